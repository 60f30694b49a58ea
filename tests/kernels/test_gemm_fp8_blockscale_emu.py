"""The block-scaled FP8 GEMM (``gemm_fp8`` with ``scaling: block``: DeepSeek-style scale_a[M, K/128] per
1x128 of A, scale_b[cdiv(N,128), K/128] per 128x128 of B, applied per K-block inside the loop) in the
emulator, sanitizer on, against float64 math on the dequantised inputs: both targets, ragged M and N,
decode-size M, several K-blocks (K-tile = K-block on gfx950, two K-tiles per K-block on gfx942),
pingpong8 and interleave4, e4m3 and e5m2 B, nothing written past C, no LDS bank conflicts; the launch
contract and the plan refusing what block scaling cannot do.
"""

import numpy as np
import pytest
import torch

from isagen.api import torch_dtype
from isagen.builders.contract import evaluate
from isagen.builders.spec import parse_spec
from isagen.errors import LaunchError, SpecError
from isagen.kernels.gemm_fp8 import make_plan
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.runtime.emu import Device
from isagen.tiles.bank_check import BankObserver

PAD = 64
SENTINEL = {"f32": np.uint32(0x7FC12345), "bf16": np.uint16(0x7FC1)}
UNIT = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8}
BLK = 128

_BUILT: dict = {}


def built(target, **params):
    key = (target, tuple(sorted(params.items())))
    if key not in _BUILT:
        body = ", ".join(f"{k}: {v}" for k, v in {"scaling": "block", **params}.items())
        spec = parse_spec(f"kernel: gemm_fp8\nname: gemm_fp8_blk_test\ntargets: [gfx942, gfx950]\n"
                          f"params: {{{body}}}\n", "test_gemm_fp8_blk.yaml")
        program = spec.build(target)
        _BUILT[key] = (spec, assemble(render_assembly(program), target, name=spec.name))
    return _BUILT[key]


