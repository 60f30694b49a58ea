"""``isagen.scaled_mm``: the FP8 GEMM (``kernels/gemm_fp8.py``) on torch tensors, as users of
``torch._scaled_mm`` call it, with B stored N×K (C = A·Bᵀ, the GEMM's own layout):

    C = isagen.scaled_mm(a, b, scale_a, scale_b, torch.bfloat16)          # a: M×K, b: N×K, e4m3

``a`` and ``b`` are e4m3 in the target's format (``torch.float8_e4m3fnuz`` on gfx942,
``torch.float8_e4m3fn`` on gfx950), or e5m2 (``float8_e5m2fnuz`` / ``float8_e5m2``: a gradient operand),
either or both; ``scale_a``/``scale_b`` fp32, of shape () or (1,) (per tensor) or
(M, 1) and (1, N) (row-wise: per token, per channel); a per-tensor scale next to a row-wise one is
broadcast to its rows/columns.  ``out_dtype`` bf16, f16 or f32; ``bias`` (N,) of any float type, added
in fp32 after the scales.  Every mistake is one ``LaunchError`` naming the argument.  See docs/gemm.md.

Block scaling (DeepSeek-V3 style, vLLM's / AITER's w8a8 block-scaled GEMM) is asked for explicitly with
``block_size=[128, 128]``: scale_a (M, K/128) per 1x128 of a, scale_b (cdiv(N, 128), K/128) per 128x128
of b, applied per K-block inside the loop (``scaling: block`` of the FP8 GEMM)::

    C = isagen.scaled_mm(a, b, scale_a, scale_b, torch.bfloat16, block_size=[128, 128])

The shapes alone cannot tell the scalings apart (K = 128 makes scale_a (M, 1) either row-wise or
block-wise; N = 4·K/128 ≤ 128 makes scale_b (1, N) either), so without ``block_size`` the scales are
per-tensor or row-wise, and with it they must have the block shapes.
"""

from __future__ import annotations

import torch

from isagen.api import Kernel, torch_dtype
from isagen.errors import LaunchError
from isagen.runtime.backends import choose_backend
from isagen.runtime.kernel_cache import cached_build, call_target
from isagen.targets import TARGETS, get_target
from isagen.tiles.mma import fp8_mfma

SPEC = "gemm_fp8"
OUT_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
K_ALIGN = 16               # fp8 LDS copies move 16-byte runs along K
BLOCK = 128                # block scaling: 1x128 of a, 128x128 of b per scale
N_ALIGN = 4                # a lane stores 4 consecutive columns


def _fail(message: str):
    raise LaunchError(f"scaled_mm: {message}")


def tile_for(m: int) -> dict:
    """Macro tile for M rows: 256x256 above M = 128 (the large-tile GEMM), 128x128 for 65..128, and for
    decode-size M 64x64 (33..64) or 32x64 (1..32, specs/gemm_fp8_decode.yaml) with interleave4 (its
    copies interleave with reads and MFMAs): one tile row covers every token, so B streams from HBM once,
    over N/64 workgroups."""
    if m > 128:
        return {"block_m": 256, "block_n": 256, "schedule": "pingpong8"}
    if m > 64:
        return {"block_m": 128, "block_n": 128, "schedule": "pingpong8"}
    return {"block_m": 64 if m > 32 else 32, "block_n": 64, "schedule": "interleave4"}


def block_tile_for(m: int, target: str) -> dict:
    """Macro tile for block scaling: 128x256 pingpong8 above M = 64 (specs/gemm_fp8_blockscale.yaml: the two
    accumulator sets of a 256x256 tile would not fit the 256 registers of two waves per SIMD); for
    decode-size M the FP8 GEMM's decode tiles (interleave4, one tile row: B streams once), except that on
    gfx950 the 16x16x128 MFMA's interleave4 needs a K-tile of 256 (two K-blocks), so the decode tile
    there is 64x64 with the 32x32x64 MFMA (two 64-k slices per 128-k tile)."""
    if m > 64:
        return {"block_m": 128, "block_n": 256, "schedule": "pingpong8", "mfma": 16}
    if fp8_mfma(get_target(target), 16)[0].k >= BLOCK:        # gfx950's 16x16x128: one slice a K-block
        return {"block_m": 64, "block_n": 64, "schedule": "interleave4", "mfma": 32}
    return {**tile_for(m), "mfma": 16}


