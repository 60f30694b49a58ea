"""Instruction objects: a definition from the ISA table plus operand values and modifiers.

An instruction's definition, operands, modifiers and comment are set once, at construction (the
table validated them first); ``with_comment()`` returns a copy rather than changing one.  Two
annotations are attached after construction, by the builder code that knows them: ``lds``, the LDS
byte range a DS or LDS-DMA access touches (for the wait and barrier checks), and ``lanes``, the
lanes' LDS addresses (for the bank-conflict check); both stay None otherwise.

``render()`` gives LLVM assembler syntax; ``defs()``/``uses()`` give the register keys written and
read (explicit operands plus implicit ones such as EXEC, VCC, SCC, M0), which every analysis
(hazards, waits, liveness, reports) works on.  ``size`` is the number of bytes the assembler will
emit (checked against LLVM for every table entry in the tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from isagen.isa.operands import (
    Label,
    Reg,
    Special,
    f16_bits,
    f32_bits,
    is_inline_constant,
    operand_keys,
    render_constant,
)

if TYPE_CHECKING:                     # the table builds instructions; a run-time import would be a cycle
    from isagen.isa.table import InstrDef


class Shared:
    """What follows from an instruction's definition, operands and modifiers alone (its register keys,
    size, encoding form, text, machine code, the checks' per-instruction facts), worked out once:
    ``InstrDef.make`` hands every instruction it makes with equal operands and modifiers the same
    one (an unrolled kernel repeats most of its instructions), an instruction made otherwise gets
    its own.  ``checks`` holds what a check pass derives, under the pass's own name."""

    __slots__ = ("defs", "uses", "size", "encoding", "text", "code", "checks")

    def __init__(self) -> None:
        self.defs: tuple[tuple[str, int], ...] | None = None
        self.uses: tuple[tuple[str, int], ...] | None = None
        self.size: int | None = None
        self.encoding: str | None = None
        self.text: str | None = None        # render(False)
        self.code: bytes | None = None      # the encoder's bytes (label-free instructions only)
        self.checks: dict[str, Any] = {}


