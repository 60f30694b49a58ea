"""Machine-code decoder for gfx942 (CDNA3) and gfx950 (CDNA4).

Turns ``.text`` bytes into :class:`DecodedInstruction` objects that the CPU emulator executes, the
wait/hazard checkers inspect and the register report counts, and renders each one as the text
``llvm-objdump -d`` prints.  Opcode -> mnemonic and the operand layout of every opcode come from
``isagen/isa/data/opcodes.<target>.json``, generated from LLVM by ``tools/gen_opcodes.py``; this
module only knows the bit layout of each encoding family.

Rendering matches llvm-objdump-19 exactly for gfx942 (tests/objects/test_disasm_vs_objdump.py, and a
fuzz over every opcode in tests/isa/test_decoder.py) except three things no compiler emits: the
``/*Invalid ...*/`` comments LLVM adds to encodings it considers invalid, ``s_sendmsg`` immediates
above 1023 (printed as decimal), and the ``sext()`` LLVM prints for the neg bit of an integer
DPP/VOP3 operand.  gfx950's reference is LLVM 22 (Debian's llvm-22: its table is probed with
llvm-mc-22, its rendering checked against llvm-objdump-22 on every gfx950 object the tests build,
Triton's, and a sample of AITER's, tests/objects/test_disasm_aiter.py), LLVM 22's spelling included:
``lit(0x...)`` for a literal an inline constant could encode.  Random gfx950 words still differ in a
few rare forms no compiler output shows (tests/isa/test_decoder.py says which).

Data model (a contract: the emulator's executor and the reports are written against it)
=========================================================================================

``decode(data, target, base=0) -> list[DecodedInstruction]`` decodes a whole buffer (raises
:class:`DecodeError`, an ``isagen.errors.CodeObjectError``, naming the byte offset of a word that is
no instruction; ``.offset`` holds it).  ``decode_one(data, offset, target, base=0) -> DecodedInstruction``
decodes one.  ``classify(w0, w1) -> (family, opcode)`` reads the encoding bits alone;
``opcode_table(target)`` gives the loaded table (``.fam[family][opcode]`` entries).

:class:`DecodedInstruction` (frozen)
    ``pc``        byte address: ``base + offset`` of the first word (``base`` is what the caller
                  passes, e.g. the kernel's address in the code object).
    ``size``      4, 8 or 12 bytes (a trailing 32-bit literal counts).
    ``words``     the raw little-endian dwords, literal included.
    ``family``    encoding family: SOP1 SOP2 SOPK SOPC SOPP SMEM VOP1 VOP2 VOPC VOP3 VOP3P DS
                  MUBUF MTBUF FLAT GLOBAL SCRATCH.  A VOP1/VOP2/VOPC opcode promoted to the 64-bit
                  form has family ``VOP3``; DPP and SDWA keep the family of their base opcode
                  (VOP1/VOP2/VOPC) and set ``variant``.  MFMA/SMFMAC are ``VOP3P`` with ``mai=True``.
    ``opcode``    the opcode field value of that family (for VOP3, the 10-bit VOP3 opcode).
    ``mnemonic``  LLVM's mnemonic as objdump prints it, with ``_e32``/``_e64``/``_sdwa``/``_dpp``.
    ``name``      the mnemonic without that suffix (``v_add_f32``): key semantics on this.
    ``variant``   ``""`` (native), ``"e32"``, ``"e64"``, ``"sdwa"`` or ``"dpp"``.
    ``operands``  tuple of :class:`Operand`, in LLVM's text order (what objdump prints before the
                  modifiers).  Implicit operands that LLVM prints (``vcc`` of VOPC/v_cndmask e32)
                  are included with ``implicit=True``.
    ``mods``      dict of instruction-level modifiers and immediate fields, only those the family
                  has.  Keys used: ``clamp omod op_sel op_sel_hi neg_lo neg_hi`` (raw bitfields,
                  bit i = source i; VOP3 ``op_sel`` bit 3 = dst; VOP3 ``neg``/``abs`` are the raw
                  bits, while Operand.neg/abs are set only where LLVM honours them),
                  ``cbsz abid blgp acc_cd acc``
                  (MFMA; ``acc`` bit0/bit1 = A/B are AGPRs), ``offset offset0 offset1 gds`` (DS),
                  ``offset offen idxen lds sc0 sc1 nt`` (MUBUF/MTBUF, plus ``dfmt nfmt``),
                  ``offset sc0 sc1 nt lds seg`` (FLAT/GLOBAL/SCRATCH; ``offset`` sign-extended
                  for GLOBAL/SCRATCH), ``offset sc0 sc1 nt imm soe`` (SMEM),
                  ``dpp_ctrl row_mask bank_mask bound_ctrl`` (DPP),
                  ``dst_sel dst_unused src0_sel src1_sel`` (SDWA), ``simm16`` (SOPP/SOPK).
    ``mai``       True for MFMA/SMFMAC (VOP3P-MAI encoding).  gfx950's scaled MFMA
                  (``v_mfma_scale_f32_*_f8f6f4``) is one 16-byte DecodedInstruction: family VOP3P, opcode
                  of its MFMA word, operands vdst/src0/src1/src2/scale0/scale1, mods adding
                  ``scale_op_sel scale_op_sel_hi`` (2 bits each) and ``scale_byte`` (the byte of
                  scale source i that holds its E8M0 scales: op_sel[i] | op_sel_hi[i] << 1, as
                  LLVM lowers llvm.amdgcn.mfma.scale.*).  f8f6f4 A/B widths follow cbsz/blgp
                  (fp8/bf8 8 dwords, fp6/bf6 6, fp4 4); ``v_bitop3_*`` has ``mods["bitop3"]``.
    ``target``    "gfx942" or "gfx950".
    ``text``      the LLVM rendering: ``mnemonic`` + operands + modifiers.
    ``reads``/``writes`` (properties) tuples of :class:`DecodedReg` read / written by the instruction,
                  from the operands' ``read``/``write`` flags (implicit vcc included; EXEC, SCC and
                  M0 effects that LLVM does not print are *not* listed - the executor knows them).
    ``branch_target`` (property) byte address of a SOPP branch's target, else None.

:class:`Operand` (frozen)
    ``role``      the encoding field it came from: vdst sdst sdata src0 src1 src2 vsrc1 ssrc0
                  ssrc1 simm16 sbase soffset offset vaddr vdata addr data0 data1 srsrc saddr
                  vcc (implicit) k (the madmk/madak/fmamk constant).
    ``kind``      "reg" | "const" (inline constant) | "literal" (trailing 32-bit word) | "imm"
                  (an immediate field such as simm16 or an SMEM offset).
    ``reg``       :class:`DecodedReg` when ``kind == "reg"``, else None.
    ``value``     const: the 9-bit source-operand code (128..208, 240..248; 255 is literal);
                  literal: the raw 32 bits; imm: the field value as LLVM interprets it; reg: 0.
    ``read``/``write``  whether the instruction reads / writes it (derived per family: VALU/SALU
                  dsts written, srcs read; loads write vdata/vdst, stores read it, atomics read
                  the data and write vdst only when they return (sc0/glc); MFMA writes vdst and
                  reads A/B/C; v_mac/v_fmac/s_cmov/s_addk... also read their dst).
    ``neg``/``abs``/``sext``  source modifiers (VOP3, VOP3P ``neg_lo``, SDWA, DPP).
    ``implicit``  True for operands not encoded in a field (e32 ``vcc``).
    ``const_bits(ty)`` inline constant or literal as the raw bits an operand of type ``ty``
                  ("b32" "f32" "i32" "f16" "bf16" "b16" "f64" "i64" "b64") sees; see
                  :func:`inline_constant_bits`.

:class:`DecodedReg` (frozen)
    ``file``      "v" | "a" | "s" | "ttmp" | "special".
    ``index``     first register of the file (v7 -> 7, ttmp3 -> 3); for "special" the scalar
                  operand code (vcc -> 106, exec -> 126, m0 -> 124, src_shared_base -> 235 ...).
    ``count``     number of dwords (v[4:7] -> 4).
    ``name``      (property) LLVM's text (``v[4:7]``, ``vcc``, ``exec_lo``).
    ``code``      (property) for scalar registers the SGPR-space operand code (s5 -> 5,
                  ttmp3 -> 111, vcc -> 106) so an executor can keep one 128-entry scalar file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from isagen.errors import CodeObjectError
from isagen.isa import fields as F
from isagen.isa.fields import inline_constant_bits, literal_bits
from isagen.targets import DEFAULT_TARGET, TARGETS

__all__ = ["DecodedReg", "Operand", "DecodedInstruction", "DecodeError", "decode", "decode_one",
           "inline_constant_bits"]


class DecodeError(CodeObjectError):
    """A word at a given byte offset is not a valid instruction of the target.

    ``offset`` is the byte offset in the decoded buffer, ``reason`` the message without it.
    """

    def __init__(self, message: str, offset: int | None = None, reason: str = ""):
        super().__init__(message)
        self.offset = offset
        self.reason = reason or message


# ----------------------------------------------------------------------------- registers

_SPECIAL_NAMES = {
    102: "flat_scratch_lo", 103: "flat_scratch_hi", 104: "xnack_mask_lo", 105: "xnack_mask_hi",
    106: "vcc_lo", 107: "vcc_hi", 124: "m0", 126: "exec_lo", 127: "exec_hi",
    235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base",
    238: "src_private_limit", 239: "src_pops_exiting_wave_id", 251: "src_vccz",
    252: "src_execz", 253: "src_scc", 254: "src_lds_direct",
}
_SPECIAL_PAIRS = {102: "flat_scratch", 104: "xnack_mask", 106: "vcc", 126: "exec"}


@dataclass(frozen=True, slots=True)
class DecodedReg:
    file: str
    index: int
    count: int = 1

    @property
    def name(self) -> str:
        f, i, n = self.file, self.index, self.count
        if f == "special":
            if n == 2 and i in _SPECIAL_PAIRS:
                return _SPECIAL_PAIRS[i]
            if n == 1:
                return _SPECIAL_NAMES.get(i, f"special{i}")
            return f"special[{i}:{i + n - 1}]"
        if n == 1:
            return f"{f}{i}"
        return f"{f}[{i}:{i + n - 1}]"

    @property
    def code(self) -> int:
        if self.file == "s":
            return self.index
        if self.file == "ttmp":
            return 108 + self.index
        if self.file == "special":
            return self.index
        raise ValueError(f"{self.name} is not a scalar register")

    def __str__(self) -> str:
        return self.name


# ----------------------------------------------------------------------------- operands

@dataclass(frozen=True, slots=True)
class Operand:
    role: str
    kind: str
    reg: DecodedReg | None = None
    value: int = 0
    read: bool = False
    write: bool = False
    neg: bool = False
    abs: bool = False
    sext: bool = False
    implicit: bool = False
    text: str = ""

    def const_bits(self, ty: str = "b32") -> int:
        if self.kind == "const":
            return inline_constant_bits(self.value, ty)
        if self.kind == "literal":
            return literal_bits(self.value, ty)
        if self.kind == "imm":
            return self.value
        raise ValueError(f"operand {self.text} is a register, not a constant")


@dataclass(frozen=True, slots=True)
class DecodedInstruction:
    pc: int
    size: int
    words: tuple[int, ...]
    family: str
    opcode: int
    mnemonic: str
    name: str
    variant: str
    operands: tuple[Operand, ...]
    mods: dict[str, Any] = field(default_factory=dict)
    mai: bool = False
    target: str = DEFAULT_TARGET
    text: str = ""

    @property
    def reads(self) -> tuple[DecodedReg, ...]:
        return tuple(o.reg for o in self.operands if o.read and o.reg is not None)

    @property
    def writes(self) -> tuple[DecodedReg, ...]:
        return tuple(o.reg for o in self.operands if o.write and o.reg is not None)

    @property
    def branch_target(self) -> int | None:
        if self.family == "SOPP" and "simm16" in self.mods and self.mods.get("branch"):
            off: int = self.mods["simm16"]
            return self.pc + 4 + 4 * off
        return None

    def __str__(self) -> str:
        return self.text


# ----------------------------------------------------------------------------- tables

_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
_TABLES: dict[str, _Table] = {}

class _Entry:
    """One opcode of one family, prepared for fast decoding."""

    __slots__ = ("mn", "name", "ops", "ct", "dpp", "sdwa", "opsel", "mai", "nsrc", "imm",
                 "store", "load", "atomic", "rmw_dst", "lds_only", "hi_default", "mix", "width",
                 "negm", "absm", "dpp_nomods", "off2", "gds", "noglc", "sdwa_nodst")

    def __init__(self, family: str, e: dict[str, Any]) -> None:
        self.mn = e["mn"]
        self.name = e.get("name", self.mn)
        self.ops = tuple((o[0], o[1], o[2]) for o in e["ops"])
        self.ct = e.get("ct", {})
        self.dpp = e.get("dpp", False)
        self.sdwa = e.get("sdwa", False)
        self.opsel = e.get("opsel", 0)
        self.mai = e.get("mai", False)
        self.nsrc = e.get("nsrc", 0)
        self.imm = e.get("imm", "dec")
        self.negm = e.get("negm", 7)      # sources whose neg bit LLVM honours
        self.absm = e.get("absm", 7)
        self.dpp_nomods = e.get("dpp_nomods", False)
        self.sdwa_nodst = e.get("sdwa_nodst", False)   # SDWA form without dst_sel/dst_unused
        self.off2 = e.get("off2", False)
        self.gds = e.get("gds", False)
        self.noglc = e.get("noglc", False)
        n = self.name
        self.atomic = "atomic" in n
        self.store = "_store" in n or n.startswith("ds_write") or (
            family == "DS" and not any(o[0] == "vdst" for o in self.ops))
        self.load = "_load" in n or (family == "DS" and any(o[0] == "vdst" for o in self.ops))
        # destinations that are also read: accumulate-into-dst ALU ops, conditional moves,
        # read-modify-write SOPK, lane writes, sparse MFMA (C is vdst) and the fp8/bf8 packs that
        # write one half or byte of vdst and keep the rest (LLVM ties vdst_in to vdst;
        # v_cvt_pkaccum_u8_f32 ORs a byte into it)
        self.rmw_dst = (any(k in n for k in ("_mac_", "_fmac", "v_dot2c", "v_writelane",
                                             "v_smfmac", "s_cmov", "s_bitset", "v_swap",
                                             "v_mad_mix", "v_cvt_pk_fp8_", "v_cvt_pk_bf8_",
                                             "v_cvt_sr_fp8_", "v_cvt_sr_bf8_",
                                             "v_cvt_pkaccum_u8")) or
                        n in ("s_addk_i32", "s_mulk_i32", "s_cmovk_i32") or
                        n.startswith("v_fma_mixhi") or n.startswith("v_fma_mixlo"))
        self.lds_only = False
        self.mix = n.startswith(("v_fma_mix", "v_mad_mix"))
        self.hi_default = 0 if self.mix else (1 << max(self.nsrc, 0)) - 1
        self.width = {o[0]: o[2] for o in self.ops}


class _Table:
    def __init__(self, target: str):
        path = os.path.join(_DATA_DIR, f"opcodes.{target}.json")
        try:
            with open(path) as f:
                raw = json.load(f)
        except OSError as exc:
            raise CodeObjectError(f"no opcode table for {target}: {path}: {exc.strerror}") from None
        self.target = target
        # LLVM 22 (the gfx950 reference) prints a literal that an inline constant could encode as
        # lit(0x...), where LLVM 19 prints the constant (tools/gen_opcodes.py probes which)
        self.lit_text = bool(raw.get("lit_text"))
        self.fam = {fam: {int(op): _Entry(fam, e) for op, e in ops.items()}
                    for fam, ops in raw["families"].items()}
        t = raw.get("tables", {})
        self.tables = {k: {int(a): b for a, b in v.items()} for k, v in t.items()}


def opcode_table(target: str = DEFAULT_TARGET) -> _Table:
    target = target.split(":")[0]
    tab = _TABLES.get(target)
    if tab is None:
        if target not in TARGETS:
            raise CodeObjectError(f"no decoder for target '{target}' (supported: {', '.join(TARGETS)})")
        tab = _TABLES[target] = _Table(target)
    return tab


# ----------------------------------------------------------------------------- operand helpers

_SEL = ("BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD")
_UNUSED = ("UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE")


def _scalar_reg(code: int, n: int) -> DecodedReg:
    # a 64-bit SGPR operand ignores bit 0 of its code, a 128-bit+ one bits 1:0 (as LLVM decodes)
    if n > 1 and code <= 123:
        code &= ~1 if n == 2 else ~3
    if code <= 101:
        return DecodedReg("s", code, n)
    if 108 <= code <= 123:
        return DecodedReg("ttmp", code - 108, n)
    return DecodedReg("special", code, n)


def _reg_text(r: DecodedReg) -> str:
    if r.file in ("v", "a"):
        return f"{r.file}{r.index}" if r.count == 1 else f"{r.file}[{r.index}:{r.index + r.count - 1}]"
    return F.scalar_text(r.code, r.count)


class _Bad(Exception):
    """Internal: the word is not a valid instruction (turned into DecodeError with the offset)."""


def _src(role: str, code: int, n: int, ct: str, lit: int | None, afile: bool = False,
         read: bool = True) -> Operand:
    """Operand for a 9-bit source field (VGPR 256+, SGPR, special, inline constant, literal)."""
    if code >= 256:
        r = DecodedReg("a" if afile else "v", code - 256, n)
        return Operand(role, "reg", r, 0, read, False, text=_reg_text(r))
    if code <= 127 or 235 <= code <= 239 or 251 <= code <= 254:
        r = _scalar_reg(code, n)
        return Operand(role, "reg", r, 0, read, False, text=F.scalar_text(r.code, n))
    if code == 255:
        if lit is None:
            raise _Bad("literal missing")
        return Operand(role, "literal", None, lit, read, False, text=F.const_text(255, lit, ct))
    if 128 <= code <= 208 or 240 <= code <= 248:
        return Operand(role, "const", None, code, read, False, text=F.const_text(code, None, ct))
    raise _Bad(f"source operand code {code} is reserved")


def _mod(op: Operand, neg: int = False, abs_: int = False, sext: int = False) -> Operand:
    if not (neg or abs_ or sext):
        return op
    t = op.text
    if sext:
        t = f"sext({t})"
    if abs_:
        t = f"|{t}|"
    if neg:
        # LLVM writes neg(...) for a negated immediate without abs (so "-1" stays unambiguous)
        if op.kind in ("const", "literal") and not abs_:
            t = f"neg({t})"
        else:
            t = "-" + t
    return Operand(op.role, op.kind, op.reg, op.value, op.read, op.write, bool(neg), bool(abs_),
                   bool(sext), op.implicit, t)


def _vreg(role: str, idx: int, n: int, file: str = "v", read: bool = False, write: bool = False) -> Operand:
    r = DecodedReg(file, idx, n)
    return Operand(role, "reg", r, 0, read, write, text=_reg_text(r))


def _sreg(role: str, code: int, n: int, read: bool = False, write: bool = False) -> Operand:
    r = _scalar_reg(code, n)
    return Operand(role, "reg", r, 0, read, write, text=F.scalar_text(r.code, n))


def _imm(role: str, value: int, text: str) -> Operand:
    return Operand(role, "imm", None, value, True, False, text=text)


def _bits(v: int, lo: int, n: int) -> int:
    return (v >> lo) & ((1 << n) - 1)


def _lst(bits: int, n: int) -> str:
    return "[" + ",".join(str((bits >> i) & 1) for i in range(n)) + "]"


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v & (1 << (bits - 1)) else v


# ----------------------------------------------------------------------------- the decoder

class _Decoder:
    _data: bytes            # the buffer being decoded (the memory-operand decoders read it from here)

    def __init__(self, target: str):
        self.t = opcode_table(target)
        self.target = self.t.target
        self.fam = self.t.fam

    # .................................................................. dispatch
    def one(self, data: bytes, off: int, base: int) -> DecodedInstruction:
        n = len(data)
        if off + 4 > n:
            raise _Bad("truncated instruction")
        w0 = int.from_bytes(data[off:off + 4], "little")
        if w0 >> 31 == 0:
            op = (w0 >> 25) & 0x3F
            if op == 0x3E:
                return self.vopc(data, off, w0, base)
            if op == 0x3F:
                return self.vop1(data, off, w0, base)
            return self.vop2(data, off, w0, base)
        if w0 >> 30 == 2:
            top = w0 >> 23
            if top == 0x17D:
                return self.sop1(data, off, w0, base)
            if top == 0x17E:
                return self.sopc(data, off, w0, base)
            if top == 0x17F:
                return self.sopp(data, off, w0, base)
            if w0 >> 28 == 0xB:
                return self.sopk(data, off, w0, base)
            return self.sop2(data, off, w0, base)
        enc = w0 >> 26
        if off + 8 > n:
            raise _Bad("truncated instruction")
        w1 = int.from_bytes(data[off + 4:off + 8], "little")
        if enc == 0x34:
            if w0 >> 23 == 0x1A7:
                return self.vop3p(data, off, w0, w1, base)
            return self.vop3(data, off, w0, w1, base)
        if enc == 0x30:
            return self.smem(off, w0, w1, base)
        if enc == 0x36:
            return self.ds(off, w0, w1, base)
        if enc == 0x37:
            return self.flat(off, w0, w1, base)
        if enc == 0x38:
            return self.mubuf(off, w0, w1, base, "MUBUF")
        if enc == 0x3A:
            return self.mubuf(off, w0, w1, base, "MTBUF")
        raise _Bad("unknown encoding")

    def entry(self, family: str, op: int) -> _Entry:
        e = self.fam.get(family, {}).get(op)
        if e is None:
            raise _Bad(f"unknown {family} opcode {op}")
        return e

    @staticmethod
    def literal(data: bytes, off: int) -> int:
        if off + 4 > len(data):
            raise _Bad("truncated literal")
        return int.from_bytes(data[off:off + 4], "little")

    @staticmethod
    def words(data: bytes, off: int, size: int) -> tuple[int, ...]:
        return struct.unpack_from(f"<{size // 4}I", data, off)

    def make(self, data: bytes, off: int, base: int, size: int, family: str, opcode: int, e: _Entry,
             variant: str, ops: list[Operand], mods: dict[str, Any], text_mods: list[str],
             mnemonic: str | None = None, mai: bool = False) -> DecodedInstruction:
        mn = mnemonic or e.mn
        if self.t.lit_text:
            ops = [_lit_marked(o) for o in ops]
        body = ", ".join(o.text for o in ops if o.text != "")
        text = mn + (" " + body if body else "")
        if text_mods:
            text += " " + " ".join(text_mods)
        return DecodedInstruction(base + off, size, self.words(data, off, size), family, opcode, mn,
                           e.name, variant, tuple(ops), mods, mai, self.target, text)

    # .................................................................. scalar ALU
    def _sop_operands(self, e: _Entry, fields: dict[str, int], lit: int | None,
                      rd_dst: bool = False) -> list[Operand]:
        ops = []
        for fld, file, n in e.ops:
            if fld == "sdst":
                rmw = e.rmw_dst or rd_dst
                ops.append(_sreg("sdst", fields["sdst"], n, read=rmw, write=True))
            elif fld in ("ssrc0", "ssrc1"):
                ops.append(_src(fld, fields[fld], n, e.ct.get(fld, "b32"), lit))
            elif fld == "gpr_idx":
                ops.append(_imm("ssrc1", fields["ssrc1"], F.fmt_gpr_idx(fields["ssrc1"])))
            elif fld == "k":
                assert lit is not None          # an entry with a K operand always reads the literal
                ops.append(Operand("k", "literal", None, lit, True, False,
                                   text=F.literal_text(lit, "b32")))
            elif fld == "=":
                ops.append(_fixed(file))
        return ops

    def _sop(self, data: bytes, off: int, base: int, family: str, op: int,
             fields: dict[str, int]) -> DecodedInstruction:
        e = self.entry(family, op)
        uses_lit = fields.get("ssrc0") == 255 or fields.get("ssrc1") == 255 or any(
            o[0] == "k" for o in e.ops)
        if any(o[0] == "gpr_idx" for o in e.ops) and fields.get("ssrc0") != 255:
            uses_lit = False
        lit = self.literal(data, off + 4) if uses_lit else None
        ops = self._sop_operands(e, fields, lit)
        return self.make(data, off, base, 8 if uses_lit else 4, family, op, e, "", ops, {}, [])

    def sop2(self, data: bytes, off: int, w0: int, base: int) -> DecodedInstruction:
        f = {"sdst": _bits(w0, 16, 7), "ssrc1": _bits(w0, 8, 8), "ssrc0": w0 & 0xFF}
        return self._sop(data, off, base, "SOP2", _bits(w0, 23, 7), f)

    def sop1(self, data: bytes, off: int, w0: int, base: int) -> DecodedInstruction:
        f = {"sdst": _bits(w0, 16, 7), "ssrc0": w0 & 0xFF}
        return self._sop(data, off, base, "SOP1", _bits(w0, 8, 8), f)

    def sopc(self, data: bytes, off: int, w0: int, base: int) -> DecodedInstruction:
        f = {"ssrc1": _bits(w0, 8, 8), "ssrc0": w0 & 0xFF}
        return self._sop(data, off, base, "SOPC", _bits(w0, 16, 7), f)

    def sopk(self, data: bytes, off: int, w0: int, base: int) -> DecodedInstruction:
        op = _bits(w0, 23, 5)
        e = self.entry("SOPK", op)
        simm = w0 & 0xFFFF
        sdst = _bits(w0, 16, 7)
        has_k = any(o[0] == "k" for o in e.ops)
        lit = self.literal(data, off + 4) if has_k else None
        n = e.name
        ops = []
        for fld, _file, w in e.ops:
            if fld == "sdst":
                if n.startswith(("s_cmpk", "s_setreg", "s_cbranch_i_fork")):
                    ops.append(_sreg("sdst", sdst, w, read=True))
                else:
                    ops.append(_sreg("sdst", sdst, w, read=e.rmw_dst, write=True))
            elif fld == "simm16":
                ops.append(_imm("simm16", simm, F.fmt_imm(e.imm, simm, self.t.tables)))
            elif fld == "k":
                assert lit is not None          # an entry with a K operand always reads the literal
                ops.append(Operand("k", "literal", None, lit, True, False,
                                   text=F.literal_text(lit, "b32")))
        mods = {"simm16": simm}
        if n == "s_call_b64":
            mods["branch"] = True
            mods["simm16"] = _sext(simm, 16)
        return self.make(data, off, base, 8 if has_k else 4, "SOPK", op, e, "", ops, mods, [])

    def sopp(self, data: bytes, off: int, w0: int, base: int) -> DecodedInstruction:
        op = _bits(w0, 16, 7)
        e = self.entry("SOPP", op)
        simm = w0 & 0xFFFF
        txt = F.fmt_imm(e.imm, simm, self.t.tables)
        ops = [_imm("simm16", simm, txt)] if txt else []
        mods = {"simm16": simm}
        if e.imm == "dec" and "branch" in e.name:
            mods["branch"] = True
            mods["simm16"] = _sext(simm, 16)
        if e.name == "s_waitcnt":
            mods.update(F.waitcnt_fields(simm))
        return self.make(data, off, base, 4, "SOPP", op, e, "", ops, mods, [])

    # .................................................................. SMEM
    def smem(self, off: int, w0: int, w1: int, base: int) -> DecodedInstruction:
        data = self._data
        op = _bits(w0, 18, 8)
        e = self.entry("SMEM", op)
        sdata, sbase = _bits(w0, 6, 7), (w0 & 0x3F) << 1
        imm, glc, soe = _bits(w0, 17, 1), _bits(w0, 16, 1), _bits(w0, 14, 1)
        offset = w1 & 0x1FFFFF
        soff = _bits(w1, 25, 7)
        ops = []
        mods = {"imm": imm, "soe": soe, "glc": glc, "sc0": glc}
        tm = []
        for fld, _file, n in e.ops:
            if fld == "sdata":
                store = "store" in e.name
                ret = bool(not store and (not e.atomic or glc))
                ops.append(_sreg("sdata", sdata, n, read=store or e.atomic, write=ret))
            elif fld == "sdata_imm":
                ops.append(_imm("sdata", sdata, F.fmt_u16_small_dec(sdata)))
            elif fld == "sbase":
                ops.append(_sreg("sbase", sbase, n, read=True))
            elif fld == "offset":
                if imm:
                    o = _sext(offset, 21)
                    mods["offset"] = o
                    if soe:
                        ops.append(_sreg("soffset", soff, 1, read=True))
                        if o:
                            tm.append("offset:" + _hex_signed(o))
                    else:
                        ops.append(_imm("offset", o, _hex_signed(o)))
                else:     # SGPR offset: soffset field with soe, else the offset field
                    ops.append(_sreg("soffset", soff if soe else offset & 0x7F, 1, read=True))
                    mods["offset"] = 0
        if glc and not e.noglc:
            tm.append("glc")
        return self.make(data, off, base, 8, "SMEM", op, e, "", ops, mods, tm)

    # .................................................................. VOP1/VOP2/VOPC (+DPP/SDWA)
    def _vop_e32(self, data: bytes, off: int, base: int, family: str, op: int, vdst: int, src0: int,
                 vsrc1: int) -> DecodedInstruction:
        e = self.entry(family, op)
        if src0 == 0xFA or src0 == 0xF9:
            return self._dpp_sdwa(data, off, base, family, op, e, vdst, src0, vsrc1)
        uses_k = any(o[0] == "k" for o in e.ops)
        lit = self.literal(data, off + 4) if (src0 == 255 or uses_k) else None
        size = 8 if lit is not None else 4
        ops = []
        seen_src = False
        for fld, file, n in e.ops:
            if fld == "vdst":
                ops.append(_valu_vdst(e, vdst, file, n))
            elif fld == "src0":
                ops.append(_src("src0", src0, n, e.ct.get("src0", "b32"), lit, afile=file == "a"))
                seen_src = True
            elif fld == "vsrc1":
                ops.append(_vreg("vsrc1", vsrc1, n, file, read=True))
                seen_src = True
            elif fld == "k":      # madmk/fmaak K: LLVM prints it as raw 32-bit hex
                assert lit is not None          # uses_k read the literal
                ops.append(Operand("k", "literal", None, lit, True, False, text=f"0x{lit:x}"))
            elif fld == "=":
                ops.append(_fixed(file, read=seen_src or family == "VOPC" and False,
                                  write=not seen_src))
        if family == "VOP1" and e.name in ("v_swap_b32", "v_permlane16_swap_b32",
                                           "v_permlane32_swap_b32"):
            ops = [_rw(o) for o in ops]
        return self.make(data, off, base, size, family, op, e, "e32" if e.mn != e.name else "",
                         ops, {}, [])

    def vop1(self, data: bytes, off: int, w0: int, base: int) -> DecodedInstruction:
        return self._vop_e32(data, off, base, "VOP1", _bits(w0, 9, 8), _bits(w0, 17, 8),
                             w0 & 0x1FF, 0)

    def vop2(self, data: bytes, off: int, w0: int, base: int) -> DecodedInstruction:
        return self._vop_e32(data, off, base, "VOP2", _bits(w0, 25, 6), _bits(w0, 17, 8),
                             w0 & 0x1FF, _bits(w0, 9, 8))

    def vopc(self, data: bytes, off: int, w0: int, base: int) -> DecodedInstruction:
        return self._vop_e32(data, off, base, "VOPC", _bits(w0, 17, 8), 0, w0 & 0x1FF,
                             _bits(w0, 9, 8))

    def _dpp_sdwa(self, data: bytes, off: int, base: int, family: str, op: int, e: _Entry, vdst: int,
                  marker: int, vsrc1: int) -> DecodedInstruction:
        w1 = self.literal(data, off + 4)
        src0 = w1 & 0xFF
        ops: list[Operand] = []
        mods: dict[str, Any] = {}
        tm: list[str] = []
        if marker == 0xFA:
            variant = "dpp"
            ctrl = _bits(w1, 8, 9)
            mods.update(dpp_ctrl=ctrl, bound_ctrl=_bits(w1, 19, 1), row_mask=_bits(w1, 28, 4),
                        bank_mask=_bits(w1, 24, 4))
            negs = (_bits(w1, 20, 1), _bits(w1, 22, 1))
            abss = (_bits(w1, 21, 1), _bits(w1, 23, 1))
            if e.dpp_nomods:
                negs = abss = (0, 0)
            sexts = (0, 0)
            s0_sgpr: int = False
        else:
            variant = "sdwa"
            negs = (_bits(w1, 20, 1), _bits(w1, 28, 1))
            abss = (_bits(w1, 21, 1), _bits(w1, 29, 1))
            sexts = (_bits(w1, 19, 1), _bits(w1, 27, 1))
            s0_sgpr, s1_sgpr = _bits(w1, 23, 1), _bits(w1, 31, 1)
            mods.update(src0_sel=_bits(w1, 16, 3), src1_sel=_bits(w1, 24, 3))
            if family != "VOPC":
                mods.update(dst_sel=_bits(w1, 8, 3), dst_unused=_bits(w1, 11, 2),
                            clamp=_bits(w1, 13, 1), omod=_bits(w1, 14, 2))
        mn = e.name + "_" + variant
        for fld, file, n in e.ops:
            if fld == "vdst":
                rmw = e.rmw_dst or (variant == "sdwa" and mods.get("dst_unused") == 2)
                if file == "s":
                    ops.append(_sreg("vdst", vdst, n, write=True))
                else:
                    ops.append(_vreg("vdst", vdst, n, file, read=rmw, write=True))
            elif fld == "src0":
                if variant == "sdwa" and s0_sgpr:
                    o = _src("src0", src0, n, e.ct.get("src0", "b32"), None)
                else:
                    o = _vreg("src0", src0, n, file if file in "va" else "v", read=True)
                ops.append(_mod(o, negs[0], abss[0], sexts[0]))
            elif fld == "vsrc1":
                if variant == "sdwa" and s1_sgpr:
                    o = _src("vsrc1", vsrc1, n, e.ct.get("vsrc1", "b32"), None)
                else:
                    o = _vreg("vsrc1", vsrc1, n, read=True)
                ops.append(_mod(o, negs[1], abss[1], sexts[1]))
            elif fld == "=":
                if family == "VOPC" and variant == "sdwa" and _bits(w1, 15, 1):
                    ops.append(_sreg("sdst", _bits(w1, 8, 7), 2, write=True))
                else:
                    ops.append(_fixed(file, read=any(o.role == "src0" for o in ops),
                                      write=not any(o.role == "src0" for o in ops)))
        if variant == "dpp":
            tm.append(_dpp_ctrl_text(mods["dpp_ctrl"]))
            tm.append("row_mask:0x{:x}".format(mods["row_mask"]))
            tm.append("bank_mask:0x{:x}".format(mods["bank_mask"]))
            if mods["bound_ctrl"]:
                tm.append("bound_ctrl:1")
        else:
            if mods.get("clamp"):
                tm.append("clamp")
            if mods.get("omod"):
                tm.append(("", "mul:2", "mul:4", "div:2")[mods["omod"]])
            if family != "VOPC" and not e.sdwa_nodst:
                tm.append("dst_sel:" + _SEL[mods["dst_sel"]] if mods["dst_sel"] < 7 else "dst_sel:?")
                tm.append("dst_unused:" + _UNUSED[mods["dst_unused"] % 3])
            tm.append("src0_sel:" + _SEL[mods["src0_sel"]] if mods["src0_sel"] < 7 else "?")
            if any(o.role == "vsrc1" for o in ops):
                tm.append("src1_sel:" + _SEL[mods["src1_sel"]] if mods["src1_sel"] < 7 else "?")
        return self.make(data, off, base, 8, family, op, e, variant, ops, mods, tm, mnemonic=mn)

    # .................................................................. VOP3
    def vop3(self, data: bytes, off: int, w0: int, w1: int, base: int) -> DecodedInstruction:
        op = _bits(w0, 16, 10)      # 0-255 VOPC, 256-319 VOP2, 320-447 VOP1, 448+ VOP3 only
        e = self.fam["VOP3"].get(op)
        if e is None:
            raise _Bad(f"unknown VOP3 opcode {op}")
        vdst = w0 & 0xFF
        clamp = _bits(w0, 15, 1)
        srcs = (w1 & 0x1FF, _bits(w1, 9, 9), _bits(w1, 18, 9))
        neg = _bits(w1, 29, 3)
        omod = _bits(w1, 27, 2)
        has_sdst = any(o[0] == "sdst" for o in e.ops)
        raw_abs = 0 if has_sdst else _bits(w0, 8, 3)
        # mods keep the raw neg/abs bits; the operands' neg/abs flags (and the text) only where
        # LLVM honours them (integer operands ignore them)
        mods = {"clamp": clamp, "omod": omod, "neg": neg, "abs": raw_abs,
                "op_sel": 0 if has_sdst else _bits(w0, 11, 4)}
        abs_ = raw_abs & e.absm
        neg &= e.negm
        opsel = mods["op_sel"]
        ops = []
        for fld, file, n in e.ops:
            if fld == "vdst":
                ops.append(_valu_vdst(e, vdst, file, n))
            elif fld == "sdst":
                ops.append(_sreg("sdst", _bits(w0, 8, 7), n, write=True))
            elif fld in ("src0", "src1", "src2"):
                i = ord(fld[3]) - 48
                o = _src(fld, srcs[i], n, e.ct.get(fld, "b32"), None, afile=file == "a")
                ops.append(_mod(o, (neg >> i) & 1, (abs_ >> i) & 1))
            elif fld == "=":
                ops.append(_fixed(file))
        tm = []
        if e.name.startswith("v_bitop3"):
            # gfx950: the 8-bit truth table lives in the neg (bits 0-2), abs (3-5), omod (6-7)
            # fields; LLVM's assembler spells it bitop3:N
            bop = mods["neg"] | (_bits(w0, 8, 3) << 3) | (omod << 6)
            mods["bitop3"] = bop
            ops = [o if not (o.neg or o.abs) else _plain(o) for o in ops]
            if opsel:
                tm.append("op_sel:" + _lst(opsel, 4))
            if bop:
                tm.append(f"bitop3:0x{bop:x}")
            if clamp:
                tm.append("clamp")
            return self.make(data, off, base, 8, "VOP3", op, e, "e64" if e.mn.endswith("_e64")
                             else "", ops, mods, tm)
        if e.name.startswith(("v_permlane16_swap", "v_permlane32_swap")):
            ops = [_rw(o) for o in ops]            # the two operands are swapped: both rw
            if opsel & 2:
                tm.append("bound_ctrl:1")
            if opsel & 1:
                tm.append("fi:1")
            return self.make(data, off, base, 8, "VOP3", op, e, "e64", ops, mods, tm)
        if e.opsel and opsel:
            k = e.opsel
            bits = [(opsel >> i) & 1 for i in range(k - 1)] + [(opsel >> 3) & 1]
            tm.append("op_sel:[" + ",".join(map(str, bits)) + "]")
        if clamp:
            tm.append("clamp")
        if omod:
            tm.append(("", "mul:2", "mul:4", "div:2")[omod])
        variant = "e64" if e.mn.endswith("_e64") else ""
        return self.make(data, off, base, 8, "VOP3", op, e, variant, ops, mods, tm)

    # .................................................................. VOP3P / MAI
    def vop3p(self, data: bytes, off: int, w0: int, w1: int, base: int) -> DecodedInstruction:
        op = _bits(w0, 16, 7)
        if op == 0x2C and "VOP3PX2" in self.fam and off + 16 <= len(data):
            m0 = int.from_bytes(data[off + 8:off + 12], "little")
            if m0 >> 23 == 0x1A7 and _bits(m0, 16, 7) in self.fam["VOP3PX2"]:
                # gfx950: v_mfma_ld_scale_b32 + MFMA = one v_mfma_scale_* instruction
                return self.mfma_scale(data, off, w0, w1, base)
        e = self.entry("VOP3P", op)
        vdst = w0 & 0xFF
        srcs = (w1 & 0x1FF, _bits(w1, 9, 9), _bits(w1, 18, 9))
        ops, tm = [], []
        if e.mai:
            acc_cd, abid, cbsz = _bits(w0, 15, 1), _bits(w0, 11, 4), _bits(w0, 8, 3)
            blgp, acc = _bits(w1, 29, 3), _bits(w1, 27, 2)
            mods = {"acc_cd": acc_cd, "abid": abid, "cbsz": cbsz, "blgp": blgp, "acc": acc}
            widths = _f8f6f4_widths(e.name, cbsz, blgp)
            for fld, _file, n in e.ops:
                if fld == "vdst":
                    ops.append(_vreg("vdst", vdst, n, "a" if acc_cd else "v",
                                     read=e.rmw_dst, write=True))
                else:
                    i = ord(fld[3]) - 48
                    n = widths[i] if widths and i < 2 else n
                    af = bool(acc & (1 << i)) if i < 2 else bool(acc_cd)
                    if i == 2 and "smfmac" in e.name:
                        af = False
                    ops.append(_src(fld, srcs[i], n, e.ct.get(fld, "b32"), None, afile=af))
            if cbsz:
                tm.append(f"cbsz:{cbsz}")
            if abid:
                tm.append(f"abid:{abid}")
            if "f64" in e.name:
                if blgp:
                    tm.append("neg:" + _lst(blgp, 3))
            elif blgp:
                tm.append(f"blgp:{blgp}")
            return self.make(data, off, base, 8, "VOP3P", op, e, "", ops, mods, tm, mai=True)
        clamp = _bits(w0, 15, 1)
        opsel = _bits(w0, 11, 3)
        hi = _bits(w1, 27, 2) | (_bits(w0, 14, 1) << 2)
        neg_lo, neg_hi = _bits(w1, 29, 3), _bits(w0, 8, 3)
        mods = {"clamp": clamp, "op_sel": opsel, "op_sel_hi": hi, "neg_lo": neg_lo,
                "neg_hi": neg_hi}
        for fld, file, n in e.ops:
            if fld == "vdst":
                ops.append(_vreg("vdst", vdst, n, file, read=e.rmw_dst, write=True))
            else:
                i = ord(fld[3]) - 48
                o = _src(fld, srcs[i], n, e.ct.get(fld, "b32"), None, afile=file == "a")
                if e.mix:
                    o = _mod(o, (neg_lo >> i) & 1, (neg_hi >> i) & 1)
                elif (neg_lo >> i) & 1:
                    o = Operand(o.role, o.kind, o.reg, o.value, o.read, o.write, True, False,
                                False, False, o.text)
                ops.append(o)
        k = e.nsrc
        mask = (1 << k) - 1
        if opsel & mask:
            tm.append("op_sel:" + _lst(opsel, k))
        if (hi & mask) != (e.hi_default & mask):
            tm.append("op_sel_hi:" + _lst(hi, k))
        if not e.mix:
            if neg_lo & mask:
                tm.append("neg_lo:" + _lst(neg_lo, k))
            if neg_hi & mask:
                tm.append("neg_hi:" + _lst(neg_hi, k))
        if clamp:
            tm.append("clamp")
        return self.make(data, off, base, 8, "VOP3P", op, e, "", ops, mods, tm)

    def mfma_scale(self, data: bytes, off: int, w0: int, w1: int, base: int) -> DecodedInstruction:
        """gfx950 v_mfma_scale_*: a v_mfma_ld_scale_b32 word pair (the two scale sources and
        their op_sel) followed by the MFMA word pair; 16 bytes, one instruction."""
        if off + 16 > len(data):
            raise _Bad("truncated scaled MFMA")
        m0, m1 = struct.unpack_from("<II", data, off + 8)
        if m0 >> 23 != 0x1A7:
            raise _Bad("v_mfma_ld_scale_b32 not followed by an MFMA")
        mop = _bits(m0, 16, 7)
        e = self.fam["VOP3PX2"].get(mop)
        if e is None:
            raise _Bad(f"v_mfma_ld_scale_b32 followed by VOP3P opcode {mop}, not a scaled MFMA")
        inner = self.vop3p(data, off + 8, m0, m1, base)
        scales = (w1 & 0x1FF, _bits(w1, 9, 9))
        # scale source i has op_sel[i] (w0 bit 11+i) and op_sel_hi[i] (w1 bit 27+i); together they
        # pick the byte of its VGPR that holds the E8M0 scales: byte = op_sel[i] | op_sel_hi[i] << 1
        # (LLVM's llvm.amdgcn.mfma.scale.* lowering).  There are two sources: the third op_sel bit
        # (w0 bit 13) and op_sel_hi bit (w0 bit 14) do not exist; LLVM 22 ignores them and prints
        # op_sel_hi always, its third element 0
        opsel = _bits(w0, 11, 2)
        hi = _bits(w1, 27, 2)
        ops = list(inner.operands)
        for j in range(2):
            ops.append(_src(f"scale{j}", scales[j], 1, "b32", None))
        mods = dict(inner.mods, scale_op_sel=opsel, scale_op_sel_hi=hi,
                    scale_byte=tuple(((opsel >> j) & 1) | (((hi >> j) & 1) << 1) for j in range(2)))
        tm = []
        if opsel:
            tm.append("op_sel:" + _lst(opsel, 3))
        tm.append("op_sel_hi:" + _lst(hi, 3))
        # the MFMA word's abid is 1 in the scaled form (set by the assembler): not printed
        tm += [t for t in inner.text.split(" ") if t.startswith(("cbsz:", "blgp:"))]
        if inner.mods.get("abid", 1) not in (0, 1):
            tm.append(f"abid:{inner.mods['abid']}")
        return self.make(data, off, base, 16, "VOP3P", mop, e, "", ops, mods, tm, mai=True)

    # .................................................................. DS
    def ds(self, off: int, w0: int, w1: int, base: int) -> DecodedInstruction:
        data = self._data
        op = _bits(w0, 17, 8)
        e = self.entry("DS", op)
        off0, off1, gds, acc = w0 & 0xFF, _bits(w0, 8, 8), _bits(w0, 16, 1), _bits(w0, 25, 1)
        f = {"addr": w1 & 0xFF, "data0": _bits(w1, 8, 8), "data1": _bits(w1, 16, 8),
             "vdst": _bits(w1, 24, 8)}
        file = "a" if acc else "v"
        ops = []
        for fld, _, n in e.ops:
            if fld == "vdst":
                ops.append(_vreg("vdst", f["vdst"], n, file, write=True))
            elif fld == "addr":
                ops.append(_vreg("addr", f["addr"], n, read=True))
            else:
                ops.append(_vreg(fld, f[fld], n, file, read=True))
        mods = {"offset0": off0, "offset1": off1, "gds": gds, "acc": acc}
        tm = []
        if e.off2:
            if off0:
                tm.append(f"offset0:{off0}")
            if off1:
                tm.append(f"offset1:{off1}")
        else:
            o = off0 | (off1 << 8)
            mods["offset"] = o
            if o:
                tm.append("offset:" + (_swizzle_text(o) if e.name == "ds_swizzle_b32" else str(o)))
        if gds and e.gds:
            tm.append("gds")     # only the GWS ops use the bit on gfx940+ (LLVM ignores it elsewhere)
        return self.make(data, off, base, 8, "DS", op, e, "", ops, mods, tm)

    # .................................................................. MUBUF / MTBUF
    def mubuf(self, off: int, w0: int, w1: int, base: int, family: str) -> DecodedInstruction:
        data = self._data
        if family == "MUBUF":
            op = _bits(w0, 18, 7)
        else:
            op = _bits(w0, 15, 4)
        e = self.entry(family, op)
        offset, offen, idxen = w0 & 0xFFF, _bits(w0, 12, 1), _bits(w0, 13, 1)
        sc0 = _bits(w0, 14, 1)
        if family == "MUBUF":
            sc1, lds, nt = _bits(w0, 15, 1), _bits(w0, 16, 1), _bits(w0, 17, 1)
        else:
            sc1, lds, nt = _bits(w1, 21, 1), 0, _bits(w1, 22, 1)
        acc = _bits(w1, 23, 1)
        vaddr, vdata, srsrc, soff = w1 & 0xFF, _bits(w1, 8, 8), _bits(w1, 16, 5) << 2, _bits(w1, 24, 8)
        mods = {"offset": offset, "offen": offen, "idxen": idxen, "sc0": sc0, "sc1": sc1,
                "nt": nt, "lds": lds, "acc": acc}
        ops = []
        for fld, _, n in e.ops:
            if fld == "vdata":
                if lds:
                    continue
                if e.atomic:
                    ops.append(_vreg("vdata", vdata, n, "a" if acc else "v", read=True,
                                     write=bool(sc0)))
                else:
                    ops.append(_vreg("vdata", vdata, n, "a" if acc else "v", read=e.store,
                                     write=not e.store))
            elif fld == "vaddr":
                k = offen + idxen
                if k:
                    ops.append(_vreg("vaddr", vaddr, k, read=True))
                else:
                    ops.append(_fixed("off"))
            elif fld == "srsrc":
                ops.append(_sreg("srsrc", srsrc, 4, read=True))
            elif fld == "soffset":
                ops.append(_src("soffset", soff, 1, "b32", None))
        tm = []
        if family == "MTBUF":
            dfmt, nfmt = _bits(w0, 19, 4), _bits(w0, 23, 3)
            mods.update(dfmt=dfmt, nfmt=nfmt)
            ft = self.t.tables.get("mtbuf_format", {}).get(dfmt * 8 + nfmt, "")
            if ft:
                tm.append(ft)
        if idxen:
            tm.append("idxen")
        if offen:
            tm.append("offen")
        tm += _offset_and_cache_text(offset, sc0, nt, sc1)
        if lds:
            tm.append("lds")
        return self.make(data, off, base, 8, family, op, e, "", ops, mods, tm)

    # .................................................................. FLAT / GLOBAL / SCRATCH
    def flat(self, off: int, w0: int, w1: int, base: int) -> DecodedInstruction:
        data = self._data
        seg = _bits(w0, 14, 2)
        family = ("FLAT", "SCRATCH", "GLOBAL", None)[seg]
        if family is None:
            raise _Bad("FLAT segment 3 is reserved")
        op = _bits(w0, 18, 7)
        e = self.entry(family, op)
        sve = _bits(w0, 13, 1) if family == "SCRATCH" else 0
        sc0, nt, sc1 = _bits(w0, 16, 1), _bits(w0, 17, 1), _bits(w0, 25, 1)
        offset = w0 & 0x1FFF
        offset = offset if family == "FLAT" else _sext(offset, 13)
        addr, dat, saddr, vdst, acc = w1 & 0xFF, _bits(w1, 8, 8), _bits(w1, 16, 7), \
            _bits(w1, 24, 8), _bits(w1, 23, 1)
        file = "a" if acc else "v"
        mods = {"offset": offset, "sc0": sc0, "sc1": sc1, "nt": nt, "seg": seg, "sve": sve,
                "acc": acc}
        ops = []
        saddr_off = saddr == 0x7F
        if e.atomic and sc0 and not any(o[0] == "vdst" for o in e.ops):
            dw = e.width.get("data", 1)
            if "cmpswap" in e.name:
                dw //= 2
            ops.append(_vreg("vdst", vdst, dw, file, write=True))
        for fld, _, n in e.ops:
            if fld == "vdst":
                ops.append(_vreg("vdst", vdst, n, file, write=True))
            elif fld == "addr":
                if family == "SCRATCH":
                    if sve:
                        ops.append(_vreg("addr", addr, 1, read=True))
                    else:
                        ops.append(_fixed("off"))
                elif family == "GLOBAL":
                    ops.append(_vreg("addr", addr, 2 if saddr_off else 1, read=True))
                else:
                    ops.append(_vreg("addr", addr, 2, read=True))
            elif fld == "data":
                ops.append(_vreg("data", dat, n, file, read=True))
            elif fld == "saddr":
                if saddr_off:
                    ops.append(_fixed("off"))
                else:
                    ops.append(_sreg("saddr", saddr, n, read=True))
        tm = _offset_and_cache_text(offset, sc0, nt, sc1)
        return self.make(data, off, base, 8, family, op, e, "", ops, mods, tm)

    # .................................................................. driver
    def decode(self, data: bytes, base: int = 0, start: int = 0, end: int | None = None) -> list[DecodedInstruction]:
        self._data = data
        end = len(data) if end is None else end
        out = []
        off = start
        one = self.one
        while off < end:
            try:
                ins = one(data, off, base)
            except _Bad as exc:
                raise _error(self.target, data, off, base, exc) from None
            out.append(ins)
            off += ins.size
        return out


def _valu_vdst(e: _Entry, vdst: int, file: str, n: int) -> Operand:
    """A VALU op's vdst field: SGPRs where the table says so (v_readfirstlane, v_readlane, ...),
    else VGPRs/AGPRs, read as well where the op reads its destination (mac/fmac, v_writelane)."""
    if file == "s":
        return _sreg("vdst", vdst, n, write=True)
    return _vreg("vdst", vdst, n, file, read=e.rmw_dst, write=True)


def _fixed(name: str, read: bool = False, write: bool = False) -> Operand:
    """A fixed token of LLVM's syntax: 'off', or an implicit vcc/exec."""
    if name in ("vcc", "exec"):
        code = 106 if name == "vcc" else 126
        return Operand(name, "reg", DecodedReg("special", code, 2), 0, read, write, implicit=True,
                       text=name)
    return Operand(name, "imm", None, 0, False, False, text=name)


