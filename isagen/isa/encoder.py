"""Machine code for isagen's instructions, without an assembler (the default path since issue 17:
``isagen.objects.elf_writer`` puts it in a code object; LLVM remains the fallback and the reference).

``encode(inst, pc, labels)`` gives the bytes of one ``Instruction``; ``encode_items(items)`` the
``.text`` of a whole item list (labels resolved, branch offsets computed).  It is the inverse of
``isagen.isa.decoder``: the opcode of every mnemonic comes from the same LLVM-generated tables
(``isagen/isa/data/opcodes.<target>.json``), read backwards, and the bit layout of each encoding
family is the decoder's.  Which form a VOP1/VOP2/VOPC instruction takes (32-bit, VOP3 or DPP) is the
table's own prediction (``Instruction.encoding``), which the ISA tests hold to LLVM's choice.

What it covers: every entry of both targets' tables (SOP1 SOP2 SOPC SOPK SOPP SMEM, VOP1 VOP2 VOPC
in their 32-bit, VOP3 and DPP forms, VOP3, VOP3P, MFMA with gfx950's scaled MFMA, DS, MUBUF,
FLAT/GLOBAL); anything else raises ``EncodeError`` and the caller assembles that kernel with LLVM.
The tests compare it with LLVM byte for byte: every sampled instance of every table entry
(tests/isa/test_isa_encoding.py), and the ``.text`` of every bundled kernel on both targets
(tests/objects/test_encoder_text.py, tests/objects/test_elf_writer.py).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Sequence
from typing import Any

from isagen.errors import CodeObjectError, ISAError
from isagen.isa.defs_cache import load_copy, store_copy
from isagen.isa.instruction import Instruction
from isagen.isa.operands import Label, Mod, Reg, Special, _Off

__all__ = ["EncodeError", "encode", "encode_items", "program_size"]


class EncodeError(ISAError):
    """An instruction isagen's encoder does not cover (or a branch to an unknown label)."""


# ----------------------------------------------------------------------------- opcodes, backwards

_INVERSE: dict[str, dict[str, dict[str, tuple[int, Any]]]] = {}
_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


class _Entry:
    """What the encoder needs of one opcode (the decoder's table entry has much more): the
    operand fields in LLVM's text order, and the layout choices of its family."""

    __slots__ = ("name", "ops", "mai", "mix", "off2")

    def __init__(self, e: dict[str, Any]) -> None:
        self.name: str = e.get("name", e["mn"])
        self.ops = tuple((o[0], o[1], o[2]) for o in e["ops"])
        self.mai: bool = e.get("mai", False)
        self.mix = self.name.startswith(("v_fma_mix", "v_mad_mix"))
        self.off2: bool = e.get("off2", False)


def _opcodes(target: str) -> dict[str, dict[str, tuple[int, Any]]]:
    """family -> LLVM name (no _e32/_e64 suffix) -> (opcode, entry), read from the same LLVM-generated
    table as ``isagen.isa.decoder.opcode_table`` (the lowest opcode of a name wins, as there); the
    decoder is not imported, and an entry is prepared only when an instruction asks for it."""
    inv = _INVERSE.get(target)
    if inv is None:
        path = os.path.join(_DATA_DIR, f"opcodes.{target}.json")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CodeObjectError(f"no opcode table for {target}: {path}: {exc.strerror}") from None
        # the inverted table (family -> name -> (opcode, the entry's fields _Entry reads)), kept in
        # isagen's cache as parsed
        inv = load_copy(f"opcodes-for-encoder.{target}", data)
        if not isinstance(inv, dict):
            import json
            inv = {}
            for fam, entries in json.loads(data)["families"].items():
                names: dict[str, Any] = {}
                for op, e in sorted((int(k), e) for k, e in entries.items()):
                    name = e.get("name", e["mn"])
                    if name not in names:           # what _Entry reads, no more
                        names[name] = (op, {"mn": name, "ops": e["ops"], "mai": e.get("mai", False),
                                            "off2": e.get("off2", False)})
                inv[fam] = names
            store_copy(f"opcodes-for-encoder.{target}", data, inv)
        _INVERSE[target] = inv
    return inv


