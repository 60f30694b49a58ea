"""Machine-code decoder for gfx942 (CDNA3) and gfx950 (CDNA4).

Turns ``.text`` bytes into :class:`Instruction` objects that the CPU emulator executes, the
wait/hazard checkers inspect and the register report counts, and renders each one as the text
``llvm-objdump -d`` prints.  Opcode -> mnemonic and the operand layout of every opcode come from
``isagen/isa/data/opcodes.<target>.json``, generated from LLVM by ``tools/gen_opcodes.py``; this
module only knows the bit layout of each encoding family.

Data model (a contract: the emulator's executor and the reports are written against it)
=========================================================================================

``decode(data, target, base=0) -> list[Instruction]`` decodes a whole buffer (raises
:class:`DecodeError`, an ``isagen.errors.CodeObjectError``, naming the byte offset of a word that is
no instruction).  ``decode_one(data, offset, target, base=0) -> Instruction`` decodes one.

:class:`Instruction` (frozen)
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
                  bit i = source i; VOP3 ``op_sel`` bit 3 = dst), ``cbsz abid blgp acc_cd acc``
                  (MFMA; ``acc`` bit0/bit1 = A/B are AGPRs), ``offset offset0 offset1 gds`` (DS),
                  ``offset offen idxen lds sc0 sc1 nt`` (MUBUF/MTBUF, plus ``dfmt nfmt``),
                  ``offset sc0 sc1 nt lds seg`` (FLAT/GLOBAL/SCRATCH; ``offset`` sign-extended
                  for GLOBAL/SCRATCH), ``offset sc0 sc1 nt imm soe`` (SMEM),
                  ``dpp_ctrl row_mask bank_mask bound_ctrl`` (DPP),
                  ``dst_sel dst_unused src0_sel src1_sel`` (SDWA), ``simm16`` (SOPP/SOPK).
    ``mai``       True for MFMA/SMFMAC (VOP3P-MAI encoding).
    ``target``    "gfx942" or "gfx950".
    ``text``      the LLVM rendering: ``mnemonic`` + operands + modifiers.
    ``reads``/``writes`` (properties) tuples of :class:`Reg` read / written by the instruction,
                  from the operands' ``read``/``write`` flags (implicit vcc included; EXEC, SCC and
                  M0 effects that LLVM does not print are *not* listed - the executor knows them).
    ``branch_target`` (property) byte address of a SOPP branch's target, else None.

:class:`Operand` (frozen)
    ``role``      the encoding field it came from: vdst sdst sdata src0 src1 src2 vsrc1 ssrc0
                  ssrc1 simm16 sbase soffset offset vaddr vdata addr data0 data1 srsrc saddr
                  vcc (implicit) k (the madmk/madak/fmamk constant).
    ``kind``      "reg" | "const" (inline constant) | "literal" (trailing 32-bit word) | "imm"
                  (an immediate field such as simm16 or an SMEM offset).
    ``reg``       :class:`Reg` when ``kind == "reg"``, else None.
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

:class:`Reg` (frozen)
    ``file``      "v" | "a" | "s" | "ttmp" | "special".
    ``index``     first register of the file (v7 -> 7, ttmp3 -> 3); for "special" the scalar
                  operand code (vcc -> 106, exec -> 126, m0 -> 124, src_shared_base -> 235 ...).
    ``count``     number of dwords (v[4:7] -> 4).
    ``name``      (property) LLVM's text (``v[4:7]``, ``vcc``, ``exec_lo``).
    ``code``      (property) for scalar registers the SGPR-space operand code (s5 -> 5,
                  ttmp3 -> 111, vcc -> 106) so an executor can keep one 128-entry scalar file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CodeObjectError

__all__ = ["Reg", "Operand", "Instruction", "DecodeError", "decode", "decode_one",
           "inline_constant_bits"]


class DecodeError(CodeObjectError):
    """A word at a given byte offset is not a valid instruction of the target."""


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
class Reg:
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
    reg: Reg | None = None
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
class Instruction:
    pc: int
    size: int
    words: tuple[int, ...]
    family: str
    opcode: int
    mnemonic: str
    name: str
    variant: str
    operands: tuple[Operand, ...]
    mods: dict = field(default_factory=dict)
    mai: bool = False
    target: str = "gfx942"
    text: str = ""

    @property
    def reads(self) -> tuple[Reg, ...]:
        return tuple(o.reg for o in self.operands if o.read and o.reg is not None)

    @property
    def writes(self) -> tuple[Reg, ...]:
        return tuple(o.reg for o in self.operands if o.write and o.reg is not None)

    @property
    def branch_target(self) -> int | None:
        if self.family == "SOPP" and "simm16" in self.mods and self.mods.get("branch"):
            off = self.mods["simm16"]
            return self.pc + 4 + 4 * off
        return None

    def __str__(self) -> str:
        return self.text


# ----------------------------------------------------------------------------- constants

def inline_constant_bits(code: int, ty: str = "b32") -> int:
    """Raw bits of inline constant ``code`` (128..208, 240..248) seen by an operand of type ``ty``."""
    raise NotImplementedError


def literal_bits(value: int, ty: str = "b32") -> int:
    """Raw bits of a 32-bit literal seen by an operand of type ``ty``."""
    raise NotImplementedError


def decode(data: bytes, target: str = "gfx942", base: int = 0) -> list[Instruction]:
    raise NotImplementedError


def decode_one(data: bytes, offset: int, target: str = "gfx942", base: int = 0) -> Instruction:
    raise NotImplementedError
