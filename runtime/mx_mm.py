"""``isagen.mx_mm``: the MX GEMM of gfx950 (``kernels/gemm_mx.py``) on torch tensors, B stored N×K:

    C = isagen.mx_mm(a, b, scale_a, scale_b, torch.bfloat16)                       # MXFP8 (e4m3)
    C = isagen.mx_mm(a, b, scale_a, scale_b, torch.bfloat16, a_format="e2m1", b_format="e2m1")   # MXFP4

``C = (a · 2^(scale_a-127)) @ (b · 2^(scale_b-127)).T``, each scale byte applying to 32 consecutive
elements of K of its row.  Formats: ``e4m3`` / ``e5m2`` (MXFP8: ``torch.float8_e4m3fn`` /
``torch.float8_e5m2`` tensors of shape (M, K), (N, K)) and ``e2m1`` (MXFP4: uint8 tensors of shape
(M, K/2), (N, K/2), two elements per byte along K, the low nibble the even k; a
``torch.float4_e2m1fn_x2`` tensor is taken as its bytes).  ``scale_a`` (M, K/32) and ``scale_b``
(N, K/32) uint8 E8M0 (or ``torch.float8_e8m0fnu``).  ``out_dtype`` bf16, f16 or f32.  K a positive
multiple of 128, N of 4, any M (M of 1..64 get the decode tiles).  gfx950 only: a gfx942 target is
refused with the reason.  Every mistake is one ``LaunchError`` naming the argument.  See docs/gemm.md.

``mx_dequantize(x, scale, fmt) -> float64`` the reference: the elements' values times their blocks'
scales (numpy/torch only, no kernel; ``isagen run``'s spec references use it).
"""

from __future__ import annotations

import torch

from isagen.api import Kernel
from isagen.errors import LaunchError
from isagen.runtime.backends import choose_backend
from isagen.runtime.kernel_cache import cached_build, call_target
from isagen.targets import TARGETS

SPEC = "gemm_mxfp8"             # the generator gemm_mx, its other formats and tiles by overrides
OUT_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
FORMATS = ("e4m3", "e5m2", "e2m1")
K_ALIGN = 128              # the K of one scaled MFMA
N_ALIGN = 4                # a lane stores 4 consecutive columns
BLOCK = 32
_FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
# OCP MX v1.0 E2M1: codes 0..7 are +0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign
# the targets with block-scaled MFMAs (v_mfma_scale_*), from the target table
MX_TARGETS = [t.name for t in TARGETS.values() if any(i.mnemonic.startswith("v_mfma_scale_") for i in t.mfmas)]
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _fail(message: str):
    raise LaunchError(f"mx_mm: {message}")


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


def mx_dequantize(x: torch.Tensor, scale: torch.Tensor, fmt: str) -> torch.Tensor:
    """float64 values of an MX tensor: ``x`` (rows, K) fp8 or (rows, K/2) packed e2m1 bytes, ``scale``
    (rows, K/32) E8M0 bytes (255 gives NaN)."""
    if fmt == "e2m1":
        raw = _bytes(x).to(torch.int64)
        codes = torch.stack([raw & 15, raw >> 4], dim=-1).reshape(raw.shape[0], -1)
        vals = torch.tensor(_E2M1, dtype=torch.float64, device=codes.device)[codes]
    else:
        vals = x.view(_FP8[fmt]).double() if x.dtype == torch.uint8 else x.double()
    e = _bytes(scale).to(torch.float64)
    factor = torch.where(e == 255, torch.nan, torch.exp2(e - 127))
    return vals * factor.repeat_interleave(BLOCK, dim=1)[:, :vals.shape[1]]


def tile_for(m: int) -> dict:
    """The FP8 GEMM's tile choice (``runtime/scaled_mm.py``): 256x256 above M = 128, 128x128 for 65..128,
    and interleave4 decode tiles of 64x64 (33..64) or 32x64 (1..32)."""
    if m > 128:
        return {"block_m": 256, "block_n": 256, "schedule": "pingpong8"}
    if m > 64:
        return {"block_m": 128, "block_n": 128, "schedule": "pingpong8"}
    return {"block_m": 64 if m > 32 else 32, "block_n": 64, "schedule": "interleave4"}


def mx_mm_kernel(target: str, a_format: str, b_format: str, out_dtype: str, block_m: int, block_n: int,
                 schedule: str) -> Kernel:
    return cached_build(SPEC, target, a_format=a_format, b_format=b_format, out_dtype=out_dtype,
                        block_m=block_m, block_n=block_n, schedule=schedule)


