"""Vector ALU semantics: VOP1, VOP2, VOPC, VOP3 and VOP3P (non-matrix), with their DPP and SDWA forms.

Every op is an entry ``name -> (out_type, in_types, fn)``; ``fn`` gets numpy arrays of the input
types (already selected, modified by neg/abs, broadcast over ``[waves, 64]``) and returns the result in
``out_type``.  Types: ``b32 u32 i32 f32``, ``b16 u16 i16 f16``, ``b64 u64 i64 f64``.  Arithmetic is
numpy's IEEE float32/float64 (round to nearest even, denormals kept); fused multiply-adds are
computed exactly (see :func:`fma32`); transcendentals are computed in float64 and rounded once
(within 1 ulp of the hardware's approximations, which are documented to 1 ulp).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:       # numpy, or CuPy while a CUDA launch runs (xp.py)
    from isagen.runtime.emu.xp import np

from isagen.runtime.emu import numerics as nx
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.access import (
    CompileError,
    is_vreg,
    mask_writer,
    read32,
    read64,
    read_mask,
    swrite,
    vwrite,
    vwrite_masked,
)
from isagen.runtime.emu.steps import CompiledStep
from isagen.runtime.emu.wave import VCC_LO

U8, U16, U32, U64 = np.uint8, np.uint16, np.uint32, np.uint64
I8, I16, I32, I64 = np.int8, np.int16, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64

DT = {"b32": U32, "u32": U32, "i32": I32, "f32": F32, "b16": U16, "u16": U16, "i16": I16, "f16": F16,
      "b64": U64, "u64": U64, "i64": I64, "f64": F64, "bool": np.bool_}
SIZE = {t: (64 if t.endswith("64") else 16 if t.endswith("16") else 32) for t in DT if t != "bool"}
SIGN_BIT = {16: 0x8000, 32: 0x80000000, 64: 0x8000000000000000}

OPS: dict[str, tuple] = {}
TRANS: set[str] = set()          # transcendental ops (statistics category "trans")


def op(name, out, ins, fn, trans=False):
    OPS[name] = (out, tuple(ins), fn)
    if trans:
        TRANS.add(name)


# ============================================================================ exact fused multiply-add

def fma32(a, b, c):
    """Correctly rounded float32 fma: the product is exact in float64; the sum is computed with
    TwoSum and rounded to odd, so the final rounding to float32 is the only one (53 >= 2*24+2)."""
    a = np.asarray(a, F32).astype(F64)
    b = np.asarray(b, F32).astype(F64)
    c = np.asarray(c, F32).astype(F64)
    p = a * b                       # exact
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)  # exact error of s (TwoSum)
    with np.errstate(invalid="ignore"):
        inexact = (err != 0) & np.isfinite(s)
    if np.any(inexact):
        sb = s.view(I64) if isinstance(s, np.ndarray) else np.asarray(s).view(I64)
        # truncate toward zero when s was rounded away from zero, then set the sticky LSB
        away = inexact & ((err < 0) == (s > 0))
        sb = np.where(away, sb - 1, sb)
        sb = np.where(inexact, sb | 1, sb)
        s = np.where(inexact, sb.view(F64), s)
    return np.asarray(s).astype(F32)


def fma64(a, b, c):
    """float64 fma (correctly rounded through exact rational arithmetic where needed)."""
    a, b, c = (np.asarray(x, F64) for x in (a, b, c))
    p = a * b
    r = p + c
    # error-free product: Dekker split
    split = F64(134217729.0)
    with np.errstate(over="ignore", invalid="ignore"):
        t = split * a
        ah = t - (t - a)
        al = a - ah
        t = split * b
        bh = t - (t - b)
        bl = b - bh
        pe = ((ah * bh - p) + ah * bl + al * bh) + al * bl   # p + pe = a*b exactly
        s = p + c
        bb = s - p
        se = (p - (s - bb)) + (c - bb)
        r2 = s + (se + pe)
    ok = np.isfinite(r2)
    return np.where(ok, r2, r)


def mad32(a, b, c):
    """Unfused multiply-add: the product is rounded to float32 first."""
    return (np.asarray(a, F32) * np.asarray(b, F32)).astype(F32) + np.asarray(c, F32)


# ============================================================================ helpers

def _f64(x):
    return np.asarray(x).astype(F64)


def _round32(x64):
    return np.asarray(x64, F64).astype(F32)


def _shift32(x):
    return np.asarray(x, U32) & U32(31)


def _cvt_i32(x, unsigned=False):
    """float -> int32/uint32 with truncation, NaN -> 0, saturation."""
    x = _f64(x)
    t = np.trunc(np.nan_to_num(x, nan=0.0))
    if unsigned:
        return np.clip(t, 0, 4294967295.0).astype(U32)
    return np.clip(t, -2147483648.0, 2147483647.0).astype(I32)


def _cvt_i16(x, unsigned=False):
    x = _f64(x)
    t = np.trunc(np.nan_to_num(x, nan=0.0))
    return np.clip(t, 0, 65535).astype(U16) if unsigned else np.clip(t, -32768, 32767).astype(I16)


def _exp2(x):
    return _round32(np.exp2(_f64(x)))


def _log2(x):
    x64 = _f64(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log2(x64)
    # log of -0 is -inf on AMD hardware as for +0
    r = np.where(x64 == 0, -np.inf, r)
    return _round32(r)


def _rcp(x):
    with np.errstate(divide="ignore"):
        return _round32(1.0 / _f64(x))


def _rsq(x):
    x64 = _f64(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _round32(1.0 / np.sqrt(x64))


def _sqrt(x):
    with np.errstate(invalid="ignore"):
        return np.sqrt(np.asarray(x, F32))


def _fract(x):
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore"):
        r = x - np.floor(x)
    r = np.minimum(r, F32(np.nextafter(F32(1), F32(0))))
    return np.where(np.isinf(x), F32(np.nan), np.where(np.isnan(x), x, r)).astype(F32)


def _frexp_mant(x):
    x = np.asarray(x)
    m, _ = np.frexp(x)
    return np.where(np.isfinite(x), m, x).astype(x.dtype)


def _frexp_exp(x):
    x = np.asarray(x)
    _, e = np.frexp(x)
    return np.where(np.isfinite(x), e, 0).astype(I32)


def _ldexp32(x, e):
    e = np.clip(np.asarray(e).astype(I64), -1000, 1000)
    if X.active() == "cuda":
        # CuPy's float32 <-> float64 conversions flush subnormals and replace NaNs by CUDA's canonical one:
        # the exact widening and rounding of xp.py instead (adding -0 keeps every value, -0 included), a
        # NaN passed through quieted, as numpy's conversions do
        xb = np.asarray(x, F32).view(U32)
        r = np.ldexp(X.f32_bits_to_f64(xb), e)
        out = np.empty(r.shape, U32)
        X.add_round_f32(r, U32(0x80000000), out)
        return np.where((xb & U32(0x7FFFFFFF)) > U32(0x7F800000), xb | U32(0x400000), out).view(F32)
    return _round32(np.ldexp(_f64(x), e))


def _zeros_ordered_max(r, a, b):
    """``r`` (a max of a and b) with a max of two zeros set to +0 unless both are -0:
    the hardware orders -0 < +0, numpy's max picks either zero."""
    both0 = (a == 0) & (b == 0)
    if np.any(both0):
        r = np.where(both0, np.where(np.signbit(a) & np.signbit(b), a, np.abs(a)), r)
    return r.astype(np.result_type(a, b))


def _zeros_ordered_min(r, a, b):
    """``r`` (a min of a and b) with a min of two zeros set to -0 if either is -0."""
    both0 = (a == 0) & (b == 0)
    if np.any(both0):
        r = np.where(both0, np.where(np.signbit(a) | np.signbit(b), -np.abs(a), a), r)
    return r.astype(np.result_type(a, b))


def _fmax(a, b):
    """IEEE maxNum (a NaN operand loses) with +0 > -0."""
    return _zeros_ordered_max(np.fmax(a, b), a, b)


def _fmin(a, b):
    return _zeros_ordered_min(np.fmin(a, b), a, b)


def _ieee_max(a, b):
    """IEEE 754-2019 maximum: NaN propagates, -0 < +0."""
    return _zeros_ordered_max(np.maximum(a, b), a, b)


def _ieee_min(a, b):
    return _zeros_ordered_min(np.minimum(a, b), a, b)


def _med3(a, b, c, mx=np.maximum, mn=np.minimum):
    return mx(mn(a, b), mn(mx(a, b), c))


def _fmed3(a, b, c):
    # with a NaN input the result is min3 of the inputs in IEEE mode (ISA pseudocode)
    nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    m = _fmax(_fmin(a, b), _fmin(_fmax(a, b), c))
    return np.where(nan, _fmin(_fmin(a, b), c), m).astype(a.dtype if hasattr(a, "dtype") else F32)


def _bfe(a, off, width, signed):
    a = np.asarray(a).astype(U64) & U64(0xFFFFFFFF)
    off = (np.asarray(off).astype(U64) & U64(31))
    width = (np.asarray(width).astype(U64) & U64(31))
    v = (a >> off) & ((U64(1) << width) - U64(1))
    if signed:
        sh = (U64(64) - width) & U64(63)
        sv = ((v << sh).view(I64) >> sh.astype(I64))
        v = np.where(width == 0, I64(0), sv).astype(I64).view(U64)
    return (v & U64(0xFFFFFFFF)).astype(U32)


def _alignbit(a, b, c):
    v = (np.asarray(a).astype(U64) << U64(32)) | np.asarray(b).astype(U64)
    return (v >> (np.asarray(c).astype(U64) & U64(31))).astype(U32)


def _alignbyte(a, b, c):
    v = (np.asarray(a).astype(U64) << U64(32)) | np.asarray(b).astype(U64)
    return (v >> ((np.asarray(c).astype(U64) & U64(3)) * U64(8))).astype(U32)


def _perm_runs(sel: int) -> list[tuple[int, int, int, int]] | None:
    """A v_perm_b32 selector as runs (source 0 = S1 / 1 = S0, source byte, result byte, bytes) of
    result bytes taken from consecutive source bytes; None if a selector byte is >= 8 (sign/constant)."""
    runs: list[list[int]] = []
    for i in range(4):
        s = (sel >> (8 * i)) & 0xFF
        if s >= 8:
            return None
        src, sb = s >> 2, s & 3
        r = runs[-1] if runs else None
        if r is not None and r[0] == src and r[1] + r[3] == sb and r[2] + r[3] == i:
            r[3] += 1
        else:
            runs.append([src, sb, i, 1])
    return [(r[0], r[1], r[2], r[3]) for r in runs]


