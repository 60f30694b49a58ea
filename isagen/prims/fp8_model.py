"""A numpy model of FP8 (e4m3) quantization, written from the formats' definitions: the reference the
quantization kernels are checked against bit for bit (``tests/kernels/test_mem_quant.py``) and the
expression ``isagen run`` evaluates for their specs.

It shares no code with the kernels (which use the hardware's ``v_cvt_pk_fp8_f32``) nor with the
emulator's own conversion tables (``runtime/emu/numerics.py``): the encoder below rounds with integer
arithmetic on the exact binary value, where the emulator searches a sorted table of code values.

**Formats** (8 bits: sign, 4 exponent bits, 3 mantissa bits):

* ``e4m3fnuz`` (gfx942, CDNA3): bias 8, no infinity, no negative zero, 0x80 the only NaN; largest
  finite 0x7f = 1.875 * 2^7 = 240, smallest subnormal 2^-10.
* ``e4m3fn`` (gfx950, CDNA4; OCP 8-bit float spec): bias 7, no infinity, +-0, NaN = 0x7f / 0xff (the
  sign kept); largest finite 0x7e = 1.75 * 2^8 = 448, smallest subnormal 2^-9.

**Rounding**: to nearest, ties to even (the even code), on the float32 value; a value whose rounded
magnitude is above the largest finite one, and +-inf, give NaN (the conversion without saturation:
the kernels saturate before converting, see ``quantize_fp8``); NaN gives the format's NaN; a value
that rounds to zero keeps its sign in ``e4m3fn`` (0x80 = -0) and becomes 0x00 in ``e4m3fnuz``.

**Quantization** (vLLM's convention, float32 arithmetic, each operation rounded once):

* per token: ``amax = max |x|`` over the row (a NaN anywhere makes it NaN: NaN counts above +inf),
  ``scale = max(amax / FP8_MAX, MIN_SCALE)`` (a NaN scale stays NaN), ``q = fp8(clamp(x * (1 / scale)))``;
  ``MIN_SCALE = 1 / (FP8_MAX * 512)`` (vLLM's floor) makes a row of zeros give scale ``MIN_SCALE`` and q = 0.
* static: ``q = fp8(clamp(x * (1 / scale)))`` with the caller's scale.

``clamp`` saturates to +-FP8_MAX (+-inf included) and keeps NaN, as ``torch.clamp`` does.  In the
per-token case it never acts on a finite row: ``|x| * fl(1/fl(amax/M)) <= M (1 + 2^-24)^3``, which
rounds to ``M``.
"""

from __future__ import annotations

import numpy as np

# the format constants (numpy-free, for the generators), re-exported
from isagen.prims.fp8_formats import (  # noqa: F401
    E2M1_EMAX,
    E4M3,
    E4M3_EMAX,
    FP4_MAX,
    FP8_MAX,
    MANT,
    MX_BLOCK,
    fp8_format_of,
)


def min_scale(fmt: str) -> np.float32:
    """vLLM's floor on a dynamic scale: fl(1 / (FP8_MAX * 512))."""
    return np.float32(1.0) / np.float32(FP8_MAX[fmt] * 512.0)


def _largest_code(fmt: str) -> int:
    return 0x7F if E4M3[fmt][1] == "fnuz" else 0x7E


def decode(codes, fmt: str) -> np.ndarray:
    """8-bit codes -> float64 values, from the bit layout."""
    bias, kind = E4M3[fmt]
    c = np.asarray(codes).astype(np.int64) & 0xFF
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> MANT) & 0xF
    m = c & 0x7
    val = np.where(e == 0, m * 2.0 ** (1 - bias - MANT), (8 + m) * np.exp2((e - bias - MANT).astype(np.float64)))
    nan = (c == 0x80) if kind == "fnuz" else ((c & 0x7F) == 0x7F)
    return np.where(nan, np.nan, sign * val)


