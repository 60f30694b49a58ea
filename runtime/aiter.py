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
    unknown = set(fields) - {n for n, _ in BF16GEMM_ARG_FIELDS}
    if unknown:
        raise LaunchError(f"bf16 GEMM KernelArgs has no field {', '.join(sorted(unknown))}")
    out = bytearray()
    for name, kind in BF16GEMM_ARG_FIELDS:
        v = fields.get(name, 0)
        if kind == "p":
            out += struct.pack("<Q", int(v)) + bytes(8)
        elif kind == "f":
            out += struct.pack("<f", float(v)) + bytes(12)
        else:
            out += struct.pack("<I", int(v) & 0xFFFFFFFF) + bytes(12)
    assert len(out) == BF16GEMM_ARGS_SIZE
    return bytes(out)


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
    # ptr_semaphore: they run split-K 1 only), so the tail they never read is left off here
    seg = mod._kernarg_size(mod.kernel(kname)) or len(raw)
    if len(raw) > seg and not any(raw[seg:]):
        raw = raw[:seg]
    try:
        reports = mod.launch(kname, grid=grid, block=(WORKGROUP_SIZE, 1, 1), kernarg=raw, on_error=on_error,
                             sanitize=sanitize)
        if out_t == torch.float32:
            out = torch.from_numpy(dev.from_device(d, (M, N), np.float32).copy())
        else:
            out = torch.from_numpy(dev.from_device(d, (M, N), np.uint16).astype(np.int16)).view(torch.bfloat16)
        if sem is not None:
            mod.last_semaphore = dev.from_device(sem, SEMAPHORE_SHAPE, np.uint32).copy()
    finally:
        for buf in (d, a, b, sem):
            if buf is not None:
                dev.free(buf)
    return out, reports, mod
