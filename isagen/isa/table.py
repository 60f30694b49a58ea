"""The instruction table: per-architecture instruction definitions loaded from YAML data.

``defs/common.yaml`` holds what gfx942 and gfx950 share; ``defs/<arch>.yaml`` adds (or removes)
what only one has.  MFMA entries are synthesised from the target table (``isagen.targets``), which is
the single source of their shapes, register counts and passes.

Each entry names its encoding family (``fmt``), its operands in assembly order and its implicit
registers.  An operand is written ``name=kind`` when the instruction writes it and ``name:kind`` when
it reads it.  Kinds (``N`` is a dword count, default 1):

  vN  VGPRs          aN  AGPRs          avN  VGPRs or AGPRs        sN  SGPRs or a special register
  vsrcN  VGPR, SGPR or constant (VALU source)      ssrcN  SGPR or constant (SALU source)
  avcN   VGPRs, AGPRs or an inline constant (MFMA C)
  simm16 / imm  integer immediates    label  branch target    soff  SMEM offset (SGPR or immediate)

Operands are checked when an instruction is built: register class, width, alignment (64-bit and
wider VGPR/AGPR tuples are even-aligned on gfx90a+; SGPR pairs even, quads and wider 4-aligned),
constants the encoding can hold, modifier names and ranges.  Every error names the instruction and
the operand.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import ISAError
from ..targets import Target, get_target
from .instruction import Instruction
from .operands import Label, Mod, Reg, Special, is_inline_constant

DEFS_DIR = Path(__file__).with_name("defs")

# units: what an analysis needs to know about where an instruction executes
UNITS = ("salu", "sopp", "smem", "valu", "trans", "mfma", "ds", "vmem", "flat")

_KIND_RE = re.compile(r"^(v|a|av|s|vsrc|ssrc|avc|simm16|imm|label|soff|text)(\d*)$")

_SPECIAL_WIDTH = {"vcc": 2, "exec": 2, "vcc_lo": 1, "vcc_hi": 1, "exec_lo": 1, "exec_hi": 1, "m0": 1, "scc": 1}


@dataclass(frozen=True)
class OperandSpec:
    name: str
    kind: str       # v, a, av, s, vsrc, ssrc, avc, simm16, imm, label, soff, text
    width: int      # dwords
    is_def: bool

    def describe(self) -> str:
        names = {"v": "VGPR", "a": "AGPR", "av": "VGPR or AGPR", "s": "SGPR", "vsrc": "VGPR, SGPR or constant",
                 "ssrc": "SGPR or constant", "avc": "VGPR, AGPR or inline constant", "simm16": "16-bit immediate",
                 "imm": "immediate", "label": "label", "soff": "SGPR or immediate offset", "text": "text"}
        plural = f"{self.width} " if self.width > 1 else ""
        return f"{plural}{names[self.kind]}{'s' if self.width > 1 and self.kind in 'vas' else ''}"


@dataclass(frozen=True)
class ModSpec:
    """A modifier: a flag (``offen``), an int with a range (``offset:16``), or a counter (``vmcnt(0)``)."""

    name: str
    type: str       # flag | uN | iN | count | bits | omod | dpp | hex
    bits: int = 0

    def check(self, instr: str, value):
        if self.type == "flag":
            if not isinstance(value, bool):
                raise ISAError(f"{instr}: modifier '{self.name}' is a flag (True/False), got {value!r}")
            return
        if self.type == "bits":
            if not (isinstance(value, (list, tuple)) and all(b in (0, 1) for b in value) and len(value) <= 3):
                raise ISAError(f"{instr}: modifier '{self.name}' takes a list of 0/1 bits, got {value!r}")
            return
        if self.type == "text":
            if not isinstance(value, str):
                raise ISAError(f"{instr}: modifier '{self.name}' takes text, got {value!r}")
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise ISAError(f"{instr}: modifier '{self.name}' takes an integer, got {value!r}")
        if self.type.startswith("u") or self.type in ("count", "hex"):
            lo, hi = 0, (1 << self.bits) - 1
        elif self.type.startswith("i"):
            lo, hi = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        elif self.type == "omod":
            lo, hi = 0, 3
        else:
            lo, hi = 0, (1 << 32) - 1
        if not lo <= value <= hi:
            raise ISAError(f"{instr}: modifier {self.name}={value} out of range [{lo}, {hi}]")

    def render(self, value) -> str:
        if self.type == "flag":
            return self.name if value else ""
        if self.type == "count":
            return f"{self.name}({value})"
        if self.type == "bits":
            return f"{self.name}:[{','.join(str(b) for b in value)}]"
        if self.type == "omod":
            return {0: "", 1: "mul:2", 2: "mul:4", 3: "div:2"}[value]
        if self.type == "hex":
            return f"{self.name}:{value:#x}"
        if self.type == "text":
            return value
        return f"{self.name}:{value}"


def _parse_mod_spec(name: str, text: str) -> ModSpec:
    m = re.fullmatch(r"(flag|bits|omod|text)|(u|i|count|hex)(\d+)", text)
    if not m:
        raise ValueError(f"bad modifier type {text!r} for {name}")
    if m.group(1):
        return ModSpec(name, m.group(1))
    return ModSpec(name, m.group(2) if m.group(2) in ("count", "hex") else m.group(2) + m.group(3), int(m.group(3)))


@dataclass(frozen=True)
class InstrDef:
    """One instruction of one architecture, as the table defines it."""

    name: str                    # the key builders use (e.g. buffer_load_dword_lds)
    asm: str                     # the mnemonic LLVM spells (e.g. buffer_load_dword)
    fmt: str                     # encoding family: SOP1 SOP2 SOPK SOPC SOPP SMEM VOP1 VOP2 VOPC VOP3 VOP3P MAI DS MUBUF GLOBAL
    unit: str
    operands: tuple[OperandSpec, ...]
    mods: dict                   # name -> ModSpec
    fixed_mods: tuple[str, ...]  # modifiers always present (e.g. lds)
    implicit_defs: tuple[str, ...]
    implicit_uses: tuple[str, ...]
    counter: str | None          # vmcnt | lgkmcnt | None
    arch: str
    flags: frozenset = field(default_factory=frozenset)   # lds_read lds_write lds_dma load store branch barrier trans mfma
    mfma: object = None          # targets.MfmaInfo for matrix instructions
    literal_ok: bool = True      # can a 32-bit literal follow the instruction word?

    # ------------------------------------------------------------------ helpers
    def operand_index(self, name: str) -> int:
        for i, spec in enumerate(self.operands):
            if spec.name == name:
                return i
        raise ISAError(f"{self.name} has no operand '{name}' (it has {', '.join(o.name for o in self.operands)})")

    def is_dpp(self, mods: dict) -> bool:
        return "dpp" in mods

    def render_modifiers(self, mods: dict) -> str:
        parts = []
        for name, spec in self.mods.items():
            if name in mods:
                text = spec.render(mods[name])
                if text:
                    parts.append(text)
        parts += list(self.fixed_mods)
        return " ".join(parts)

    def signature(self) -> str:
        return ", ".join(f"{o.name}{'=' if o.is_def else ':'}{o.kind}{o.width if o.width > 1 else ''}"
                         for o in self.operands)

    # ------------------------------------------------------------------ building
    def __call__(self, *ops, comment: str | None = None, **mods) -> Instruction:
        return self.make(ops, mods, comment)

    def make(self, ops, mods: dict, comment: str | None = None) -> Instruction:
        if len(ops) != len(self.operands):
            raise ISAError(f"{self.name} takes {len(self.operands)} operands ({self.signature()}), got {len(ops)}")
        literals = 0
        checked = []
        for spec, value in zip(self.operands, ops):
            value = self._check_operand(spec, value)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not is_inline_constant(value):
                literals += 1
            checked.append(value)
        if literals > 1:
            raise ISAError(f"{self.name}: at most one literal constant per instruction, got {literals}")
        if literals and not self.literal_ok:
            raise ISAError(f"{self.name}: the {self.fmt} encoding takes inline constants only "
                           "(-16..64, ±0.5, ±1, ±2, ±4, 1/(2π)); put the value in a register first")
        for name, value in mods.items():
            spec = self.mods.get(name)
            if spec is None:
                allowed = ", ".join(self.mods) or "none"
                raise ISAError(f"{self.name}: unknown modifier '{name}' (allowed: {allowed})")
            spec.check(self.name, value)
        if "dpp" in mods:
            self._check_dpp(checked)
        return Instruction(self, tuple(checked), dict(mods), comment)

    def _check_dpp(self, ops):
        for spec, value in zip(self.operands, ops):
            if not spec.is_def and isinstance(value, (int, float)):
                raise ISAError(f"{self.name}: DPP forms take no constants (operand {spec.name})")

    def _check_operand(self, spec: OperandSpec, value):
        where = f"{self.name}: operand {spec.name}"
        kind, width = spec.kind, spec.width
        if kind in ("imm", "simm16"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ISAError(f"{where} expects an integer immediate, got {value!r}")
            lo, hi = (-(1 << 15), (1 << 16) - 1) if kind == "simm16" else (-(1 << 31), (1 << 32) - 1)
            if not lo <= value <= hi:
                raise ISAError(f"{where}: immediate {value} out of range [{lo}, {hi}]")
            return value
        if kind == "label":
            if isinstance(value, str):
                value = Label(value)
            if not isinstance(value, Label):
                raise ISAError(f"{where} expects a label, got {value!r}")
            return value
        if kind == "text":
            if not isinstance(value, str):
                raise ISAError(f"{where} expects text, got {value!r}")
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if kind in ("vsrc", "ssrc", "soff"):
                if kind == "soff" and (not isinstance(value, int) or not -(1 << 20) <= value < (1 << 20)):
                    raise ISAError(f"{where}: SMEM offset {value!r} must be an integer in ±2^20")
                return value
            if kind == "avc":
                if not is_inline_constant(value):
                    raise ISAError(f"{where}: only an inline constant may replace the accumulator, got {value!r}")
                return value
            raise ISAError(f"{where} expects {spec.describe()}, got the constant {value!r}")
        reg = value.reg if isinstance(value, Mod) else value
        if isinstance(value, Mod) and self.fmt not in ("VOP3", "VOP3P", "VOP1", "VOP2", "VOPC"):
            raise ISAError(f"{where}: source modifiers (neg/abs) need a VALU instruction")
        if isinstance(reg, Special):
            if kind not in ("s", "ssrc", "vsrc", "soff"):
                raise ISAError(f"{where} expects {spec.describe()}, got {reg}")
            if reg.name == "scc":
                raise ISAError(f"{where}: scc is not an operand register")
            if _SPECIAL_WIDTH[reg.name] != width:
                raise ISAError(f"{where} expects {width} dword(s), got {reg} ({_SPECIAL_WIDTH[reg.name]})")
            return value
        if not isinstance(reg, Reg):
            raise ISAError(f"{where} expects {spec.describe()}, got {value!r}")
        allowed = {"v": "v", "a": "a", "av": "va", "s": "s", "vsrc": "vs", "ssrc": "s", "avc": "va", "soff": "s"}[kind]
        if reg.cls not in allowed:
            raise ISAError(f"{where} expects {spec.describe()}, got {reg.cls.upper()}GPR {reg}")
        if reg.count != width:
            raise ISAError(f"{where} expects {width} register(s), got {reg} ({reg.count})")
        align = _alignment(reg.cls, width)
        if reg.index % align:
            raise ISAError(f"{where}: {reg} must start at a multiple of {align}")
        return value


def _alignment(cls: str, width: int) -> int:
    if cls == "s":
        return 1 if width == 1 else (2 if width == 2 else 4)
    return 2 if width >= 2 else 1       # gfx90a+: 64-bit and wider VGPR/AGPR tuples are even-aligned


# ---------------------------------------------------------------------- loading
def _parse_operand(text: str) -> OperandSpec:
    m = re.fullmatch(r"\s*(\w+)\s*([=:])\s*(\w+)\s*", text)
    if not m:
        raise ValueError(f"bad operand spec {text!r}")
    name, sep, kind_text = m.groups()
    km = _KIND_RE.match(kind_text)
    if not km:
        raise ValueError(f"bad operand kind {kind_text!r} in {text!r}")
    return OperandSpec(name, km.group(1), int(km.group(2) or 1), sep == "=")


class ISATable:
    """All instruction definitions of one target, by name."""

    def __init__(self, target: Target, defs: dict[str, InstrDef]):
        self.target = target
        self.defs = defs

    def __getitem__(self, name: str) -> InstrDef:
        try:
            return self.defs[name]
        except KeyError:
            raise ISAError(f"'{name}' is not an instruction isagen knows for {self.target.name}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.defs

    def __iter__(self):
        return iter(self.defs.values())

    def __len__(self) -> int:
        return len(self.defs)


def _load_yaml(name: str) -> dict:
    path = DEFS_DIR / name
    if not path.exists():
        return {}
    with open(path) as f:
        return yaml.safe_load(f) or {}


@functools.lru_cache(maxsize=None)
def isa_table(target) -> ISATable:
    """The instruction table of a target (cached)."""
    target = get_target(target)
    common = _load_yaml("common.yaml")
    arch = _load_yaml(f"{target.name}.yaml")
    formats = dict(common.get("formats", {}))
    formats.update(arch.get("formats", {}))
    entries = dict(common.get("instructions", {}))
    for name in arch.get("remove", []) or []:
        entries.pop(name, None)
    entries.update(arch.get("instructions", {}) or {})
    defs: dict[str, InstrDef] = {}
    for name, entry in entries.items():
        defs[name] = _make_def(name, entry, formats, target)
    for info in target.mfmas:
        defs[info.mnemonic] = _make_mfma_def(info, formats, target)
    return ISATable(target, defs)


def _make_def(name: str, entry: dict, formats: dict, target: Target) -> InstrDef:
    fmt = entry["fmt"]
    fdef = formats[fmt]
    mods = {k: _parse_mod_spec(k, t) for k, t in (fdef.get("mods") or {}).items()}
    mods.update({k: _parse_mod_spec(k, t) for k, t in (entry.get("mods") or {}).items()})
    for k in entry.get("no_mods", []) or []:
        mods.pop(k, None)
    unit = entry.get("unit", fdef["unit"])
    assert unit in UNITS, (name, unit)
    implicit_uses = tuple(entry.get("iuse", [])) + tuple(fdef.get("iuse", []))
    return InstrDef(
        name=name, asm=entry.get("asm", name), fmt=fmt, unit=unit,
        operands=tuple(_parse_operand(o) for o in entry.get("ops", [])),
        mods=mods, fixed_mods=tuple(entry.get("fixed_mods", [])),
        implicit_defs=tuple(entry.get("idef", [])) + tuple(fdef.get("idef", [])),
        implicit_uses=tuple(dict.fromkeys(implicit_uses)),
        counter=entry.get("counter", fdef.get("counter")),
        arch=target.name,
        flags=frozenset(entry.get("flags", [])) | frozenset(fdef.get("flags", [])),
        literal_ok=entry.get("literal_ok", fdef.get("literal_ok", True)),
    )


def _make_mfma_def(info, formats: dict, target: Target) -> InstrDef:
    fdef = formats["MAI"]
    ops = (OperandSpec("vdst", "av", info.c_regs, True), OperandSpec("src0", "av", info.a_regs, False),
           OperandSpec("src1", "av", info.b_regs, False), OperandSpec("src2", "avc", info.c_regs, False))
    return InstrDef(
        name=info.mnemonic, asm=info.mnemonic, fmt="MAI", unit="mfma", operands=ops,
        mods={k: _parse_mod_spec(k, t) for k, t in (fdef.get("mods") or {}).items()},
        fixed_mods=(), implicit_defs=(), implicit_uses=tuple(fdef.get("iuse", [])), counter=None,
        arch=target.name, flags=frozenset({"mfma"}), mfma=info, literal_ok=False,
    )