def _perm(a, b, sel):
    """v_perm_b32: bytes of {S0, S1} (S1 is the low word) chosen by each selector byte of S2."""
    a, b, sel = np.asarray(a, U32), np.asarray(b, U32), np.asarray(sel, U32)
    if X.active() == "cuda":        # one kernel: no selector read back to the host (xp.perm_b32)
        return X.perm_b32(a, b, sel)
    s0 = int(sel.flat[0])
    runs = _perm_runs(s0)
    if runs is not None and (sel.size == 1 or (sel == U32(s0)).all()):
        # one selector for every lane (an SGPR or constant, as compilers use it): shifts and masks
        shape = np.broadcast_shapes(a.shape, b.shape, sel.shape)
        out = np.zeros(shape, U32)
        for src, sb, db, n in runs:
            x = b if src == 0 else a
            if sb:
                x = x >> U32(8 * sb)
            if n < 4:
                x = x & U32((1 << (8 * n)) - 1)
            if db:
                x = x << U32(8 * db)
            out |= x
        return out
    sb = np.ascontiguousarray(sel).reshape(sel.shape + (1,)).view(U8)          # [..., 4] selector bytes
    if (sb < 8).all():
        shape = np.broadcast_shapes(a.shape, b.shape, sel.shape)
        data = np.empty(shape + (2,), U32)
        data[..., 0] = b
        data[..., 1] = a
        d8 = data.view(U8)                                                      # [..., 8] bytes
        out = np.take_along_axis(d8, np.broadcast_to(sb, shape + (4,)).astype(np.intp), axis=-1)
        return np.ascontiguousarray(out).view(U32)[..., 0]
    data = (a.astype(U64) << U64(32)) | b.astype(U64)
    out = np.zeros(np.broadcast(data, sel).shape, U32)
    for i in range(4):
        s = (sel >> U32(8 * i)) & U32(0xFF)
        byte = ((data >> (np.minimum(s, 7).astype(U64) * U64(8))) & U64(0xFF)).astype(U32)
        # 8..11: sign of bytes 1,3,5,7 replicated; 12: 0x00; >=13: 0xFF
        sign_src = np.array([1, 3, 5, 7], U64)
        sgn = (((data >> (sign_src[np.clip(s.astype(np.int64) - 8, 0, 3)] * U64(8) + U64(7))) & U64(1)).astype(U32)
               * U32(0xFF))
        byte = np.where(s < 8, byte, np.where(s < 12, sgn, np.where(s == 12, U32(0), U32(0xFF))))
        out = out | (byte << U32(8 * i))
    return out


def _mul_hi_u32(a, b):
    return ((np.asarray(a).astype(U64) * np.asarray(b).astype(U64)) >> U64(32)).astype(U32)


def _mul_hi_i32(a, b):
    return ((np.asarray(a).astype(I64) * np.asarray(b).astype(I64)) >> 64 - 32).astype(I64).astype(U32)


def _i24(x):
    x = np.asarray(x).astype(U32) & U32(0xFFFFFF)
    return np.where(x & U32(0x800000), x.astype(I64) - 0x1000000, x.astype(I64))


def _u24(x):
    return (np.asarray(x).astype(U32) & U32(0xFFFFFF)).astype(U64)


def _sad_u8(a, b, masked=False):
    """Sum over the four bytes of |a.byte - b.byte|; ``masked`` (v_msad_u8) leaves out the bytes
    where b's byte is 0."""
    a = np.asarray(a).astype(U32)
    b = np.asarray(b).astype(U32)
    s = np.zeros(np.broadcast(a, b).shape, U32)
    for i in range(4):
        x = ((a >> U32(8 * i)) & U32(0xFF)).astype(I64)
        y = ((b >> U32(8 * i)) & U32(0xFF)).astype(I64)
        d = np.abs(x - y)
        if masked:
            d = np.where(y == 0, 0, d)
        s = s + d.astype(U32)
    return s


def _cvt_pk_norm(a, b, signed):
    def one(x):
        x = np.clip(_f64(x), -1.0 if signed else 0.0, 1.0)
        x = np.nan_to_num(x, nan=0.0)
        return (np.rint(x * (32767 if signed else 65535)).astype(I64) & 0xFFFF).astype(U32)
    return one(a) | (one(b) << U32(16))


def _sat_u16(x):
    return np.clip(np.asarray(x).astype(I64), 0, 65535).astype(U32)


def _sat_i16(x):
    return (np.clip(np.asarray(x).astype(I64), -32768, 32767) & 0xFFFF).astype(U32)


def _div_fixup(q, d, n, dt, inf):
    """v_div_fixup_*: q = quotient estimate, d = denominator, n = numerator."""
    q, d, n = (np.asarray(x, dt) for x in (q, d, n))
    sign = np.signbit(d) ^ np.signbit(n)
    res = np.where(sign, -np.abs(q), np.abs(q))
    res = np.where(np.isnan(q), np.where(sign, -inf, inf), res)
    zero = np.where(sign, -dt(0), dt(0))
    infs = np.where(sign, -inf, inf)
    dn = np.isinf(d)
    nn = np.isinf(n)
    res = np.where(dn | (n == 0), zero, res)
    res = np.where((d == 0) | nn, infs, res)
    bad = ((d == 0) & (n == 0)) | (dn & nn)
    res = np.where(bad, dt(np.nan), res)            # 0/0 and inf/inf: the default quiet NaN
    res = np.where(np.isnan(d), d, res)
    res = np.where(np.isnan(n), n, res)
    return res.astype(dt)


# ============================================================================ the table

f32 = ("f32", "f32")
# ---- 32-bit float arithmetic
op("v_add_f32", "f32", f32, lambda a, b: X.f32_arith("add", a, b) if X.active() == "cuda" else a + b)
op("v_sub_f32", "f32", f32, lambda a, b: X.f32_arith("sub", a, b) if X.active() == "cuda" else a - b)
op("v_subrev_f32", "f32", f32, lambda a, b: X.f32_arith("sub", b, a) if X.active() == "cuda" else b - a)
op("v_mul_f32", "f32", f32, lambda a, b: X.f32_arith("mul", a, b) if X.active() == "cuda" else a * b)
op("v_mul_legacy_f32", "f32", f32, lambda a, b: np.where((a == 0) | (b == 0), F32(0), a * b).astype(F32))
op("v_min_f32", "f32", f32, _fmin)
op("v_max_f32", "f32", f32, _fmax)
op("v_fma_f32", "f32", ("f32",) * 3, fma32)
op("v_fmac_f32", "f32", ("f32",) * 3, fma32)          # src2 = vdst (added by the compiler below)
op("v_fmamk_f32", "f32", ("f32",) * 3, fma32)
op("v_fmaak_f32", "f32", ("f32",) * 3, fma32)
op("v_mad_f32", "f32", ("f32",) * 3, mad32)
op("v_mac_f32", "f32", ("f32",) * 3, mad32)
op("v_madmk_f32", "f32", ("f32",) * 3, mad32)
op("v_madak_f32", "f32", ("f32",) * 3, mad32)
op("v_mad_legacy_f32", "f32", ("f32",) * 3,
   lambda a, b, c: np.where((a == 0) | (b == 0), F32(0), (a * b).astype(F32)).astype(F32) + c)
op("v_fma_legacy_f32", "f32", ("f32",) * 3,
   lambda a, b, c: fma32(np.where(b == 0, F32(0), a), np.where(a == 0, F32(0), b), c))
op("v_min3_f32", "f32", ("f32",) * 3, lambda a, b, c: _fmin(_fmin(a, b), c))
op("v_max3_f32", "f32", ("f32",) * 3, lambda a, b, c: _fmax(_fmax(a, b), c))
op("v_med3_f32", "f32", ("f32",) * 3, _fmed3)
op("v_ldexp_f32", "f32", ("f32", "i32"), _ldexp32)
op("v_exp_f32", "f32", ("f32",), _exp2, True)
op("v_exp_legacy_f32", "f32", ("f32",), _exp2, True)
op("v_log_f32", "f32", ("f32",), _log2, True)
op("v_log_legacy_f32", "f32", ("f32",), _log2, True)
op("v_rcp_f32", "f32", ("f32",), _rcp, True)
op("v_rcp_iflag_f32", "f32", ("f32",), _rcp, True)
op("v_rsq_f32", "f32", ("f32",), _rsq, True)
op("v_sqrt_f32", "f32", ("f32",), _sqrt, True)
op("v_sin_f32", "f32", ("f32",), lambda x: _round32(np.sin(_f64(x) * 2 * np.pi)), True)
op("v_cos_f32", "f32", ("f32",), lambda x: _round32(np.cos(_f64(x) * 2 * np.pi)), True)
op("v_fract_f32", "f32", ("f32",), _fract)
op("v_trunc_f32", "f32", ("f32",), np.trunc)
op("v_ceil_f32", "f32", ("f32",), np.ceil)
op("v_floor_f32", "f32", ("f32",), np.floor)
op("v_rndne_f32", "f32", ("f32",), np.rint)
op("v_frexp_mant_f32", "f32", ("f32",), _frexp_mant)
op("v_frexp_exp_i32_f32", "i32", ("f32",), _frexp_exp)
op("v_div_fixup_f32", "f32", ("f32",) * 3, lambda q, d, n: _div_fixup(q, d, n, F32, F32(np.inf)))
op("v_cvt_f32_i32", "f32", ("i32",), lambda a: a.astype(F32))
op("v_cvt_f32_u32", "f32", ("u32",), lambda a: a.astype(F32))
op("v_cvt_i32_f32", "i32", ("f32",), _cvt_i32)
op("v_cvt_u32_f32", "u32", ("f32",), lambda a: _cvt_i32(a, True))
op("v_cvt_rpi_i32_f32", "i32", ("f32",), lambda a: _cvt_i32(np.floor(_f64(a) + 0.5)))
op("v_cvt_flr_i32_f32", "i32", ("f32",), lambda a: _cvt_i32(np.floor(_f64(a))))
op("v_cvt_off_f32_i4", "f32", ("u32",), lambda a: (((a & U32(0xF)).astype(I64) ^ 8) - 8).astype(F32) / F32(16))
for _i in range(4):
    op(f"v_cvt_f32_ubyte{_i}", "f32", ("u32",), (lambda k: lambda a: ((a >> U32(8 * k)) & U32(0xFF)).astype(F32))(_i))
op("v_cvt_f16_f32", "b16", ("f32",), nx.f32_to_f16)
op("v_cvt_f32_f16", "f32", ("b16",), nx.f16_to_f32)
op("v_cvt_f32_f64", "f32", ("f64",), lambda a: a.astype(F32))
op("v_cvt_f64_f32", "f64", ("f32",), lambda a: a.astype(F64))
op("v_cvt_f64_i32", "f64", ("i32",), lambda a: a.astype(F64))
op("v_cvt_f64_u32", "f64", ("u32",), lambda a: a.astype(F64))
op("v_cvt_i32_f64", "i32", ("f64",), _cvt_i32)
op("v_cvt_u32_f64", "u32", ("f64",), lambda a: _cvt_i32(a, True))
op("v_cvt_pkrtz_f16_f32", "b32", f32, lambda a, b: nx.pack16(nx.f32_to_f16_rtz(a), nx.f32_to_f16_rtz(b)))
op("v_cvt_pknorm_i16_f32", "b32", f32, lambda a, b: _cvt_pk_norm(a, b, True))
op("v_cvt_pknorm_u16_f32", "b32", f32, lambda a, b: _cvt_pk_norm(a, b, False))
op("v_cvt_pk_u16_u32", "b32", ("u32", "u32"), lambda a, b: np.minimum(a, 65535) | (np.minimum(b, 65535) << U32(16)))
op("v_cvt_pk_i16_i32", "b32", ("i32", "i32"), lambda a, b: _sat_i16(a) | (_sat_i16(b) << U32(16)))
op("v_cvt_pk_bf16_f32", "b32", f32, lambda a, b: nx.pack16(nx.f32_to_bf16(a), nx.f32_to_bf16(b)))
op("v_cvt_pkaccum_u8_f32", "b32", ("f32", "u32"), None)   # needs the old dst: special-cased below
op("v_cvt_pk_f16_f32", "b32", f32, lambda a, b: nx.pack16(nx.f32_to_f16(a), nx.f32_to_f16(b)))   # gfx950
op("v_cvt_f32_bf16", "f32", ("b16",), nx.bf16_to_f32)                                             # gfx950
op("v_maximum3_f32", "f32", ("f32",) * 3, lambda a, b, c: _ieee_max(_ieee_max(a, b), c))          # gfx950
op("v_minimum3_f32", "f32", ("f32",) * 3, lambda a, b, c: _ieee_min(_ieee_min(a, b), c))          # gfx950