def _check_operand(name: str, t, fmt: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if fmt == "e2m1":
        ok = t.dtype == torch.uint8 or getattr(torch, "float4_e2m1fn_x2", None) == t.dtype
        if not ok:
            _fail(f"{name} must be uint8 (two e2m1 per byte, the low nibble the even k) or "
                  f"float4_e2m1fn_x2 for format e2m1, got {t.dtype}")
    elif t.dtype != _FP8[fmt]:
        _fail(f"{name} must be {_FP8[fmt]} for format {fmt} (the OCP encoding of {', '.join(MX_TARGETS)}), "
              f"got {t.dtype}")
    if t.dim() != 2:
        _fail(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    return _bytes(t) if fmt == "e2m1" else t


def _check_scale(name: str, t, rows: int, kb: int, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a uint8 (E8M0) torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.uint8 and t.dtype != getattr(torch, "float8_e8m0fnu", None):
        _fail(f"{name} must be uint8 E8M0 exponents (or float8_e8m0fnu), got {t.dtype}")
    if tuple(t.shape) != (rows, kb):
        _fail(f"{name} has shape {tuple(t.shape)}; it must be ({rows}, {kb}): one E8M0 byte per {BLOCK} "
              f"elements of K for each {what}")
    return _bytes(t)


def mx_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
          out_dtype: torch.dtype = torch.bfloat16, *, a_format: str = "e4m3", b_format: str | None = None,
          target: str | None = None, backend: str | None = None) -> torch.Tensor:
    """``C = (a·2^(scale_a-127)) @ (b·2^(scale_b-127)).T`` in ``out_dtype`` (module docstring).
    ``b_format`` defaults to ``a_format``; ``target`` gfx950 (the default on the emulator; a hip GPU's
    own architecture otherwise); ``backend`` hip or emu, as for ``Kernel.run``."""
    try:
        backend_name = choose_backend(backend)
    except LaunchError as e:
        raise LaunchError(f"mx_mm: {e}") from None
    b_format = a_format if b_format is None else b_format
    for name, f in (("a_format", a_format), ("b_format", b_format)):
        if f not in FORMATS:
            _fail(f"{name} must be one of {', '.join(FORMATS)}, got {f!r}")
    if (a_format == "e2m1") != (b_format == "e2m1"):
        _fail(f"a_format {a_format} with b_format {b_format}: e2m1 (MXFP4) pairs only with e2m1")
    if not isinstance(a, torch.Tensor):
        _fail(f"a must be a torch.Tensor, got {type(a).__name__}")
    if target is None and backend_name == "emu":
        target = MX_TARGETS[0]
    tgt = call_target(target, backend_name, a.device, "mx_mm")
    if tgt not in MX_TARGETS:
        _fail(f"target {tgt} has no block-scaled MFMA (v_mfma_scale_*): MX GEMMs need {' or '.join(MX_TARGETS)}; "
              "use isagen.scaled_mm (per-tensor or row-wise fp32 scales) there")
    a = _check_operand("a", a, a_format)
    b = _check_operand("b", b, b_format)
    epb = 2 if a_format == "e2m1" else 1
    (M, Ka), (N, Kb) = a.shape, b.shape
    if Ka != Kb:
        _fail(f"a is {M}x{Ka * epb} and b is {N}x{Kb * epb} (b is stored N x K: C = a @ b.T): their K differ")
    K = Ka * epb
    if K < K_ALIGN or K % K_ALIGN:
        _fail(f"K = {K} must be a positive multiple of {K_ALIGN} (the K of one scaled MFMA)")
    if N % N_ALIGN:
        _fail(f"N = {N} must be a multiple of {N_ALIGN} (a lane stores {N_ALIGN} consecutive columns)")
    if out_dtype not in OUT_DTYPES:
        _fail(f"out_dtype must be one of {', '.join(map(str, OUT_DTYPES))}, got {out_dtype}")
    sa = _check_scale("scale_a", scale_a, M, K // BLOCK, "row of a")
    sb = _check_scale("scale_b", scale_b, N, K // BLOCK, "row of b (column of C)")
    for name, t in (("b", b), ("scale_a", sa), ("scale_b", sb)):
        if t.device != a.device:
            _fail(f"{name} is on {t.device} but a is on {a.device}")
    c = torch.empty(M, N, dtype=out_dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    kernel = mx_mm_kernel(tgt, a_format, b_format, OUT_DTYPES[out_dtype], **tile_for(M))
    try:
        kernel.run(a.contiguous(), b.contiguous(), c, sa.contiguous(), sb.contiguous(), backend=backend_name)
    except LaunchError as e:
        raise LaunchError(f"mx_mm: {e}") from None
    return c


def output_like(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, **_) -> torch.Tensor:
    """Empty C of the shape and dtype ``mx_mm`` returns (the torch op's fake)."""
    return torch.empty(a.shape[0], b.shape[0], dtype=out_dtype, device=a.device)
