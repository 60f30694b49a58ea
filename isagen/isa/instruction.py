"""Instruction objects: a definition from the ISA table plus operand values and modifiers.

Instructions are immutable values.  ``render()`` gives LLVM assembler syntax; ``defs()``/``uses()``
give the register keys written and read (explicit operands plus implicit ones such as EXEC, VCC,
SCC, M0), which every analysis (hazards, waits, liveness, reports) works on.
"""

from __future__ import annotations

from .operands import Label, Reg, Special, operand_keys, render_constant


class Instruction:
    __slots__ = ("desc", "ops", "mods", "comment")

    def __init__(self, desc, ops: tuple, mods: dict, comment: str | None = None):
        self.desc = desc          # isagen.isa.table.InstrDef
        self.ops = ops            # operand values, in assembly order
        self.mods = mods          # modifier name -> value (validated)
        self.comment = comment

    # ------------------------------------------------------------------ identity
    @property
    def name(self) -> str:
        return self.desc.name

    @property
    def unit(self) -> str:
        return self.desc.unit

    @property
    def counter(self) -> str | None:
        return self.desc.counter

    def operand(self, name: str):
        """The value of the operand called ``name`` in the table (e.g. ``'vdst'``, ``'src0'``)."""
        return self.ops[self.desc.operand_index(name)]

    def with_comment(self, comment: str) -> "Instruction":
        return Instruction(self.desc, self.ops, self.mods, comment)

    # ------------------------------------------------------------------ dataflow
    def def_operands(self) -> list:
        return [value for spec, value in zip(self.desc.operands, self.ops) if spec.is_def]

    def use_operands(self) -> list:
        return [value for spec, value in zip(self.desc.operands, self.ops) if not spec.is_def]

    def defs(self) -> list[tuple[str, int]]:
        keys = []
        for value in self.def_operands():
            keys += operand_keys(value)
        for name in self.desc.implicit_defs:
            keys += Special(name).keys()
        return keys

    def uses(self) -> list[tuple[str, int]]:
        keys = []
        for value in self.use_operands():
            keys += operand_keys(value)
        for name in self.desc.implicit_uses:
            keys += Special(name).keys()
        return keys

    # ------------------------------------------------------------------ rendering
    def render_operands(self) -> str:
        return ", ".join(_render_value(x) for x in self.ops)

    def render_modifiers(self) -> str:
        return self.desc.render_modifiers(self.mods)

    def render(self, with_comment: bool = True) -> str:
        text = self.desc.asm
        if self.desc.is_dpp(self.mods):
            text += "_dpp"
        ops = self.render_operands()
        if ops:
            text += " " + ops
        mods = self.render_modifiers()
        if mods:
            text += " " + mods
        if with_comment and self.comment:
            text = f"{text:<48} // {self.comment}"
        return text

    __str__ = render

    def __repr__(self) -> str:
        return f"<{self.render(with_comment=False)}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, Instruction) and self.render(False) == other.render(False)

    def __hash__(self) -> int:
        return hash(self.render(False))


def _render_value(value) -> str:
    if isinstance(value, (Reg, Special, Label)) or hasattr(value, "keys"):
        return str(value)
    if isinstance(value, str):     # pre-rendered text such as a waitcnt expression or hwreg()
        return value
    return render_constant(value)
