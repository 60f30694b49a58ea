"""Bit-level facts shared by the opcode-table generator and the decoder.

Scalar operand codes, inline constants and the text LLVM prints for immediate fields (s_waitcnt
counters, hwreg(), sendmsg(), gpr_idx()).  ``tools/gen_opcodes.py`` checks every formatter here
against LLVM's own disassembly of many values before it records which formatter an opcode uses, so
these functions are pinned to LLVM's printer, not typed from memory.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

# ----------------------------------------------------------------------------- inline constants

#: fp inline constants by source code: (f32 bits, f64 bits, f16 bits, bf16 bits, text)
FP_INLINE = {
    240: (0x3F000000, 0x3FE0000000000000, 0x3800, 0x3F00, "0.5"),
    241: (0xBF000000, 0xBFE0000000000000, 0xB800, 0xBF00, "-0.5"),
    242: (0x3F800000, 0x3FF0000000000000, 0x3C00, 0x3F80, "1.0"),
    243: (0xBF800000, 0xBFF0000000000000, 0xBC00, 0xBF80, "-1.0"),
    244: (0x40000000, 0x4000000000000000, 0x4000, 0x4000, "2.0"),
    245: (0xC0000000, 0xC000000000000000, 0xC000, 0xC000, "-2.0"),
    246: (0x40800000, 0x4010000000000000, 0x4400, 0x4080, "4.0"),
    247: (0xC0800000, 0xC010000000000000, 0xC400, 0xC080, "-4.0"),
    248: (0x3E22F983, 0x3FC45F306DC9C882, 0x3118, 0x3E22, "0.15915494"),
}
INV_2PI_F64_TEXT = "0.15915494309189532"


def is_inline_int(code: int) -> bool:
    return 128 <= code <= 208


def inline_int(code: int) -> int:
    """Integer value of inline constant 128..208 (0..64, then -1..-16)."""
    return code - 128 if code <= 192 else 192 - code


def is_inline_const(code: int) -> bool:
    return 128 <= code <= 208 or 240 <= code <= 248


#: how an operand prints inline constants and literals ("ctype" in the opcode tables):
#:   b32  - 32-bit operand: fp constants by value, literal as 32-bit hex
#:   b64  - 64-bit operand: 1/(2pi) printed with double precision, literal as 32-bit hex
#:   f16  - 16-bit fp operand: fp constants by value, literal as its low 16 bits in hex
#:   i16  - 16-bit integer operand: fp constants as the hex of their f16 encoding, literal low 16
#:   bf16 - 16-bit bf16 operand (gfx950): fp constants by value, literal low 16
#:   pk16 - packed 16-bit pair (v_dot2c_f32_f16, v_pk_fmac_f16): a literal equal to an f16
#:          constant's bits prints as that constant, otherwise as 32-bit hex
CTYPES = ("b32", "b64", "f16", "i16", "bf16", "pk16")


def const_text(code: int, literal: int | None, ctype: str) -> str:
    """LLVM's text of source operand ``code`` (inline constant or 255 = literal)."""
    if code == 255:
        return literal_text(literal or 0, ctype)
    if is_inline_int(code):
        return str(inline_int(code))
    fp = FP_INLINE[code]
    if ctype == "i16":
        return f"0x{fp[2]:x}"
    if ctype == "b64" and code == 248:
        return INV_2PI_F64_TEXT
    return fp[4]


_FP32_TEXT = {v[0]: v[4] for v in FP_INLINE.values()}
_FP16_TEXT = {v[2]: v[4] for v in FP_INLINE.values()}
_BF16_TEXT = {v[3]: v[4] for v in FP_INLINE.values()}
_FP64HI_TEXT = {v[1] >> 32: v[4] for k, v in FP_INLINE.items() if k != 248}


def literal_text(lit: int, ctype: str) -> str:
    """LLVM prints a literal that equals an inline constant's value as that constant."""
    if ctype == "pk16":
        s = lit - (1 << 32) if lit & 0x80000000 else lit
        if -16 <= s <= 64:
            return str(s)
        if lit in _FP16_TEXT:
            return _FP16_TEXT[lit]
        return f"0x{lit:x}"
    if ctype == "i16":
        s = lit - (1 << 32) if lit & 0x80000000 else lit
        if -16 <= s <= 64:
            return str(s)
        if lit in _FP32_TEXT:
            return _FP32_TEXT[lit]
        return "0x%x" % (lit & 0xFFFF)
    if ctype in ("f16", "bf16"):
        v = lit & 0xFFFF
        s = v - 0x10000 if v & 0x8000 else v
        if -16 <= s <= 64:
            return str(s)
        if ctype == "f16" and v in _FP16_TEXT:
            return _FP16_TEXT[v]
        if ctype == "bf16" and v in _BF16_TEXT:
            return _BF16_TEXT[v]
        return f"0x{v:x}"
    s = lit - (1 << 32) if lit & 0x80000000 else lit
    if ctype != "b64" and -16 <= s <= 64:
        return str(s)
    if ctype == "b32" and lit in _FP32_TEXT:
        return _FP32_TEXT[lit]
    if ctype == "b64" and lit in _FP64HI_TEXT:
        return _FP64HI_TEXT[lit]
    return f"0x{lit:x}"


