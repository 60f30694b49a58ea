"""Triton 3.9's ``tl.dot_scaled`` (MX block-scaled matmul) compiled for gfx950 runs in the emulator
and matches a float64 matmul of the dequantized inputs.

Triton lowers ``dot_scaled`` on gfx950 to ``v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4`` with the
operand and scale layouts LLVM and Triton run in production: code no one here wrote, so a wrong fp4
nibble order, k-per-lane assignment, scale lane/byte (op_sel) or register width in the emulator
shows up as a wrong result.  The mixed e2m1 x e4m3 / e5m2 kernels pair 4-VGPR fp4 operands with
8-VGPR fp8 ones, which makes the k order of each format observable (equal formats on both sides
hide a common k permutation).  Triton 3.9 refuses e2m3/e3m2 ("NYI"), so fp6 is checked only
against the numpy model (test_emu_mfma_mx.py).  The sanitizer is on (hazards use the fp4 pass
counts: half those of fp8).
"""

import re

import numpy as np
import pytest
import torch

from isagen.runtime.emu.device import Device

pytest.importorskip("triton")
from tools.triton_mx import compile_dot_scaled  # noqa: E402

FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])       # OCP MX v1.0 E2M1 magnitudes
FP4 = np.concatenate([FP4, -FP4])
CBSZ = {"e4m3": 0, "e5m2": 1, "e2m1": 4}


def mx_operand(fmt: str, rows: int, K: int, g) -> tuple[np.ndarray, np.ndarray]:
    """(stored bytes, float64 values) of a random [rows, K] operand; fp4 packs k = 2p in the low
    nibble of byte p and k = 2p + 1 in the high one."""
    if fmt == "e2m1":
        codes = g.integers(0, 16, (rows, K))
        return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), FP4[codes]
    dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
    x = (torch.from_numpy(g.standard_normal((rows, K))) * 4).to(dt)
    return x.view(torch.uint8).numpy(), x.double().numpy()


@pytest.mark.parametrize("a_fmt,b_fmt,size", [
    ("e4m3", "e4m3", 32), ("e4m3", "e4m3", 16), ("e5m2", "e5m2", 32),
    ("e2m1", "e2m1", 32), ("e2m1", "e2m1", 16),
    ("e2m1", "e4m3", 32), ("e4m3", "e2m1", 16), ("e5m2", "e2m1", 32),
])
def test_triton_dot_scaled_matches_float64(a_fmt, b_fmt, size):
    kernel = compile_dot_scaled(a_fmt, b_fmt, block_m=64, block_n=64, block_k=128, num_warps=4, mfma_size=size)
    mfmas = re.findall(r"(v_mfma\w*) .*", kernel.amdgcn)
    shape = "16x16x128" if size == 16 else "32x32x64"
    assert set(mfmas) == {f"v_mfma_scale_f32_{shape}_f8f6f4"}
    # the format codes the emulator is asked for: Triton may swap A and B (it computes (B^T A^T)^T)
    mods = {(int(m.group(1) or 0), int(m.group(2) or 0)) for m in
            re.finditer(r"v_mfma_scale\S+ [^\n]*?(?:cbsz:(\d))?(?: blgp:(\d))?$", kernel.amdgcn, re.M)}
    assert mods and mods <= {(CBSZ[a_fmt], CBSZ[b_fmt]), (CBSZ[b_fmt], CBSZ[a_fmt])}, mods

    M, N, K = 80, 72, 256             # ragged M and N (two tiles each), two K steps
    g = np.random.default_rng(M + K + size)
    a, av = mx_operand(a_fmt, M, K, g)
    b, bv = mx_operand(b_fmt, N, K, g)
    sa = g.integers(118, 137, (M, K // 32)).astype(np.uint8)
    sb = g.integers(118, 137, (N, K // 32)).astype(np.uint8)
    fa = av * np.repeat(2.0 ** (sa - 127.0), 32, axis=1)
    fb = bv * np.repeat(2.0 ** (sb - 127.0), 32, axis=1)
    ref, bound = fa @ fb.T, np.abs(fa) @ np.abs(fb).T

    dev = Device("gfx950", sanitize=True)
    mod = dev.load_module(kernel.hsaco)
    A, B, SA, SB = (dev.to_device(torch.from_numpy(np.ascontiguousarray(x))) for x in (a, b, sa, sb))
    C = dev.alloc(M * N * 4, "C")
    reports = mod.launch(kernel.name, grid=kernel.grid(M, N), block=kernel.block,
                         args=kernel.args(A, B, SA, SB, C, M, N, K), shared_bytes=kernel.shared,
                         on_error="collect")
    assert reports == []
    c = dev.from_device(C, (M, N), np.float32).astype(np.float64)
    # exact products summed in fp32 (the hardware's order is not documented): a few ulps of the bound
    assert np.all(np.abs(c - ref) <= 2.0 ** -21 * bound), np.abs(c - ref).max()
    assert np.mean(np.abs(c - ref) <= 2.0 ** -23 * np.abs(ref)) > 0.9