def _plain(o: Operand) -> Operand:
    t = o.text.lstrip("-").strip("|")
    if t.startswith("neg(") and t.endswith(")"):
        t = t[4:-1].strip("|")
    return Operand(o.role, o.kind, o.reg, o.value, o.read, o.write, text=t)


_F8F6F4 = {0: 8, 1: 8, 2: 6, 3: 6, 4: 4}      # cbsz/blgp format -> dwords of A/B (fp8 bf8 fp6 bf6 fp4)


def _f8f6f4_widths(name: str, cbsz: int, blgp: int) -> tuple[int, int] | None:
    if "f8f6f4" not in name:
        return None
    return _F8F6F4.get(cbsz, 8), _F8F6F4.get(blgp, 8)


_HEX = re.compile(r"-?0x[0-9a-f]+")


def _lit_marked(o: Operand) -> Operand:
    """A literal source whose LLVM-19 text is an inline constant's ("1.0", "64", "-16") as LLVM 22
    prints it: lit(0x<the 32 bits>), inside any neg/abs decoration."""
    if o.kind != "literal" or o.role == "k":
        return o
    t = o.text                           # _mod's decoration: neg(x) / -|x| / |x|
    pre, post = "", ""
    if o.neg and not o.abs:
        pre, post = "neg(", ")"
    elif o.neg:
        pre, post = "-|", "|"
    elif o.abs:
        pre, post = "|", "|"
    core = t[len(pre):len(t) - len(post)]
    if _HEX.fullmatch(core) or not core:
        return o
    return dataclasses.replace(o, text=f"{pre}lit(0x{o.value:x}){post}")