def encode(x, fmt: str) -> np.ndarray:
    """float32 values -> 8-bit codes, round to nearest even, no saturation (module docstring)."""
    bias, kind = E4M3[fmt]
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.int64)
    neg = (bits >> 31) & 1
    nan = np.isnan(x)
    a = np.abs(x.astype(np.float64))                          # exact
    # the quantum (spacing of codes) at |x|: 2^(e - 3) for normal binades, 2^(1 - bias - 3) below them
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.where(np.isfinite(e), e, 0)
    # log2 of an exact power of two is exact; guard the floor against rounding just below an integer
    e = np.where(np.exp2(e) > a, e - 1, e)
    e = np.where(np.exp2(e + 1) <= a, e + 1, e)
    e = np.where(a > 0, np.maximum(e, 1 - bias), 1 - bias)
    quantum = np.exp2(e - MANT)
    with np.errstate(invalid="ignore"):
        n = np.rint(np.where(np.isfinite(a), a, 0.0) / quantum)    # exact division; rint: ties to even
    # n counts quanta of binade e (n in [8, 16]; n = 16 carries into the next binade), or of the
    # lowest binade and the subnormals below it (n in [0, 16]): either way the code is (e + bias - 1) * 8 + n
    code = ((e + bias - 1) * 8 + n).astype(np.int64)
    overflow = ~np.isfinite(a) | (code > _largest_code(fmt))
    if kind == "fnuz":
        out = np.where(code == 0, 0, code | (neg << 7))
        out = np.where(overflow | nan, 0x80, out)
    else:
        out = code | (neg << 7)
        out = np.where(overflow | nan, 0x7F | (neg << 7), out)
    return out.astype(np.uint8)


def clamp_keep_nan(y: np.ndarray, fmt: str) -> np.ndarray:
    m = np.float32(FP8_MAX[fmt])
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(y), y, np.clip(y, -m, m)).astype(np.float32)


def quantize_fp8(x, inv_scale, fmt: str) -> np.ndarray:
    """codes of fp8(clamp(fl(x * inv_scale))), float32 math (``inv_scale`` broadcasts against ``x``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.asarray(x, np.float32) * np.asarray(inv_scale, np.float32)
    return encode(clamp_keep_nan(y.astype(np.float32), fmt), fmt)


def row_amax(x) -> np.ndarray:
    """max |x| over the last axis as float32, NaN above everything (a NaN element makes the row NaN)."""
    a = np.abs(np.asarray(x, np.float32))
    return np.where(np.isnan(a).any(-1), np.float32(np.nan), np.nanmax(np.where(np.isnan(a), 0, a), -1)
                    ).astype(np.float32)


def per_token_scales(x, fmt: str) -> np.ndarray:
    """float32 scales [rows] = max(fl(amax / FP8_MAX), MIN_SCALE), NaN kept."""
    amax = row_amax(x)
    with np.errstate(over="ignore", invalid="ignore"):
        s = (amax / np.float32(FP8_MAX[fmt])).astype(np.float32)
        return np.where(np.isnan(s), s, np.maximum(s, min_scale(fmt))).astype(np.float32)


def per_token_quant(x, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(codes [rows, hidden] uint8, scales [rows] float32) of dynamic per-token quantization."""
    x = np.asarray(x, np.float32)
    scales = per_token_scales(x, fmt)
    with np.errstate(divide="ignore"):
        inv = (np.float32(1.0) / scales).astype(np.float32)
    return quantize_fp8(x, inv[..., None], fmt), scales


def static_quant(x, scale, fmt: str) -> np.ndarray:
    """codes of static quantization with a float32 ``scale``: fp8(clamp(x * fl(1/scale)))."""
    with np.errstate(divide="ignore"):
        inv = np.float32(1.0) / np.float32(scale)
    return quantize_fp8(x, inv, fmt)


# ------------------------------------------------------------------ torch front ends (isagen run, tests)
def _np32(t):
    return t.detach().cpu().float().numpy()