def _check_block_scale(name: str, t, shape: tuple, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a float32 torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        _fail(f"{name} must be float32, got {t.dtype}")
    if tuple(t.shape) != shape:
        _fail(f"{name} has shape {tuple(t.shape)}; with block_size [{BLOCK}, {BLOCK}] it must be {shape} ({what})")
    if not bool(torch.isfinite(t).all()):
        _fail(f"{name} holds a non-finite value (inf or nan); scales must be finite")


def scaled_mm_kernel(target: str, a: str, b: str, scaling: str, out_dtype: str, bias: bool, block_m: int,
                     block_n: int, schedule: str, mfma: int = 16) -> Kernel:
    """The built FP8 GEMM for these parameters (built once per process, then reused)."""
    return cached_build(SPEC, target, in_dtype=a, b_dtype=b, scaling=scaling, out_dtype=out_dtype, bias=bias,
                        block_m=block_m, block_n=block_n, schedule=schedule, mfma=mfma)


def _target(target, backend_name: str, device: torch.device) -> str:
    return call_target(target, backend_name, device, "scaled_mm")


KINDS = {"fp8": "e4m3", "bf8": "e5m2"}


def _check_operand(name: str, t, target: str) -> str:
    """The operand's isagen type (fp8 = e4m3, bf8 = e5m2) on ``target``."""
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    mine = {torch_dtype(kind, target): kind for kind in KINDS}
    if t.dtype not in mine:
        other = [(n, kind) for n in TARGETS for kind in KINDS if n != target and t.dtype == torch_dtype(kind, n)]
        why = (f"{t.dtype} is {other[0][0]}'s {KINDS[other[0][1]]} format, not {target}'s" if other
               else f"got {t.dtype}")
        _fail(f"{name} must be {' or '.join(map(str, mine))} (e4m3 or e5m2 on {target}); {why}")
    if t.dim() != 2:
        _fail(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    return mine[t.dtype]


def _check_scale(name: str, t, rows_or_cols: str, size: int, shape: tuple) -> str:
    """'tensor' or 'row' for a scale of shape () / (1,) or ``shape``; the values finite."""
    if not isinstance(t, torch.Tensor):
        _fail(f"{name} must be a float32 torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        _fail(f"{name} must be float32, got {t.dtype}")
    if t.numel() == 1 and t.dim() <= 1:
        kind = "tensor"
    elif tuple(t.shape) == shape:
        kind = "row"
    else:
        _fail(f"{name} has shape {tuple(t.shape)}; it must be () or (1,) (per tensor) or {shape} (one per "
              f"{rows_or_cols}, {rows_or_cols} = {size}); block scales need block_size=[{BLOCK}, {BLOCK}]")
    if not bool(torch.isfinite(t).all()):
        _fail(f"{name} holds a non-finite value (inf or nan); scales must be finite")
    return kind


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16, bias: torch.Tensor | None = None, target: str | None = None,
              backend: str | None = None, block_size=None) -> torch.Tensor:
    """``C = scale_a · scale_b · (a @ b.T) (+ bias)`` in ``out_dtype`` (module docstring): a (M, K) and b
    (N, K) e4m3 in the target's format; K a positive multiple of 16, N a multiple of 4, any M.
    ``block_size=[128, 128]``: block scales (K a multiple of 128; scale_a (M, K/128), scale_b
    (cdiv(N, 128), K/128)).  ``target``: gfx942 or gfx950, default the GPU's architecture on hip, else
    gfx942; ``backend``: hip or emu, as for ``Kernel.run``."""
    try:
        backend_name = choose_backend(backend)
    except LaunchError as e:
        raise LaunchError(f"scaled_mm: {e}") from None
    if not isinstance(a, torch.Tensor):
        _fail(f"a must be a torch.Tensor, got {type(a).__name__}")
    tgt = _target(target, backend_name, a.device)
    kind_a, kind_b = _check_operand("a", a, tgt), _check_operand("b", b, tgt)
    (M, K), (N, Kb) = a.shape, b.shape
    if K != Kb:
        _fail(f"a is {M}x{K} and b is {N}x{Kb} (b is stored N x K: C = a @ b.T): their K differ")
    if K < K_ALIGN or K % K_ALIGN:
        _fail(f"K = {K} must be a positive multiple of {K_ALIGN} (fp8 copies move 16-byte runs along K)")
    if N % N_ALIGN:
        _fail(f"N = {N} must be a multiple of {N_ALIGN} (a lane stores {N_ALIGN} consecutive columns)")
    if out_dtype not in OUT_DTYPES:
        _fail(f"out_dtype must be one of {', '.join(map(str, OUT_DTYPES))}, got {out_dtype}")
    if block_size is not None:
        if not isinstance(block_size, (list, tuple)) or [*block_size] != [BLOCK, BLOCK]:
            _fail(f"block_size must be [{BLOCK}, {BLOCK}] (1x{BLOCK} blocks of a, {BLOCK}x{BLOCK} of b) or None, "
                  f"got {block_size!r}")
        if K % BLOCK:
            _fail(f"K = {K} must be a multiple of {BLOCK} with block_size [{BLOCK}, {BLOCK}] (one scale per "
                  f"{BLOCK}-wide K-block)")
        kb, nb = K // BLOCK, -(-N // BLOCK)
        _check_block_scale("scale_a", scale_a, (M, kb), f"M x K/{BLOCK}: one per row and {BLOCK}-wide K-block")
        _check_block_scale("scale_b", scale_b, (nb, kb), f"cdiv(N, {BLOCK}) x K/{BLOCK}: one per {BLOCK}x{BLOCK} "
                                                         "block of b")
        scaling = "block"
    else:
        kinds = {_check_scale("scale_a", scale_a, "rows", M, (M, 1)),
                 _check_scale("scale_b", scale_b, "columns", N, (1, N))}
        scaling = "row" if "row" in kinds else "tensor"
    if scaling == "row":              # a per-tensor scale next to a row-wise one: broadcast
        scale_a, scale_b = scale_a.reshape(-1, 1).expand(M, 1), scale_b.reshape(1, -1).expand(1, N)
    elif scaling == "tensor":
        scale_a, scale_b = scale_a.reshape(1), scale_b.reshape(1)
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or not bias.is_floating_point() or tuple(bias.shape) != (N,):
            what = (f"shape {tuple(bias.shape)} dtype {bias.dtype}" if isinstance(bias, torch.Tensor)
                    else type(bias).__name__)
            _fail(f"bias must be a float tensor of shape ({N},), got {what}")
        bias = bias.to(torch.float32)
    for name, t in (("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias)):
        if t is not None and t.device != a.device:
            _fail(f"{name} is on {t.device} but a is on {a.device}")
    c = torch.empty(M, N, dtype=out_dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    tile = block_tile_for(M, tgt) if scaling == "block" else tile_for(M)
    kernel = scaled_mm_kernel(tgt, kind_a, kind_b, scaling, OUT_DTYPES[out_dtype], bias is not None, **tile)
    tensors = [a.contiguous(), b.contiguous(), c, scale_a.contiguous(), scale_b.contiguous()]
    if bias is not None:
        tensors.append(bias.contiguous())
    try:
        kernel.run(*tensors, backend=backend_name)
    except LaunchError as e:
        raise LaunchError(f"scaled_mm: {e}") from None
    return c


def output_like(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, block_size=None) -> torch.Tensor:
    """Empty C of the shape and dtype ``scaled_mm`` returns, from the inputs' metadata only (the torch
    op's fake)."""
    return torch.empty(a.shape[0], b.shape[0], dtype=out_dtype, device=a.device)