def _rw(o: Operand) -> Operand:
    if o.reg is None:
        return o
    return Operand(o.role, o.kind, o.reg, o.value, True, True, o.neg, o.abs, o.sext,
                   o.implicit, o.text)


def _hex_signed(v: int) -> str:
    return "-0x%x" % -v if v < 0 else f"0x{v:x}"


_DPP_WAVE = {0x130: "wave_shl:1", 0x134: "wave_rol:1", 0x138: "wave_shr:1", 0x13C: "wave_ror:1",
             0x140: "row_mirror", 0x141: "row_half_mirror", 0x142: "row_bcast:15",
             0x143: "row_bcast:31"}


def _dpp_ctrl_text(c: int) -> str:
    if c <= 0xFF:
        return f"quad_perm:[{c & 3},{(c >> 2) & 3},{(c >> 4) & 3},{(c >> 6) & 3}]"
    if 0x101 <= c <= 0x10F:
        return f"row_shl:{c - 0x100}"
    if 0x111 <= c <= 0x11F:
        return f"row_shr:{c - 0x110}"
    if 0x121 <= c <= 0x12F:
        return f"row_ror:{c - 0x120}"
    if c in _DPP_WAVE:
        return _DPP_WAVE[c]
    if 0x150 <= c <= 0x15F:
        return f"row_newbcast:{c - 0x150}"     # gfx940+ (the DP ALU's only DPP control)
    raise _Bad(f"reserved dpp_ctrl 0x{c:x}")