def inputs(target, M, N, K, seed, a="fp8", b="fp8"):
    """A, B ~ N(0, 1) rounded to the target's 8-bit type; scales in [0.25, 2.25) with the sign of B's
    flipped in one block (a scale is any finite fp32)."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).to(torch_dtype(a, target))
    B = torch.randn(N, K, generator=g).to(torch_dtype(b, target))
    KB, NB = K // BLK, -(-N // BLK)
    sa = torch.rand(M, KB, generator=g) * 2 + 0.25
    sb = torch.rand(NB, KB, generator=g) * 2 + 0.25
    sb[0, -1] = -sb[0, -1]
    return A, B, sa, sb


def reference(A, B, sa, sb):
    """float64: C[m][n] = sum_kb sa[m][kb] * sb[n/128][kb] * sum_{k in kb} A[m][k] B[n][k], and the same on
    absolute values (the error bound's magnitude)."""
    M, K = A.shape
    N = B.shape[0]
    Ad, Bd = A.double(), B.double()
    sbn = sb.double().repeat_interleave(BLK, dim=0)[:N]            # (N, KB)
    ref = torch.zeros(M, N, dtype=torch.float64)
    mag = torch.zeros(M, N, dtype=torch.float64)
    for kb in range(K // BLK):
        s = slice(kb * BLK, (kb + 1) * BLK)
        f = sa.double()[:, kb:kb + 1] * sbn[:, kb][None, :]
        ref += f * (Ad[:, s] @ Bd[:, s].T)
        mag += f.abs() * (Ad[:, s].abs() @ Bd[:, s].abs().T)
    return ref, mag


def run_blk(target, M, N, K, *, seed=0, scales=None, **params):
    spec, co = built(target, **params)
    info = spec.launch_info(target)
    out = spec.params.out_dtype
    plan = make_plan(spec.params, target)
    A, B, sa, sb = inputs(target, M, N, K, seed, plan.in_dtype, plan.b_dtype)
    if scales is not None:
        sa, sb = scales(sa, sb)
    ref, mag = reference(A, B, sa, sb)
    bias = None
    if spec.params.bias:
        bias = torch.randn(N, generator=torch.Generator().manual_seed(seed + 1)) * 4
        ref, mag = ref + bias.double(), mag + bias.double().abs()
    dev = Device(target)
    obs = BankObserver(target)
    dev.lds_observer = obs
    mod = dev.load_module(co)
    bits = np.uint32 if out == "f32" else np.uint16
    c = dev.to_device(np.full(M * N + PAD, SENTINEL[out], bits))
    args = [dev.to_device(A.view(torch.uint8).numpy()), dev.to_device(B.view(torch.uint8).numpy()), c,
            dev.to_device(sa.numpy().ravel()), dev.to_device(sb.numpy().ravel())]
    if bias is not None:
        args.append(dev.to_device(bias.numpy()))
    sizes = {"m": M, "n": N, "k": K, "kb": K // BLK, "nb": -(-N // BLK)}
    env = {**info.constants, **sizes}
    args += [np.uint32(evaluate(info.source_of(n)[1], env)) for n in
             ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles", "pad")]
    mod.launch(spec.name, grid=info.grid_for(sizes, "gemm"), block=info.block, args=args)
    raw = dev.from_device(c, (M * N + PAD,), bits)
    assert (raw[M * N:] == SENTINEL[out]).all(), "the kernel wrote past the end of C"
    if out == "f32":
        C = raw[:M * N].view(np.float32).astype(np.float64)
    else:
        C = torch.from_numpy(raw[:M * N].view(np.int16).copy()).view(torch.bfloat16).double().numpy()
    return C.reshape(M, N), ref.numpy(), mag.numpy(), obs


def check(C, ref, mag, out, K):
    """fp8 products are exact in fp32; a K-block's 128-term fp32 sum errs by at most 128·2⁻²⁴ of its
    magnitude, the factor scale_a·scale_b and the fma add two roundings per K-block (the fma's error is
    relative to the running sum, bounded by the magnitude of everything before it: K/128 of them), the
    output one rounding of its type."""
    KB = K // BLK
    tol = (BLK + 2 * KB + 4) * KB * 2.0 ** -24 * mag + UNIT[out] * np.abs(ref) + 1e-30
    err = np.abs(C - ref)
    assert (err <= tol).all(), f"max error {err.max():.3g} (at {np.unravel_index(err.argmax(), err.shape)})"
    assert np.abs(ref).max() > 1, "the reference is degenerate"


def no_conflicts(obs):
    bad = obs.conflicts()
    assert not bad, "LDS bank conflicts: " + "; ".join(e.line() for e in bad)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("out", ["bf16", "f32"])
def test_block_scaled_ragged(target, out):
    """64x128 tiles (pingpong8): a 2x2 grid with ragged M and N (N past a 128-block of scale_b), 3
    K-blocks (gfx942: 6 K-tiles of 64; gfx950: 3 of 128)."""
    M, N, K = 90, 200, 3 * BLK
    C, ref, mag, obs = run_blk(target, M, N, K, out_dtype=out, block_m=64, block_n=128)
    check(C, ref, mag, out, K)
    no_conflicts(obs)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("M", [1, 7, 64])
def test_block_scaled_decode(target, M):
    """Decode-size M (1..64) with the 64x256 tile isagen.scaled_mm takes for it: one tile row, B's rows
    over two 128-blocks of scale_b, 2 K-blocks."""
    N, K = 256, 2 * BLK
    C, ref, mag, _ = run_blk(target, M, N, K, block_m=64, block_n=256, seed=M)
    check(C, ref, mag, "bf16", K)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_block_scaled_bias_e5m2(target):
    """e4m3 A with e5m2 B (a gradient operand) and a bias, one K-block (the first K-block is also the last)."""
    M, N, K = 33, 132, BLK
    C, ref, mag, _ = run_blk(target, M, N, K, b_dtype="bf8", bias="true", block_m=64, block_n=128, seed=5)
    check(C, ref, mag, "bf16", K)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_block_scaled_mfma32(target):
    """32x32 MFMAs (16 accumulators a tile, 8 v_pk_fma_f32 each): gfx950 32x32x64 (two k-slices a K-block),
    gfx942 32x32x16 fp8; 5 K-blocks (an odd number of K-tiles on gfx950)."""
    M, N, K = 70, 132, 5 * BLK
    C, ref, mag, obs = run_blk(target, M, N, K, mfma=32, block_m=64, block_n=128, seed=17)
    check(C, ref, mag, "bf16", K)
    no_conflicts(obs)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_block_scaled_one_row_fragment(target):
    """32x128 tiles: one 16-row fragment per wave (an odd count: the factor pair's second half unused)."""
    M, N, K = 45, 128, 2 * BLK
    C, ref, mag, _ = run_blk(target, M, N, K, block_m=32, block_n=128, seed=13)
    check(C, ref, mag, "bf16", K)


@pytest.mark.parametrize("target,mfma", [("gfx942", 16), ("gfx950", 32)])
def test_block_scaled_interleave4(target, mfma):
    """interleave4 (the decode tiles of isagen.scaled_mm): gfx942 16x16 (halves of a 64-k tile, two K-tiles
    per K-block), gfx950 32x32x64 (two 64-k slices per 128-k tile = K-block; 16 accumulators a tile)."""
    M, N, K = 40, 64, 4 * BLK
    C, ref, mag, obs = run_blk(target, M, N, K, schedule="interleave4", mfma=mfma, block_m=64, block_n=64, seed=7)
    check(C, ref, mag, "bf16", K)
    no_conflicts(obs)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_block_scales_matter_per_block(target):
    """Scales that differ only in one K-block (zero there) give the sum over the other blocks: a kernel
    applying the scales after the loop (or to the wrong block) fails."""
    M, N, K = 16, 128, 3 * BLK

    def scales(sa, sb):
        sa = sa.clone()
        sa[:, 1] = 0.0
        sb = sb.clone()
        sb[:, 2] *= 64.0
        return sa, sb
    C, ref, mag, _ = run_blk(target, M, N, K, block_m=64, block_n=128, seed=11, scales=scales, out_dtype="f32")
    check(C, ref, mag, "f32", K)


def test_refusals():
    """Unaligned K, scale shapes that do not match K and N, a K-tile of 256, a wave wider than a block."""
    spec, _ = built("gfx950", block_m=64, block_n=128)
    info = spec.launch_info("gfx950")
    with pytest.raises(LaunchError, match="K must be a positive multiple of 128"):
        info.grid_for({"m": 8, "n": 128, "k": 192, "kb": 1, "nb": 1})
    with pytest.raises(LaunchError, match="K/128"):
        info.grid_for({"m": 8, "n": 128, "k": 256, "kb": 1, "nb": 1})
    with pytest.raises(LaunchError, match="scale_b must have cdiv"):
        info.grid_for({"m": 8, "n": 200, "k": 256, "kb": 2, "nb": 1})
    with pytest.raises(SpecError, match="block_k"):
        built("gfx950", schedule="interleave4", block_m=64, block_n=64)          # gfx950 interleave4: K-tile 256
    with pytest.raises(SpecError, match=r"params.block_n: block scaling needs each wave's 48 columns inside one "
                                        r"128-column block"):
        built("gfx942", block_m=128, block_n=192)
