"""Launchers for AMD AITER's prebuilt assembly kernels, run on isagen's emulator.

AITER (https://github.com/ROCm/aiter, MIT) ships hand-written gfx942/gfx950 kernels as code objects
(``hsa/<arch>/<family>/*.co``) and launches them from C++ with a packed argument struct passed as raw
kernarg bytes (``HIP_LAUNCH_PARAM_BUFFER_POINTER``).  Each launcher here packs that struct byte for
byte, and computes the grid and block, as AITER's C++ launcher does, so that the emulator runs the
kernel exactly as a user's MI300X would.

Families:

* bf16 GEMM, ``bf16gemm_fp32bf16_tn_<tileM>x<tileN>_*`` (:func:`gemm_a16w16`): ``out[M, N] = A[M, K] @
  B[N, K]^T`` with bf16 inputs and fp32 (or bf16) output, split-K.  Source of the struct, the checks,
  the grid and the split-K choice: ``csrc/py_itfs_cu/asm_gemm_a16w16.cu`` (``KernelArgs``,
  ``get_heuristic_kernel``, ``gemm_a16w16_asm``) and ``aiter/ops/gemm_op_a16w16.py`` (the
  semaphore workspace) at AITER commit ``e4048607a535ace3a2b51ded31b1c8c2d45c0879``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from isagen.errors import LaunchError
from isagen.objects.codeobject import read_code_object

# AITER commit the layouts below were read from
AITER_COMMIT = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"

# ---------------------------------------------------------------------------- bf16 GEMM (a16w16)
#
# struct __attribute__((packed)) KernelArgs  (csrc/py_itfs_cu/asm_gemm_a16w16.cu): every field sits in a
# 16-byte slot -- a pointer followed by p2 (two unsigned ints), a 4-byte value followed by p3 (three).
# (name, kind): "p" = 8-byte pointer, "f" = float, "u" = unsigned int.
BF16GEMM_ARG_FIELDS: tuple[tuple[str, str], ...] = (
    ("ptr_D", "p"), ("ptr_C", "p"), ("ptr_A", "p"), ("ptr_B", "p"),
    ("alpha", "f"), ("beta", "f"),
    ("stride_D0", "u"), ("stride_D1", "u"), ("stride_C0", "u"), ("stride_C1", "u"),
    ("stride_A0", "u"), ("stride_A1", "u"), ("stride_B0", "u"), ("stride_B1", "u"),
    ("M", "u"), ("N", "u"), ("K", "u"), ("splitk", "u"), ("is_out_b16", "u"),
    ("ptr_Bias", "p"), ("add_bias", "u"), ("ptr_semaphore", "p"),
)
SLOT = 16
BF16GEMM_ARGS_SIZE = SLOT * len(BF16GEMM_ARG_FIELDS)      # sizeof(KernelArgs) = 352

# aiter/ops/gemm_op_a16w16.py: _SEMA_SHAPE = (16, 64) uint32, zero-initialised, one per stream; the
# split-K kernels count arrivals per output tile in it and the last workgroup reduces (and resets it).
SEMAPHORE_SHAPE = (16, 64)
MAX_SPLITK = 16               # get_heuristic_kernel: min(splitk, 16, K / subK)
WORKGROUP_SIZE = 256          # launch_kernel({..., gdx, gdy, gdz, 256, 1, 1, ...})


def pack_bf16gemm_args(**fields) -> bytes:
    """The bytes of AITER's ``KernelArgs`` for the bf16 GEMM; missing fields are 0 (``KernelArgs args = {}``)."""
    out = pack_slots(BF16GEMM_ARG_FIELDS, **fields)
    assert len(out) == BF16GEMM_ARGS_SIZE
    return out