def _offset_and_cache_text(offset: int, sc0: int, nt: int, sc1: int) -> list[str]:
    """The offset and cache-policy modifiers of a buffer / flat access, in LLVM's printing order."""
    text = [f"offset:{offset}"] if offset else []
    return text + [name for name, bit in (("sc0", sc0), ("nt", nt), ("sc1", sc1)) if bit]


def _swizzle_text(o: int) -> str:
    """ds_swizzle_b32's offset as LLVM prints it (swizzle macros of the AMDGPU assembler)."""
    if o & 0xFF00 == 0x8000:
        return f"swizzle(QUAD_PERM,{o & 3},{(o >> 2) & 3},{(o >> 4) & 3},{(o >> 6) & 3})"
    if o & 0x8000:
        return str(o)
    and_m, or_m, xor_m = o & 0x1F, (o >> 5) & 0x1F, (o >> 10) & 0x1F
    if and_m == 0x1F and or_m == 0 and xor_m and (xor_m & (xor_m - 1)) == 0:
        return f"swizzle(SWAP,{xor_m})"
    if and_m == 0x1F and or_m == 0 and xor_m and (xor_m & (xor_m + 1)) == 0:
        return f"swizzle(REVERSE,{xor_m + 1})"
    group = 0x1F - and_m + 1
    if group > 1 and (group & (group - 1)) == 0 and or_m < group and xor_m == 0:
        return f"swizzle(BROADCAST,{group},{or_m})"
    p0 = (0 | or_m) ^ xor_m                 # lane bit when the source bit is 0 ...
    p1 = (and_m | or_m) ^ xor_m             # ... and when it is 1
    mask = ""
    for i in range(4, -1, -1):
        b0, b1 = (p0 >> i) & 1, (p1 >> i) & 1
        mask += "1" if b0 and b1 else "0" if not b0 and not b1 else "p" if b1 else "i"
    return f'swizzle(BITMASK_PERM,"{mask}")'