def inline_constant_bits(code: int, ty: str = "b32") -> int:
    """Raw bits an operand of type ``ty`` sees for inline constant ``code``.

    ``ty``: b32/i32/u32/f32, b64/i64/u64/f64, b16/i16/u16/f16, bf16.  Integer constants are
    sign-extended to the operand width; fp constants are encoded in the operand's format (an
    integer-typed operand gets the f32/f64/f16 encoding of the value, as the hardware does).
    """
    width = _width(ty)
    if is_inline_int(code):
        return inline_int(code) & ((1 << width) - 1)
    if code not in FP_INLINE:
        raise ValueError(f"operand code {code} is not an inline constant")
    f32, f64, f16, bf16, _ = FP_INLINE[code]
    if width == 64:
        return f64
    if width == 16:
        return bf16 if ty == "bf16" else f16
    return f32


def literal_bits(value: int, ty: str = "b32") -> int:
    """Bits an operand of type ``ty`` sees for a 32-bit literal.

    f64 operands take the literal as the high 32 bits (low bits zero); 64-bit integer operands
    zero-extend it (LLVM's assembler only accepts literals that fit in 32 bits for them); 16-bit
    operands use the low 16 bits.
    """
    value &= 0xFFFFFFFF
    if ty == "f64":
        return value << 32
    width = _width(ty)
    return value & ((1 << width) - 1)


def _width(ty: str) -> int:
    if ty.endswith("64"):
        return 64
    if ty.endswith("16"):
        return 16
    return 32


def f32_bits(x: float) -> int:
    bits: int = struct.unpack("<I", struct.pack("<f", x))[0]
    return bits


# ----------------------------------------------------------------------------- scalar registers

SPECIAL_SCALAR = {
    102: "flat_scratch_lo", 103: "flat_scratch_hi", 104: "xnack_mask_lo", 105: "xnack_mask_hi",
    106: "vcc_lo", 107: "vcc_hi", 124: "m0", 125: "null", 126: "exec_lo", 127: "exec_hi",
    235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base",
    238: "src_private_limit", 239: "src_pops_exiting_wave_id", 251: "src_vccz",
    252: "src_execz", 253: "src_scc", 254: "src_lds_direct",
}
SPECIAL_PAIRS = {102: "flat_scratch", 104: "xnack_mask", 106: "vcc", 126: "exec"}


def scalar_text(code: int, count: int) -> str:
    """LLVM's name of scalar operand ``code`` covering ``count`` dwords."""
    if code <= 101:
        return f"s{code}" if count == 1 else f"s[{code}:{code + count - 1}]"
    if 108 <= code <= 123:
        i = code - 108
        return f"ttmp{i}" if count == 1 else f"ttmp[{i}:{i + count - 1}]"
    if count == 2 and code in SPECIAL_PAIRS:
        return SPECIAL_PAIRS[code]
    if count == 1 or code >= 235 or code == 125:
        return SPECIAL_SCALAR.get(code, f"<scalar {code}>")
    return f"<scalar {code}x{count}>"


# ----------------------------------------------------------------------------- immediate fields

def fmt_waitcnt(v: int) -> str:
    """gfx9 s_waitcnt: vmcnt = [3:0] | [15:14] << 4, expcnt [6:4], lgkmcnt [11:8]."""
    vm = (v & 0xF) | ((v >> 14) & 3) << 4
    exp = (v >> 4) & 7
    lgkm = (v >> 8) & 0xF
    parts = []
    if vm != 63:
        parts.append(f"vmcnt({vm})")
    if exp != 7:
        parts.append(f"expcnt({exp})")
    if lgkm != 15:
        parts.append(f"lgkmcnt({lgkm})")
    if not parts:
        parts = [f"vmcnt({vm})", f"expcnt({exp})", f"lgkmcnt({lgkm})"]
    return " ".join(parts)


def waitcnt_fields(v: int) -> dict[str, int]:
    return {"vmcnt": (v & 0xF) | ((v >> 14) & 3) << 4, "expcnt": (v >> 4) & 7,
            "lgkmcnt": (v >> 8) & 0xF}


def fmt_gpr_idx(v: int) -> str:
    if v > 15:
        return f"0x{v:x}"
    names = [n for bit, n in ((1, "SRC0"), (2, "SRC1"), (4, "SRC2"), (8, "DST")) if v & bit]
    return "gpr_idx(" + ",".join(names) + ")"


def fmt_hwreg(v: int, names: dict[int, str]) -> str:
    reg, off, size = v & 0x3F, (v >> 6) & 0x1F, ((v >> 11) & 0x1F) + 1
    name = names.get(reg, str(reg))
    if off == 0 and size == 32:
        return f"hwreg({name})"
    return f"hwreg({name}, {off}, {size})"


def fmt_u16_small_dec(v: int) -> str:
    return str(v) if v <= 64 else f"0x{v:x}"


# formatter of an immediate: (value, the opcode table's name tables) -> LLVM's text
IMM_FORMATS: dict[str, Callable[[int, dict[str, dict[int, str]]], str]] = {
    "none": lambda v, t: "",
    "opt_dec": lambda v, t: "" if v == 0 else str(v),
    "dec": lambda v, t: str(v),
    "hex": lambda v, t: f"0x{v:x}",
    "small_dec": lambda v, t: fmt_u16_small_dec(v),
    "waitcnt": lambda v, t: fmt_waitcnt(v),
    "gpr_idx": lambda v, t: fmt_gpr_idx(v),
    "hwreg": lambda v, t: fmt_hwreg(v, t.get("hwreg", {})),
    "sendmsg": lambda v, t: t.get("sendmsg", {}).get(v, str(v)),
}


def fmt_imm(fmt: str, v: int, tables: dict[str, dict[int, str]]) -> str:
    text: str = IMM_FORMATS[fmt](v, tables)
    return text