@dataclass(frozen=True)
class Bf16GemmConfig:
    """One row of AITER's ``hsa/<arch>/bf16gemm/bf16gemm_fp32bf16.csv`` (the fields the launcher reads)."""

    name: str            # kernel file stem, e.g. bf16gemm_fp32bf16_tn_64x64_splitk_clean
    tile_m: int
    tile_n: int
    b_preshuffle: bool
    splitk: bool         # the CSV's splitK column: 1 for the ``*_clean`` kernels, which take split-K > 1 only
    sub_k: int = 64

    @classmethod
    def from_name(cls, name: str) -> Bf16GemmConfig:
        """The CSV row of a kernel from its name (the gfx942 and gfx950 CSVs agree with this rule)."""
        stem = name.rsplit("/", 1)[-1].removesuffix(".co")
        m = re.fullmatch(r"bf16gemm_(?:fp32bf16|bf16)_tn_(\d+)x(\d+)(?:_(\w+))?", stem)
        if not m:
            raise LaunchError(f"'{name}' is not an AITER bf16gemm_fp32bf16_tn_<M>x<N>_* or "
                              f"bf16gemm_bf16_tn_<M>x<N> kernel")
        rest = m.group(3) or ""
        # the CSV's bPreshuffle column: "bshuffle" (fp32bf16 kernels) or "bpreshuffle" (gfx950's 256x256)
        return cls(stem, int(m.group(1)), int(m.group(2)), "shuffle" in rest, rest.endswith("clean"))