def classify(w0: int, w1: int = 0) -> tuple[str, int] | None:
    """(family, opcode) of a machine word from its encoding bits alone (no opcode table).

    VOP3 opcodes are the 10-bit VOP3 opcode (promoted VOPC/VOP2/VOP1 included); FLAT's family is
    FLAT, SCRATCH or GLOBAL by its segment field.  None for an unknown encoding.
    """
    if w0 >> 31 == 0:
        op = (w0 >> 25) & 0x3F
        if op == 0x3E:
            return "VOPC", (w0 >> 17) & 0xFF
        if op == 0x3F:
            return "VOP1", (w0 >> 9) & 0xFF
        return "VOP2", op
    if w0 >> 30 == 2:
        top = w0 >> 23
        if top == 0x17D:
            return "SOP1", (w0 >> 8) & 0xFF
        if top == 0x17E:
            return "SOPC", (w0 >> 16) & 0x7F
        if top == 0x17F:
            return "SOPP", (w0 >> 16) & 0x7F
        if w0 >> 28 == 0xB:
            return "SOPK", (w0 >> 23) & 0x1F
        return "SOP2", (w0 >> 23) & 0x7F
    enc = w0 >> 26
    if enc == 0x34:
        if w0 >> 23 == 0x1A7:
            return "VOP3P", (w0 >> 16) & 0x7F
        return "VOP3", (w0 >> 16) & 0x3FF
    if enc == 0x30:
        return "SMEM", (w0 >> 18) & 0xFF
    if enc == 0x36:
        return "DS", (w0 >> 17) & 0xFF
    if enc == 0x37:
        fam = ("FLAT", "SCRATCH", "GLOBAL", None)[(w0 >> 14) & 3]
        return (fam, (w0 >> 18) & 0x7F) if fam else None
    if enc == 0x38:
        return "MUBUF", (w0 >> 18) & 0x7F
    if enc == 0x3A:
        return "MTBUF", (w0 >> 15) & 0xF
    return None