def _opcode(target: str, family: str, asm: str) -> tuple[int, _Entry] | None:
    names = _opcodes(target).get(family)
    got = names.get(asm) if names is not None else None
    if got is None:
        return None
    op, e = got
    if not isinstance(e, _Entry):
        e = _Entry(e)
        names[asm] = (op, e)          # type: ignore[index]
    return op, e


# ----------------------------------------------------------------------------- operand codes

_SPECIAL_CODES = {"vcc": 106, "vcc_lo": 106, "vcc_hi": 107, "exec": 126, "exec_lo": 126, "exec_hi": 127,
                  "m0": 124, "scc": 253}
_INLINE_FLOATS = {0.5: 240, -0.5: 241, 1.0: 242, -1.0: 243, 2.0: 244, -2.0: 245, 4.0: 246, -4.0: 247}
_INV_2PI = 0.15915494309189532
_F32_INLINE_BITS = {0x3F000000: 240, 0xBF000000: 241, 0x3F800000: 242, 0xBF800000: 243, 0x40000000: 244,
                    0xC0000000: 245, 0x40800000: 246, 0xC0800000: 247, 0x3E22F983: 248}
_F16_BITS = {0.5: 0x3800, -0.5: 0xB800, 1.0: 0x3C00, -1.0: 0xBC00, 2.0: 0x4000, -2.0: 0xC000, 4.0: 0x4400,
             -4.0: 0xC400}


def _f32_bits(x: float) -> int:
    bits: int = struct.unpack("<I", struct.pack("<f", x))[0]
    return bits


def _f16_bits(x: float) -> int:
    bits: int = struct.unpack("<H", struct.pack("<e", x))[0]
    return bits


def _reg_code(value: Any) -> int:
    """The 9-bit source code of a register operand (VGPR/AGPR 256+, SGPR, special)."""
    if isinstance(value, Reg):
        return 256 + value.index if value.cls in ("v", "a") else value.index
    if isinstance(value, Special):
        return _SPECIAL_CODES[value.name]
    raise EncodeError(f"not a register: {value!r}")


def _index(value: Any) -> int:
    """A VGPR/AGPR/SGPR field (8 bits for vector registers, the SGPR code for scalar ones)."""
    if type(value) is Reg:
        return value.index
    value = value.reg if isinstance(value, Mod) else value
    if isinstance(value, Reg):
        return value.index
    if isinstance(value, Special):
        return _SPECIAL_CODES[value.name]
    if isinstance(value, _Off):
        return 0
    raise EncodeError(f"not a register: {value!r}")


class _Src:
    """A source field: its 9-bit code, the literal it needs (or None), and its neg/abs modifiers."""

    __slots__ = ("code", "literal", "neg", "abs")

    def __init__(self, code: int, literal: int | None = None, neg: bool = False, abs_: bool = False):
        self.code, self.literal, self.neg, self.abs = code, literal, neg, abs_


def _const(value: Any, ftype: str, width: int) -> _Src:
    if isinstance(value, bool):
        raise EncodeError(f"not a constant: {value!r}")
    if isinstance(value, int):
        if -16 <= value <= 64:
            return _Src(128 + value if value >= 0 else 192 - value)
        if width != 2:
            bits = value & 0xFFFFFFFF
            if 0xFFFFFFF0 <= bits:
                return _Src(192 + (0x100000000 - bits))
            if bits in _F32_INLINE_BITS:
                return _Src(_F32_INLINE_BITS[bits])
        return _Src(255, value & 0xFFFFFFFF)
    if isinstance(value, float):
        if value == 0.0 and math.copysign(1.0, value) > 0:
            return _Src(128)
        if value in _INLINE_FLOATS:
            return _Src(_INLINE_FLOATS[value])
        if _f32_bits(value) == 0x3E22F983 or value == _INV_2PI:
            return _Src(248)
        if ftype == "f16":
            return _Src(255, _f16_bits(value))
        if ftype == "bf16":
            return _Src(255, _f32_bits(value) >> 16)
        if width == 2 or ftype == "f64":
            return _Src(255, struct.unpack("<Q", struct.pack("<d", value))[0] >> 32)
        return _Src(255, _f32_bits(value))
    raise EncodeError(f"not a constant: {value!r}")