def torch_per_token_quant(x, target):
    """(the fp8 values as float64 tensor, scales) of ``per_token_quant`` on a torch tensor ``x [rows, hidden]``
    (the expression the ``per_token_quant_fp8`` specs give ``isagen run``)."""
    import torch
    fmt = fp8_format_of(target)
    codes, scales = per_token_quant(_np32(x), fmt)
    return torch.from_numpy(decode(codes, fmt)), torch.from_numpy(scales.astype(np.float64))


def torch_static_quant(x, scale, target):
    """The fp8 values (float64 tensor) of ``static_quant`` for torch tensors ``x`` and ``scale [1]``."""
    import torch
    fmt = fp8_format_of(target)
    return torch.from_numpy(decode(static_quant(_np32(x), _np32(scale).reshape(-1)[0], fmt), fmt))


# ------------------------------------------------------------------ the fused kernels' references
# (RMSNorm and SiLU-and-mul before the quantization: the reduction order and the hardware's rsqrt / exp make y
# differ from float64 in its last fp32 bits, so the codes are compared with a bound, not bit for bit)
FUSED_REL = 1e-5     # the relative error allowed on y and on the scale: ~100 fp32 ulps


_TORCH_TYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def torch_fused_y(op: str, x, weight=None, residual=None, eps=1e-6, dtype="bf16"):
    """(y, h) in float64: op "rms" (h = x + residual rounded to ``dtype``, the kernel's element type,
    y = RMSNorm(h) * weight) or "silu_and_mul" (x [rows, 2, d]: y = silu(gate) * up; h None)."""
    import torch
    if op == "silu_and_mul":
        xd = x.double()
        return torch.nn.functional.silu(xd[:, 0]) * xd[:, 1], None
    h = x if residual is None else (x.float() + residual.float()).to(getattr(torch, _TORCH_TYPES[dtype]))
    hd = h.double()
    return hd * torch.rsqrt((hd * hd).mean(-1, keepdim=True) + eps) * weight.double(), hd


def _fused(op, x, weight, residual, eps, target, dtype):
    import torch
    fmt = fp8_format_of(target)
    y, h = torch_fused_y(op, x, weight, residual, eps, dtype)
    s = torch.clamp_min(y.abs().amax(-1) / FP8_MAX[fmt], float(min_scale(fmt)))
    r = (y / s[:, None]).numpy()
    codes = [encode(v.astype(np.float32), fmt) for v in (r, r * (1 - FUSED_REL), r * (1 + FUSED_REL))]
    vals = [torch.from_numpy(decode(c, fmt)) for c in codes]
    return vals, s, h


def torch_fused_reference(op, x, weight, residual, eps, target, dtype="bf16"):
    """The float64 reference of the fused per-token kernels: (q as values, [residual_out,] scales), q the
    codes of y / scale rounded to nearest even (``encode``)."""
    vals, s, h = _fused(op, x, weight, residual, eps, target, dtype)
    return (vals[0], h, s) if residual is not None else (vals[0], s)


def torch_fused_bound(op, x, weight, residual, eps, target, dtype="bf16"):
    """How far the fused kernels' outputs may be from ``torch_fused_reference``: a code may be the other
    neighbour only where y / scale lies within ``FUSED_REL`` (relative) of a rounding boundary (the
    bound is the distance between the codes there, 0 elsewhere); the scale within ``FUSED_REL``;
    ``residual_out`` exact."""
    vals, s, h = _fused(op, x, weight, residual, eps, target, dtype)
    q_bound = (vals[1] - vals[2]).abs()
    return (q_bound, 0.0, s * FUSED_REL) if residual is not None else (q_bound, s * FUSED_REL)


# ------------------------------------------------------------------ MXFP8 (OCP Microscaling, e4m3 elements)


