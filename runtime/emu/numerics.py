"""Bit-exact number-format helpers of the CPU emulator, on numpy arrays.

Every function is vectorised: it takes a numpy array (or anything ``np.asarray`` accepts) of any
shape and returns an array of the same shape.  Raw encodings travel as unsigned integers (``uint16``
for bf16/f16, ``uint8`` for fp8/bf8, ``uint32`` for packed words); values travel as ``float32``.
The VALU conversions of the executor call these; the MFMA unit (``mfma.py``) decodes its inputs
with them.

bit views
    ``f32_bits(x) -> uint32``             the IEEE bits of float32 values.
    ``bits_f32(u) -> float32``            float32 values of raw bits (any unsigned/int dtype).

bf16 (1-8-7, the upper half of an f32)
    ``bf16_to_f32(h) -> float32``         exact (``h << 16``); NaN payloads kept.
    ``f32_to_bf16(x) -> uint16``          round to nearest even; overflow rounds to +-inf; a NaN
                                          becomes a quiet NaN with the same sign and top payload bits
                                          (``(bits >> 16) | 0x0040``).  gfx950's ``v_cvt_pk_bf16_f32``.
    ``f32_to_bf16_trunc(x) -> uint16``    truncation (``bits >> 16``), NaN quieted as above; for code
                                          that packs bf16 by dropping the low half.

f16 (IEEE binary16)
    ``f16_to_f32(h) -> float32``          exact, subnormals included; NaN payloads kept.
    ``f32_to_f16(x) -> uint16``           round to nearest even (``v_cvt_f16_f32``,
                                          ``v_cvt_pk_f16_f32``); overflow -> +-inf; NaN -> quiet NaN
                                          ``sign | 0x7e00 | payload[22:13]``.
    ``f32_to_f16_rtz(x) -> uint16``       round toward zero (``v_cvt_pkrtz_f16_f32``): finite values
                                          never become inf (overflow -> +-65504, 0x7bff); inf stays inf.

packed 16-bit halves and bytes of 32-bit words
    ``lo16(w)``, ``hi16(w) -> uint16``;   ``pack16(lo, hi) -> uint32`` (lo in bits [15:0]).
    ``byte_of(w, i) -> uint8``            byte ``i`` (0 = bits [7:0]); ``i`` may be an array.
    ``pack_bytes(b0, b1, b2, b3) -> uint32``.

fp8 / bf8 (8-bit floats).  Format names are torch's:
    ``"e4m3fnuz"`` gfx942 fp8: bias 8, max 240, no inf, no -0, 0x80 = the only NaN.
    ``"e5m2fnuz"`` gfx942 bf8: bias 16, max 57344, no inf, no -0, 0x80 = the only NaN.
    ``"e4m3fn"``   gfx950 fp8 (OCP): bias 7, max 448, no inf, +-0, NaN = 0x7f / 0xff.
    ``"e5m2"``     gfx950 bf8 (OCP): bias 15, max 57344, +-inf = 0x7c / 0xfc, NaN = 0x7d..0x7f (+sign).
    ``fp8_format(target, kind) -> str``   kind "fp8" or "bf8" -> the format name on ``target``
                                          ("gfx942"/"gfx950" or a ``Target``).
    ``fp8_formats(target) -> (fp8_fmt, bf8_fmt)``  both at once.
    ``fp8_table(fmt) -> float32[256]``    decode table (read-only), built from the bit layout.
    ``fp8_to_f32(codes, fmt) -> float32`` decode (``v_cvt_f32_fp8``, MFMA inputs); subnormals exact.
    ``f32_to_fp8(x, fmt, saturate=False) -> uint8``
        round to nearest even (``v_cvt_pk_fp8_f32`` / ``v_cvt_pk_bf8_f32``).  Without saturation (the
        instructions' default, clamp bit clear) a finite value whose rounded magnitude exceeds the
        format's max, and +-inf, become NaN for e4m3fnuz/e5m2fnuz/e4m3fn and +-inf for e5m2.  With
        ``saturate=True`` (the VOP3 clamp bit) they become +-max.  NaN -> NaN (0x80 for FNUZ,
        ``sign | 0x7f`` for OCP formats).  FNUZ has no -0: negative values that round to zero give 0x00;
        OCP formats give 0x80 (-0).  Ties at the top of the range round to even, so e.g. 464.0 ->
        448 in e4m3fn but 248.0 -> overflow in e4m3fnuz and 61440.0 -> overflow in e5m2.
    ``fp8_max(fmt) -> float``             largest finite value.

fp32 denormals (for kernels whose MODE flushes them)
    ``is_denorm_f32(x) -> bool``; ``flush_denorm_f32(x) -> float32`` (subnormal -> zero of the same
    sign); ``flush_denorm_f16(h) -> uint16`` on f16 bits.

Sources for the per-arch choices: AMD's CDNA3/CDNA4 ISA guides (FP8 conversions round to nearest
even; gfx942 = FNUZ, gfx950 = OCP, cf. docs/emu_notes.md), the OCP 8-bit float spec (saturating vs
non-saturating modes), hipBLASLt's gfx942 fp8 epilogue (clamps to +-240 in software before
``v_cvt_pk_fp8_f32``: the instruction itself does not saturate) and tinygrad's hardware test on gfx950
(``v_cvt_pk_bf8_f32`` of 61440.0 and of inf gives the e5m2 inf 0x7c).  The clamp-bit saturation is
the ISA's description and has not been checked on hardware here [verify].
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import numpy as host

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

from isagen.runtime.emu import xp as X
from isagen.targets import get_target

__all__ = [
    "f32_bits", "bits_f32",
    "bf16_to_f32", "f32_to_bf16", "f32_to_bf16_trunc",
    "f16_to_f32", "f32_to_f16", "f32_to_f16_rtz",
    "lo16", "hi16", "pack16", "byte_of", "pack_bytes",
    "FP8_FORMATS", "fp8_format", "fp8_formats", "fp8_table", "fp8_to_f32", "f32_to_fp8", "fp8_max",
    "is_denorm_f32", "flush_denorm_f32", "flush_denorm_f16",
]


# ----------------------------------------------------------------------------- bit views

def f32_bits(x) -> np.ndarray:
    """The IEEE-754 bits of float32 values (converting other float dtypes to float32 first)."""
    return np.asarray(x, dtype=np.float32).view(np.uint32)      # same itemsize: any strides, any ndim


def bits_f32(u) -> np.ndarray:
    """float32 values whose bits are ``u`` (taken modulo 2**32)."""
    return np.asarray(u).astype(np.uint32, copy=False).view(np.float32)


def _u32(u) -> np.ndarray:
    return np.asarray(u).astype(np.uint32, copy=False)


# ----------------------------------------------------------------------------- bf16

def bf16_to_f32(h) -> np.ndarray:
    """bf16 bits -> float32, exact."""
    return bits_f32((_u32(h) & 0xFFFF) << 16)


def f32_to_bf16(x) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even; NaN -> quiet NaN keeping sign and top payload."""
    b = f32_bits(x)
    rounded = (b + np.uint32(0x7FFF) + ((b >> 16) & 1)) >> 16
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    out = np.where(nan, (b >> 16) | 0x0040, rounded)
    return out.astype(np.uint16)