def _src(value: Any, ftype: str, width: int) -> _Src:
    if type(value) is Reg:                      # the common case first
        return _Src(256 + value.index if value.cls in ("v", "a") else value.index)
    neg = abs_ = False
    if isinstance(value, Mod):
        neg, abs_, value = value.neg, value.abs, value.reg
    if isinstance(value, _Off):
        raise EncodeError("'off' is not a source operand")
    if isinstance(value, (Reg, Special)):
        s = _Src(_reg_code(value))
    else:
        s = _const(value, ftype, width)
    s.neg, s.abs = neg, abs_
    return s


# ----------------------------------------------------------------------------- the families

def _bits(mods: dict[str, Any], name: str, default: int = 0) -> int:
    v = mods.get(name)
    if v is None:
        return default
    if isinstance(v, (tuple, list)):
        return sum(int(b) << i for i, b in enumerate(v))
    return int(v)


def _dpp_ctrl(mods: dict[str, Any]) -> int:
    if "quad_perm" in mods:
        q = [int(x) for x in mods["quad_perm"]]
        return q[0] | q[1] << 2 | q[2] << 4 | q[3] << 6
    for name, base in (("row_shl", 0x100), ("row_shr", 0x110), ("row_ror", 0x120)):
        if name in mods:
            return base + int(mods[name])
    for name, code in (("wave_shl", 0x130), ("wave_rol", 0x134), ("wave_shr", 0x138), ("wave_ror", 0x13C),
                       ("row_mirror", 0x140), ("row_half_mirror", 0x141)):
        if mods.get(name):
            return code
    if "row_bcast" in mods:
        return 0x142 if mods["row_bcast"] == 15 else 0x143
    raise EncodeError("DPP instruction without a DPP control")


def _waitcnt(mods: dict[str, Any]) -> int:
    vm = int(mods.get("vmcnt", 63))
    exp = int(mods.get("expcnt", 7))
    lgkm = int(mods.get("lgkmcnt", 15))
    return (vm & 0xF) | (exp & 7) << 4 | (lgkm & 0xF) << 8 | (vm >> 4 & 3) << 14


class _Fields:
    """The operands of one instruction, by the encoding field they go to."""

    def __init__(self) -> None:
        self.f: dict[str, Any] = {}
        self.literal: int | None = None

    def src(self, name: str, value: Any, ftype: str, width: int) -> _Src:
        s = _src(value, ftype, width)
        if s.literal is not None:
            if self.literal is not None and self.literal != s.literal:
                raise EncodeError("two different literals in one instruction")
            self.literal = s.literal
        self.f[name] = s
        return s

    def code(self, name: str) -> int:
        s = self.f.get(name)
        return s.code if isinstance(s, _Src) else 0


_SRC_FIELDS = frozenset(("src0", "src1", "src2", "ssrc0", "ssrc1", "soffset", "scale0", "scale1"))
_Plan = tuple[str, int, _Entry, tuple[tuple[str, int, int, bool], ...], int]
_PLANS: dict[tuple[int, str], tuple[Any, _Plan]] = {}


