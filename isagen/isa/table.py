"""The instruction table: per-architecture instruction definitions loaded from YAML data.

``defs/common.yaml`` holds what gfx942 and gfx950 share; ``defs/<arch>.yaml`` adds (or removes) what
only one has.  MFMA entries are synthesised from the target table (``isagen.targets``), which is the
single source of their shapes, register counts and passes.  docs/isa.md describes the vocabulary and
how to add an instruction; tests/isa/test_isa_encoding.py assembles every entry with LLVM.

Each entry names a format template (``fmt``: encoding family, unit, counter, implicit registers,
modifiers), its operands in assembly order and anything that differs from the template.  An operand
is written ``name=kind`` when the instruction writes it, ``name:kind`` when it reads it and
``name+kind`` when it does both (an accumulator, a partially written destination).  Kinds (``N`` is a
dword count, default 1):

  vN  VGPRs           aN  AGPRs             avN  VGPRs or AGPRs
  sN  SGPRs or a special register of that width (vcc, exec, m0, vcc_lo ...)
  vsrcN  VALU source: VGPR, SGPR, special register or constant
  ssrcN  SALU source: SGPR, special register or constant
  avcN   MFMA accumulator input: VGPRs, AGPRs or an inline constant
  immN   N-bit unsigned immediate (decimal)   simm16 / uimm16  SOPK 16-bit immediate (hex)
  lit    32-bit literal constant (v_fmaak_f32's K)         label  branch target
  soff   SMEM offset: SGPR, m0 or a signed 21-bit byte offset (s_load_*)
  soffu  SMEM offset: SGPR, m0 or an unsigned 20-bit byte offset (s_buffer_load_*)
  saddr  global SGPR base: an SGPR pair or ``off``
  gaddr  global VGPR address: 2 VGPRs when saddr is ``off``, else a 32-bit VGPR offset
  mvaddr MUBUF VGPR address: ``off``, 1 VGPR (offen or idxen) or 2 VGPRs (idxen and offen)

Operands are checked when an instruction is built: register class, width, alignment (64-bit and wider
VGPR/AGPR tuples even-aligned on gfx90a+; SGPR pairs even, quads and wider 4-aligned), register
ranges, constants the encoding can hold (one literal, only in a 32-bit VOP1/VOP2/VOPC or SALU word),
the constant-bus limit (one SGPR or literal per VALU instruction on gfx9), DPP restrictions, modifier
names and ranges.  Every error is one line naming the instruction and the operand or modifier.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from isagen.errors import ISAError
from isagen.isa.defs_cache import load_yaml_file
from isagen.isa.instruction import Instruction, Shared
from isagen.isa.operands import (
    OFF,
    Label,
    Mod,
    Reg,
    Special,
    _Off,
    canonical_swizzle,
    f32_bits,
    is_inline_constant,
    swizzle_text,
)
from isagen.records import record, value_methods
from isagen.targets import TARGETS, MfmaInfo, Target, get_target

DEFS_DIR = Path(__file__).with_name("defs")

# units: what an analysis needs to know about where an instruction executes
UNITS = ("salu", "sopp", "smem", "valu", "trans", "mfma", "ds", "vmem", "flat")
# encoding families (InstrDef.fmt)
ENCODINGS = ("SOP1", "SOP2", "SOPK", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P",
             "MAI", "DS", "MUBUF", "GLOBAL")
FLAGS = ("load", "store", "atomic", "lds_read", "lds_write", "lds_dma", "branch", "barrier", "mfma")

_REG_KINDS = ("v", "a", "av", "s", "sgpr", "vsrc", "ssrc", "avc")
_FIXED_KINDS = ("simm16", "uimm16", "lit", "label", "soff", "soffu", "saddr", "gaddr", "mvaddr")
_KIND_RE = re.compile(r"^(?:(v|a|av|sgpr|s|vsrc|ssrc|avc)(\d*)|imm(\d+)|(" + "|".join(_FIXED_KINDS) + "))$")

_SPECIAL_WIDTH = {"vcc": 2, "exec": 2, "vcc_lo": 1, "vcc_hi": 1, "exec_lo": 1, "exec_hi": 1, "m0": 1, "scc": 1}
# addressable registers per lane / wave on gfx9: v0-v255, a0-a255, s0-s101 (VCC is s[106:107])
_REG_LIMIT = {"v": 256, "a": 256, "s": 102}
_FILE_NAME = {"v": "VGPR", "a": "AGPR", "s": "SGPR"}
#: operand kind -> the register files a Reg for it may be in
_ALLOWED_FILES = {"v": "v", "a": "a", "av": "va", "s": "s", "sgpr": "s", "vsrc": "vs", "ssrc": "s", "avc": "va",
                  "soff": "s", "soffu": "s", "saddr": "s", "gaddr": "v", "mvaddr": "v"}

# ----------------------------------------------------------------------------- operand specs


@value_methods
@record(frozen=True, repr=False, eq=False)
class OperandSpec:
    """One operand of an instruction definition: its name, kind, width and whether it is written/read."""

    name: str
    kind: str       # v a av s vsrc ssrc avc imm simm16 uimm16 lit label soff soffu saddr gaddr mvaddr
    width: int      # dwords (for imm: bits)
    is_def: bool    # the instruction writes it
    is_use: bool = True   # the instruction reads it

    @property
    def access(self) -> str:
        return "+" if self.is_def and self.is_use else ("=" if self.is_def else ":")

    def describe(self, width: int | None = None) -> str:
        width = self.width if width is None else width
        if self.kind in ("v", "a", "s", "sgpr") :
            noun = {"v": "VGPR", "a": "AGPR", "s": "SGPR", "sgpr": "SGPR"}[self.kind]
            text = f"{width} {noun}s" if width > 1 else noun
            return text + (" (or vcc)" if self.kind == "sgpr" else "")
        names = {"av": "VGPR or AGPR", "vsrc": "VGPR, SGPR or constant",
                 "ssrc": "SGPR or constant", "avc": "VGPR, AGPR or inline constant",
                 "simm16": "signed 16-bit immediate", "uimm16": "unsigned 16-bit immediate",
                 "imm": f"{self.width}-bit unsigned immediate", "lit": "32-bit constant", "label": "label",
                 "soff": "SGPR or signed 21-bit offset", "soffu": "SGPR or unsigned 20-bit offset",
                 "saddr": "SGPR pair or off", "gaddr": "VGPR address", "mvaddr": "VGPR address or off"}
        text = names[self.kind]
        if self.kind in _REG_KINDS and width > 1:
            text = f"{width}-dword {text}"
        return text

    def signature(self) -> str:
        suffix = self.width if self.kind in _REG_KINDS and self.width > 1 else ""
        kind = f"imm{self.width}" if self.kind == "imm" else self.kind
        return f"{self.name}{self.access}{kind}{suffix}"


def _parse_operand(text: str) -> OperandSpec:
    m = re.fullmatch(r"\s*(\w+)\s*([=:+])\s*(\w+)\s*", text)
    if not m:
        raise ValueError(f"bad operand spec {text!r}")
    name, sep, kind_text = m.groups()
    km = _KIND_RE.match(kind_text)
    if not km:
        raise ValueError(f"bad operand kind {kind_text!r} in {text!r}")
    if km.group(1):
        kind, width = km.group(1), int(km.group(2) or 1)
    elif km.group(3):
        kind, width = "imm", int(km.group(3))
    else:
        kind, width = km.group(4), 1
    return OperandSpec(name, kind, width, is_def=sep in "=+", is_use=sep in ":+")


# ----------------------------------------------------------------------------- modifier specs

_OMOD_TEXT = {0: "", 1: "mul:2", 2: "mul:4", 3: "div:2"}
_OMOD_NAMES = {"mul:2": 1, "mul:4": 2, "div:2": 3}
DPP_CONTROLS = ("quad_perm", "row_shl", "row_shr", "row_ror", "wave_shl", "wave_rol", "wave_shr", "wave_ror",
                "row_mirror", "row_half_mirror", "row_bcast")
_DPP_CONTROL_SET = frozenset(DPP_CONTROLS)
_DPP_MODS = {"quad_perm": "quad", "row_shl": "u4nz", "row_shr": "u4nz", "row_ror": "u4nz",
             "wave_shl": "one", "wave_rol": "one", "wave_shr": "one", "wave_ror": "one",
             "row_mirror": "flag", "row_half_mirror": "flag", "row_bcast": "bcast",
             "row_mask": "mask", "bank_mask": "mask", "bound_ctrl": "flag"}


@value_methods
@record(frozen=True, repr=False, eq=False)
class ModSpec:
    """A modifier.  Types: ``flag``; ``uN``/``iN`` integer ranges (``offset:16``); ``hexN`` (``bitop3:0x12``);
    ``countN`` (``vmcnt(0)``); ``bitsN`` lists of 0/1 of length N, default all 0 (``bitsN_1``: all 1),
    left out of the text when equal to the default; ``omod`` (0..3 or "mul:2"/"mul:4"/"div:2");
    ``swizzle`` (ds_swizzle offset, printed as LLVM's swizzle(...)); the DPP controls."""

    name: str
    type: str           # flag u i hex count bits omod swizzle quad u4nz one bcast mask
    bits: int = 0       # range width, or list length (bits: 0 = one per source operand)
    default: int = 0    # bits: default value of every element
    always: bool = False  # bits: rendered even when equal to the default

    def check(self, instr: str, value: Any, nsrc: int = 0) -> Any:
        where = f"{instr}: modifier {self.name}"
        if self.type == "flag":
            if not isinstance(value, bool):
                raise ISAError(f"{where} is a flag (True/False), got {value!r}")
            return value
        if self.type == "bits":
            n = self.bits or nsrc
            if not (isinstance(value, (list, tuple)) and len(value) == n
                    and all(b in (0, 1) and not isinstance(b, float) for b in value)):
                raise ISAError(f"{where} takes a list of {n} bits (0/1), got {value!r}")
            return tuple(int(b) for b in value)
        if self.type == "omod":
            if isinstance(value, str) and value in _OMOD_NAMES:
                return _OMOD_NAMES[value]
            if isinstance(value, bool) or value not in (0, 1, 2, 3):
                raise ISAError(f"{where} takes 0..3 (1 = mul:2, 2 = mul:4, 3 = div:2) or 'mul:2'/'mul:4'/'div:2', "
                               f"got {value!r}")
            return value
        if self.type == "quad":
            if not (isinstance(value, (list, tuple)) and len(value) == 4
                    and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 3 for x in value)):
                raise ISAError(f"{where} takes 4 lane numbers 0..3, got {value!r}")
            return tuple(value)
        if self.type == "one":
            if value is not True and value != 1:
                raise ISAError(f"{where} shifts by exactly 1 lane (pass True), got {value!r}")
            return True
        if isinstance(value, bool) or not isinstance(value, int):
            raise ISAError(f"{where} takes an integer, got {value!r}")
        if self.type == "bcast":
            if value not in (15, 31):
                raise ISAError(f"{where} takes 15 or 31, got {value}")
            return value
        fixed = {"u4nz": (1, 15), "mask": (0, 15), "swizzle": (0, 0xFFFF)}.get(self.type)
        if fixed is not None:
            lo, hi = fixed
            if self.type == "swizzle" and lo <= value <= hi:
                return canonical_swizzle(value)
        else:
            if self.type in ("u", "count", "hex"):
                lo, hi = 0, (1 << self.bits) - 1
            else:   # i
                lo, hi = -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        if not lo <= value <= hi:
            raise ISAError(f"{where}={value} out of range [{lo}, {hi}]")
        return value

    def render(self, value: Any, nsrc: int = 0) -> str:
        t = self.type
        if self.name == "bound_ctrl":
            return "bound_ctrl:1" if value else ""       # LLVM >= 17 spelling (older: bound_ctrl:0)
        if t == "flag":
            return self.name if value else ""
        if t == "count":
            return f"{self.name}({value})"
        if t == "bits":
            if tuple(value) == (self.default,) * len(value) and not self.always:
                return ""
            return f"{self.name}:[{','.join(str(b) for b in value)}]"
        if t == "omod":
            return _OMOD_TEXT[value]
        if t == "mask":
            return f"{self.name}:{value:#x}"
        if t == "hex":                                  # LLVM prints 0..10 in decimal, larger in hex
            return f"{self.name}:{value if value <= 10 else hex(value)}" if value else ""
        if t == "swizzle":
            return f"offset:{swizzle_text(value)}" if value else ""
        if t == "quad":
            return f"quad_perm:[{','.join(str(x) for x in value)}]"
        if t == "one":
            return f"{self.name}:1"
        return f"{self.name}:{value}"


