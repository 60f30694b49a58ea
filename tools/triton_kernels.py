"""Triton kernels compiled for AMD targets on a CPU-only machine: an independent producer of real
gfx942/gfx950 code objects for the emulator's tests and benchmarks.

``compile_matmul(target, block_m, block_n, block_k, num_warps, dtype, aligned) -> TritonKernel``
compiles a plain tiled ``C = A @ B`` (``tl.dot``, fp32 accumulation, masked loads/stores so any M, N, K
work; A row-major M x K, B row-major K x N (or N x K with ``b_kmajor``), C row-major M x N) the way Triton's JIT
specialises it for contiguous torch tensors: the unit inner strides become constants and the
pointers are marked 16-byte aligned; ``aligned=True`` also marks M, N, K and the row strides as
multiples of 16 (what the JIT does when they are, e.g. 1024^3), which gives the vectorised
``global_load_dwordx4`` / ``ds_write_b64`` / ``ds_read2st64_b64`` code real launches run.
``TritonKernel`` carries the code object (``hsaco``), the kernel name, the dynamic LDS size Triton
asks for (``shared``), the workgroup size and ``args(a, b, c, M, N, K)`` / ``grid(M, N)``.

Needs ``triton`` (3.x; ``pip install triton``).  Triton caches compiled kernels in ``~/.triton``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")     # silence the 3.9 default-change warning

_KERNEL = None


def _matmul_kernel():
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c = acc.to(c_ptr.dtype.element_ty)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    _KERNEL = matmul_kernel
    return _KERNEL


@dataclass
class TritonKernel:
    name: str
    hsaco: bytes
    amdgcn: str
    shared: int              # dynamic LDS bytes Triton launches with
    num_warps: int
    block_m: int
    block_n: int
    block_k: int
    aligned: bool
    b_kmajor: bool = False   # B stored N x K row-major (nn.Linear's weight layout) instead of K x N

    @property
    def block(self) -> tuple[int, int, int]:
        return (64 * self.num_warps, 1, 1)

    def grid(self, M: int, N: int) -> tuple[int, int, int]:
        return (-(-M // self.block_m), -(-N // self.block_n), 1)

    def args(self, a, b, c, M: int, N: int, K: int) -> list:
        """Kernel arguments in metadata order: the three pointers, M, N, K and the row strides
        (i32; the unit inner strides are compiled in), and the two scratch pointers Triton 3.x
        appends (null: the kernel asks for no scratch)."""
        if self.aligned and (M % 16 or N % 16 or K % 16):
            raise ValueError(f"this kernel was compiled for M, N, K divisible by 16, got {M}, {N}, {K}")
        i32 = np.int32
        b_stride = K if self.b_kmajor else N          # stride_bn (B is N x K) or stride_bk (K x N)
        return [a, b, c, i32(M), i32(N), i32(K), i32(K), i32(b_stride), i32(N), np.uint64(0), np.uint64(0)]


# Triton element types: fp8/bf8 are FNUZ (e4m3fnuz/e5m2fnuz) on gfx942 and OCP (e4m3fn/e5m2) on gfx950
_IN_TYPES = {"bf16": "*bf16", "f16": "*fp16",
             ("fp8", "gfx942"): "*fp8e4b8", ("bf8", "gfx942"): "*fp8e5b16",
             ("fp8", "gfx950"): "*fp8e4nv", ("bf8", "gfx950"): "*fp8e5"}


def compile_matmul(target: str = "gfx942", block_m: int = 128, block_n: int = 128, block_k: int = 64,
                   num_warps: int = 4, dtype: str = "bf16", aligned: bool = False,
                   mfma_size: int = 0, b_kmajor: bool = False) -> TritonKernel:
    """``dtype``: "bf16" or "f16" (C in the same type), or "fp8" / "bf8" (the target's 8-bit formats;
    C in bf16).  ``mfma_size`` 16 or 32 asks Triton for 16x16 or 32x32 MFMAs (its
    ``matrix_instr_nonkdim``); 0 lets it choose.  ``b_kmajor``: B is passed as an N x K row-major
    array (``stride_bk`` = 1), the layout MFMA operands want without transposing LDS reads."""
    import triton
    from triton.backends.compiler import GPUTarget

    fn = _matmul_kernel()
    ptr = _IN_TYPES[dtype] if dtype in ("bf16", "f16") else _IN_TYPES[(dtype, target.split(":")[0])]
    sig = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr if dtype in ("bf16", "f16") else "*bf16"}
    sig.update({n: "i32" for n in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                                   "stride_cm", "stride_cn")})
    unit_b = "stride_bk" if b_kmajor else "stride_bn"
    other_b = "stride_bn" if b_kmajor else "stride_bk"
    consts = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k,
              "stride_ak": 1, unit_b: 1, "stride_cn": 1}
    sig.update({k: "constexpr" for k in consts})
    div16 = ["a_ptr", "b_ptr", "c_ptr"] + (["M", "N", "K", "stride_am", other_b, "stride_cm"] if aligned else [])
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    options = {"num_warps": num_warps}
    if mfma_size:
        options["matrix_instr_nonkdim"] = mfma_size
    k = triton.compile(src, target=GPUTarget("hip", target, 64), options=options)
    return TritonKernel(k.metadata.name, k.asm["hsaco"], k.asm["amdgcn"], int(k.metadata.shared),
                        num_warps, block_m, block_n, block_k, aligned, b_kmajor)