def f32_to_bf16_trunc(x) -> np.ndarray:
    """float32 -> bf16 bits by truncation (drop the low 16 bits); NaN quieted as in f32_to_bf16."""
    b = f32_bits(x)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (b >> 16) | 0x0040, b >> 16).astype(np.uint16)


# ----------------------------------------------------------------------------- f16

def f16_to_f32(h) -> np.ndarray:
    """f16 bits -> float32, exact (subnormals and NaN payloads kept)."""
    return (_u32(h) & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)


def _quiet_f16_nan(b: np.ndarray) -> np.ndarray:
    return ((b >> 16) & 0x8000) | 0x7E00 | ((b >> 13) & 0x3FF)


def f32_to_f16(x) -> np.ndarray:
    """float32 -> f16 bits, round to nearest even; overflow -> inf; NaN -> quiet NaN."""
    xf = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = xf.astype(np.float16).view(np.uint16).astype(np.uint32)
    b = f32_bits(xf)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, _quiet_f16_nan(b), h).astype(np.uint16)


def f32_to_f16_rtz(x) -> np.ndarray:
    """float32 -> f16 bits, round toward zero; finite overflow -> +-65504; inf stays inf."""
    xf = np.asarray(x, dtype=np.float32)
    h = f32_to_f16(xf).astype(np.uint32)
    # RNE gives either the truncation or one ulp above it (in magnitude): step back where it rounded up.
    with np.errstate(invalid="ignore"):
        back = np.abs(f16_to_f32(h).astype(np.float64)) > np.abs(xf.astype(np.float64))
    b = f32_bits(xf)
    finite = (b & 0x7FFFFFFF) < 0x7F800000
    h = np.where(back & finite, h - 1, h)
    return h.astype(np.uint16)