def _parse_mod_spec(name: str, text: object) -> ModSpec:
    text = str(text)
    m = re.fullmatch(r"(flag|omod|swizzle)|(u|i|count|hex)(\d+)|bits(\d)(_1)?(!)?", text)
    if not m:
        raise ValueError(f"bad modifier type {text!r} for {name}")
    if m.group(1):
        return ModSpec(name, m.group(1))
    if m.group(2):
        return ModSpec(name, m.group(2), int(m.group(3)))
    return ModSpec(name, "bits", int(m.group(4)), 1 if m.group(5) else 0, bool(m.group(6)))


_DPP_SPECS = {name: ModSpec(name, t) for name, t in _DPP_MODS.items()}


# ----------------------------------------------------------------------------- definitions


@value_methods
@record(frozen=True, repr=False, eq=False)
class InstrDef:
    """One instruction of one architecture, as the table defines it."""

    name: str                    # the key builders use (e.g. buffer_load_dword_lds)
    asm: str                     # the mnemonic LLVM spells (e.g. buffer_load_dword)
    fmt: str                     # encoding family, one of ENCODINGS
    unit: str
    operands: tuple[OperandSpec, ...]
    mods: dict[str, ModSpec]     # name -> ModSpec, in LLVM's printing order
    fixed_mods: tuple[str, ...]  # modifiers always present (e.g. lds)
    implicit_defs: tuple[str, ...]
    implicit_uses: tuple[str, ...]
    counter: str | None          # vmcnt | lgkmcnt | None
    arch: str
    flags: frozenset[str] = field(default_factory=frozenset)   # see FLAGS
    mfma: MfmaInfo | None = None   # the MFMA table's entry, for matrix instructions
    literal_ok: bool = True      # can a 32-bit literal follow the instruction word (in its short form)?
    srcmods: tuple[str, ...] = ()  # operands that take neg/abs source modifiers (float sources)
    dpp: bool = False            # VOP1/VOP2 DPP form allowed
    ftype: str = "f32"           # type of the 32-bit sources: f32, or f16/i16 for 16-bit operands
    m0_free: tuple[str, ...] = ()   # operands that may be m0 without using the constant bus
    no_m0: tuple[str, ...] = ()     # register operands that may not be m0

    # ------------------------------------------------------------------ helpers
    def operand_index(self, name: str) -> int:
        for i, spec in enumerate(self.operands):
            if spec.name == name:
                return i
        raise ISAError(f"{self.name} has no operand '{name}' (it has {', '.join(o.name for o in self.operands)})")

    @functools.cached_property
    def sources(self) -> tuple[OperandSpec, ...]:
        """Operands read as sources (not destinations), in order."""
        return tuple(o for o in self.operands if not o.is_def)

    @functools.cached_property
    def _facts(self) -> tuple[bool, bool, bool, tuple[tuple[int, str, int], ...]]:
        """What ``make``'s checks ask of the definition alone: modifiers at all (s_waitcnt needs
        one), whether any operand width depends on the modifiers, a ``gaddr`` operand, and the
        sources that may be a literal (index, kind, width)."""
        waitcnt = self.fmt == "SOPP" and self.name == "s_waitcnt"
        widths = (self.mfma is not None and self.mfma.in_type == "f8f6f4") or any(
            o.kind in ("mvaddr", "saddr") for o in self.operands)
        gaddr = any(o.kind == "gaddr" for o in self.operands)
        lits = tuple((i, o.kind, o.width) for i, o in enumerate(self.operands)
                     if not o.is_def and o.kind in ("lit", "vsrc", "ssrc"))
        return waitcnt, widths, gaddr, lits

    def is_dpp(self, mods: dict[str, Any]) -> bool:
        return bool(mods) and not _DPP_CONTROL_SET.isdisjoint(mods)

    def render_modifiers(self, mods: dict[str, Any]) -> str:
        parts: list[str] = []
        nsrc = len(self.sources)
        dpp = self.is_dpp(mods)
        for name, spec in self.mods.items():
            if name in mods:
                text = spec.render(mods[name], nsrc)
            elif dpp and name in ("row_mask", "bank_mask"):
                text = spec.render(0xF)       # LLVM always prints both masks of a DPP instruction
            elif spec.type == "bits" and spec.always:
                text = spec.render((spec.default,) * (spec.bits or nsrc))
            else:
                continue
            if text:
                parts.append(text)
        parts += list(self.fixed_mods)
        return " ".join(parts)

    def signature(self) -> str:
        return self._signature

    @functools.cached_property
    def _signature(self) -> str:        # the builder's method docstrings ask on every attribute lookup
        return ", ".join(o.signature() for o in self.operands)

    # ------------------------------------------------------------------ building
    def __call__(self, *ops: Any, comment: str | None = None, **mods: Any) -> Instruction:
        return self.make(ops, mods, comment)

    def make(self, ops: Sequence[Any], mods: dict[str, Any], comment: str | None = None) -> Instruction:
        if not mods and type(ops) is tuple:     # _made_key's common case, inline
            types = tuple(map(type, ops))
            if float in types:
                key = _made_key(self, ops, mods)
            elif Reg in types:
                key = (id(self), tuple([(o.cls, o.index, o.count, o.sym, o.sym_base) if type(o) is Reg else o
                                        for o in ops]), types, ())
            else:
                key = (id(self), ops, types, ())
        else:
            key = _made_key(self, ops, mods)
        made = None
        if key is not None:
            try:
                made = _MADE.get(key)
            except TypeError:           # an unhashable operand
                key = None
        if made is not None and made[2] is self:    # these operands and modifiers passed the checks before
            m = made[1]
            return Instruction(self, made[0], m.copy() if m else {}, comment, made[3])
        if len(ops) != len(self.operands):
            raise ISAError(f"{self.name} takes {len(self.operands)} operands ({self.signature()}), got {len(ops)}")
        waitcnt, var_widths, _, _ = self._facts
        mods = self._check_mods(mods) if mods or waitcnt else {}
        if var_widths:
            widths = self._operand_widths(mods)
            checked = tuple([self._check_operand(spec, value, widths.get(spec.name, spec.width))
                             for spec, value in zip(self.operands, ops)])
        else:
            checked = tuple([self._check_operand(spec, value, spec.width) for spec, value in zip(self.operands, ops)])
        self._check_combination(checked, mods)
        shared = Shared()
        if key is not None:
            if len(_MADE) >= _MADE_LIMIT:
                _MADE.clear()
            _MADE[key] = (checked, dict(mods), self, shared)
        return Instruction(self, checked, mods, comment, shared)

    # ------------------------------------------------------------------ modifiers
    def _check_mods(self, mods: dict[str, Any]) -> dict[str, Any]:
        nsrc = len(self.sources)
        out: dict[str, Any] = {}
        for name, value in mods.items():
            spec = self.mods.get(name)
            if spec is None:
                allowed = ", ".join(self.mods) or "none"
                raise ISAError(f"{self.name}: unknown modifier '{name}' (allowed: {allowed})")
            out[name] = spec.check(self.name, value, nsrc)
        if self.mfma is not None and self.name.startswith("v_mfma_scale_"):
            for name in ("op_sel", "op_sel_hi"):
                if name in out and out[name][2]:
                    raise ISAError(f"{self.name}: modifier {name}: only the first two bits (scale_src0, scale_src1) "
                                   f"exist, got {list(out[name])}")
        # a modifier at its default value is the same instruction as one without it
        for name in list(out):
            spec = self.mods[name]
            if (spec.type == "flag" and out[name] is False) or (spec.type == "omod" and out[name] == 0):
                del out[name]
            elif spec.type == "bits" and not spec.always and out[name] == (spec.default,) * len(out[name]):
                del out[name]
        controls = [k for k in out if k in DPP_CONTROLS]
        if len(controls) > 1:
            raise ISAError(f"{self.name}: one DPP control per instruction, got {', '.join(controls)}")
        if not controls:
            stray = [k for k in ("row_mask", "bank_mask", "bound_ctrl") if k in out]
            if stray:
                raise ISAError(f"{self.name}: modifier {stray[0]} needs a DPP control "
                               f"({', '.join(DPP_CONTROLS)})")
        elif self.fmt in ("VOP1", "VOP2"):
            vop3_only = [k for k in ("clamp", "omod", "op_sel") if k in out]
            if vop3_only:
                raise ISAError(f"{self.name}: modifier {vop3_only[0]} has no DPP form")
        if self.fmt == "SOPP" and self.name == "s_waitcnt":
            if not out:
                raise ISAError("s_waitcnt: give at least one counter (vmcnt, expcnt, lgkmcnt)")
            maxima = {k: (1 << s.bits) - 1 for k, s in self.mods.items()}
            kept = {k: v for k, v in out.items() if v != maxima[k]}
            out = kept or {k: out.get(k, maxima[k]) for k in self.mods}   # LLVM's canonical spelling
        return out

    def _operand_widths(self, mods: dict[str, Any]) -> dict[str, int]:
        """Operand widths that depend on modifiers (f8f6f4 MFMA formats, MUBUF addressing)."""
        widths: dict[str, int] = {}
        info = self.mfma
        if info is not None and info.in_type == "f8f6f4":
            regs = {0: 8, 1: 8, 2: 6, 3: 6, 4: 4}
            for mod, operand in (("cbsz", "src0"), ("blgp", "src1")):
                fmt = mods.get(mod, 0)
                if fmt not in regs:
                    raise ISAError(f"{self.name}: modifier {mod}={fmt} is not a matrix format "
                                   "(0 fp8, 1 bf8, 2 fp6, 3 bf6, 4 fp4)")
                widths[operand] = regs[fmt]
        for spec in self.operands:
            if spec.kind == "mvaddr":
                widths[spec.name] = int("offen" in mods) + int("idxen" in mods)
            elif spec.kind == "saddr":
                widths[spec.name] = 2
        return widths

    # ------------------------------------------------------------------ operands
    def _check_operand(self, spec: OperandSpec, value: Any, width: int) -> Any:
        kind = spec.kind
        if type(value) is Reg:          # the common case, checked as below without building messages
            allowed = _ALLOWED_FILES.get(kind)
            if allowed is not None and value.cls in allowed:
                count = value.count
                w = count if kind == "gaddr" and count in (1, 2) else width
                if count == w and not value.index % _alignment(value.cls, w) \
                        and value.index + count - 1 < _REG_LIMIT[value.cls]:
                    return value
        elif type(value) is int and (kind == "vsrc" or kind == "ssrc") and -(1 << 31) <= value < (1 << 32) \
                and (width != 1 or self.ftype not in ("f16", "bf16", "i16")):
            return value                # a 32-bit constant for a 32-bit (or wider) source: checked as below
        where = f"{self.name}: operand {spec.name}"
        if isinstance(value, str) and value == "off":
            value = OFF
        if kind in ("imm", "simm16", "uimm16"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ISAError(f"{where} expects an integer immediate, got {value!r}")
            lo, hi = {"simm16": (-(1 << 15), (1 << 15) - 1), "uimm16": (0, (1 << 16) - 1)}.get(
                kind, (0, (1 << spec.width) - 1))
            if not lo <= value <= hi:
                raise ISAError(f"{where}: immediate {value} out of range [{lo}, {hi}]")
            return value
        if kind == "lit":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ISAError(f"{where} expects a constant, got {value!r}")
            _check_constant_fits(where, value)
            return value
        if kind == "label":
            if isinstance(value, str):
                value = Label(value)
            if not isinstance(value, Label):
                raise ISAError(f"{where} expects a label, got {value!r}")
            return value
        if kind in ("saddr", "mvaddr") and isinstance(value, _Off):
            if kind == "mvaddr" and width:
                raise ISAError(f"{where}: 'off' means no VGPR address, but offen/idxen ask for one")
            return value
        if kind == "mvaddr" and width == 0:
            raise ISAError(f"{where}: a VGPR address needs offen and/or idxen (use 'off' for none)")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if kind in ("vsrc", "ssrc"):
                _check_constant_fits(where, value)
                if self.ftype in ("f16", "bf16", "i16") and width == 1 and not is_inline_constant(value):
                    if isinstance(value, int) and not -(1 << 15) <= value < (1 << 16):
                        raise ISAError(f"{where}: literal {value:#x} does not fit the 16-bit operand")
                    if isinstance(value, float) and self.ftype == "i16":
                        raise ISAError(f"{where}: a float literal for a 16-bit integer operand (use its bits)")
                    if isinstance(value, float) and self.ftype == "bf16" and f32_bits(value) & 0xFFFF:
                        raise ISAError(f"{where}: {value!r} is not exactly representable in bf16")
                return value
            if kind in ("soff", "soffu"):
                lo, hi = (-(1 << 20), (1 << 20) - 1) if kind == "soff" else (0, (1 << 20) - 1)
                if not isinstance(value, int) or not lo <= value <= hi:
                    raise ISAError(f"{where}: SMEM offset {value!r} must be an integer in [{lo}, {hi}]")
                return value
            if kind == "avc":
                if not is_inline_constant(value):
                    raise ISAError(f"{where}: only an inline constant may replace the accumulator, got {value!r}")
                return value
            raise ISAError(f"{where} expects {spec.describe(width)}, got the constant {value!r}")
        reg = value.reg if isinstance(value, Mod) else value
        if isinstance(value, Mod):
            if spec.is_def or kind not in ("vsrc", "v", "avc", "av"):
                raise ISAError(f"{where}: source modifiers (neg/abs) apply to VALU sources only")
            if spec.name not in self.srcmods:
                raise ISAError(f"{where}: {self.name} takes no neg/abs source modifiers"
                               + (f" on {spec.name}" if self.srcmods else ""))
        if isinstance(reg, _Off):
            raise ISAError(f"{where} expects {spec.describe(width)}, got off")
        if isinstance(reg, Special):
            if kind == "sgpr" and reg.name.startswith("vcc"):
                pass
            elif kind not in ("s", "ssrc", "vsrc", "soff", "soffu", "saddr"):
                raise ISAError(f"{where} expects {spec.describe(width)}, got {reg}")
            if reg.name == "scc":
                raise ISAError(f"{where}: scc is not an operand register")
            if reg.name == "m0" and spec.name in self.no_m0:
                raise ISAError(f"{where}: m0 is not allowed here")
            if _SPECIAL_WIDTH[reg.name] != width:
                raise ISAError(f"{where} expects {width} dword(s), got {reg} ({_SPECIAL_WIDTH[reg.name]})")
            return value
        if not isinstance(reg, Reg):
            raise ISAError(f"{where} expects {spec.describe(width)}, got {value!r}")
        allowed = _ALLOWED_FILES[kind]
        if reg.cls not in allowed:
            raise ISAError(f"{where} expects {spec.describe(width)}, got {_FILE_NAME[reg.cls]} {reg.physical()}")
        if kind == "gaddr" and reg.count in (1, 2):
            width = reg.count           # 64-bit address or 32-bit offset: checked against saddr below
        if reg.count != width:
            raise ISAError(f"{where} expects {width} register(s), got {reg.physical()} ({reg.count})")
        align = _alignment(reg.cls, width)
        if reg.index % align:
            raise ISAError(f"{where}: {reg.physical()} must start at a multiple of {align}")
        if reg.last >= _REG_LIMIT[reg.cls]:
            raise ISAError(f"{where}: {reg.physical()} is beyond the {_REG_LIMIT[reg.cls]} addressable "
                           f"{_FILE_NAME[reg.cls]}s")
        return value

    # ------------------------------------------------------------------ whole-instruction rules
    def _check_combination(self, ops: tuple[Any, ...], mods: dict[str, Any]) -> None:
        specs = self.operands
        _, _, gaddr, lit_slots = self._facts
        # global addressing: the VGPR address is 64-bit without an SGPR base, a 32-bit offset with one
        for spec, value in zip(specs, ops) if gaddr else ():
            if spec.kind == "gaddr":
                saddr = next((v for s, v in zip(specs, ops) if s.kind == "saddr"), OFF)
                need = 2 if isinstance(saddr, _Off) else 1
                if value.count != need:
                    what = "a 64-bit address (2 VGPRs) when saddr is off" if need == 2 else \
                        "a 32-bit offset (1 VGPR) when saddr is an SGPR pair"
                    raise ISAError(f"{self.name}: operand {spec.name} must be {what}, got {value.physical()}")
        # register-file consistency
        if self.fmt == "MAI":
            vals = dict(zip((s.name for s in specs), ops))
            dst, acc = vals["vdst"], vals["src2"]
            if isinstance(acc, Reg) and acc.cls != dst.cls:
                raise ISAError(f"{self.name}: operand src2 ({acc.physical()}) and vdst ({dst.physical()}) must both "
                               "be VGPRs or both AGPRs")
        elif self.fmt in ("DS", "MUBUF", "GLOBAL"):
            files = {(s.name, v.cls) for s, v in zip(specs, ops) if s.kind == "av" and isinstance(v, Reg)}
            if len({c for _, c in files}) > 1:
                raise ISAError(f"{self.name}: data operands must all be VGPRs or all AGPRs "
                               f"({', '.join(f'{n}={_FILE_NAME[c]}' for n, c in sorted(files))})")
        # constants: which encodings carry a literal dword, the constant bus
        literals = {_literal_key(ops[i]) for i, kind, width in lit_slots if _is_literal(ops[i], kind, width)}
        if self.is_dpp(mods):
            reasons = self.vop3_reasons(ops, mods)
            if reasons:
                raise ISAError(f"{self.name}: DPP needs the 32-bit {self.fmt} form, but {reasons[0]} needs VOP3")
            for spec, value in zip(specs, ops):
                if spec.is_use and not isinstance(_bare(value), Reg) and spec.kind in ("vsrc", "v"):
                    raise ISAError(f"{self.name}: DPP takes VGPR sources only (operand {spec.name} is {value})")
                if spec.kind == "vsrc" and isinstance(_bare(value), Reg) and _bare(value).cls != "v":
                    raise ISAError(f"{self.name}: DPP takes VGPR sources only (operand {spec.name} is "
                                   f"{_bare(value).physical()})")
        if literals:
            self._check_literal(ops, mods, literals)
        if self.unit in ("valu", "trans"):
            self._check_constant_bus(ops, literals)

    def _check_literal(self, ops: tuple[Any, ...], mods: dict[str, Any], literals: set[tuple[str, Any]]) -> None:
        if len(literals) > 1:
            raise ISAError(f"{self.name}: at most one literal constant per instruction, got "
                           f"{', '.join(sorted(str(x[1]) for x in literals))}")
        if not self.literal_ok:
            raise ISAError(f"{self.name}: the {self.fmt} encoding takes inline constants only on gfx9 "
                           "(-16..64, ±0.5, ±1, ±2, ±4, 1/(2π)); put the value in a register first")
        if self.fmt in ("VOP1", "VOP2", "VOPC"):
            reasons = self.vop3_reasons(ops, mods)
            if reasons:
                raise ISAError(f"{self.name}: a literal constant needs the 32-bit {self.fmt} encoding, but "
                               f"{reasons[0]} needs VOP3 (which takes no literal on gfx9)")
            first = next(s for s in self.operands if not s.is_def)
            for spec, value in zip(self.operands, ops):
                if not spec.is_def and spec is not first and spec.kind != "lit" \
                        and _is_literal(value, spec.kind, spec.width):
                    raise ISAError(f"{self.name}: a literal constant may only be the first source ({first.name}); "
                                   f"operand {spec.name} is {value!r}")

    def _check_constant_bus(self, ops: tuple[Any, ...], literals: set[tuple[str, Any]]) -> None:
        # an implicit vcc read (v_div_fmas_f32) takes the constant bus like an explicit SGPR source
        scalars: list[str] = ["vcc"] if "vcc" in self.implicit_uses and self.unit == "valu" else []
        for spec, value in zip(self.operands, ops):
            if spec.is_def and not spec.is_use:
                continue
            reg = _bare(value)
            if isinstance(reg, Special) and reg.name == "m0" and spec.name in self.m0_free:
                continue
            if (isinstance(reg, Reg) and reg.cls == "s") or isinstance(reg, Special):
                key = reg.physical() if isinstance(reg, Reg) else reg.name
                if key not in scalars:
                    scalars.append(key)
        if len(scalars) + len(literals) > 1:
            what = scalars + [str(x[1]) for x in literals]
            raise ISAError(f"{self.name}: reads {len(what)} scalar values ({', '.join(what)}) but a VALU instruction "
                           "reads at most one SGPR or literal on gfx9 (constant bus limit)")

    # ------------------------------------------------------------------ encoding
    def vop3_reasons(self, ops: Sequence[Any], mods: dict[str, Any]) -> list[str]:
        """Why a VOP1/VOP2/VOPC instruction needs its 64-bit VOP3 form (empty: the short form fits)."""
        if self.fmt not in ("VOP1", "VOP2", "VOPC"):
            return []
        reasons: list[str] = []
        for name in ("clamp", "omod", "op_sel"):
            if name in mods:
                reasons.append(f"modifier {name}")
        dpp = self.is_dpp(mods)
        seen_src = 0
        for spec, value in zip(self.operands, ops):
            if isinstance(value, Mod) and not dpp:
                reasons.append(f"the source modifier on {spec.name}")
            if spec.kind in ("s", "sgpr") and self.fmt in ("VOP2", "VOPC") and not (
                    isinstance(value, Special) and value.name == "vcc"):
                reasons.append(f"operand {spec.name} ({value}) not being vcc")
            if not spec.is_def and spec.kind in ("vsrc", "v"):
                if seen_src == 1 and self.fmt in ("VOP2", "VOPC"):
                    reg = _bare(value)
                    if not (isinstance(reg, Reg) and reg.cls == "v"):
                        reasons.append(f"operand {spec.name} ({value}) not being a VGPR")
                seen_src += 1
        return reasons

    def encoding(self, ops: Sequence[Any], mods: dict[str, Any]) -> str:
        """``e32`` (VOP1/VOP2/VOPC short form), ``e64`` (their VOP3 form), ``dpp`` or ``native``."""
        if self.fmt not in ("VOP1", "VOP2", "VOPC"):
            return "native"
        if self.is_dpp(mods):
            return "dpp"
        return "e64" if self.vop3_reasons(ops, mods) else "e32"

    def size(self, ops: Sequence[Any], mods: dict[str, Any]) -> int:
        """Bytes of machine code: the instruction words plus a trailing literal."""
        enc = self.encoding(ops, mods)
        if self.mfma is not None and self.name.startswith("v_mfma_scale_"):
            return 16                   # v_mfma_ld_scale_b32 word pair + the MFMA (VOP3PX2)
        if self.fmt in ("SOP1", "SOP2", "SOPK", "SOPC", "SOPP") or enc == "e32":
            base = 4
        else:
            base = 8
        literal = any(not s.is_def and _is_literal(v, s.kind, s.width) for s, v in zip(self.operands, ops))
        return base + (4 if literal else 0)


def _bare(value: Any) -> Any:
    return value.reg if isinstance(value, Mod) else value


def _is_literal(value: Any, kind: str, width: int = 1) -> bool:
    if kind == "lit":
        return True
    if kind in ("vsrc", "ssrc") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return not is_inline_constant(value, 64 if width == 2 else 32)
    return False


def _literal_key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)