# ---- 64-bit float
op("v_add_f64", "f64", ("f64", "f64"), lambda a, b: a + b)
op("v_mul_f64", "f64", ("f64", "f64"), lambda a, b: a * b)
op("v_min_f64", "f64", ("f64", "f64"), _fmin)
op("v_max_f64", "f64", ("f64", "f64"), _fmax)
op("v_fma_f64", "f64", ("f64",) * 3, fma64)
op("v_fmac_f64", "f64", ("f64",) * 3, fma64)
op("v_ldexp_f64", "f64", ("f64", "i32"), lambda x, e: np.ldexp(x, np.clip(e.astype(I64), -3000, 3000)))
op("v_rcp_f64", "f64", ("f64",), lambda x: 1.0 / x, True)
op("v_rsq_f64", "f64", ("f64",), lambda x: 1.0 / np.sqrt(x), True)
op("v_sqrt_f64", "f64", ("f64",), np.sqrt, True)
op("v_trunc_f64", "f64", ("f64",), np.trunc)
op("v_ceil_f64", "f64", ("f64",), np.ceil)
op("v_floor_f64", "f64", ("f64",), np.floor)
op("v_rndne_f64", "f64", ("f64",), np.rint)
op("v_fract_f64", "f64", ("f64",),
   lambda x: np.where(np.isfinite(x), np.minimum(x - np.floor(x), np.nextafter(1.0, 0.0)),
                      np.where(np.isnan(x), x, np.nan)))
op("v_frexp_mant_f64", "f64", ("f64",), _frexp_mant)
op("v_frexp_exp_i32_f64", "i32", ("f64",), _frexp_exp)
op("v_div_fixup_f64", "f64", ("f64",) * 3, lambda q, d, n: _div_fixup(q, d, n, F64, F64(np.inf)))

# ---- 16-bit float
f16 = ("f16", "f16")
op("v_add_f16", "f16", f16, lambda a, b: a + b)
op("v_sub_f16", "f16", f16, lambda a, b: a - b)
op("v_subrev_f16", "f16", f16, lambda a, b: b - a)
op("v_mul_f16", "f16", f16, lambda a, b: a * b)
op("v_max_f16", "f16", f16, _fmax)
op("v_min_f16", "f16", f16, _fmin)
op("v_fma_f16", "f16", ("f16",) * 3, lambda a, b, c: (_f64(a) * _f64(b) + _f64(c)).astype(F16))
op("v_fmac_f16", "f16", ("f16",) * 3, lambda a, b, c: (_f64(a) * _f64(b) + _f64(c)).astype(F16))
op("v_mad_f16", "f16", ("f16",) * 3, lambda a, b, c: (a * b).astype(F16) + c)
op("v_mad_legacy_f16", "f16", ("f16",) * 3, lambda a, b, c: (a * b).astype(F16) + c)
op("v_mac_f16", "f16", ("f16",) * 3, lambda a, b, c: (a * b).astype(F16) + c)
op("v_madmk_f16", "f16", ("f16",) * 3, lambda a, b, c: (a * b).astype(F16) + c)
op("v_madak_f16", "f16", ("f16",) * 3, lambda a, b, c: (a * b).astype(F16) + c)
op("v_fma_legacy_f16", "f16", ("f16",) * 3, lambda a, b, c: (_f64(a) * _f64(b) + _f64(c)).astype(F16))
op("v_min3_f16", "f16", ("f16",) * 3, lambda a, b, c: _fmin(_fmin(a, b), c))
op("v_max3_f16", "f16", ("f16",) * 3, lambda a, b, c: _fmax(_fmax(a, b), c))
op("v_med3_f16", "f16", ("f16",) * 3, _fmed3)
op("v_ldexp_f16", "f16", ("f16", "i32"), lambda x, e: np.ldexp(_f64(x), np.clip(e.astype(I64), -100, 100)).astype(F16))
op("v_exp_f16", "f16", ("f16",), lambda x: np.exp2(_f64(x)).astype(F16), True)
op("v_log_f16", "f16", ("f16",),
   lambda x: np.where(x == 0, -np.inf, np.log2(np.abs(_f64(x)) * np.where(x < 0, np.nan, 1))).astype(F16), True)
op("v_rcp_f16", "f16", ("f16",), lambda x: (1.0 / _f64(x)).astype(F16), True)
op("v_rsq_f16", "f16", ("f16",), lambda x: (1.0 / np.sqrt(_f64(x))).astype(F16), True)
op("v_sqrt_f16", "f16", ("f16",), lambda x: np.sqrt(_f64(x)).astype(F16), True)
op("v_sin_f16", "f16", ("f16",), lambda x: np.sin(_f64(x) * 2 * np.pi).astype(F16), True)
op("v_cos_f16", "f16", ("f16",), lambda x: np.cos(_f64(x) * 2 * np.pi).astype(F16), True)
op("v_fract_f16", "f16", ("f16",),
   lambda x: np.where(np.isfinite(x), np.minimum(x - np.floor(x), F16(np.nextafter(F16(1), F16(0)))),
                      np.nan).astype(F16))
op("v_trunc_f16", "f16", ("f16",), np.trunc)
op("v_ceil_f16", "f16", ("f16",), np.ceil)
op("v_floor_f16", "f16", ("f16",), np.floor)
op("v_rndne_f16", "f16", ("f16",), np.rint)
op("v_frexp_mant_f16", "f16", ("f16",), _frexp_mant)
op("v_frexp_exp_i16_f16", "i16", ("f16",), lambda x: _frexp_exp(x).astype(I16))
op("v_cvt_f16_u16", "f16", ("u16",), lambda a: a.astype(F16))
op("v_cvt_f16_i16", "f16", ("i16",), lambda a: a.astype(F16))
op("v_cvt_u16_f16", "u16", ("f16",), lambda a: _cvt_i16(a, True))
op("v_cvt_i16_f16", "i16", ("f16",), lambda a: _cvt_i16(a))
op("v_cvt_norm_i16_f16", "i16", ("f16",), lambda a: np.rint(np.clip(np.nan_to_num(_f64(a)), -1, 1) * 32767).astype(I16))
op("v_cvt_norm_u16_f16", "u16", ("f16",), lambda a: np.rint(np.clip(np.nan_to_num(_f64(a)), 0, 1) * 65535).astype(U16))
op("v_div_fixup_f16", "f16", ("f16",) * 3, lambda q, d, n: _div_fixup(q, d, n, F16, F16(np.inf)))
op("v_div_fixup_legacy_f16", "f16", ("f16",) * 3, lambda q, d, n: _div_fixup(q, d, n, F16, F16(np.inf)))
op("v_pack_b32_f16", "b32", ("b16", "b16"), lambda a, b: a.astype(U32) | (b.astype(U32) << U32(16)))
op("v_cvt_pknorm_i16_f16", "b32", f16,
   lambda a, b: (np.rint(np.clip(np.nan_to_num(_f64(a)), -1, 1) * 32767).astype(I64) & 0xFFFF).astype(U32)
   | ((np.rint(np.clip(np.nan_to_num(_f64(b)), -1, 1) * 32767).astype(I64) & 0xFFFF).astype(U32) << U32(16)))
op("v_cvt_pknorm_u16_f16", "b32", f16,
   lambda a, b: np.rint(np.clip(np.nan_to_num(_f64(a)), 0, 1) * 65535).astype(U32)
   | (np.rint(np.clip(np.nan_to_num(_f64(b)), 0, 1) * 65535).astype(U32) << U32(16)))

