"""A Triton-compiled bf16 ``tl.dot`` matmul for gfx942 runs in the emulator and matches torch.

Triton (3.9, CPU-only machine) is an independent producer of a real code object: its MFMA operand
layouts are Triton's and LLVM's, not ours, so a wrong lane layout, K pairing or accumulator mapping
in runtime/emu/mfma.py shows up as a wrong product.  The shapes are not multiples of the
128x128x64 tile, so the masked edge loads/stores run too.
"""

import numpy as np
import pytest
import torch

from runtime.emu.device import Device
from tools.triton_kernels import compile_matmul


@pytest.fixture(scope="module")
def kernel():
    return compile_matmul("gfx942", block_m=128, block_n=128, block_k=64, num_warps=4, dtype="bf16")


def run_matmul(kernel, a: torch.Tensor, b: torch.Tensor, sanitize: bool):
    M, K = a.shape
    N = b.shape[1]
    dev = Device("gfx942", sanitize=sanitize)
    mod = dev.load_module(kernel.hsaco)
    A, B = dev.to_device(a), dev.to_device(b)
    C = dev.alloc(M * N * 2, "C")                 # exactly M*N: a store past the end is a fault
    reports = mod.launch(kernel.name, grid=kernel.grid(M, N), block=kernel.block,
                         args=kernel.args(A, B, C, M, N, K), shared_bytes=kernel.shared,
                         on_error="collect")
    c = torch.from_numpy(dev.from_device(C, (M, N), np.uint16).view(np.int16)).view(torch.bfloat16)
    return c, reports, mod.last_stats


def test_triton_kernel_uses_mfma(kernel):
    assert "v_mfma_f32_32x32x8_bf16" in kernel.amdgcn
    assert kernel.shared > 0                      # A/B tiles staged through LDS


@pytest.mark.parametrize("M,N,K", [(200, 136, 100), (64, 256, 192)])
def test_triton_bf16_matmul_matches_torch(kernel, M, N, K):
    g = torch.Generator().manual_seed(M * N + K)
    a = torch.randn(M, K, generator=g).bfloat16()
    b = torch.randn(K, N, generator=g).bfloat16()
    # sanitize=False: the sanitizer flags LLVM's SGPR spill of a never-written register
    # (`v_writelane_b32 v254, s85, 12` in the prologue), an executor matter unrelated to the MFMA
    c, reports, stats = run_matmul(kernel, a, b, sanitize=False)
    assert reports == []
    assert stats["categories"]["mfma"] == stats["waves"] * 32 * -(-K // 64)
    ref = a.double() @ b.double()
    err = (c.double() - ref).abs()
    # fp32 accumulation (K <= 192 exact-product terms) then one bf16 rounding of the result
    tol = 2.0 ** -8 * ref.abs() + 1e-4 * (a.double().abs() @ b.double().abs())
    assert bool((err <= tol).all()), f"max error {err.max().item():.3g}"
    # and it is not trivially zero: most outputs are the correctly rounded bf16 of the exact product
    assert (c == ref.bfloat16()).float().mean().item() > 0.9