# ----------------------------------------------------------------------------- packing

def lo16(w) -> np.ndarray:
    """Bits [15:0] of 32-bit words."""
    return (_u32(w) & 0xFFFF).astype(np.uint16)


def hi16(w) -> np.ndarray:
    """Bits [31:16] of 32-bit words."""
    return (_u32(w) >> 16).astype(np.uint16)


def pack16(lo, hi) -> np.ndarray:
    """32-bit words with ``lo`` in bits [15:0] and ``hi`` in bits [31:16]."""
    return (_u32(lo) & 0xFFFF) | ((_u32(hi) & 0xFFFF) << 16)


def byte_of(w, i) -> np.ndarray:
    """Byte ``i`` (0..3, 0 = bits [7:0]) of 32-bit words."""
    return ((_u32(w) >> (8 * _u32(i))) & 0xFF).astype(np.uint8)


def pack_bytes(b0, b1, b2, b3) -> np.ndarray:
    """32-bit words from four bytes, ``b0`` in bits [7:0]."""
    return ((_u32(b0) & 0xFF) | ((_u32(b1) & 0xFF) << 8) | ((_u32(b2) & 0xFF) << 16)
            | ((_u32(b3) & 0xFF) << 24))


# ----------------------------------------------------------------------------- fp8 / bf8

# name -> (exponent bits, mantissa bits, bias, kind); kind "fnuz" | "fn" (no inf) | "ieee" (inf + NaNs)
_FP8_SPECS = {
    "e4m3fnuz": (4, 3, 8, "fnuz"),
    "e5m2fnuz": (5, 2, 16, "fnuz"),
    "e4m3fn": (4, 3, 7, "fn"),
    "e5m2": (5, 2, 15, "ieee"),
}
FP8_FORMATS = tuple(_FP8_SPECS)


def fp8_format(target, kind: str) -> str:
    """The 8-bit float format a target's fp8/bf8 instructions use: ``kind`` is "fp8" or "bf8"."""
    t = get_target(target)
    if kind not in ("fp8", "bf8"):
        raise ValueError(f"fp8 kind must be 'fp8' or 'bf8', not {kind!r}")
    if t.fp8_format == "fnuz":
        return "e4m3fnuz" if kind == "fp8" else "e5m2fnuz"
    return "e4m3fn" if kind == "fp8" else "e5m2"


def fp8_formats(target) -> tuple[str, str]:
    """(fp8 format, bf8 format) of ``target``: ("e4m3fnuz", "e5m2fnuz") or ("e4m3fn", "e5m2")."""
    return fp8_format(target, "fp8"), fp8_format(target, "bf8")


def _spec(fmt: str):
    try:
        return _FP8_SPECS[fmt]
    except KeyError:
        raise ValueError(f"unknown 8-bit float format {fmt!r} (known: {', '.join(FP8_FORMATS)})") from None


def _decode_code(code: int, fmt: str) -> float:
    e_bits, m_bits, bias, kind = _spec(fmt)
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    if kind == "fnuz" and code == 0x80:
        return float("nan")
    if kind == "fn" and (code & 0x7F) == 0x7F:
        return float("nan")
    if kind == "ieee" and e == (1 << e_bits) - 1:
        return sign * float("inf") if m == 0 else float("nan")
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1.0 + m / (1 << m_bits)) * 2.0 ** (e - bias)