def mx_scale_codes(x, emax: int = E4M3_EMAX) -> np.ndarray:
    """E8M0 codes [..., n/32] of MX blocks (32 consecutive elements of the last axis), from the OCP MX
    spec (v1.0, 6.3): X = floor(log2(amax)) - emax of the element format (8 for e4m3, 2 for fp4 e2m1: the
    default is MXFP8's), clamped below to -127
    (a block of zeros or of subnormals: code 0, 2^-127); code = X + 127; a block with a NaN or an
    infinity gets the NaN code 0xff.  floor(log2) of a float32 is its unbiased exponent (subnormals:
    below -126, clamped anyway)."""
    a = np.abs(np.asarray(x, np.float32))
    blocks = a.reshape(*a.shape[:-1], -1, MX_BLOCK)
    bad = ~np.isfinite(blocks).all(-1)
    amax = np.where(np.isfinite(blocks), blocks, 0).max(-1).astype(np.float32)
    biased = (amax.view(np.uint32) >> 23).astype(np.int64)           # 0 for zeros and subnormals
    code = np.maximum(biased - emax, 0)
    return np.where(bad, 0xFF, code).astype(np.uint8)


def mxfp8_quant(x) -> tuple[np.ndarray, np.ndarray]:
    """(e4m3fn codes [..., n], E8M0 codes [..., n/32]): each element x / 2^X rounded to nearest even,
    saturated to +-448 (the spec's clamp to the largest normal), NaN kept.  In a block whose scale is
    NaN the elements are don't-cares (the scale makes the block NaN); here they are x * 2^-120 (the
    kernel's: the code 0xff read as X = 120) saturated."""
    x = np.asarray(x, np.float32)
    codes = mx_scale_codes(x)
    shift = np.where(codes == 0xFF, 255 - E4M3_EMAX, codes.astype(np.int64)) - 127        # X
    shift = np.repeat(shift, MX_BLOCK, axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (x.astype(np.float64) * np.exp2(-shift.astype(np.float64))).astype(np.float32)      # exact: 2^-X
    return encode(clamp_keep_nan(y, "e4m3fn"), "e4m3fn"), codes


def torch_mxfp8_quant(x):
    """(the e4m3fn values as float64, the E8M0 codes as float64) of ``mxfp8_quant`` on a torch tensor
    ``x [rows, blocks, 32]`` (the expression the ``mxfp8_quant`` spec gives ``isagen run``)."""
    import torch
    rows = x.shape[0]
    codes, scales = mxfp8_quant(_np32(x).reshape(rows, -1))
    return (torch.from_numpy(decode(codes, "e4m3fn")).reshape(x.shape),
            torch.from_numpy(scales.astype(np.float64)).reshape(x.shape[:-1]))


# ------------------------------------------------------------------ block-scaled GEMM reference
SCALE_BLOCK = 128     # DeepSeek-style block scaling: 1x128 of A, 128x128 of B per fp32 scale


def torch_block_scaled_mm(A, B, scale_a, scale_b):
    """float64 ``C[m][n] = sum_kb scale_a[m][kb] * scale_b[n/128][kb] * sum_{k in kb} A[m][k] * B[n][k]`` for
    A (M×K), B (N×K) (any float type, fp8 included), scale_a (M, K/128), scale_b (cdiv(N, 128), K/128): the
    expression the ``gemm_fp8_blockscale`` spec gives ``isagen run``."""
    import torch
    a, b = A.double(), B.double()
    n = b.shape[0]
    kb = a.shape[1] // SCALE_BLOCK
    sa = scale_a.double()
    sb = scale_b.double().repeat_interleave(SCALE_BLOCK, dim=0)[:n]
    parts = torch.einsum("mbk,nbk->bmn", a.reshape(a.shape[0], kb, SCALE_BLOCK), b.reshape(n, kb, SCALE_BLOCK))
    return torch.einsum("bmn,mb,nb->mn", parts, sa, sb)


# ------------------------------------------------------------------ MXFP4 (OCP Microscaling, fp4 e2m1 elements)
# fp4 e2m1 (OCP MX v1.0, 5.3.3): sign, 2 exponent bits (bias 1), 1 mantissa bit; no inf, no NaN.  Codes 0..7
# are the magnitudes below (code 1 = 0.5 the one subnormal), bit 3 the sign (8 = -0).
FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def decode_fp4(codes) -> np.ndarray:
    """float64 values of fp4 e2m1 codes (the low 4 bits of each entry)."""
    c = np.asarray(codes).astype(np.int64) & 0xF
    return np.where(c & 8, -1.0, 1.0) * FP4_VALUES[c & 7]


def encode_fp4(y) -> np.ndarray:
    """fp4 e2m1 codes (uint8, 0..15) of float values: the nearest of the 8 magnitudes, a tie going to the
    even code (round to nearest even), magnitudes above 6 (and +-inf) saturated to 6 (OCP MX: fp4 has no
    inf; conversions saturate), the sign kept (also for 0: -0 is code 8).  NaN has no fp4 code: it gives
    6 with its sign bit (what the kernel's ``v_min_f32`` leaves; only in blocks whose E8M0 scale is the
    NaN code 0xff, where the elements are don't-cares)."""
    y = np.asarray(y, np.float32)
    a = np.abs(y.astype(np.float64))
    a = np.where(np.isnan(a), FP4_MAX, np.minimum(a, FP4_MAX))
    d = np.abs(a[..., None] - FP4_VALUES)
    best = d.min(-1, keepdims=True)
    tied = d == best                                  # one or two neighbours
    even = tied & (np.arange(8) % 2 == 0)
    pick = np.where(even.any(-1, keepdims=True), even, tied)
    code = pick.argmax(-1).astype(np.uint8)
    return code | (np.signbit(y).astype(np.uint8) << 3)


def pack_fp4(codes) -> np.ndarray:
    """Two fp4 codes a byte along the last axis: element 2i in bits 3:0, element 2i+1 in bits 7:4
    (little-endian nibbles: element k of a dword at bits 4k+3:4k, the order the gfx950 f8f6f4 MFMAs read
    fp4 K-elements in)."""
    c = np.asarray(codes, np.uint8)
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def unpack_fp4(packed) -> np.ndarray:
    """Inverse of ``pack_fp4``: codes [..., 2n]."""
    p = np.asarray(packed, np.uint8)
    return np.stack([p & 0xF, p >> 4], axis=-1).reshape(*p.shape[:-1], -1)


def mxfp4_quant(x) -> tuple[np.ndarray, np.ndarray]:
    """(packed fp4 e2m1 [..., n/2] (``pack_fp4``), E8M0 codes [..., n/32]) of MXFP4 (OCP MX v1.0): per block
    of 32, X = floor(log2(amax)) - 2 (at least -127; 0xff for a block with a NaN or an inf), each element
    x / 2^X (exact) rounded to nearest even and saturated to +-6 (``encode_fp4``).  In a NaN-scale block the
    elements are x * 2^-126 (the kernel reads the code 0xff as X = 126), encoded the same way."""
    x = np.asarray(x, np.float32)
    codes = mx_scale_codes(x, E2M1_EMAX)
    shift = np.where(codes == 0xFF, 255 - E2M1_EMAX, codes.astype(np.int64)) - 127        # X
    shift = np.repeat(shift, MX_BLOCK, axis=-1)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        y = np.ldexp(x, (-shift).astype(np.int32)).astype(np.float32)     # exact (or underflow to +-0)
    return pack_fp4(encode_fp4(y)), codes


def torch_mxfp4_quant(x):
    """(the packed fp4 bytes as float64 [rows, blocks, 16], the E8M0 codes as float64 [rows, blocks]) of
    ``mxfp4_quant`` on a torch tensor ``x [rows, blocks, 32]`` (the expression the ``mxfp4_quant`` spec gives
    ``isagen run``: the kernel's bytes must equal these; ``decode_fp4(unpack_fp4(q))`` gives the values)."""
    import torch
    rows = x.shape[0]
    packed, scales = mxfp4_quant(_np32(x).reshape(rows, -1))
    return (torch.from_numpy(packed.astype(np.float64)).reshape(*x.shape[:-1], x.shape[-1] // 2),
            torch.from_numpy(scales.astype(np.float64)).reshape(x.shape[:-1]))