def _plan(desc: Any, enc: str) -> _Plan:
    """What an instruction's encoding takes from its table entry alone, worked out once per entry
    and form: the family, the opcode, the opcode's entry, and per operand its field, its width in
    registers, the width ``_src`` is given (2 for 64-bit operands) and whether it is a source field;
    and the number of operands the encoding has."""
    key = (id(desc), enc)
    got = _PLANS.get(key)
    if got is not None and got[0] is desc:
        return got[1]
    target = desc.arch
    fmt = desc.fmt
    if fmt in ("VOP1", "VOP2", "VOPC"):
        family = fmt if enc in ("e32", "dpp") else "VOP3"
    elif fmt == "MAI":
        # gfx950's scaled MFMA: a v_mfma_ld_scale_b32 word pair (VOP3P opcode 0x2c) in front of the MFMA
        family = "VOP3PX2" if desc.name.startswith("v_mfma_scale_") else "VOP3P"
    else:
        family = fmt
    found = _opcode(target, family, desc.asm)
    if found is None:
        raise EncodeError(f"{desc.name}: no {family} opcode for {desc.asm} on {target}")
    op, entry = found
    layout = entry.ops
    if family == "MUBUF" and "lds" in desc.fixed_mods:
        layout = tuple(x for x in layout if x[0] != "vdata")      # LDS DMA: the data goes to LDS
    # isagen's operands, in assembly order, against the entry's fields (also in LLVM's text order;
    # '=' fields are fixed registers such as the vcc of a 32-bit compare, with nothing to encode)
    fields = tuple((fld, n, 2 if spec.width == 2 else n, fld in _SRC_FIELDS)
                   for (fld, _file, n), spec in zip(layout, desc.operands))
    plan: _Plan = (family, op, entry, fields, len(layout))
    _PLANS[key] = (desc, plan)
    return plan


#: packers of n little-endian 32-bit words (an instruction is 1 to 4 words: a scaled MFMA's pair of pairs)
_WORDS = {n: struct.Struct(f"<{n}I") for n in (1, 2, 3, 4)}


def encode(inst: Instruction, pc: int = 0, labels: dict[str, int] | None = None) -> bytes:
    """The machine code of ``inst`` placed at byte address ``pc`` (``labels``: label name -> byte
    address, for branches)."""
    desc = inst.desc
    enc = inst.encoding
    family, op, entry, plan, n_layout = _plan(desc, enc)
    ops = inst.ops
    if family == "SOPP" and not ops:
        n_layout = 0                 # s_waitcnt's fields are modifiers; s_endpgm's simm16 is 0
    if n_layout != len(ops):
        raise EncodeError(f"{inst.render(False)}: {len(ops)} operands, the {family} encoding has "
                          f"{n_layout}")
    fields = _Fields()
    f = fields.f
    ftype = desc.ftype
    for (fld, _n, width, is_src), value in zip(plan, ops):
        if fld == "=":
            continue
        if is_src and not isinstance(value, Label):
            if fld == "soffset" and isinstance(value, _Off):
                f[fld] = _Src(0)
                continue
            src = _src(value, ftype, width)
            if src.literal is not None:
                if fields.literal is not None and fields.literal != src.literal:
                    raise EncodeError("two different literals in one instruction")
                fields.literal = src.literal
            f[fld] = src
        else:
            f[fld] = value
    words = _pack(family, op, entry, inst, fields, inst.mods, enc, pc, labels)
    packer = _WORDS.get(len(words))
    data = packer.pack(*words) if packer is not None else struct.pack(f"<{len(words)}I", *words)
    if fields.literal is not None:
        data += struct.pack("<I", fields.literal)
    return data