def _check_constant_fits(where: str, value: Any) -> None:
    if isinstance(value, int) and not -(1 << 31) <= value < (1 << 32):
        raise ISAError(f"{where}: constant {value} does not fit in 32 bits")


def _alignment(cls: str, width: int) -> int:
    if cls == "s":
        return 1 if width == 1 else (2 if width == 2 else 4)
    return 2 if width >= 2 else 1       # gfx90a+: 64-bit and wider VGPR/AGPR tuples are even-aligned


# ----------------------------------------------------------------------------- the table


class ISATable:
    """All instruction definitions of one target, by name."""

    def __init__(self, target: Target, defs: Mapping[str, InstrDef], missing: dict[str, str] | None = None):
        self.target = target
        self.defs = defs
        self._missing = missing           # instructions of the other targets, for a helpful error

    def __getitem__(self, name: str) -> InstrDef:
        try:
            return self.defs[name]
        except KeyError:
            if self._missing is None:      # worked out on the first miss (it builds the other tables)
                self._missing = _other_targets_instructions(self.target, self.defs)
            other = self._missing.get(name)
            if other:
                raise ISAError(f"'{name}' does not exist on {self.target.name} (it is a {other} instruction)") from None
            raise ISAError(f"'{name}' is not an instruction isagen knows for {self.target.name}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.defs

    def __iter__(self) -> Iterator[InstrDef]:
        return iter(self.defs.values())

    def __len__(self) -> int:
        return len(self.defs)


@functools.cache
def _load_yaml(name: str) -> dict[str, Any]:
    return load_yaml_file(DEFS_DIR / name)     # parsed once per file content (isagen.isa.defs_cache)


def _expand(name: str) -> list[tuple[str, tuple[str, ...]]]:
    """Brace expansion of entry names: ``v_cmp_{eq,ne}_u32`` is v_cmp_eq_u32 and v_cmp_ne_u32.
    Returns (name, the choice made in each brace group)."""
    parts = re.split(r"\{([^{}]*)\}", name)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    out = []
    for combo in itertools.product(*choices):
        out.append(("".join(combo), tuple(combo[1::2])))
    return out


def _entries(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, entry in (doc.get("instructions") or {}).items():
        for name, picked in _expand(key):
            e = dict(entry or {})
            if "asm" in e:
                e["asm"] = e["asm"].format(*picked)
            out[name] = e
    return out


#: InstrDef.make's memo: (definition, operands, modifiers, their types) -> the checked operands and
#: modifiers, and the ``Shared`` facts of the instructions made from them.  An unrolled kernel builds
#: the same instruction many times over (a GEMM of 3157 instructions has 859 distinct ones), and the
#: checks are pure functions of these; the types are part of the key because 1, 1.0 and True are
#: equal (and hash alike) but are not the same operand.
_MADE: dict[tuple[Any, ...], tuple[tuple[Any, ...], dict[str, Any], InstrDef, Shared]] = {}
_MADE_LIMIT = 1 << 16


def forget_made() -> None:
    """Empty InstrDef.make's memo (benchmarks time a build from nothing with it)."""
    _MADE.clear()


def _made_key(desc: InstrDef, ops: Sequence[Any], mods: dict[str, Any]) -> tuple[Any, ...] | None:
    """The memo key of ``desc.make(ops, mods)``, or None when a modifier is not a value the key can
    hold.  ``desc`` is there by identity (the memo's value keeps it, so the id is not reused)."""
    if type(ops) is not tuple:
        ops = tuple(ops)
    if mods:
        mkey: list[tuple[Any, ...]] = []
        for k, v in mods.items():
            t = type(v)
            if t is tuple or t is list:
                mkey.append((k, t, tuple(v), tuple(map(type, v))))
            elif t is bool or t is int or t is str:
                mkey.append((k, t, v))
            else:
                return None
        mods_key: tuple[Any, ...] = tuple(mkey)
    else:
        mods_key = ()
    types = tuple(map(type, ops))
    if Reg in types:                    # a register by its fields: tuples hash and compare in C
        ops = tuple([(o.cls, o.index, o.count, o.sym, o.sym_base) if type(o) is Reg else o for o in ops])
    if float in types:                  # -0.0 == 0.0, but they are different constants
        return (id(desc), ops, types, mods_key, tuple(repr(o) for o in ops if type(o) is float))
    return (id(desc), ops, types, mods_key)


@functools.cache
def isa_table(target: str | Target) -> ISATable:
    """The instruction table of a target (cached)."""
    target = get_target(target)
    return ISATable(target, _build_defs(target))


def _other_targets_instructions(target: Target, defs: Mapping[str, InstrDef]) -> dict[str, str]:
    """Instruction name -> the other target that has it, for those ``target`` lacks."""
    missing: dict[str, str] = {}
    for other in TARGETS.values():
        if other.name != target.name:
            for name in _build_defs(other):
                if name not in defs:
                    missing[name] = other.name
    return missing


class _Defs(Mapping[str, InstrDef]):
    """A target's definitions by name, each made on first use: a kernel uses a few dozen of the
    ~450 opcodes, and making a definition (operands, modifiers) costs more than looking it up.
    Iteration is in the table's order; a definition is made once, so it stays the same object."""

    def __init__(self, sources: dict[str, tuple[str, Any]], formats: dict[str, Any], target: Target):
        self._sources = sources         # name -> ("entry", the YAML entry) or ("mfma", MfmaInfo)
        self._formats = formats
        self._target = target
        self._made: dict[str, InstrDef] = {}

    def __getitem__(self, name: str) -> InstrDef:
        made = self._made.get(name)
        if made is not None:
            return made
        kind, src = self._sources[name]
        if kind == "mfma":
            made = _make_mfma_def(src, self._formats, self._target)
        else:
            try:
                made = _make_def(name, src, self._formats, self._target)
            except (KeyError, ValueError, AssertionError) as e:
                raise ValueError(f"isa/defs: bad entry {name}: {e}") from e
        self._made[name] = made
        return made

    def __contains__(self, name: object) -> bool:
        return name in self._sources

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)


@functools.cache
def _build_defs(target: Target) -> _Defs:
    common = _load_yaml("common.yaml")
    arch = _load_yaml(f"{target.name}.yaml")
    formats = dict(common.get("formats", {}))
    formats.update(arch.get("formats", {}) or {})
    entries = _entries(common)
    for name in arch.get("remove", []) or []:
        entries.pop(name, None)
    entries.update(_entries(arch))
    sources: dict[str, tuple[str, Any]] = {name: ("entry", entry) for name, entry in entries.items()}
    for info in target.mfmas:
        if info.in_isa_table:
            sources[info.mnemonic] = ("mfma", info)
    return _Defs(sources, formats, target)


def _mod_specs(spec: dict[str, Any] | None) -> dict[str, ModSpec]:
    return {k: _parse_mod_spec(k, t) for k, t in (spec or {}).items()}


def _make_def(name: str, entry: dict[str, Any], formats: dict[str, Any], target: Target) -> InstrDef:
    template = formats[entry["fmt"]]
    fmt = template.get("enc", entry["fmt"])
    assert fmt in ENCODINGS, fmt

    def get(key: str, default: Any = None) -> Any:
        """The entry's value, else its format template's."""
        return entry.get(key, template.get(key, default))

    mods = _mod_specs(template.get("mods"))
    mods.update(_mod_specs(entry.get("mods")))
    for k in entry.get("no_mods", []) or []:
        mods.pop(k, None)
    dpp = bool(get("dpp", False))
    if dpp:
        mods.update(_DPP_SPECS)
    unit = get("unit")
    assert unit in UNITS, unit
    flags = frozenset(entry.get("flags", [])) | frozenset(template.get("flags", []))
    assert flags <= set(FLAGS), flags
    iuse = tuple(entry.get("iuse", [])) + tuple(template.get("iuse", []))
    idef = tuple(entry.get("idef", [])) + tuple(template.get("idef", []))
    return InstrDef(
        name=name, asm=entry.get("asm", name), fmt=fmt, unit=unit,
        operands=tuple(_parse_operand(o) for o in entry.get("ops", [])),
        mods=mods, fixed_mods=tuple(entry.get("fixed_mods", [])),
        implicit_defs=tuple(dict.fromkeys(idef)), implicit_uses=tuple(dict.fromkeys(iuse)),
        counter=get("counter"), arch=target.name, flags=flags,
        literal_ok=bool(get("literal", False)), srcmods=_srcmods(get("srcmods", False), entry), dpp=dpp,
        ftype=get("ftype", "f32"), m0_free=tuple(entry.get("m0_free", [])), no_m0=tuple(entry.get("no_m0", [])),
    )


def _srcmods(value: Any, entry: dict[str, Any]) -> tuple[str, ...]:
    """``srcmods: true`` means every VALU source; a list names the operands."""
    if value is True:
        return tuple(_parse_operand(o).name for o in entry.get("ops", [])
                     if _parse_operand(o).kind in ("vsrc", "v") and not _parse_operand(o).is_def)
    return tuple(value or ())


def _make_mfma_def(info: MfmaInfo, formats: dict[str, Any], target: Target) -> InstrDef:
    template = formats["MAI"]
    ops = [OperandSpec("vdst", "av", info.c_regs, True, False), OperandSpec("src0", "av", info.a_regs, False),
           OperandSpec("src1", "av", info.b_regs, False), OperandSpec("src2", "avc", info.c_regs, False)]
    mods = _mod_specs(template.get("mods"))
    if info.in_type == "f8f6f4":
        mods.pop("abid", None)          # cbsz/blgp select the A/B formats; there is no abid
    if info.mnemonic.startswith("v_mfma_scale_"):
        # the E8M0 scales of A and B (VGPRs); op_sel[i]/op_sel_hi[i] pick the byte of scale_src<i>
        # (LLVM prints a third, unused element, always 0)
        ops += [OperandSpec("scale_src0", "v", 1, False), OperandSpec("scale_src1", "v", 1, False)]
        mods = {"op_sel": ModSpec("op_sel", "bits", 3), "op_sel_hi": ModSpec("op_sel_hi", "bits", 3, 0, True),
                **mods}
    return InstrDef(
        name=info.mnemonic, asm=info.mnemonic, fmt="MAI", unit="mfma", operands=tuple(ops), mods=mods,
        fixed_mods=(), implicit_defs=(), implicit_uses=tuple(template.get("iuse", [])), counter=None,
        arch=target.name, flags=frozenset({"mfma"}), mfma=info, literal_ok=False,
    )