class Instruction:
    __slots__ = ("desc", "ops", "mods", "comment", "lds", "lanes", "shared")

    def __init__(self, desc: InstrDef, ops: tuple[Any, ...], mods: dict[str, Any],
                 comment: str | None = None, shared: Shared | None = None):
        self.desc = desc          # the table's definition
        self.ops = ops            # operand values, in assembly order
        self.mods = mods          # modifier name -> value (validated)
        self.comment = comment
        # optional LDS byte range (start, end) a DS/LDS-DMA access touches (waits.py)
        self.lds: tuple[int, int] | None = None
        # optional lane byte addresses of a DS/LDS-DMA access, one 64-tuple per wave variant, for the
        # LDS bank check (lds_banks.check_program)
        self.lanes: tuple[tuple[int, ...], ...] | None = None
        # what follows from desc, ops and mods, worked out on first use (they never change), shared
        # with the equal instructions InstrDef.make made
        self.shared = shared if shared is not None else Shared()

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

    @property
    def encoding(self) -> str:
        """``e32``/``e64``/``dpp`` for VOP1/VOP2/VOPC instructions (which form LLVM will pick), else
        ``native``."""
        sh = self.shared
        if sh.encoding is None:
            sh.encoding = self.desc.encoding(self.ops, self.mods)
        return sh.encoding

    @property
    def size(self) -> int:
        """Bytes of machine code (4, 8 or 12: instruction words plus a trailing literal)."""
        sh = self.shared
        if sh.size is None:
            sh.size = self.desc.size(self.ops, self.mods)
        return sh.size

    @property
    def is_dpp(self) -> bool:
        return self.desc.is_dpp(self.mods)

    def operand(self, name: str) -> Any:
        """The value of the operand called ``name`` in the table (e.g. ``'vdst'``, ``'src0'``)."""
        return self.ops[self.desc.operand_index(name)]

    def with_comment(self, comment: str) -> Instruction:
        inst = Instruction(self.desc, self.ops, self.mods, comment, self.shared)
        inst.lds = self.lds
        inst.lanes = self.lanes
        return inst

    # ------------------------------------------------------------------ dataflow
    def def_operands(self) -> list[Any]:
        """Operand values the instruction writes (destinations, read-write operands)."""
        return [value for spec, value in zip(self.desc.operands, self.ops) if spec.is_def]

    def use_operands(self) -> list[Any]:
        """Operand values the instruction reads.  A read-write operand (``name+kind`` in the table) is
        both; so is the destination of a DPP move, whose disabled lanes keep their old value."""
        dpp = self.is_dpp
        return [value for spec, value in zip(self.desc.operands, self.ops)
                if spec.is_use or (dpp and spec.is_def and spec.name == "vdst")]

    def defs(self) -> list[tuple[str, int]]:
        return list(self.def_keys())

    def uses(self) -> list[tuple[str, int]]:
        return list(self.use_keys())

    def def_keys(self) -> tuple[tuple[str, int], ...]:
        """``defs()`` as a tuple, computed once per instruction."""
        sh = self.shared
        if sh.defs is None:
            keys: list[tuple[str, int]] = []
            for value in self.def_operands():
                keys += operand_keys(value)
            for name in self.desc.implicit_defs:
                keys += Special(name).keys()
            sh.defs = tuple(keys)
        return sh.defs

    def use_keys(self) -> tuple[tuple[str, int], ...]:
        """``uses()`` as a tuple, computed once per instruction."""
        sh = self.shared
        if sh.uses is None:
            keys: list[tuple[str, int]] = []
            for value in self.use_operands():
                keys += operand_keys(value)
            for name in self.desc.implicit_uses:
                keys += Special(name).keys()
            sh.uses = tuple(keys)
        return sh.uses

    # ------------------------------------------------------------------ rendering
    def render_operands(self) -> str:
        ftype = self.desc.ftype
        wide = "f32" if self.desc.fmt == "VOP3P" else "f64"       # packed f32 pairs are two f32s
        return ", ".join([str(x) if x.__class__ is Reg          # the common case, without the checks
                          else _render_value(x, spec.kind, wide if spec.width == 2 else ftype)
                          for spec, x in zip(self.desc.operands, self.ops)])

    def render_modifiers(self) -> str:
        return self.desc.render_modifiers(self.mods)

    def render(self, with_comment: bool = True) -> str:
        text = self.shared.text
        if text is None:
            text = self.desc.asm
            if self.is_dpp:
                text += "_dpp"
            ops = self.render_operands()
            if ops:
                text += " " + ops
            mods = self.render_modifiers()
            if mods:
                text += " " + mods
            self.shared.text = text
        if with_comment and self.comment:
            text = f"{text:<48} // {self.comment}"
        return text

    __str__ = render

    def __repr__(self) -> str:
        return f"<{self.render(with_comment=False)}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Instruction) and self.render(False) == other.render(False)

    def __hash__(self) -> int:
        return hash(self.render(False))


def _render_value(value: Any, kind: str = "vsrc", ftype: str = "f32") -> str:
    """LLVM's spelling of one operand (as its printer writes it, so a round trip compares equal)."""
    if isinstance(value, (Reg, Special, Label)) or hasattr(value, "keys"):
        return str(value)
    if kind in ("simm16", "uimm16"):          # SOPK immediates print as 16-bit hex
        return hex(value & 0xFFFF)
    if kind in ("soff", "soffu"):             # SMEM byte offsets print as signed hex
        return hex(value)
    if kind == "imm":                         # SOPP immediates: decimal up to 64, then hex
        return str(value) if value <= 64 else hex(value)
    if kind == "lit":                         # a literal K is always the 32 bits of the operand
        return hex(value & 0xFFFFFFFF) if isinstance(value, int) else hex(f32_bits(value) if ftype != "f16"
                                                                             else f16_bits(value))
    if ftype == "bf16" and isinstance(value, float) and not is_inline_constant(value):
        return hex(f32_bits(value) >> 16)     # a bf16 literal: the upper half of the f32 bits
    return render_constant(value, ftype)
