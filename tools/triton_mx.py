"""Triton ``tl.dot_scaled`` (MX block-scaled) matmuls compiled for gfx950 on a CPU-only machine: an
independent producer of code objects with ``v_mfma_scale_f32_*_f8f6f4`` for the emulator's tests.

``compile_dot_scaled(a_format, b_format, block_m, block_n, block_k, num_warps, mfma_size)
-> TritonMxKernel`` compiles ``C[M, N] (f32) = (A * 2^(sa-127)) @ (B * 2^(sb-127))^T`` with
A ``[M, K]`` and B ``[N, K]`` row-major (K-major, the MX layout), formats ``"e4m3"``, ``"e5m2"`` or
``"e2m1"`` (fp4: uint8, two elements per byte along K, the low nibble the even k, so the row is
K/2 bytes), E8M0 scales ``sa [M, K/32]``, ``sb [N, K/32]`` (uint8).  Rows past M/N are read
modulo M/N (no masks on the loads: the kernel needs K % block_k == 0) and the store is masked.

Needs ``triton`` 3.9 (``pip install triton``): it lowers ``tl.dot_scaled`` on gfx950 to the scaled
MFMAs (Triton 3.9 refuses e2m3/e3m2 operands: "NYI: lhs_format e2m3").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def mx_matmul(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  A_FMT: tl.constexpr, B_FMT: tl.constexpr, A_DIV: tl.constexpr, B_DIV: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_ka = tl.arange(0, BLOCK_K // A_DIV)
        offs_kb = tl.arange(0, BLOCK_K // B_DIV)
        offs_ks = tl.arange(0, BLOCK_K // 32)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K // BLOCK_K):
            a = tl.load(a_ptr + offs_m[:, None] * (K // A_DIV) + k * (BLOCK_K // A_DIV) + offs_ka[None, :])
            b = tl.load(b_ptr + offs_n[:, None] * (K // B_DIV) + k * (BLOCK_K // B_DIV) + offs_kb[None, :])
            sa = tl.load(sa_ptr + offs_m[:, None] * (K // 32) + k * (BLOCK_K // 32) + offs_ks[None, :])
            sb = tl.load(sb_ptr + offs_n[:, None] * (K // 32) + k * (BLOCK_K // 32) + offs_ks[None, :])
            acc = tl.dot_scaled(a, sa, A_FMT, b.T, sb, B_FMT, acc)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))

    _KERNEL = mx_matmul
    return _KERNEL


@dataclass
class TritonMxKernel:
    name: str
    hsaco: bytes
    amdgcn: str
    shared: int
    num_warps: int
    block_m: int
    block_n: int
    block_k: int

    @property
    def block(self) -> tuple[int, int, int]:
        return (64 * self.num_warps, 1, 1)

    def grid(self, M: int, N: int) -> tuple[int, int, int]:
        return (-(-M // self.block_m), -(-N // self.block_n), 1)

    def args(self, a, b, sa, sb, c, M: int, N: int, K: int) -> list:
        """Metadata order: five pointers, M, N, K (i32), Triton's two scratch pointers (null)."""
        if K % self.block_k:
            raise ValueError(f"K={K} must be a multiple of the kernel's BLOCK_K={self.block_k}")
        i32 = np.int32
        return [a, b, sa, sb, c, i32(M), i32(N), i32(K), np.uint64(0), np.uint64(0)]


_PTR = {"e4m3": "*fp8e4nv", "e5m2": "*fp8e5", "e2m1": "*u8"}


def compile_dot_scaled(a_format: str = "e4m3", b_format: str = "e4m3", block_m: int = 64, block_n: int = 64,
                       block_k: int = 128, num_warps: int = 4, mfma_size: int = 0) -> TritonMxKernel:
    """``mfma_size`` 16 or 32 asks for 16x16x128 / 32x32x64 MFMAs (``matrix_instr_nonkdim``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _kernel()
    sig = {"a_ptr": _PTR[a_format], "b_ptr": _PTR[b_format], "sa_ptr": "*u8", "sb_ptr": "*u8",
           "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
    consts = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "A_FMT": a_format,
              "B_FMT": b_format, "A_DIV": 2 if a_format == "e2m1" else 1, "B_DIV": 2 if b_format == "e2m1" else 1}
    sig.update({k: "constexpr" for k in consts})
    div16 = ["a_ptr", "b_ptr", "sa_ptr", "sb_ptr", "c_ptr", "K"]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16}
    options: dict = {"num_warps": num_warps}
    if mfma_size:
        options["matrix_instr_nonkdim"] = mfma_size
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("hip", "gfx950", 64), options=options)
    return TritonMxKernel(k.metadata.name, k.asm["hsaco"], k.asm["amdgcn"], int(k.metadata.shared),
                          num_warps, block_m, block_n, block_k)
