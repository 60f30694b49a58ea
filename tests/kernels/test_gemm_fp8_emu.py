"""The FP8 GEMM (``gemm_fp8``) in the emulator, sanitizer on, against float64 math on the dequantised
inputs: C = scale_a · scale_b · (A·Bᵀ) with A and B e4m3 in the target's format (torch's
``float8_e4m3fnuz`` on gfx942, ``float8_e4m3fn`` on gfx950), every scaling × target × output type,
ragged M/N/K (leading partial K-tile, masked columns, dropped rows), nothing written past C, no LDS bank
conflicts in the emulated address stream; the launch contract refusing shapes it cannot do.
"""

import numpy as np
import pytest
import torch

from isagen.api import torch_dtype
from isagen.builders.contract import evaluate
from isagen.builders.spec import parse_spec
from isagen.errors import LaunchError
from isagen.kernels.gemm_fp8 import make_plan
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.runtime.emu import Device
from isagen.tiles.bank_check import BankObserver

PAD = 64
SENTINEL = {"f32": np.uint32(0x7FC12345), "bf16": np.uint16(0x7FC1), "f16": np.uint16(0x7E01)}
TORCH_OUT = {"bf16": torch.bfloat16, "f16": torch.float16}
UNIT = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}

_BUILT: dict = {}


def built(target, **params):
    key = (target, tuple(sorted(params.items())))
    if key not in _BUILT:
        body = ", ".join(f"{k}: {v}" for k, v in params.items())
        spec = parse_spec(f"kernel: gemm_fp8\nname: gemm_fp8_test\ntargets: [gfx942, gfx950]\nparams: {{{body}}}\n",
                          "test_gemm_fp8.yaml")
        program = spec.build(target)
        _BUILT[key] = (spec, assemble(render_assembly(program), target, name=spec.name))
    return _BUILT[key]