# ---- 32-bit integer / bits
u32 = ("u32", "u32")
op("v_mov_b32", "b32", ("b32",), lambda a: a)
op("v_accvgpr_mov_b32", "b32", ("b32",), lambda a: a)
op("v_accvgpr_read_b32", "b32", ("b32",), lambda a: a)
op("v_accvgpr_write_b32", "b32", ("b32",), lambda a: a)
op("v_not_b32", "b32", ("b32",), lambda a: ~a)
op("v_bfrev_b32", "b32", ("b32",), lambda a: _brev(a))
op("v_ffbh_u32", "u32", ("u32",), lambda a: _ffbh(a))
op("v_ffbl_b32", "u32", ("u32",), lambda a: _ffbl(a))
op("v_ffbh_i32", "u32", ("u32",), lambda a: _ffbh_i(a))
op("v_add_u32", "u32", u32, lambda a, b: a + b)
op("v_sub_u32", "u32", u32, lambda a, b: a - b)
op("v_subrev_u32", "u32", u32, lambda a, b: b - a)
op("v_add_i32", "i32", ("i32", "i32"), lambda a, b: (a.astype(I64) + b).astype(I32))
op("v_sub_i32", "i32", ("i32", "i32"), lambda a, b: (a.astype(I64) - b).astype(I32))
op("v_mul_lo_u32", "u32", u32, lambda a, b: (a.astype(U64) * b).astype(U32))
op("v_mul_hi_u32", "u32", u32, _mul_hi_u32)
op("v_mul_hi_i32", "u32", ("i32", "i32"), _mul_hi_i32)
op("v_mul_i32_i24", "u32", u32, lambda a, b: (_i24(a) * _i24(b)).astype(U32))
op("v_mul_hi_i32_i24", "u32", u32, lambda a, b: ((_i24(a) * _i24(b)) >> 32).astype(U32))
op("v_mul_u32_u24", "u32", u32, lambda a, b: (_u24(a) * _u24(b)).astype(U32))
op("v_mul_hi_u32_u24", "u32", u32, lambda a, b: ((_u24(a) * _u24(b)) >> U64(32)).astype(U32))
op("v_mad_i32_i24", "u32", ("u32", "u32", "i32"), lambda a, b, c: (_i24(a) * _i24(b) + c).astype(U32))
op("v_mad_u32_u24", "u32", u32 + ("u32",), lambda a, b, c: (_u24(a) * _u24(b) + c).astype(U32))
op("v_min_i32", "i32", ("i32", "i32"), np.minimum)
op("v_max_i32", "i32", ("i32", "i32"), np.maximum)
op("v_min_u32", "u32", u32, np.minimum)
op("v_max_u32", "u32", u32, np.maximum)
op("v_min3_i32", "i32", ("i32",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
op("v_max3_i32", "i32", ("i32",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
op("v_min3_u32", "u32", ("u32",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
op("v_max3_u32", "u32", ("u32",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
op("v_med3_i32", "i32", ("i32",) * 3, _med3)
op("v_med3_u32", "u32", ("u32",) * 3, _med3)
op("v_lshlrev_b32", "b32", ("u32", "b32"), lambda s, a: a << _shift32(s))
op("v_lshrrev_b32", "b32", ("u32", "b32"), lambda s, a: a >> _shift32(s))
op("v_ashrrev_i32", "i32", ("u32", "i32"), lambda s, a: a >> _shift32(s).astype(I32))
op("v_and_b32", "b32", u32, lambda a, b: a & b)
op("v_or_b32", "b32", u32, lambda a, b: a | b)
op("v_xor_b32", "b32", u32, lambda a, b: a ^ b)
op("v_xnor_b32", "b32", u32, lambda a, b: ~(a ^ b))
op("v_bfe_u32", "u32", ("u32",) * 3, lambda a, o, w: _bfe(a, o, w, False))
op("v_bfe_i32", "u32", ("u32",) * 3, lambda a, o, w: _bfe(a, o, w, True))
op("v_bfi_b32", "b32", ("u32",) * 3, lambda m, a, b: (m & a) | (~m & b))
op("v_bfm_b32", "b32", u32,
   lambda w, o: (((U64(1) << _shift32(w).astype(U64)) - U64(1)) << _shift32(o).astype(U64)).astype(U32))
op("v_alignbit_b32", "b32", ("u32",) * 3, _alignbit)
op("v_alignbyte_b32", "b32", ("u32",) * 3, _alignbyte)
op("v_perm_b32", "b32", ("u32",) * 3, _perm)
op("v_bcnt_u32_b32", "u32", u32, lambda a, b: np.bitwise_count(a).astype(U32) + b)
op("v_lshl_add_u32", "u32", ("u32",) * 3, lambda a, s, c: (a << _shift32(s)) + c)
op("v_add_lshl_u32", "u32", ("u32",) * 3, lambda a, b, s: (a + b) << _shift32(s))
op("v_add3_u32", "u32", ("u32",) * 3, lambda a, b, c: a + b + c)
op("v_lshl_or_b32", "b32", ("u32",) * 3, lambda a, s, c: (a << _shift32(s)) | c)
op("v_and_or_b32", "b32", ("u32",) * 3, lambda a, b, c: (a & b) | c)
op("v_or3_b32", "b32", ("u32",) * 3, lambda a, b, c: a | b | c)
op("v_xad_u32", "u32", ("u32",) * 3, lambda a, b, c: (a ^ b) + c)
op("v_sad_u8", "u32", ("u32",) * 3, lambda a, b, c: _sad_u8(a, b) + c)
op("v_sad_u32", "u32", ("u32",) * 3, lambda a, b, c: np.where(a > b, a - b, b - a) + c)
op("v_sad_u16", "u32", ("u32",) * 3,
   lambda a, b, c: (np.abs((a & U32(0xFFFF)).astype(I64) - (b & U32(0xFFFF)))
                    + np.abs((a >> U32(16)).astype(I64) - (b >> U32(16)))).astype(U32) + c)
op("v_sad_hi_u8", "u32", ("u32",) * 3, lambda a, b, c: (_sad_u8(a, b) << U32(16)) + c)
op("v_msad_u8", "u32", ("u32",) * 3, lambda a, b, c: _sad_u8(a, b, masked=True) + c)
op("v_lerp_u8", "u32", ("u32",) * 3, lambda a, b, c: _lerp_u8(a, b, c))
op("v_mad_u32_u16", "u32", ("u32",) * 3, lambda a, b, c: (a & U32(0xFFFF)) * (b & U32(0xFFFF)) + c)
op("v_mad_i32_i16", "u32", ("u32", "u32", "i32"),
   lambda a, b, c: ((a & U32(0xFFFF)).astype(U16).view(I16).astype(I64) * (b & U32(0xFFFF)).astype(U16).view(I16)
                    + c).astype(U32))
op("v_sat_pk_u8_i16", "u32", ("u32",),
   lambda a: (np.clip((a & U32(0xFFFF)).astype(U16).view(I16), 0, 255).astype(U32)
              | (np.clip((a >> U32(16)).astype(U16).view(I16), 0, 255).astype(U32) << U32(8))))
op("v_cvt_pk_u8_f32", "u32", ("f32", "u32", "u32"),
   lambda f, s, d: ((d & ~(U32(0xFF) << ((s & U32(3)) * U32(8))))
                    | ((np.clip(np.rint(np.nan_to_num(_f64(f))), 0, 255).astype(U32)) << ((s & U32(3)) * U32(8)))))

# ---- 16-bit integer
u16 = ("u16", "u16")
op("v_add_u16", "u16", u16, lambda a, b: a + b)
op("v_sub_u16", "u16", u16, lambda a, b: a - b)
op("v_subrev_u16", "u16", u16, lambda a, b: b - a)
op("v_add_i16", "i16", ("i16", "i16"), lambda a, b: a + b)
op("v_sub_i16", "i16", ("i16", "i16"), lambda a, b: a - b)
op("v_mul_lo_u16", "u16", u16, lambda a, b: a * b)
op("v_lshlrev_b16", "u16", u16, lambda s, a: a << (s & U16(15)))
op("v_lshrrev_b16", "u16", u16, lambda s, a: a >> (s & U16(15)))
op("v_ashrrev_i16", "i16", ("u16", "i16"), lambda s, a: a >> (s & U16(15)).astype(I16))
op("v_max_u16", "u16", u16, np.maximum)
op("v_min_u16", "u16", u16, np.minimum)
op("v_max_i16", "i16", ("i16", "i16"), np.maximum)
op("v_min_i16", "i16", ("i16", "i16"), np.minimum)
op("v_mad_u16", "u16", ("u16",) * 3, lambda a, b, c: a * b + c)
op("v_mad_i16", "i16", ("i16",) * 3, lambda a, b, c: a * b + c)
op("v_mad_legacy_u16", "u16", ("u16",) * 3, lambda a, b, c: a * b + c)
op("v_mad_legacy_i16", "i16", ("i16",) * 3, lambda a, b, c: a * b + c)
op("v_min3_i16", "i16", ("i16",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
op("v_max3_i16", "i16", ("i16",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
op("v_med3_i16", "i16", ("i16",) * 3, _med3)
op("v_min3_u16", "u16", ("u16",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c))
op("v_max3_u16", "u16", ("u16",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c))
op("v_med3_u16", "u16", ("u16",) * 3, _med3)

# ---- 64-bit integer
op("v_mov_b64", "b64", ("b64",), lambda a: a)
op("v_lshlrev_b64", "b64", ("u32", "b64"), lambda s, a: a << (s & U32(63)).astype(U64))
op("v_lshrrev_b64", "b64", ("u32", "b64"), lambda s, a: a >> (s & U32(63)).astype(U64))
op("v_ashrrev_i64", "i64", ("u32", "i64"), lambda s, a: a >> (s & U32(63)).astype(I64))
op("v_lshl_add_u64", "u64", ("u64", "u32", "u64"), lambda a, s, c: (a << (s & U32(7)).astype(U64)) + c)

# ---- dot products (VOP3P / VOP2 "c" forms accumulate into vdst)
op("v_dot2_f32_f16", "f32", ("b32", "b32", "f32"),
   lambda a, b, c: _round32(_f64(nx.f16_to_f32(a)) * nx.f16_to_f32(b)
                            + _f64(nx.f16_to_f32(a >> U32(16))) * nx.f16_to_f32(b >> U32(16)) + c))
op("v_dot2c_f32_f16", "f32", ("b32", "b32", "f32"), OPS["v_dot2_f32_f16"][2])
op("v_dot2_f32_bf16", "f32", ("b32", "b32", "f32"),
   lambda a, b, c: _round32(_f64(nx.bf16_to_f32(a)) * nx.bf16_to_f32(b)
                            + _f64(nx.bf16_to_f32(a >> U32(16))) * nx.bf16_to_f32(b >> U32(16)) + c))
op("v_dot2c_f32_bf16", "f32", ("b32", "b32", "f32"), OPS["v_dot2_f32_bf16"][2])
op("v_dot2_i32_i16", "i32", ("b32", "b32", "i32"),
   lambda a, b, c: (_halves_i(a, 16) * _halves_i(b, 16)).sum(-1).astype(I64) + c)
op("v_dot2c_i32_i16", "i32", ("b32", "b32", "i32"), OPS["v_dot2_i32_i16"][2])
op("v_dot2_u32_u16", "u32", ("b32", "b32", "u32"),
   lambda a, b, c: (_halves_u(a, 16) * _halves_u(b, 16)).sum(-1).astype(U64) + c)
op("v_dot4_i32_i8", "i32", ("b32", "b32", "i32"),
   lambda a, b, c: (_halves_i(a, 8) * _halves_i(b, 8)).sum(-1).astype(I64) + c)
op("v_dot4c_i32_i8", "i32", ("b32", "b32", "i32"), OPS["v_dot4_i32_i8"][2])
op("v_dot4_u32_u8", "u32", ("b32", "b32", "u32"),
   lambda a, b, c: (_halves_u(a, 8) * _halves_u(b, 8)).sum(-1).astype(U64) + c)
op("v_dot8_i32_i4", "i32", ("b32", "b32", "i32"),
   lambda a, b, c: (_halves_i(a, 4) * _halves_i(b, 4)).sum(-1).astype(I64) + c)
op("v_dot8c_i32_i4", "i32", ("b32", "b32", "i32"), OPS["v_dot8_i32_i4"][2])
op("v_dot8_u32_u4", "u32", ("b32", "b32", "u32"),
   lambda a, b, c: (_halves_u(a, 4) * _halves_u(b, 4)).sum(-1).astype(U64) + c)

# ops whose vdst is also the accumulator (src2 = vdst)
ACCUMULATING_OPS = {"v_fmac_f32", "v_mac_f32", "v_fmac_f16", "v_mac_f16", "v_fmac_f64", "v_dot2c_f32_f16",
              "v_dot2c_f32_bf16", "v_dot2c_i32_i16", "v_dot4c_i32_i8", "v_dot8c_i32_i4"}


def _halves_i(x, bits):
    x = np.asarray(x).astype(U32)
    n = 32 // bits
    parts = [((x >> U32(bits * i)) & U32((1 << bits) - 1)).astype(I64) for i in range(n)]
    parts = [np.where(p >= (1 << (bits - 1)), p - (1 << bits), p) for p in parts]
    return np.stack(parts, -1)


def _halves_u(x, bits):
    x = np.asarray(x).astype(U32)
    n = 32 // bits
    return np.stack([((x >> U32(bits * i)) & U32((1 << bits) - 1)).astype(U64) for i in range(n)], -1)


def _brev(a):
    a = np.ascontiguousarray(np.asarray(a, U32))
    b = np.unpackbits(a.reshape(-1).view(U8), bitorder="little").reshape(-1, 32)[:, ::-1]
    return np.packbits(b, axis=-1, bitorder="little").view(U32).reshape(a.shape)


def _msb32(a):
    a = np.asarray(a).astype(U64)
    r = np.zeros(a.shape, I64)
    x = a.copy()
    for s in (16, 8, 4, 2, 1):
        m = x >= (U64(1) << U64(s))
        r = np.where(m, r + s, r)
        x = np.where(m, x >> U64(s), x)
    return np.where(a == 0, -1, r)


def _ffbh(a):
    m = _msb32(a)
    return np.where(m < 0, -1, 31 - m).astype(I64).astype(U32)


def _ffbl(a):
    a = np.asarray(a).astype(U64)
    return _msb32(a & (~a + U64(1)) & U64(0xFFFFFFFF)).astype(I64).astype(U32)


def _ffbh_i(a):
    x = np.asarray(a).astype(U32).view(I32).astype(I64)
    y = np.where(x < 0, ~x, x)
    m = _msb32(y)
    return np.where((x == 0) | (x == -1), -1, 31 - m).astype(I64).astype(U32)


def _lerp_u8(a, b, c):
    out = np.zeros(np.broadcast(a, b, c).shape, U32)
    for i in range(4):
        x = (a >> U32(8 * i)) & U32(0xFF)
        y = (b >> U32(8 * i)) & U32(0xFF)
        r = (c >> U32(8 * i)) & U32(1)
        out = out | (((x + y + r) >> U32(1)) << U32(8 * i))
    return out


# ============================================================================ VOPC

_FCMP = {
    "f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
    "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "lg": lambda a, b: (a < b) | (a > b), "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b),
    "nlg": lambda a, b: ~((a < b) | (a > b)),
    "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b),
    "nlt": lambda a, b: ~(a < b), "tru": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
}
_ICMP = {
    "f": _FCMP["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
    "ne": np.not_equal, "ge": np.greater_equal, "t": _FCMP["tru"],
}


def _class_mask(x, mask):
    """v_cmp_class: bit per class (0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0, 6 +0,
    7 +denorm, 8 +normal, 9 +inf)."""
    x = np.asarray(x)
    bits = {F32: (32, 23), F64: (64, 52), F16: (16, 10)}[x.dtype.type]
    nb, mb = bits
    raw = x.view({32: U32, 64: U64, 16: U16}[nb]).astype(U64)
    expmask = ((U64(1) << U64(nb - 1 - mb)) - U64(1)) << U64(mb)
    mant = raw & ((U64(1) << U64(mb)) - U64(1))
    exp = raw & expmask
    neg = ((raw >> U64(nb - 1)) & U64(1)) == 1
    quiet = ((mant >> U64(mb - 1)) & U64(1)) == 1
    nan = (exp == expmask) & (mant != 0)
    inf = (exp == expmask) & (mant == 0)
    zero = (exp == 0) & (mant == 0)
    den = (exp == 0) & (mant != 0)
    norm = (exp != 0) & (exp != expmask)
    # the classes exclude each other and cover every value: the class number is the sum (np.select's
    # choice list of Python ints is numpy's only, not CuPy's)
    conds = [nan & ~quiet, nan & quiet, inf & neg, norm & neg, den & neg, zero & neg, zero & ~neg,
             den & ~neg, norm & ~neg, inf & ~neg]
    cls = sum(c.astype(U32) * U32(i) for i, c in enumerate(conds) if i)
    return ((np.asarray(mask).astype(U32) >> cls.astype(U32)) & U32(1)) == 1


def vopc_spec(name):
    """(src type, compare fn, is_cmpx) of a v_cmp/v_cmpx name."""
    parts = name.split("_")          # v cmp[x] op type
    cmpx = parts[1] == "cmpx"
    opn, ty = parts[2], parts[3]
    if opn == "class":
        return ty, "u32", _class_mask, cmpx
    table = _FCMP if ty.startswith("f") else _ICMP
    if opn not in table:
        raise CompileError(f"{name}: unknown comparison")
    return ty, ty, table[opn], cmpx


# ============================================================================ DPP

def dpp_lanes(ctrl: int):
    """(source lane [64], valid [64]) for a DPP control value."""
    lane = np.arange(64)
    row_base, in_row = lane & ~15, lane & 15
    if ctrl <= 0xFF:
        src = (lane & ~3) | ((ctrl >> (2 * (lane & 3))) & 3)
        return src, np.ones(64, bool)
    if 0x101 <= ctrl <= 0x10F:
        n = ctrl & 0xF
        return np.minimum(lane + n, 63), in_row + n < 16
    if 0x111 <= ctrl <= 0x11F:
        n = ctrl & 0xF
        return np.maximum(lane - n, 0), in_row >= n
    if 0x121 <= ctrl <= 0x12F:
        n = ctrl & 0xF
        return row_base + ((in_row - n) & 15), np.ones(64, bool)
    if ctrl == 0x130:
        return np.minimum(lane + 1, 63), lane < 63
    if ctrl == 0x134:
        return (lane + 1) & 63, np.ones(64, bool)
    if ctrl == 0x138:
        return np.maximum(lane - 1, 0), lane > 0
    if ctrl == 0x13C:
        return (lane - 1) & 63, np.ones(64, bool)
    if ctrl == 0x140:
        return row_base + 15 - in_row, np.ones(64, bool)
    if ctrl == 0x141:
        return (lane & ~7) + 7 - (lane & 7), np.ones(64, bool)
    if ctrl == 0x142:
        return np.maximum(row_base - 1, 0), lane >= 16
    if ctrl == 0x143:
        return np.full(64, 31), lane >= 32
    if 0x150 <= ctrl <= 0x15F:
        # row_newbcast:n (gfx90a+; gfx10's row_share): every lane reads lane n of its own row of 16
        return row_base + (ctrl & 0xF), np.ones(64, bool)
    raise CompileError(f"DPP control {ctrl:#x} is not modelled")


def dpp_write_mask(row_mask: int, bank_mask: int):
    lane = np.arange(64)
    return (((row_mask >> (lane // 16)) & 1) == 1) & (((bank_mask >> ((lane & 15) // 4)) & 1) == 1)


# ============================================================================ the compiler

SRC_ROLES = ("src0", "vsrc1", "src1", "src2", "k")


class VInst:
    """Decoded modifiers of one VALU instruction, normalised over VOP1/2/3, DPP and SDWA."""

    def __init__(self, inst):
        self.inst = inst
        self.name = inst.name
        self.variant = inst.variant
        m = inst.mods
        self.srcs = [o for o in inst.operands if o.role in SRC_ROLES]
        self.vdst = next((o for o in inst.operands if o.role == "vdst"), None)
        self.sdst = next((o for o in inst.operands if o.role == "sdst"), None)
        self.vcc_in = next((o for o in inst.operands if o.role == "vcc" and o.read), None)
        self.clamp = bool(m.get("clamp", 0))
        self.omod = m.get("omod", 0)
        self.op_sel = m.get("op_sel", 0)
        n = len(self.srcs)
        self.neg = [bool(o.neg) for o in self.srcs]
        self.abs = [bool(o.abs) for o in self.srcs]
        self.sext = [bool(o.sext) for o in self.srcs]
        if inst.family == "VOP3" and self.variant != "sdwa":
            # read the raw bits: the decoder drops neg/abs of promoted VOP1/VOP2 opcodes
            w0, w1 = inst.words[0], inst.words[1]
            negf = (w1 >> 29) & 7
            vop3b = self.sdst is not None and not self.name.startswith(("v_cmp", "v_cmpx"))
            absf = 0 if vop3b else (w0 >> 8) & 7
            self.neg = [bool((negf >> i) & 1) for i in range(n)]
            self.abs = [bool((absf >> i) & 1) for i in range(n)]
        self.sdwa = None
        if self.variant == "sdwa":
            self.sdwa = (m.get("src0_sel", 6), m.get("src1_sel", 6), m.get("dst_sel", 6), m.get("dst_unused", 0))
        self.dpp = None
        if self.variant == "dpp":
            self.dpp = (m.get("dpp_ctrl", 0), m.get("row_mask", 15), m.get("bank_mask", 15), m.get("bound_ctrl", 0))


def _apply_neg_abs(raw, bits, neg, abs_):
    if abs_:
        raw = raw & {16: U16(0x7FFF), 32: U32(0x7FFFFFFF), 64: U64(0x7FFFFFFFFFFFFFFF)}[bits]
    if neg:
        raw = raw ^ {16: U16(0x8000), 32: U32(0x80000000), 64: U64(0x8000000000000000)}[bits]
    return raw


def _sdwa_select(raw, sel, sext):
    if sel == 6:
        return raw
    if sel <= 3:
        v = (raw >> U32(8 * sel)) & U32(0xFF)
        if sext:
            v = (v.astype(U8).view(I8).astype(I32).view(U32) if isinstance(v, np.ndarray)
                 else U32(np.int32(np.int8(np.uint8(v))) & 0xFFFFFFFF))
        return v
    v = (raw >> U32(16 * (sel - 4))) & U32(0xFFFF)
    if sext:
        v = (v.astype(U16).view(I16).astype(I32).view(U32) if isinstance(v, np.ndarray)
             else U32(np.int32(np.int16(np.uint16(v))) & 0xFFFFFFFF))
    return v


def make_fetch(vi: VInst, i: int, ty: str, ctx, hi: bool = False):
    """Closure (st, ws) -> typed value of source i (DPP with bound_ctrl: invalid source lanes read 0)."""
    f = _fetch(vi, i, ty, ctx, hi)
    if vi.dpp is not None and i == 0 and vi.dpp[3]:
        return _dpp_zero_fill(vi, f)
    return f


def _fetch(vi: VInst, i: int, ty: str, ctx, hi: bool = False):
    o = vi.srcs[i]
    bits = SIZE[ty]
    neg, abs_ = vi.neg[i], vi.abs[i]
    isfloat = ty.startswith("f")
    if not isfloat:
        neg = abs_ = False
    dt = DT[ty]
    if bits == 64:
        r = read64(o, ctx, ty)
        if not (neg or abs_):
            return lambda st, ws: r(st, ws).view(dt)
        return lambda st, ws: _apply_neg_abs(np.asarray(r(st, ws), U64), 64, neg, abs_).view(dt)
    r = read32(o, ctx, ty if bits == 32 else ty)
    sel = None
    if vi.sdwa is not None and i < 2:
        sel = vi.sdwa[i]
        if sel == 6:
            sel = None
    dpp = vi.dpp if (vi.dpp is not None and i == 0) else None
    base = r
    if dpp is not None:
        base = _dpp_source(r, dpp, ctx)
    if sel is not None:
        sx = vi.sext[i]
        b0 = base
        base = lambda st, ws: _sdwa_select(b0(st, ws), sel, sx)
    if bits == 32:
        if not (neg or abs_):
            if dt is U32:
                return base
            return lambda st, ws: base(st, ws).view(dt)
        return lambda st, ws: _apply_neg_abs(base(st, ws), 32, neg, abs_).view(dt)
    # 16-bit: low or high half
    if o.kind in ("const", "literal"):
        c = U16(o.const_bits(ty) & 0xFFFF)
        c = _apply_neg_abs(c, 16, neg, abs_)
        # the constant as a numpy scalar of the lane type (numpy's stubs type a 0-d index as an array)
        cv: np.generic | np.ndarray = np.asarray(c).view(dt)[()]
        return lambda st, ws: cv
    if hi:
        h = lambda st, ws: (base(st, ws) >> U32(16)).astype(U16)
    else:
        h = lambda st, ws: (base(st, ws) & U32(0xFFFF)).astype(U16)
    if not (neg or abs_):
        return h if dt is U16 else (lambda st, ws: h(st, ws).view(dt))
    return lambda st, ws: _apply_neg_abs(h(st, ws), 16, neg, abs_).view(dt)


def _dpp_source(r, dpp, ctx):
    ctrl, row_mask, bank_mask, bound = dpp
    src, valid = dpp_lanes(ctrl)

    def f(st, ws):
        v = r(st, ws)
        return v[:, src]
    f.dpp_src, f.dpp_valid = src, valid
    return f


def _to_bits(res, ty):
    """Typed result -> raw uint32 (or uint64 for 64-bit types)."""
    dt = DT[ty]
    res = np.asarray(res)
    if res.dtype != dt:
        if ty.startswith("f"):
            res = res.astype(dt)
        else:
            res = res.astype(I64 if ty.startswith("i") else U64).astype(dt) if res.dtype.kind == "f" else res.astype(dt)
    bits = SIZE[ty]
    if bits == 32:
        return res.view(U32)
    if bits == 64:
        return res.view(U64)
    return res.view(U16).astype(U32)


def _float_post(res, ty, vi: VInst, ctx):
    if vi.omod:
        k = {1: 2.0, 2: 4.0, 3: 0.5}[vi.omod]
        if ty == "f32" and X.active() == "cuda":        # (CuPy's float32 multiply: see xp.f32_arith)
            res = X.f32_arith("mul", res, k)
        else:
            res = res * k
        res = res.astype(DT[ty])
    if vi.clamp:
        res = np.clip(np.nan_to_num(res, nan=0.0), 0, 1).astype(DT[ty])
    if ty == "f32" and ctx.flush32:
        res = nx.flush_denorm_f32(res)
    return res


def compile_valu(inst, idx, ctx) -> CompiledStep:
    vi = VInst(inst)
    name = vi.name
    cat = "trans" if name in TRANS else "valu"
    special = SPECIAL.get(name)
    if special is not None:
        fn = special(vi, ctx)
        return CompiledStep(inst, idx, fn, cat)
    if name.startswith(("v_cmp_", "v_cmpx_")):
        return CompiledStep(inst, idx, _compile_vopc(vi, ctx), cat)
    if inst.family == "VOP3P" and name.startswith("v_pk_"):
        return CompiledStep(inst, idx, _compile_packed(vi, ctx), cat)
    spec = OPS.get(name)
    if spec is None or spec[2] is None:
        raise CompileError(f"{name} is not modelled")
    out, ins, fn = spec
    srcs = list(vi.srcs)
    if name in ACCUMULATING_OPS:
        vi.srcs = srcs + [vi.vdst]
        vi.neg = vi.neg + [False]
        vi.abs = vi.abs + [False]
        vi.sext = vi.sext + [False]
    if len(vi.srcs) != len(ins):
        raise CompileError(f"{name}: expected {len(ins)} sources, decoded {len(vi.srcs)}")
    opsel = vi.op_sel if inst.family == "VOP3" else 0
    fetch = [make_fetch(vi, i, t, ctx, hi=bool((opsel >> i) & 1) and SIZE[t] == 16) for i, t in enumerate(ins)]
    writer = _make_writer(vi, out, ctx, dst_hi=bool((opsel >> 3) & 1) and SIZE[out] == 16)
    isf = out.startswith("f")
    post = ((lambda r: _float_post(r, out, vi, ctx))
            if (isf and (vi.clamp or vi.omod or (out == "f32" and ctx.flush32))) else None)
    if len(fetch) == 1:
        f0 = fetch[0]

        def h(st, ws):
            r = fn(f0(st, ws))
            if post is not None:
                r = post(r)
            writer(st, ws, r)
    elif len(fetch) == 2:
        f0, f1 = fetch

        def h(st, ws):
            r = fn(f0(st, ws), f1(st, ws))
            if post is not None:
                r = post(r)
            writer(st, ws, r)
    else:
        f0, f1, f2 = fetch

        def h(st, ws):
            r = fn(f0(st, ws), f1(st, ws), f2(st, ws))
            if post is not None:
                r = post(r)
            writer(st, ws, r)
    return CompiledStep(inst, idx, h, cat)


def _make_writer(vi: VInst, out: str, ctx, dst_hi=False):
    """Closure (st, ws, typed result) writing vdst for the active lanes (DPP/SDWA aware)."""
    d = vi.vdst
    if d is None:
        raise CompileError(f"{vi.name}: no destination")
    if d.kind == "reg" and d.reg.file in ("s", "ttmp", "special"):
        w = swrite(d, ctx)
        return lambda st, ws, r: w(st, ws, np.asarray(_to_bits(r, out)).reshape(-1))
    bits = SIZE[out]
    if bits == 64:
        i = ctx.vindex(d.reg, 2)
        lane_mask = _lane_mask_fn(vi)

        def w64(st, ws, r):
            b = np.asarray(_to_bits(r, out), U64)
            lo = (b & U64(0xFFFFFFFF)).astype(U32)
            hi = (b >> U64(32)).astype(U32)
            if lane_mask is None:
                vwrite(st, ws, i, lo)
                vwrite(st, ws, i + 1, hi)
            else:
                m = lane_mask(st, ws)
                vwrite_masked(st, ws, i, lo, m)
                vwrite_masked(st, ws, i + 1, hi, m)
        return w64
    i = ctx.vindex(d.reg, 1)
    lane_mask = _lane_mask_fn(vi)
    if vi.sdwa is not None and vi.sdwa[2] != 6:
        dst_sel, unused = vi.sdwa[2], vi.sdwa[3]

        def wsdwa(st, ws, r):
            b = _to_bits(r, out)
            old = st.V[i, ws]
            if dst_sel <= 3:
                sh, msk = 8 * dst_sel, 0xFF
            else:
                sh, msk = 16 * (dst_sel - 4), 0xFFFF
            field = (b & U32(msk)) << U32(sh)
            if unused == 2:
                val = (old & U32(~(msk << sh) & 0xFFFFFFFF)) | field
            elif unused == 1:
                signbit = (field >> U32(sh + (7 if msk == 0xFF else 15))) & U32(1)
                above = (U32(0xFFFFFFFF) << U32(sh) << U32(8 if msk == 0xFF else 16)
                         if sh + (8 if msk == 0xFF else 16) < 32 else U32(0))
                val = field | np.where(signbit == 1, above, U32(0))
            else:
                val = field
            m = st.EXEC[ws] if lane_mask is None else lane_mask(st, ws)
            vwrite_masked(st, ws, i, val, m)
        return wsdwa
    if bits == 16 and dst_hi:
        def whi(st, ws, r):
            b = _to_bits(r, out)
            val = (st.V[i, ws] & U32(0xFFFF)) | (b << U32(16))
            vwrite(st, ws, i, val)
        return whi
    if lane_mask is None:
        if bits == 16:
            return lambda st, ws, r: vwrite(st, ws, i, _to_bits(r, out))
        dt = DT[out]
        if dt is U32:
            def w32u(st, ws, r):
                vwrite(st, ws, i, r if (isinstance(r, np.ndarray) and r.dtype == U32) else _to_bits(r, out))
            return w32u
        return lambda st, ws, r: vwrite(st, ws, i, _to_bits(r, out))
    return lambda st, ws, r: vwrite_masked(st, ws, i, _to_bits(r, out), lane_mask(st, ws))


def _lane_mask_fn(vi: VInst):
    """For DPP: closure (st, ws) -> lanes written (EXEC & row/bank masks & valid-or-bound_ctrl)."""
    if vi.dpp is None:
        return None
    ctrl, row_mask, bank_mask, bound = vi.dpp
    src, valid = dpp_lanes(ctrl)
    rb = dpp_write_mask(row_mask, bank_mask)

    def m(st, ws):
        e = st.EXEC[ws]
        ok = valid & e[:, src]
        if bound:
            return e & rb
        return e & rb & ok
    return m


def _dpp_zero_fill(vi: VInst, fetch0):
    """DPP with bound_ctrl: lanes reading an invalid/inactive source read 0."""
    ctrl, row_mask, bank_mask, bound = vi.dpp
    src, valid = dpp_lanes(ctrl)

    def f(st, ws):
        v = fetch0(st, ws)
        ok = valid & st.EXEC[ws][:, src]
        return np.where(ok, v, np.zeros((), v.dtype))
    return f


# ============================================================================ VOPC

def _compile_vopc(vi: VInst, ctx):
    sty, _, cmp, cmpx = vopc_spec(vi.name)
    is_class = "class" in vi.name
    f0 = make_fetch(vi, 0, sty, ctx, hi=bool(vi.op_sel & 1) and SIZE[sty] == 16)
    f1 = make_fetch(vi, 1, "u32" if is_class else sty, ctx, hi=bool(vi.op_sel & 2) and SIZE[sty] == 16)
    dst = vi.sdst or vi.vdst or next((o for o in vi.inst.operands if o.role == "vcc" and o.write), None)
    wmask = mask_writer(dst, ctx) if dst is not None else None
    lane_mask = _lane_mask_fn(vi)

    def h(st, ws):
        with np.errstate(invalid="ignore"):
            r = cmp(f0(st, ws), f1(st, ws))
        e = st.EXEC[ws] if lane_mask is None else lane_mask(st, ws)
        r = np.broadcast_to(r, e.shape) & e
        if wmask is not None:
            wmask(st, ws, r)
        if cmpx:
            st.set_exec(ws, r)
    return h


# ============================================================================ packed (VOP3P v_pk_*)

PK16: dict[str, tuple[str, int, Callable[..., Any]]] = {     # name: (lane type, sources, function)
    "v_pk_add_f16": ("f16", 2, lambda a, b: a + b), "v_pk_mul_f16": ("f16", 2, lambda a, b: a * b),
    "v_pk_fma_f16": ("f16", 3, lambda a, b, c: (_f64(a) * _f64(b) + _f64(c)).astype(F16)),
    "v_pk_max_f16": ("f16", 2, _fmax), "v_pk_min_f16": ("f16", 2, _fmin),
    "v_pk_add_u16": ("u16", 2, lambda a, b: a + b), "v_pk_sub_u16": ("u16", 2, lambda a, b: a - b),
    "v_pk_add_i16": ("i16", 2, lambda a, b: a + b), "v_pk_sub_i16": ("i16", 2, lambda a, b: a - b),
    "v_pk_mul_lo_u16": ("u16", 2, lambda a, b: a * b), "v_pk_mad_u16": ("u16", 3, lambda a, b, c: a * b + c),
    "v_pk_mad_i16": ("i16", 3, lambda a, b, c: a * b + c),
    "v_pk_max_u16": ("u16", 2, np.maximum), "v_pk_min_u16": ("u16", 2, np.minimum),
    "v_pk_max_i16": ("i16", 2, np.maximum), "v_pk_min_i16": ("i16", 2, np.minimum),
    "v_pk_lshlrev_b16": ("u16", 2, lambda s, a: a << (s & U16(15))),
    "v_pk_lshrrev_b16": ("u16", 2, lambda s, a: a >> (s & U16(15))),
    "v_pk_ashrrev_i16": ("i16", 2, lambda s, a: a >> (s & I16(15))),
}
PK32: dict[str, tuple[int, Callable[..., Any]]] = {          # name: (sources, function)
    "v_pk_add_f32": (2, lambda a, b: a + b), "v_pk_mul_f32": (2, lambda a, b: a * b),
    "v_pk_fma_f32": (3, fma32),
}


def _compile_packed(vi: VInst, ctx):
    name, m = vi.name, vi.inst.mods
    op_sel, op_sel_hi = m.get("op_sel", 0), m.get("op_sel_hi", 7)
    neg_lo, neg_hi = m.get("neg_lo", 0), m.get("neg_hi", 0)
    i_d = ctx.vindex(vi.vdst.reg, 2 if name in PK32 or name == "v_pk_mov_b32" else 1)
    if name == "v_pk_mov_b32":
        r0, r1 = read64(vi.srcs[0], ctx), read64(vi.srcs[1], ctx)

        def h(st, ws):
            a, b = np.asarray(r0(st, ws), U64), np.asarray(r1(st, ws), U64)
            lo = (a >> U64(32 * (op_sel & 1))) & U64(0xFFFFFFFF)
            hi = (b >> U64(32 * ((op_sel >> 1) & 1))) & U64(0xFFFFFFFF)
            lo, hi = lo.astype(U32), hi.astype(U32)
            vwrite(st, ws, i_d, lo)
            vwrite(st, ws, i_d + 1, hi)
        return h
    if name in PK32:
        n, fn = PK32[name]
        rd = [_pk32_reader(o, ctx) for o in vi.srcs[:n]]
        clamp = vi.clamp

        def h(st, ws):
            vals = [r(st, ws) for r in rd]   # (lo, hi) uint32 pairs
            los, his = [], []
            for k, (lo, hi) in enumerate(vals):
                a = hi if (op_sel >> k) & 1 else lo
                b = hi if (op_sel_hi >> k) & 1 else lo
                a = _apply_neg_abs(np.asarray(a, U32), 32, (neg_lo >> k) & 1, False).view(F32)
                b = _apply_neg_abs(np.asarray(b, U32), 32, (neg_hi >> k) & 1, False).view(F32)
                los.append(a)
                his.append(b)
            rl, rh = np.asarray(fn(*los), F32), np.asarray(fn(*his), F32)
            if clamp:
                rl, rh = np.clip(np.nan_to_num(rl), 0, 1).astype(F32), np.clip(np.nan_to_num(rh), 0, 1).astype(F32)
            if ctx.flush32:
                rl, rh = nx.flush_denorm_f32(rl), nx.flush_denorm_f32(rh)
            vwrite(st, ws, i_d, rl.view(U32))
            vwrite(st, ws, i_d + 1, rh.view(U32))
        return h
    if name in PK16:
        ty, n, fn = PK16[name]
        dt = DT[ty]
        isf = ty == "f16"
        rd = [read32(o, ctx, "f16" if isf else "b16") for o in vi.srcs[:n]]
        consts = [o.kind in ("const", "literal") for o in vi.srcs[:n]]
        clamp = vi.clamp

        def h(st, ws):
            los, his = [], []
            for k in range(n):
                raw = np.asarray(rd[k](st, ws), U32)
                lo_half = (raw & U32(0xFFFF)).astype(U16)
                # an inline constant is a 16-bit value used for both halves
                hi_half = lo_half if consts[k] else (raw >> U32(16)).astype(U16)
                a = hi_half if (op_sel >> k) & 1 else lo_half
                b = hi_half if (op_sel_hi >> k) & 1 else lo_half
                if isf:
                    a = _apply_neg_abs(a, 16, (neg_lo >> k) & 1, False)
                    b = _apply_neg_abs(b, 16, (neg_hi >> k) & 1, False)
                los.append(np.asarray(a).view(dt))
                his.append(np.asarray(b).view(dt))
            with np.errstate(over="ignore", invalid="ignore"):
                rl, rh = np.asarray(fn(*los)).astype(dt), np.asarray(fn(*his)).astype(dt)
            if clamp and isf:
                rl, rh = np.clip(np.nan_to_num(rl), 0, 1).astype(dt), np.clip(np.nan_to_num(rh), 0, 1).astype(dt)
            val = rl.view(U16).astype(U32) | (rh.view(U16).astype(U32) << U32(16))
            vwrite(st, ws, i_d, val)
        return h
    raise CompileError(f"{name} is not modelled")


def _pk32_reader(o, ctx):
    if o.kind in ("const", "literal"):
        c = U32(o.const_bits("f32") & 0xFFFFFFFF)
        return lambda st, ws: (c, c)
    if is_vreg(o):
        i = ctx.vindex(o.reg, 2)
        return lambda st, ws: (st.V[i, ws], st.V[i + 1, ws])
    code = o.reg.code
    return lambda st, ws: (st.S[code, ws][:, None], st.S[code + 1, ws][:, None])


# ============================================================================ special instructions

def _carry_ops(vi: VInst, ctx):
    name = vi.name
    base = name.replace("_co", "")
    sub = "sub" in base
    rev = "rev" in base
    carry_in = name.startswith(("v_addc", "v_subb"))
    f0, f1 = make_fetch(vi, 0, "u32", ctx), make_fetch(vi, 1, "u32", ctx)
    cin = None
    if carry_in:
        src = vi.vcc_in if vi.vcc_in is not None else (vi.srcs[2] if len(vi.srcs) > 2 else None)
        cin = read_mask(src, ctx) if src is not None else (lambda st, ws: st.read_mask(VCC_LO, ws))
    cout_op = vi.sdst or next((o for o in vi.inst.operands if o.role == "vcc" and o.write), None)
    wmask = mask_writer(cout_op, ctx) if cout_op is not None else None
    writer = _make_writer(vi, "u32", ctx)

    def h(st, ws):
        a = np.asarray(f0(st, ws)).astype(I64)
        b = np.asarray(f1(st, ws)).astype(I64)
        if rev:
            a, b = b, a
        c = cin(st, ws).astype(I64) if cin is not None else 0
        r = a - b - c if sub else a + b + c
        carry = (r < 0) if sub else (r > 0xFFFFFFFF)
        e = st.EXEC[ws]
        writer(st, ws, r.astype(U32))
        if wmask is not None:
            wmask(st, ws, np.broadcast_to(carry, e.shape) & e)
    return h


def _cndmask(vi: VInst, ctx):
    f0, f1 = make_fetch(vi, 0, "u32", ctx), make_fetch(vi, 1, "u32", ctx)
    if vi.inst.family == "VOP3" and vi.variant != "sdwa":
        # float modifiers apply bitwise
        f0 = _bitmods(f0, vi.neg[0], vi.abs[0])
        f1 = _bitmods(f1, vi.neg[1], vi.abs[1])
        sel = read_mask(vi.srcs[2], ctx)
    else:
        src = vi.vcc_in
        sel = read_mask(src, ctx) if src is not None else (lambda st, ws: st.read_mask(VCC_LO, ws))
    writer = _make_writer(vi, "u32", ctx)

    def h(st, ws):
        writer(st, ws, np.where(sel(st, ws), f1(st, ws), f0(st, ws)).astype(U32))
    return h


def _bitmods(f, neg, abs_):
    if not (neg or abs_):
        return f
    return lambda st, ws: _apply_neg_abs(np.asarray(f(st, ws), U32), 32, neg, abs_)


def _readlane(vi: VInst, ctx):
    src = vi.srcs[0]
    i = ctx.vindex(src.reg, 1)
    lane = read32(vi.srcs[1], ctx, lanes=False)
    w = swrite(vi.vdst, ctx)

    def h(st, ws):
        ln = np.broadcast_to(np.asarray(lane(st, ws), U32) & U32(63), st.SCC[ws].shape).astype(np.int64)
        v = st.V[i, ws]
        w(st, ws, v[np.arange(v.shape[0]), ln])
    return h


def _readfirstlane(vi: VInst, ctx):
    o = vi.srcs[0]
    w = swrite(vi.vdst, ctx)
    if not is_vreg(o):
        r = read32(o, ctx, lanes=False)
        return lambda st, ws: w(st, ws, np.broadcast_to(np.asarray(r(st, ws), U32), st.SCC[ws].shape))
    i = ctx.vindex(o.reg, 1)

    def h(st, ws):
        e = st.EXEC[ws]
        first = np.argmax(e, axis=1)   # 0 when EXEC is empty (the hardware reads lane 0)
        v = st.V[i, ws]
        w(st, ws, v[np.arange(v.shape[0]), first])
    return h


def _writelane(vi: VInst, ctx):
    i = ctx.vindex(vi.vdst.reg, 1)
    val = read32(vi.srcs[0], ctx, lanes=False)
    lane = read32(vi.srcs[1], ctx, lanes=False)

    def h(st, ws):
        n = st.SCC[ws].shape
        ln = np.broadcast_to(np.asarray(lane(st, ws), U32) & U32(63), n).astype(np.int64)
        v = np.broadcast_to(np.asarray(val(st, ws), U32), n)
        cols = np.arange(st.W)[ws]
        st.V[i, cols, ln] = v
    return h


def _mbcnt(vi: VInst, ctx):
    hi = vi.name.endswith("hi_u32_b32")
    f0, f1 = make_fetch(vi, 0, "u32", ctx), make_fetch(vi, 1, "u32", ctx)
    writer = _make_writer(vi, "u32", ctx)
    lane = np.arange(64)
    if hi:
        k = np.clip(lane - 32, 0, 32)
    else:
        k = np.minimum(lane, 32)
    masks = np.where(k >= 32, 0xFFFFFFFF, (1 << k) - 1).astype(U32)

    def h(st, ws):
        a = np.asarray(f0(st, ws), U32)
        writer(st, ws, np.bitwise_count(a & masks).astype(U32) + f1(st, ws))
    return h


def _div_scale(vi: VInst, ctx):
    is64 = vi.name.endswith("f64")
    ty = "f64" if is64 else "f32"
    dt = F64 if is64 else F32
    ebias, mbits, scale, ebits_max = (1023, 52, 128, 2047) if is64 else (127, 23, 64, 255)
    f = [make_fetch(vi, k, ty, ctx) for k in range(3)]
    writer = _make_writer(vi, ty, ctx)
    wmask = mask_writer(vi.sdst, ctx) if vi.sdst is not None else None

    def exponent(x):
        raw = np.asarray(x).view(U64 if is64 else U32).astype(U64)
        return ((raw >> U64(mbits)) & U64(ebits_max)).astype(I64)

    def h(st, ws):
        s0, s1, s2 = (np.asarray(g(st, ws), dt) for g in f)
        s0, s1, s2 = np.broadcast_arrays(s0, s1, s2)
        tiny = np.finfo(dt).tiny
        e1, e2 = exponent(s1), exponent(s2)
        with np.errstate(all="ignore"):
            q = s2.astype(F64) / s1.astype(F64) if not is64 else s2 / s1
            r1 = 1.0 / s1.astype(F64) if not is64 else 1.0 / s1
        den = lambda x: (np.abs(x) < tiny) & (x != 0)
        d = s0.copy()
        vcc = np.zeros(s0.shape, bool)
        nan = (s2 == 0) | (s1 == 0)
        c1 = ~nan & (e2 - e1 >= (768 if is64 else 96))
        c2 = ~nan & ~c1 & den(s1)
        c3 = ~nan & ~c1 & ~c2 & den(r1) & den(q)
        c4 = ~nan & ~c1 & ~c2 & ~c3 & den(r1)
        c5 = ~nan & ~c1 & ~c2 & ~c3 & ~c4 & den(q)
        c6 = ~nan & ~c1 & ~c2 & ~c3 & ~c4 & ~c5 & (e2 <= mbits)
        up = np.ldexp(s0, scale).astype(dt)
        down = np.ldexp(s0, -scale).astype(dt)
        eq01 = s0 == s1
        eq02 = s0 == s2
        d = np.where(nan, dt(np.nan), d)
        d = np.where(c1 & eq01, up, d)
        vcc |= c1
        d = np.where(c2, up, d)
        d = np.where(c3 & eq01, up, d)
        vcc |= c3
        d = np.where(c4, down, d)
        d = np.where(c5 & eq02, up, d)
        vcc |= c5
        d = np.where(c6, up, d)
        writer(st, ws, d)
        if wmask is not None:
            wmask(st, ws, vcc & st.EXEC[ws])
    return h


def _div_fmas(vi: VInst, ctx):
    is64 = vi.name.endswith("f64")
    ty = "f64" if is64 else "f32"
    f = [make_fetch(vi, k, ty, ctx) for k in range(3)]
    writer = _make_writer(vi, ty, ctx)
    fma = fma64 if is64 else fma32
    big, sc, mbits, emax = (1023, 128, 52, 2047) if is64 else (127, 64, 23, 255)

    def h(st, ws):
        s0, s1, s2 = (g(st, ws) for g in f)
        r = np.asarray(fma(s0, s1, s2))
        vcc = st.read_mask(VCC_LO, ws)
        raw = np.broadcast_to(np.asarray(s2), r.shape).view(U64 if is64 else U32).astype(U64)
        e2 = ((raw >> U64(mbits)) & U64(emax)).astype(I64)
        scaled = np.where(e2 > big, np.ldexp(r.astype(F64), sc), np.ldexp(r.astype(F64), -sc))
        if not is64:
            # scale the exact fma: recompute in float64 and round once
            exact = _f64(s0) * _f64(s1) + _f64(s2)
            scaled = np.where(e2 > big, np.ldexp(exact, sc), np.ldexp(exact, -sc)).astype(F32)
        r = np.where(vcc, scaled, r).astype(F64 if is64 else F32)
        writer(st, ws, r)
    return h


def _mad_64_32(vi: VInst, ctx):
    signed = vi.name == "v_mad_i64_i32"
    f0 = make_fetch(vi, 0, "i32" if signed else "u32", ctx)
    f1 = make_fetch(vi, 1, "i32" if signed else "u32", ctx)
    f2 = make_fetch(vi, 2, "i64" if signed else "u64", ctx)
    writer = _make_writer(vi, "u64", ctx)
    wmask = mask_writer(vi.sdst, ctx) if vi.sdst is not None else None

    def h(st, ws):
        a, b, c = f0(st, ws), f1(st, ws), f2(st, ws)
        if signed:
            prod = np.asarray(a).astype(I64) * np.asarray(b).astype(I64)
            r = prod.astype(I64) + np.asarray(c).astype(I64)
            # overflow: sign of result differs when adding same-signed values
            carry = ((prod >= 0) == (np.asarray(c) >= 0)) & ((r >= 0) != (prod >= 0))
            res = r.view(U64)
        else:
            prod = np.asarray(a).astype(U64) * np.asarray(b).astype(U64)
            res = prod + np.asarray(c).astype(U64)
            carry = res < prod
        writer(st, ws, res)
        if wmask is not None:
            e = st.EXEC[ws]
            wmask(st, ws, np.broadcast_to(carry, e.shape) & e)
    return h


def _swap(vi: VInst, ctx):
    i = ctx.vindex(vi.vdst.reg, 1)
    j = ctx.vindex(vi.srcs[0].reg, 1)

    def h(st, ws):
        a = st.V[i, ws].copy()
        b = st.V[j, ws].copy()
        vwrite(st, ws, i, b)
        vwrite(st, ws, j, a)
    return h


def _permlane_swap(vi: VInst, ctx):
    """gfx950 v_permlane16_swap / v_permlane32_swap: swap lane groups between vdst and src0."""
    i = ctx.vindex(vi.vdst.reg, 1)
    j = ctx.vindex(vi.srcs[0].reg, 1)
    lane = np.arange(64)
    if vi.name.startswith("v_permlane32"):      # (not '"32" in name': every _b32 name has it)
        # vdst's upper 32 lanes <-> src0's lower 32 lanes
        odd = lane >= 32
        partner = lane ^ 32
    else:
        # odd rows of vdst <-> even rows of src0 (rows of 16 lanes)
        odd = ((lane // 16) & 1) == 1
        partner = lane ^ 16

    lanes: dict = {}        # (odd, partner) on each engine's device

    def h(st, ws):
        o, p = lanes.get(X.active()) or lanes.setdefault(X.active(), (X.from_host(odd), X.from_host(partner)))
        a = st.V[i, ws].copy()
        b = st.V[j, ws].copy()
        new_a = np.where(o, b[:, p], a)
        new_b = np.where(~o, a[:, p], b)
        vwrite(st, ws, i, new_a)
        vwrite(st, ws, j, new_b)
    return h


def _bitop3(vi: VInst, ctx):
    m = vi.inst.mods
    ttbl = m.get("bitop3", None)
    if ttbl is None:
        raise CompileError(f"{vi.name}: the decoder gives no bitop3 truth table")
    is16 = vi.name.endswith("b16")
    f = [make_fetch(vi, k, "u32", ctx) for k in range(3)]
    writer = _make_writer(vi, "u32", ctx)

    def h(st, ws):
        a, b, c = (np.asarray(g(st, ws), U32) for g in f)
        out = np.zeros(np.broadcast_arrays(a, b, c)[0].shape, U32)     # (np.broadcast is numpy's class)
        for t in range(8):
            if (ttbl >> t) & 1:
                x = a if t & 4 else ~a
                y = b if t & 2 else ~b
                z = c if t & 1 else ~c
                out = out | (x & y & z)
        if is16:
            out = out & U32(0xFFFF)
        writer(st, ws, out)
    return h


def _cvt_fp8(vi: VInst, ctx):
    """v_cvt_f32_fp8 / v_cvt_f32_bf8 (byte chosen by SDWA src0_sel or VOP3 op_sel[1:0]) and the
    packed forms v_cvt_pk_f32_fp8/bf8 (word chosen by op_sel[0] / src0_sel)."""
    name = vi.name
    kind = "bf8" if "bf8" in name else "fp8"
    fmt = nx.fp8_format(ctx.target, kind)
    r = read32(vi.srcs[0], ctx)
    packed = "_pk_" in name
    if vi.sdwa is not None:
        sel = vi.sdwa[0]
        byte = sel if sel <= 3 else (2 if sel == 5 else 0)
    else:
        byte = (vi.op_sel & 3) if not packed else 2 * (vi.op_sel & 1)
    if packed:
        i = ctx.vindex(vi.vdst.reg, 2)

        def hp(st, ws):
            raw = np.asarray(r(st, ws), U32)
            lo = nx.fp8_to_f32(raw >> U32(8 * byte), fmt)
            hi = nx.fp8_to_f32(raw >> U32(8 * (byte + 1)), fmt)
            vwrite(st, ws, i, np.asarray(lo, F32).view(U32))
            vwrite(st, ws, i + 1, np.asarray(hi, F32).view(U32))
        return hp
    writer = _make_writer(vi, "f32", ctx)

    def h(st, ws):
        raw = np.asarray(r(st, ws), U32)
        writer(st, ws, nx.fp8_to_f32(raw >> U32(8 * byte), fmt))
    return h


def _cvt_pk_fp8(vi: VInst, ctx):
    """v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32: two f32 -> two 8-bit codes in word op_sel[3] of vdst
    (the other word is kept)."""
    kind = "bf8" if "bf8" in vi.name else "fp8"
    fmt = nx.fp8_format(ctx.target, kind)
    f0, f1 = make_fetch(vi, 0, "f32", ctx), make_fetch(vi, 1, "f32", ctx)
    i = ctx.vindex(vi.vdst.reg, 1)
    hi_word = bool((vi.op_sel >> 3) & 1)
    sat = vi.clamp

    def h(st, ws):
        a = nx.f32_to_fp8(f0(st, ws), fmt, saturate=sat).astype(U32)
        b = nx.f32_to_fp8(f1(st, ws), fmt, saturate=sat).astype(U32)
        word = a | (b << U32(8))
        old = st.V[i, ws]
        val = (old & U32(0x0000FFFF)) | (word << U32(16)) if hi_word else (old & U32(0xFFFF0000)) | word
        vwrite(st, ws, i, val)
    return h


def _cvt_sr_fp8(vi: VInst, ctx):
    raise CompileError(f"{vi.name} (stochastic rounding) is not modelled")


def _fma_mix(vi: VInst, ctx):
    """v_fma_mix_f32 / v_fma_mixlo_f16 / v_fma_mixhi_f16: op_sel_hi[i] = source i is f16 (op_sel[i]
    picks its half), else f32."""
    m = vi.inst.mods
    op_sel, op_sel_hi = m.get("op_sel", 0), m.get("op_sel_hi", 0)
    neg_lo, neg_hi = m.get("neg_lo", 0), m.get("neg_hi", 0)   # neg_hi = abs for mix
    rd = [read32(o, ctx, "f32") for o in vi.srcs[:3]]
    consts = [o.kind in ("const", "literal") for o in vi.srcs[:3]]
    i = ctx.vindex(vi.vdst.reg, 1)
    mode = vi.name

    def val(k, st, ws):
        raw = np.asarray(rd[k](st, ws), U32)
        if (op_sel_hi >> k) & 1:
            if consts[k]:
                h = U16(vi.srcs[k].const_bits("f16") & 0xFFFF)
            else:
                h = ((raw >> U32(16)) if (op_sel >> k) & 1 else raw & U32(0xFFFF)).astype(U16)
            x = nx.f16_to_f32(h).astype(F64)
        else:
            x = raw.view(F32).astype(F64)
        if (neg_hi >> k) & 1:
            x = np.abs(x)
        if (neg_lo >> k) & 1:
            x = -x
        return x

    def h(st, ws):
        a, b, c = (val(k, st, ws) for k in range(3))
        r = fma32(a.astype(F32), b.astype(F32), c.astype(F32))
        if vi.clamp:
            r = np.clip(np.nan_to_num(r), 0, 1).astype(F32)
        if mode == "v_fma_mix_f32":
            vwrite(st, ws, i, np.asarray(r, F32).view(U32))
            return
        hb = nx.f32_to_f16(r).astype(U32)
        old = st.V[i, ws]
        vwrite(st, ws, i, (old & U32(0xFFFF0000)) | hb if mode == "v_fma_mixlo_f16"
               else (old & U32(0xFFFF)) | (hb << U32(16)))
    return h


def _cvt_pkaccum(vi, ctx):
    raise CompileError(f"{vi.name} is not modelled")


def _pk_fmac_f16(vi: VInst, ctx):
    """v_pk_fmac_f16 (VOP2): both halves D = fma(S0, S1, D)."""
    r0, r1 = read32(vi.srcs[0], ctx, "f16"), read32(vi.srcs[1], ctx, "f16")
    i = ctx.vindex(vi.vdst.reg, 1)

    def halves(v):
        v = np.asarray(v, U32)
        return (v & U32(0xFFFF)).astype(U16).view(F16).astype(F64), (v >> U32(16)).astype(U16).view(F16).astype(F64)

    def h(st, ws):
        a0, a1 = halves(r0(st, ws))
        b0, b1 = halves(r1(st, ws))
        c0, c1 = halves(st.V[i, ws])
        lo = (a0 * b0 + c0).astype(F16).view(U16).astype(U32)
        hi = (a1 * b1 + c1).astype(F16).view(U16).astype(U32)
        vwrite(st, ws, i, lo | (hi << U32(16)))
    return h


def _nop(vi, ctx):
    return lambda st, ws: None


SPECIAL = {
    "v_nop": _nop,
    "v_cndmask_b32": _cndmask,
    "v_readlane_b32": _readlane,
    "v_readfirstlane_b32": _readfirstlane,
    "v_writelane_b32": _writelane,
    "v_mbcnt_lo_u32_b32": _mbcnt, "v_mbcnt_hi_u32_b32": _mbcnt,
    "v_div_scale_f32": _div_scale, "v_div_scale_f64": _div_scale,
    "v_div_fmas_f32": _div_fmas, "v_div_fmas_f64": _div_fmas,
    "v_mad_u64_u32": _mad_64_32, "v_mad_i64_i32": _mad_64_32,
    "v_swap_b32": _swap,
    "v_permlane16_swap_b32": _permlane_swap, "v_permlane32_swap_b32": _permlane_swap,
    "v_bitop3_b32": _bitop3, "v_bitop3_b16": _bitop3,
    "v_cvt_f32_fp8": _cvt_fp8, "v_cvt_f32_bf8": _cvt_fp8,
    "v_cvt_pk_f32_fp8": _cvt_fp8, "v_cvt_pk_f32_bf8": _cvt_fp8,
    "v_cvt_pk_fp8_f32": _cvt_pk_fp8, "v_cvt_pk_bf8_f32": _cvt_pk_fp8,
    "v_cvt_sr_fp8_f32": _cvt_sr_fp8, "v_cvt_sr_bf8_f32": _cvt_sr_fp8,
    "v_fma_mix_f32": _fma_mix, "v_fma_mixlo_f16": _fma_mix, "v_fma_mixhi_f16": _fma_mix,
    "v_cvt_pkaccum_u8_f32": _cvt_pkaccum,
    "v_pk_fmac_f16": _pk_fmac_f16,
}
for _n in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32",
           "v_subbrev_co_u32"):
    SPECIAL[_n] = _carry_ops