def _pack(family: str, op: int, entry: Any, inst: Instruction, fl: _Fields, mods: dict[str, Any], enc: str,
          pc: int, labels: dict[str, int] | None) -> list[int]:
    f = fl.f
    if family == "SOP2":
        return [2 << 30 | op << 23 | _index(f.get("sdst", 0) or 0) << 16 | fl.code("ssrc1") << 8 | fl.code("ssrc0")]
    if family == "SOP1":
        sdst = _index(f["sdst"]) if "sdst" in f else 0
        return [0x17D << 23 | sdst << 16 | op << 8 | fl.code("ssrc0")]
    if family == "SOPC":
        return [0x17E << 23 | op << 16 | fl.code("ssrc1") << 8 | fl.code("ssrc0")]
    if family == "SOPK":
        sdst = _index(f["sdst"]) if "sdst" in f else 0
        return [0xB << 28 | op << 23 | sdst << 16 | (int(f.get("simm16", 0)) & 0xFFFF)]
    if family == "SOPP":
        simm = 0
        if inst.name == "s_waitcnt":
            simm = _waitcnt(mods)
        elif "simm16" in f:
            value = f["simm16"]
            if isinstance(value, Label):
                if labels is None or value.name not in labels:
                    raise EncodeError(f"{inst.render(False)}: branch to a label whose address is unknown")
                delta = labels[value.name] - (pc + 4)
                simm = (delta // 4) & 0xFFFF
            else:
                simm = int(value) & 0xFFFF
        return [0x17F << 23 | op << 16 | simm]
    if family == "SMEM":
        sdata = _index(f.get("sdata", 0) or 0)
        sbase = _index(f["sbase"]) >> 1 if "sbase" in f else 0
        offset = f.get("offset", 0)
        imm = glc = soe = soff = 0
        off_field = 0
        if isinstance(offset, (Reg, Special)):
            off_field = _index(offset)
        elif "offset" in f:
            imm = 1
            off_field = int(offset) & 0x1FFFFF
        glc = 1 if mods.get("glc") or mods.get("sc0") else 0
        return [0x30 << 26 | op << 18 | imm << 17 | glc << 16 | soe << 14 | sdata << 6 | sbase,
                soff << 25 | off_field]
    if family in ("VOP1", "VOP2", "VOPC"):
        vdst = _index(f["vdst"]) if "vdst" in f else 0
        vsrc1 = _index(f["vsrc1"]) if "vsrc1" in f else 0
        if family == "VOP2" and "src1" in f and "vsrc1" not in f:
            vsrc1 = fl.code("src1") - 256
        if "k" in f:
            k = f["k"]
            fl.literal = k & 0xFFFFFFFF if isinstance(k, int) else _f32_bits(float(k))
        src0 = fl.code("src0")
        if enc == "dpp":
            s0 = f["src0"]
            s1 = f.get("vsrc1") if isinstance(f.get("vsrc1"), _Src) else None
            w1 = (_bits(mods, "row_mask", 0xF) << 28 | _bits(mods, "bank_mask", 0xF) << 24
                  | (s1.abs if s1 else 0) << 23 | (s1.neg if s1 else 0) << 22
                  | s0.abs << 21 | s0.neg << 20 | _bits(mods, "bound_ctrl") << 19
                  | _dpp_ctrl(mods) << 8 | (s0.code - 256) & 0xFF)
            src0 = 0xFA
        if family == "VOP2":
            w0 = op << 25 | vdst << 17 | vsrc1 << 9 | src0
        elif family == "VOP1":
            w0 = 0x3F << 25 | vdst << 17 | op << 9 | src0
        else:
            w0 = 0x3E << 25 | op << 17 | vsrc1 << 9 | src0
        return [w0, w1] if enc == "dpp" else [w0]
    if family == "VOP3":
        srcs = [f.get(name) for name in ("src0", "src1", "src2")]
        neg, abs_ = _neg_abs(srcs)
        vdst = _index(f["vdst"]) if "vdst" in f else 0
        clamp = _bits(mods, "clamp")
        omod = _bits(mods, "omod")
        opsel = 0
        if "op_sel" in mods:
            bits = list(mods["op_sel"])
            opsel = sum(int(b) << i for i, b in enumerate(bits[:-1])) | int(bits[-1]) << 3
        if "bitop3" in mods:     # gfx950 v_bitop3_*: the truth table fills the neg, abs and omod fields
            bop = int(mods["bitop3"])
            neg, abs_, omod = bop & 7, bop >> 3 & 7, bop >> 6 & 3
        if "sdst" in f:
            mid = _index(f["sdst"]) << 8
        else:
            mid = opsel << 11 | abs_ << 8
        w0 = 0x34 << 26 | op << 16 | clamp << 15 | mid | vdst
        w1 = neg << 29 | omod << 27 | fl.code("src2") << 18 | fl.code("src1") << 9 | fl.code("src0")
        return [w0, w1]
    if family == "VOP3PX2":
        # the scale sources and their op_sel/op_sel_hi (two bits each: the third does not exist),
        # then the MFMA with abid 1, as LLVM emits it
        opsel, hi = _bits(mods, "op_sel") & 3, _bits(mods, "op_sel_hi") & 3
        scale = [0x1A7 << 23 | 0x2C << 16 | opsel << 11, hi << 27 | fl.code("scale1") << 9 | fl.code("scale0")]
        inner = dict(mods)
        inner["abid"] = 1
        for name in ("op_sel", "op_sel_hi"):
            inner.pop(name, None)
        return scale + _mai(op, inst, fl, inner)
    if family == "VOP3P":
        vdst = _index(f["vdst"]) if "vdst" in f else 0
        srcs = [f.get(name) for name in ("src0", "src1", "src2")]
        if entry.mai:
            return _mai(op, inst, fl, mods)
        nsrc = sum(1 for s in srcs if s is not None)
        opsel = _bits(mods, "op_sel")
        # op_sel_hi: LLVM's default is every bit set (also the bits of sources the instruction does
        # not have), except for the mixed-precision FMAs, whose default is 0
        if entry.mix:
            hi = _bits(mods, "op_sel_hi")
        else:
            hi = _bits(mods, "op_sel_hi", 7) | (7 & ~((1 << nsrc) - 1))
        src_neg, src_abs = _neg_abs(srcs)
        neg_lo = _bits(mods, "neg_lo") | src_neg
        neg_hi = _bits(mods, "neg_hi")
        if entry.mix:            # v_fma_mix*: |x| is the neg_hi bit of its source
            neg_hi |= src_abs
        w0 = (0x1A7 << 23 | op << 16 | _bits(mods, "clamp") << 15 | (hi >> 2 & 1) << 14 | opsel << 11
              | neg_hi << 8 | vdst)
        w1 = neg_lo << 29 | (hi & 3) << 27 | fl.code("src2") << 18 | fl.code("src1") << 9 | fl.code("src0")
        return [w0, w1]
    if family == "DS":
        if entry.off2:
            off0, off1 = _bits(mods, "offset0"), _bits(mods, "offset1")
        else:
            o = _bits(mods, "offset")
            off0, off1 = o & 0xFF, o >> 8 & 0xFF
        acc = 0
        for name in ("vdst", "data0", "data1"):
            v = f.get(name)
            if isinstance(v, Reg) and v.cls == "a":
                acc = 1
        w0 = 0x36 << 26 | acc << 25 | op << 17 | off1 << 8 | off0
        w1 = (_index(f["vdst"]) if "vdst" in f else 0) << 24 | (_index(f["data1"]) if "data1" in f else 0) << 16 \
            | (_index(f["data0"]) if "data0" in f else 0) << 8 | _index(f.get("addr", 0) or 0)
        return [w0, w1]
    if family == "MUBUF":
        lds = 1 if "lds" in inst.desc.fixed_mods or mods.get("lds") else 0
        vdata = f.get("vdata")
        acc = 1 if isinstance(vdata, Reg) and vdata.cls == "a" else 0
        w0 = (0x38 << 26 | op << 18 | _bits(mods, "nt") << 17 | lds << 16 | _bits(mods, "sc1") << 15
              | _bits(mods, "sc0") << 14 | _bits(mods, "idxen") << 13 | _bits(mods, "offen") << 12
              | _bits(mods, "offset") & 0xFFF)
        vaddr = f.get("vaddr")
        srsrc = _index(f["srsrc"]) >> 2 if "srsrc" in f else 0
        w1 = (fl.code("soffset") << 24 | acc << 23 | srsrc << 16
              | (_index(vdata) if vdata is not None else 0) << 8 | (_index(vaddr) if vaddr is not None else 0))
        return [w0, w1]
    if family in ("GLOBAL", "FLAT"):
        seg = 2 if family == "GLOBAL" else 0
        saddr = f.get("saddr")
        saddr_code: int = 0x7F if saddr is None or isinstance(saddr, _Off) else _index(saddr)
        gdst, gdata = f.get("vdst"), f.get("data")
        acc = 1 if any(isinstance(v, Reg) and v.cls == "a" for v in (gdst, gdata)) else 0
        w0 = (0x37 << 26 | _bits(mods, "sc1") << 25 | op << 18 | _bits(mods, "nt") << 17 | _bits(mods, "sc0") << 16
              | seg << 14 | _bits(mods, "offset") & 0x1FFF)
        w1 = ((_index(gdst) if gdst is not None else 0) << 24 | acc << 23 | saddr_code << 16
              | (_index(gdata) if gdata is not None else 0) << 8 | _index(f.get("addr", 0) or 0))
        return [w0, w1]
    raise EncodeError(f"{inst.name}: the {family} encoding is not covered by isagen's encoder")


def _neg_abs(srcs: list[Any]) -> tuple[int, int]:
    """The neg and abs bits of the source fields (bit i: source i)."""
    neg = abs_ = 0
    for i, s in enumerate(srcs):
        if isinstance(s, _Src):
            neg |= int(s.neg) << i
            abs_ |= int(s.abs) << i
    return neg, abs_


def _mai(op: int, inst: Instruction, fl: _Fields, mods: dict[str, Any]) -> list[int]:
    """An MFMA's word pair: AGPR/VGPR files of D/C (acc_cd) and of A and B (acc bits)."""
    f = fl.f
    dst = f["vdst"]
    acc_cd = 1 if isinstance(dst, Reg) and dst.cls == "a" else 0
    acc = 0
    for i in range(2):
        raw = inst.ops[i + 1]
        raw = raw.reg if isinstance(raw, Mod) else raw
        if isinstance(raw, Reg) and raw.cls == "a":
            acc |= 1 << i
    w0 = 0x1A7 << 23 | op << 16 | acc_cd << 15 | _bits(mods, "abid") << 11 | _bits(mods, "cbsz") << 8 | _index(dst)
    w1 = (_bits(mods, "blgp") << 29 | acc << 27 | fl.code("src2") << 18 | fl.code("src1") << 9
          | fl.code("src0"))
    return [w0, w1]


# ----------------------------------------------------------------------------- whole programs

def program_size(items: Sequence[object]) -> int:
    return sum(i.size for i in items if isinstance(i, Instruction))


def encode_items(items: Sequence[object]) -> bytes:
    """The ``.text`` bytes of an item list: instructions in order, labels at the address of the next
    instruction, branches pointing at them.

    Equal label-free instructions share their bytes (``Instruction.shared``), so each is encoded
    once; they are encoded first, and their length is their size (checked against the table's
    ``size`` wherever that is already known).  An instruction with a label operand (a branch)
    takes the table's size for the layout and is encoded once every label has its address."""
    labels: dict[str, int] = {}
    parts: list[Any] = []              # bytes, or the branch instruction to encode at the end
    branches: list[tuple[int, int, Instruction]] = []     # (index in parts, pc, instruction)
    pc = 0
    for item in items:
        if isinstance(item, Instruction):
            sh = item.shared
            code = sh.code
            if code is None:
                if _has_label(item):
                    size = item.size
                    branches.append((len(parts), pc, item))
                    parts.append(b"")
                    pc += size
                    continue
                code = encode(item, pc, labels)
                if sh.size is None:
                    sh.size = len(code)
                elif len(code) != sh.size:
                    raise EncodeError(f"{item.render(False)}: encoded {len(code)} bytes, its size is {sh.size}")
                sh.code = code
            parts.append(code)
            pc += len(code)
        elif isinstance(item, Label):
            labels[item.name] = pc
    for i, at, inst in branches:
        code = encode(inst, at, labels)
        if len(code) != inst.size:
            raise EncodeError(f"{inst.render(False)}: encoded {len(code)} bytes, its size is {inst.size}")
        parts[i] = code
    return b"".join(parts)


_LABEL_KIND: dict[int, tuple[Any, bool]] = {}


def _has_label(inst: Instruction) -> bool:
    """Whether ``inst`` has a label operand (only a table entry with a label-kind operand can)."""
    desc = inst.desc
    got = _LABEL_KIND.get(id(desc))
    if got is None or got[0] is not desc:
        got = _LABEL_KIND[id(desc)] = (desc, any(spec.kind == "label" for spec in desc.operands))
    return got[1] and any(isinstance(op, Label) for op in inst.ops)