@cache
def fp8_table(fmt: str) -> np.ndarray:
    """Read-only float32[256]: the value of every code of ``fmt``."""
    t = host.array([_decode_code(c, fmt) for c in range(256)], dtype=np.float32)
    t.flags.writeable = False
    return X.from_host(t)      # on the engine's device (a copy there, writable: CuPy has no read-only arrays)


def fp8_to_f32(codes, fmt: str) -> np.ndarray:
    """Decode 8-bit codes (any integer dtype; the low 8 bits are used) to float32."""
    return fp8_table(fmt)[_u32(codes) & 0xFF]


@cache
def _encode_tables(fmt: str):
    """Positive finite codes in increasing value order, plus the 'one past max' virtual code."""
    table = fp8_table(fmt).astype(np.float64)
    codes = [c for c in range(0x80) if np.isfinite(table[c])]
    vals = table[codes]
    assert np.all(np.diff(vals) > 0), fmt
    max_code = codes[-1]
    ulp = vals[-1] - vals[-2]
    vals = np.append(vals, vals[-1] + ulp)             # virtual code max_code + 1: overflow
    return vals, np.array(codes + [max_code + 1], dtype=np.int64), max_code


def fp8_max(fmt: str) -> float:
    """Largest finite value of ``fmt``."""
    vals, _, _ = _encode_tables(fmt)
    return float(vals[-2])


def f32_to_fp8(x, fmt: str, saturate: bool = False) -> np.ndarray:
    """float32 -> 8-bit codes, round to nearest even; see the module docstring for overflow/NaN."""
    _, _, _, kind = _spec(fmt)
    vals, codes, max_code = _encode_tables(fmt)
    xf = np.asarray(x, dtype=np.float32)
    b = f32_bits(xf)
    neg = (b >> 31).astype(bool)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    with np.errstate(invalid="ignore"):               # signalling NaNs widen with a warning
        a = np.abs(xf.astype(np.float64))
    # nearest representable magnitude, ties to the even code (the code's LSB is the mantissa LSB)
    hi = np.clip(np.searchsorted(vals, a, side="left"), 1, len(vals) - 1)
    lo = hi - 1
    d_lo = a - vals[lo]
    d_hi = vals[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (codes[hi] % 2 == 0))
    mag = np.where(pick_hi, codes[hi], codes[lo])
    overflow = (mag > max_code) | (a > vals[-1])          # includes +-inf
    if kind == "fnuz":
        out = np.where(mag == 0, 0, mag | (neg.astype(np.int64) << 7))
        bad = np.int64(0x80)
        out = np.where(overflow, max_code | (neg.astype(np.int64) << 7) if saturate else bad, out)
        out = np.where(nan, bad, out)
    else:
        signed = mag | (neg.astype(np.int64) << 7)
        if saturate:
            over = max_code | (neg.astype(np.int64) << 7)
        elif kind == "ieee":
            over = 0x7C | (neg.astype(np.int64) << 7)    # e5m2 inf
        else:
            over = 0x7F | (neg.astype(np.int64) << 7)    # e4m3fn NaN
        out = np.where(overflow, over, signed)
        out = np.where(nan, 0x7F | (neg.astype(np.int64) << 7), out)
    return out.astype(np.uint8)


# ----------------------------------------------------------------------------- denormals

def is_denorm_f32(x) -> np.ndarray:
    """True where ``x`` is a nonzero float32 subnormal."""
    b = f32_bits(x)
    return ((b & 0x7F800000) == 0) & ((b & 0x007FFFFF) != 0)


def flush_denorm_f32(x) -> np.ndarray:
    """float32 with subnormals replaced by a zero of the same sign."""
    b = f32_bits(x)
    return bits_f32(np.where((b & 0x7F800000) == 0, b & 0x80000000, b))


def flush_denorm_f16(h) -> np.ndarray:
    """f16 bits with subnormals replaced by a zero of the same sign."""
    u = _u32(h) & 0xFFFF
    return np.where((u & 0x7C00) == 0, u & 0x8000, u).astype(np.uint16)


for _f in (fp8_table, _encode_tables):
    X.register_cache(_f.cache_clear)