def bf16gemm_splitk(cfg: Bf16GemmConfig, M: int, N: int, K: int, splitk: int | None, num_cu: int = 304) -> int:
    """Split-K as ``get_heuristic_kernel`` chooses it for a named kernel (``splitk=None``: its automatic
    choice, which depends on the device's CU count -- 304 on MI300X)."""
    if K % 64:
        raise LaunchError(f"bf16 GEMM: K={K} must be divisible by 64 (AITER: 'Kdim must be divisible by 64')")
    if N % cfg.tile_n:
        raise LaunchError(f"bf16 GEMM: N={N} must be a multiple of the kernel's tileN={cfg.tile_n}")
    if splitk is not None and splitk >= 0:
        split = min(splitk, MAX_SPLITK, K // cfg.sub_k)
        if not ((split > 1 and cfg.splitk) or (split <= 1 and not cfg.splitk)):
            raise LaunchError(f"bf16 GEMM: split-K {split} cannot be run by {cfg.name} (its CSV splitK="
                              f"{int(cfg.splitk)}: {'> 1' if cfg.splitk else '<= 1'} only) with K={K}")
        return split
    split = 1
    if cfg.splitk and K // cfg.sub_k >= 2:
        tiles = -(-M // cfg.tile_m) * (N // cfg.tile_n)
        split = max(2, min(num_cu // tiles, MAX_SPLITK, K // cfg.sub_k))
    return split


def bf16gemm_grid(cfg: Bf16GemmConfig, M: int, N: int, split: int) -> tuple[int, int, int]:
    """``gdx = ceil(N / tileN), gdy = ceil(M / tileM), gdz = split``; AITER caps gdx*gdy at 1024 for split-K
    (the semaphore has 16*64 counters)."""
    gdx, gdy = -(-N // cfg.tile_n), -(-M // cfg.tile_m)
    if split > 1 and gdx * gdy > SEMAPHORE_SHAPE[0] * SEMAPHORE_SHAPE[1]:
        raise LaunchError(f"bf16 GEMM: gdx * gdy ({gdx * gdy}) must be <= 16*64 with split-K")
    return gdx, gdy, split


def _fit_kernarg(mod, kname: str, raw: bytes) -> bytes:
    """``raw`` cut to the kernel's kernarg segment when what lies past it is all zeros (AITER's launchers
    pass their whole struct, some kernels declare a shorter segment); else unchanged, so that the
    emulator refuses a struct that really is too long."""
    seg = mod._kernarg_size(mod.kernel(kname)) or len(raw)
    return raw[:seg] if len(raw) > seg and not any(raw[seg:]) else raw


def _bf16_result(dev, buf, M: int, N: int):
    """The M x N bf16 matrix in device buffer ``buf`` as a torch tensor."""
    import torch
    return torch.from_numpy(dev.from_device(buf, (M, N), np.uint16).astype(np.int16)).view(torch.bfloat16)


def gemm_a16w16(A, B, co: bytes | str, *, splitk: int | None = None, out_dtype="float32", device=None,
                sanitize: bool = True, on_error: str = "raise", out_fill: float = float("nan"),
                num_cu: int = 304, trace=None):
    """``A[M, K] @ B[N, K]^T`` through AITER's bf16 GEMM kernel ``co`` (its bytes or a path) on the emulator.

    ``A`` and ``B`` are bf16 (torch tensors, CPU) with unit stride in K.  Arguments, grid (``ceil(N/tileN),
    ceil(M/tileM), splitK``) and block (256) as ``gemm_a16w16_asm`` computes them; D is ``M x N``, not
    padded (``tuned_gemm.asm_gemm`` allocates it with ``torch.empty``: here it starts as ``out_fill``).
    Returns ``(out, reports, module)``: the output as a torch tensor, the emulator's reports
    (``on_error="collect"``) and the loaded module (``module.last_stats``).  ``trace``: the emulator's
    trace hook for this launch (``Module.trace``; the timing model's instruction streams).
    """
    import torch

    from isagen.runtime.emu import Device

    if isinstance(co, str):
        name = co
        with open(co, "rb") as f:
            co = f.read()
    else:
        name = ""
    if A.dtype != torch.bfloat16 or B.dtype != torch.bfloat16:
        raise LaunchError(f"bf16 GEMM: A and B must be bf16, got {A.dtype} and {B.dtype}")
    if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[1]:
        raise LaunchError(f"bf16 GEMM: A must be M x K and B N x K, got {tuple(A.shape)} and {tuple(B.shape)}")
    if A.stride(1) != 1 or B.stride(1) != 1:
        raise LaunchError("bf16 GEMM: A and B must be contiguous in K")
    odt = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if str(out_dtype).removeprefix("torch.") not in odt:
        raise LaunchError(f"bf16 GEMM: out_dtype must be float32 or bfloat16, not {out_dtype}")
    out_t = odt[str(out_dtype).removeprefix("torch.")]
    # the processor the code object was built for (its ELF e_flags), not a name spelled here
    dev = device if device is not None else Device(read_code_object(co).mach, sanitize=sanitize)
    mod = dev.load_module(co)
    mod.trace = trace
    kernels = list(mod.co.kernels)
    if len(kernels) != 1:
        raise LaunchError(f"bf16 GEMM: expected one kernel in the code object, found {kernels}")
    kname = kernels[0]
    m = re.search(r"bf16gemm_(?:fp32bf16|bf16)_tn_\w+?(?=E$|$)", kname)
    cfg = Bf16GemmConfig.from_name(m.group(0) if m else name)
    if cfg.b_preshuffle:
        raise LaunchError(f"bf16 GEMM: {cfg.name} takes a pre-shuffled B; this launcher passes B as N x K")
    M, K = A.shape
    N = B.shape[0]
    split = bf16gemm_splitk(cfg, M, N, K, splitk, num_cu)
    grid = bf16gemm_grid(cfg, M, N, split)
    esize = 4 if out_t == torch.float32 else 2
    d = dev.to_device(torch.full((M, N), out_fill, dtype=out_t), "D")
    a = dev.to_device(A.contiguous() if A.stride(0) != K else A, "A")
    b = dev.to_device(B.contiguous() if B.stride(0) != K else B, "B")
    sem = dev.to_device(np.zeros(SEMAPHORE_SHAPE, np.uint32), "semaphore") if split > 1 else None
    raw = pack_bf16gemm_args(
        ptr_D=int(d), ptr_C=0, ptr_A=int(a), ptr_B=int(b), alpha=1.0, beta=0.0,
        stride_A0=K * 2, stride_B0=K * 2, stride_C0=N * esize, stride_D0=N * esize,
        M=M, N=N, K=K, splitk=split, is_out_b16=int(out_t == torch.bfloat16), ptr_Bias=0, add_bias=0,
        ptr_semaphore=int(sem) if sem is not None else 0)
    # AITER passes sizeof(KernelArgs) = 352 bytes; the pf3 kernels declare a 336-byte segment (no
    # ptr_semaphore: they run split-K 1 only): _fit_kernarg leaves off the tail they never read
    raw = _fit_kernarg(mod, kname, raw)
    try:
        reports = mod.launch(kname, grid=grid, block=(WORKGROUP_SIZE, 1, 1), kernarg=raw, on_error=on_error,
                             sanitize=sanitize)
        if out_t == torch.float32:
            out = torch.from_numpy(dev.from_device(d, (M, N), np.float32).copy())
        else:
            out = _bf16_result(dev, d, M, N)
        if sem is not None:
            mod.last_semaphore = dev.from_device(sem, SEMAPHORE_SHAPE, np.uint32).copy()
    finally:
        for buf in (d, a, b, sem):
            if buf is not None:
                dev.free(buf)
    return out, reports, mod


# ------------------------------------------------------------ fp8 block-scale GEMM, pre-shuffled B
#
# struct __attribute__((packed)) KernelArgs  (csrc/py_itfs_cu/asm_a8w8_blockscale_bpreshuffle.cu): 16-byte slots.
FP8BS_ARG_FIELDS: tuple[tuple[str, str], ...] = (
    ("ptr_C", "p"), ("ptr_A", "p"), ("ptr_B", "p"), ("ptr_a_scale", "p"), ("ptr_b_scale", "p"), ("ptr_bias", "p"),
    ("m", "u"), ("n", "u"), ("k", "u"), ("lda", "u"), ("ldb", "u"), ("ldc", "u"), ("ks", "u"),
    ("scale_m", "u"), ("scale_n", "u"), ("scale_k", "u"),
)
FP8BS_TILE_K = 128          # TileK; block_shape = (1, 128) for A, (128, 128) for B


def pack_slots(spec: tuple[tuple[str, str], ...], **fields) -> bytes:
    """A packed struct of 16-byte slots (pointer + p2, or a 4-byte value + p3), as AITER's launchers declare."""
    unknown = set(fields) - {n for n, _ in spec}
    if unknown:
        raise LaunchError(f"KernelArgs has no field {', '.join(sorted(unknown))}")
    out = bytearray()
    for name, kind in spec:
        v = fields.get(name, 0)
        if kind == "p":
            out += struct.pack("<Q", int(v)) + bytes(8)
        elif kind == "f":
            out += struct.pack("<f", float(v)) + bytes(12)
        else:
            out += struct.pack("<I", int(v) & 0xFFFFFFFF) + bytes(12)
    return bytes(out)


def shuffle_weight_16x16(w):
    """AITER's ``shuffle_weight(w, layout=(16, 16))`` (aiter/ops/shuffle.py) for 1-byte elements: [N, K] viewed
    as (N/16, 16, K/32, 2, 16), permuted (0, 2, 3, 1, 4) -- 16-byte K packs of 16 rows side by side."""
    N, K = w.shape
    if N % 16 or K % 32:
        raise LaunchError(f"shuffle_weight: N={N} must be a multiple of 16 and K={K} of 32")
    return w.view(N // 16, 16, K // 32, 2, 16).permute(0, 2, 3, 1, 4).contiguous().view(N, K)


@dataclass(frozen=True)
class Fp8BlockscaleConfig:
    """A row of ``hsa/<arch>/fp8gemm_blockscale/fp8gemm_bf16_blockscale.csv``: every kernel there has tile_n 128,
    splitK 1 (split-K capable) and a pre-shuffled B."""

    name: str
    tile_m: int
    tile_n: int

    @classmethod
    def from_name(cls, name: str) -> Fp8BlockscaleConfig:
        m = re.search(r"fp8gemm_bf16_blockscale_BpreShuffle_(\d+)x(\d+)", name)
        if not m:
            raise LaunchError(f"'{name}' is not an AITER fp8gemm_bf16_blockscale_BpreShuffle_<M>x<N> kernel")
        return cls(m.group(0), int(m.group(1)), int(m.group(2)))


def fp8bs_splitk(K: int, splitk: int) -> int:
    """The launcher's split-K check for an explicit split: every split takes a multiple of 128 of K."""
    split = splitk or 1
    per = -(-K // split)
    per = -(-per // FP8BS_TILE_K) * FP8BS_TILE_K
    actual = -(-K // per)
    if actual != split:
        raise LaunchError(f"fp8 block-scale GEMM: split-K {split} does not give 128-aligned K ranges for K={K} "
                          f"(AITER: 'Kdim alignment check failed for splitK')")
    return split


def fp8bs_grid(cfg: Fp8BlockscaleConfig, M: int, N: int, split: int) -> tuple[int, int, int]:
    """``gdx = N / tile_n * splitK, gdy = ceil(M / tile_m), gdz = 1`` (the launcher's grid)."""
    return (N // cfg.tile_n) * split, -(-M // cfg.tile_m), 1


def gemm_a8w8_blockscale_bpreshuffle(A, B_shuffled, x_scale, w_scale, co: bytes | str, *, splitk: int = 1,
                                     device=None, sanitize: bool = True, on_error: str = "raise", trace=None):
    """``(A * x_scale) @ (B * w_scale)^T`` in bf16 through AITER's fp8 block-scale GEMM ``co`` on the emulator.

    ``A``: fp8 [M, K]; ``B_shuffled``: fp8 [N, K] after :func:`shuffle_weight_16x16`; ``x_scale``: fp32
    [M, K/128] (per row and 128-wide K block; passed to the kernel transposed, [K/128, M], as AITER's test
    does); ``w_scale``: fp32 [N/128, K/128].  The arguments, grid ``(N/128 * splitK, ceil(M/tile_m))`` and
    block 256 are ``gemm_a8w8_blockscale_bpreshuffle_asm``'s; with split-K > 1 the output starts zeroed
    (the launcher's ``hipMemsetAsync``) and the splits add into it.  Returns ``(out, reports, module)``.
    """
    import torch

    from isagen.runtime.emu import Device

    if isinstance(co, str):
        with open(co, "rb") as f:
            co = f.read()
    M, K = A.shape
    N = B_shuffled.shape[0]
    if B_shuffled.shape[1] != K or A.element_size() != 1 or B_shuffled.element_size() != 1:
        raise LaunchError(f"fp8 block-scale GEMM: A must be fp8 M x K and B fp8 N x K, got {tuple(A.shape)} "
                          f"and {tuple(B_shuffled.shape)}")
    if N % 128 or K % FP8BS_TILE_K:
        raise LaunchError(f"fp8 block-scale GEMM: N={N} and K={K} must be multiples of 128 (AITER: 'only support "
                          f"128nx128k tile')")
    sk = K // FP8BS_TILE_K
    if tuple(x_scale.shape) != (M, sk) or tuple(w_scale.shape) != (N // 128, sk):
        raise LaunchError(f"fp8 block-scale GEMM: x_scale must be [{M}, {sk}] and w_scale [{N // 128}, {sk}], got "
                          f"{tuple(x_scale.shape)} and {tuple(w_scale.shape)}")
    dev = device if device is not None else Device(read_code_object(co).mach, sanitize=sanitize)
    mod = dev.load_module(co)
    mod.trace = trace
    kname = next(iter(mod.co.kernels))
    cfg = Fp8BlockscaleConfig.from_name(kname)
    split = fp8bs_splitk(K, splitk)
    grid = fp8bs_grid(cfg, M, N, split)
    c = dev.to_device(torch.zeros(M, N, dtype=torch.bfloat16), "C")
    a = dev.to_device(A.contiguous().view(torch.uint8), "A")
    b = dev.to_device(B_shuffled.contiguous().view(torch.uint8), "B")
    xs = dev.to_device(x_scale.float().t().contiguous(), "x_scale")
    ws = dev.to_device(w_scale.float().contiguous(), "w_scale")
    bias = dev.to_device(torch.zeros(1, N, dtype=torch.float32), "zero_bias")
    raw = pack_slots(FP8BS_ARG_FIELDS, ptr_C=int(c), ptr_A=int(a), ptr_B=int(b), ptr_a_scale=int(xs),
                     ptr_b_scale=int(ws), ptr_bias=int(bias), m=M, n=N, k=K, lda=K, ldb=K, ldc=N * 2, ks=split,
                     scale_m=M, scale_n=N // 128, scale_k=sk)
    raw = _fit_kernarg(mod, kname, raw)
    try:
        reports = mod.launch(kname, grid=grid, block=(WORKGROUP_SIZE, 1, 1), kernarg=raw, on_error=on_error,
                             sanitize=sanitize)
        out = _bf16_result(dev, c, M, N)
    finally:
        for buf in (c, a, b, xs, ws, bias):
            dev.free(buf)
    return out, reports, mod


# ------------------------------------------------------------ int8 GEMM, per-token scales, pre-shuffled B
#
# struct __attribute__((packed)) KernelArgs  (csrc/py_itfs_cu/asm_gemm_a8w8.cu): 16-byte slots.
I8_ARG_FIELDS: tuple[tuple[str, str], ...] = (
    ("ptr_c", "p"), ("ptr_a", "p"), ("ptr_b", "p"), ("ptr_sa", "p"), ("ptr_sb", "p"), ("ptr_bias", "p"),
    ("m", "u"), ("n", "u"), ("k", "u"), ("lda", "u"), ("ldb", "u"), ("ldc", "u"), ("ks", "u"),
)


def i8_tiles(name: str) -> tuple[int, int]:
    m = re.search(r"I8gemm_bf16_perTokenI8_BpreShuffle_(\d+)x(\d+)", name)
    if not m:
        raise LaunchError(f"'{name}' is not an AITER I8gemm_bf16_perTokenI8_BpreShuffle_<M>x<N> kernel")
    return int(m.group(1)), int(m.group(2))


def gemm_a8w8_asm(A, B_shuffled, x_scale, w_scale, bias, co: bytes | str, *, splitk: int = 1, device=None,
                  sanitize: bool = True, on_error: str = "raise", trace=None):
    """``(A @ B^T) * x_scale * w_scale + bias`` in bf16 through AITER's int8 GEMM ``co`` on the emulator.

    ``A``: int8 [M, K]; ``B_shuffled``: int8 [N, K] after :func:`shuffle_weight_16x16` (AITER's test shuffles
    with layout (16, 16)); ``x_scale`` fp32 [M, 1], ``w_scale`` fp32 [N, 1] (per token / per channel);
    ``bias`` fp32 [1, N] (the asm kernel needs one: pass zeros).  Grid ``(N/tile_n * splitK, ceil(M/tile_m))``,
    block 256, split-K as ``gemm_a8w8_asm`` checks it (128-aligned K ranges; output zeroed first).
    """
    import torch

    from isagen.runtime.emu import Device

    if isinstance(co, str):
        with open(co, "rb") as f:
            co = f.read()
    M, K = A.shape
    N = B_shuffled.shape[0]
    if A.dtype != torch.int8 or B_shuffled.dtype != torch.int8 or B_shuffled.shape[1] != K:
        raise LaunchError(f"int8 GEMM: A must be int8 M x K and B int8 N x K, got {A.dtype} {tuple(A.shape)} and "
                          f"{B_shuffled.dtype} {tuple(B_shuffled.shape)}")
    dev = device if device is not None else Device(read_code_object(co).mach, sanitize=sanitize)
    mod = dev.load_module(co)
    mod.trace = trace
    kname = next(iter(mod.co.kernels))
    tile_m, tile_n = i8_tiles(kname)
    if N % tile_n:
        raise LaunchError(f"int8 GEMM: N={N} must be a multiple of the kernel's tile_n={tile_n}")
    split = fp8bs_splitk(K, splitk)
    grid = ((N // tile_n) * split, -(-M // tile_m), 1)
    c = dev.to_device(torch.zeros(M, N, dtype=torch.bfloat16), "C")
    a = dev.to_device(A.contiguous(), "A")
    b = dev.to_device(B_shuffled.contiguous(), "B")
    sa = dev.to_device(x_scale.float().contiguous(), "x_scale")
    sb = dev.to_device(w_scale.float().contiguous(), "w_scale")
    bb = dev.to_device(bias.float().contiguous(), "bias")
    raw = pack_slots(I8_ARG_FIELDS, ptr_c=int(c), ptr_a=int(a), ptr_b=int(b), ptr_sa=int(sa), ptr_sb=int(sb),
                     ptr_bias=int(bb), m=M, n=N, k=K, lda=K, ldb=K, ldc=N * 2, ks=split)
    raw = _fit_kernarg(mod, kname, raw)
    try:
        reports = mod.launch(kname, grid=grid, block=(WORKGROUP_SIZE, 1, 1), kernarg=raw, on_error=on_error,
                             sanitize=sanitize)
        out = _bf16_result(dev, c, M, N)
    finally:
        for buf in (c, a, b, sa, sb, bb):
            dev.free(buf)
    return out, reports, mod