_DECODERS: dict[str, _Decoder] = {}


def _decoder(target: str) -> _Decoder:
    target = target.split(":")[0]
    d = _DECODERS.get(target)
    if d is None:
        d = _DECODERS[target] = _Decoder(target)
    return d


def decode(data: bytes, target: str = DEFAULT_TARGET, base: int = 0) -> list[DecodedInstruction]:
    """Decode every instruction of ``data`` (a .text slice); ``pc`` = ``base`` + offset."""
    return _decoder(target).decode(bytes(data), base)


def decode_one(data: bytes, offset: int = 0, target: str = DEFAULT_TARGET, base: int = 0) -> DecodedInstruction:
    """Decode the instruction at ``offset`` of ``data``."""
    d = _decoder(target)
    d._data = data = bytes(data)
    try:
        return d.one(data, offset, base)
    except _Bad as exc:
        raise _error(d.target, data, offset, base, exc) from None


def _error(target: str, data: bytes, off: int, base: int, exc: Exception) -> DecodeError:
    words = " ".join(f"{w:08x}" for w in struct.unpack_from(
        f"<{min(8, len(data) - off) // 4}I", data, off)) if off + 4 <= len(data) else \
        data[off:].hex()
    reason = f"cannot decode {target} instruction {words}: {exc}"
    return DecodeError(f"offset 0x{base + off:x}: {reason}", off, reason)