def inputs(target, M, N, K, scaling, seed, a="fp8", b="fp8"):
    """A (M×K) and B (N×K) drawn as N(0, 1) then rounded to the target's e4m3 (fp8) or e5m2 (bf8); fp32
    scales."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).to(torch_dtype(a, target))
    B = torch.randn(N, K, generator=g).to(torch_dtype(b, target))
    if scaling == "tensor":
        sa, sb = torch.rand(1, generator=g) + 0.5, torch.rand(1, generator=g) + 0.5
    else:
        sa, sb = torch.rand(M, 1, generator=g) + 0.25, torch.rand(1, N, generator=g) * 3 - 1.5
    return A, B, sa, sb


def run_fp8(target, M, N, K, *, seed=0, **params):
    """Run the kernel; returns (C as float64, the float64 reference, |reference| bound, observer)."""
    spec, co = built(target, **params)
    info = spec.launch_info(target)
    out = spec.params.out_dtype
    plan = make_plan(spec.params, target)
    A, B, sa, sb = inputs(target, M, N, K, spec.params.scaling, seed, plan.in_dtype, plan.b_dtype)
    ref = sa.double() * (A.double() @ B.double().T) * sb.double()
    mag = sa.double().abs() * (A.double().abs() @ B.double().abs().T) * sb.double().abs()
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
    sizes = {"m": M, "n": N, "k": K}
    env = {**info.constants, **sizes}
    args += [np.uint32(evaluate(info.source_of(n)[1], env)) for n in
             ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles", "pad")]
    mod.launch(spec.name, grid=info.grid_for(sizes, "gemm"), block=info.block, args=args)
    raw = dev.from_device(c, (M * N + PAD,), bits)
    assert (raw[M * N:] == SENTINEL[out]).all(), "the kernel wrote past the end of C"
    if out == "f32":
        C = raw[:M * N].view(np.float32).astype(np.float64)
    else:
        C = torch.from_numpy(raw[:M * N].view(np.int16).copy()).view(TORCH_OUT[out]).double().numpy()
    return C.reshape(M, N), ref.numpy(), mag.numpy(), obs


def check(C, ref, mag, out, K):
    """Products of fp8 values are exact in fp32; the K-term fp32 sum (any order) errs by at most
    K·2⁻²⁴·Σ|a·b|, the two scale products and the bias by 3 roundings, the output by one rounding of
    its type (``mag`` is the reference on absolute values)."""
    tol = (K + 4) * 2.0 ** -24 * mag + UNIT[out] * np.abs(ref) + 1e-30
    err = np.abs(C - ref)
    assert (err <= tol).all(), f"max error {err.max():.3g} (at {np.unravel_index(err.argmax(), err.shape)})"
    assert np.abs(ref).max() > 1, "the reference is degenerate"


def no_conflicts(obs):
    bad = obs.conflicts()
    assert not bad, "LDS bank conflicts: " + "; ".join(e.line() for e in bad)
    assert obs.instructions(), "the observer saw no LDS access"


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("scaling,out", [("tensor", "bf16"), ("row", "f16"), ("row", "f32")])
def test_small_tiles(target, scaling, out):
    """64x64 tiles (pingpong8), a 2x2 grid with ragged M and N and a K of 2 K-tiles and a part."""
    M, N, K = 100, 124, 2 * 128 + 48
    C, ref, mag, obs = run_fp8(target, M, N, K, scaling=scaling, out_dtype=out, block_m=64, block_n=64)
    check(C, ref, mag, out, K)
    no_conflicts(obs)


@pytest.mark.parametrize("target,params", [
    ("gfx942", {"schedule": "interleave4", "block_m": 64, "block_n": 64}),
    ("gfx950", {"schedule": "interleave4", "block_m": 64, "block_n": 64}),       # default K-tile 256
    ("gfx942", {"mfma": 32, "block_m": 64, "block_n": 128}),
    ("gfx950", {"mfma": 32, "block_m": 64, "block_n": 128}),
    ("gfx950", {"schedule": "interleave4", "mfma": 32, "block_m": 64, "block_n": 64}),
], ids=["i4-gfx942", "i4-gfx950", "mfma32-gfx942", "mfma32-gfx950", "i4-mfma32-gfx950"])
def test_schedules_and_mfma_sizes(target, params):
    """interleave4 (gfx942: ds_read_b64 slices; gfx950: two 128-k slices) and the 32x32 fp8 MFMAs, with
    row-wise scales, an odd number of K-tiles and ragged edges."""
    M, N, K = 72, 136, 3 * 256 + 16
    C, ref, mag, obs = run_fp8(target, M, N, K, scaling="row", out_dtype="bf16", seed=3, **params)
    check(C, ref, mag, "bf16", K)
    no_conflicts(obs)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_bias(target, scaling):
    """C = scale_a·scale_b·(A·Bᵀ) + bias[n] (fp32), ragged N (the bias past N is never read into C)."""
    M, N, K = 40, 92, 160
    C, ref, mag, _ = run_fp8(target, M, N, K, scaling=scaling, bias="true", out_dtype="bf16", block_m=64,
                             block_n=64, seed=9)
    check(C, ref, mag, "bf16", K)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("M,block_m", [(1, 32), (13, 32), (32, 32), (33, 64)])
def test_decode_size_m(target, M, block_m):
    """Decode-size M on the decode tiles (interleave4 32x64: specs/gemm_fp8_decode.yaml; 64x64): one token, 13, a full
    32-row tile, 33; rows past M read zeros and store nothing; three tile columns, ragged K."""
    N, K = 192, 208
    C, ref, mag, obs = run_fp8(target, M, N, K, scaling="row", out_dtype="bf16", block_m=block_m, block_n=64,
                               schedule="interleave4", seed=M)
    check(C, ref, mag, "bf16", K)
    no_conflicts(obs)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_bundled_256_tile(target):
    """The bundled specs' 256x256 tile (pingpong8, 16x16) on two tiles: per-tensor, bf16 out."""
    M, N, K = 300, 256, 336
    C, ref, mag, obs = run_fp8(target, M, N, K, scaling="tensor", out_dtype="bf16", seed=5)
    check(C, ref, mag, "bf16", K)
    no_conflicts(obs)


@pytest.mark.parametrize("sizes,message", [({"m": 64, "n": 64, "k": 24}, "K must be a positive multiple of 16"),
                                           ({"m": 64, "n": 62, "k": 64}, "N must be a multiple of 4")])
def test_launch_contract_refuses(sizes, message):
    spec, _ = built("gfx942", block_m=64, block_n=64)
    with pytest.raises(LaunchError, match=message):
        spec.launch_info("gfx942").grid_for(sizes, "gemm_fp8")


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("a,b", [("bf8", "same"), ("fp8", "bf8"), ("bf8", "fp8")])
def test_e5m2_operands(target, a, b):
    """e5m2 (bf8) A and/or B (a gradient operand): gfx950's f8f6f4 with cbsz/blgp = 1, gfx942's
    bf8_bf8 / bf8_fp8 / fp8_bf8 MFMAs; row-wise scales, ragged M/N/K."""
    M, N, K = 50, 68, 144
    C, ref, mag, obs = run_fp8(target, M, N, K, in_dtype=a, b_dtype=b, scaling="row", out_dtype="f32",
                               block_m=64, block_n=64, seed=11)
    check(C, ref, mag, "f32", K)
    no_conflicts(obs)
