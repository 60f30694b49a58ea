"""The BF16 GEMM kernels run in the emulator (sanitizer on: missing waits and wait states, LDS races,
out-of-bounds accesses, uninitialised reads all raise) against torch, with the emulator's LDS
address stream analysed for bank conflicts per instruction (``tiles.bank_check.BankObserver``).

Coverage: every schedule x target at 256³; C = A·B (transposed B reads: tr16 on gfx950, u16 on
gfx942) and 32x32 MFMAs; a non-square 512x768x320 (5 K-tiles: an odd count); a 16-tile grid of small
tiles through the chiplet-aware order; ragged M/N/K (leading partial K-tile, masked columns, dropped
rows); nothing written past C; the launch contract refusing shapes it cannot do; ``isagen.build``.
"""

import numpy as np
import pytest
import torch

from isagen.builders.contract import evaluate
from isagen.builders.spec import parse_spec
from isagen.errors import LaunchError
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.runtime.emu import Device
from isagen.tiles.bank_check import BankObserver

PAD = 64                        # sentinel elements after C: nothing may write there
SENTINEL = {"f32": np.uint32(0x7FC12345), "bf16": np.uint16(0x7FC1)}


def make_spec(**params):
    body = ", ".join(f"{k}: {v}" for k, v in params.items())
    return parse_spec(f"kernel: gemm_bf16\nname: gemm_test\ntargets: [gfx942, gfx950]\nparams: {{{body}}}\n",
                      "test_gemm.yaml")


_BUILT = {}


def built(target, **params):
    key = (target, tuple(sorted(params.items())))
    if key not in _BUILT:
        spec = make_spec(**params)
        program = spec.build(target)
        co = assemble(render_assembly(program), target, name=spec.name)
        _BUILT[key] = (spec, co)
    return _BUILT[key]


def run_gemm(target, M, N, K, *, seed=0, **params):
    """Run the kernel on random bf16 inputs; returns (C as float64, torch reference, observer)."""
    spec, co = built(target, **params)
    info = spec.launch_info(target)
    layout = spec.params.layout
    out = spec.params.out_dtype
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).to(torch.bfloat16)
    B = torch.randn(*((N, K) if layout == "abt" else (K, N)), generator=g).to(torch.bfloat16)
    ref = A.double() @ (B.double().T if layout == "abt" else B.double())
    dev = Device(target)
    obs = BankObserver(target)
    dev.lds_observer = obs
    mod = dev.load_module(co)
    a = dev.to_device(A.view(torch.int16).numpy())
    b = dev.to_device(B.view(torch.int16).numpy())
    bits = np.uint32 if out == "f32" else np.uint16
    c = dev.to_device(np.full(M * N + PAD, SENTINEL[out], bits))
    sizes = {"m": M, "n": N, "k": K}
    grid = info.grid_for(sizes, "gemm")
    env = {**info.constants, **sizes}
    args = [a, b, c] + [np.uint32(evaluate(info.source_of(n)[1], env)) for n in
                        ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles", "pad")]
    mod.launch(spec.name, grid=grid, block=info.block, args=args)
    raw = dev.from_device(c, (M * N + PAD,), bits)
    assert (raw[M * N:] == SENTINEL[out]).all(), "the kernel wrote past the end of C"
    if out == "f32":
        C = raw[:M * N].view(np.float32).astype(np.float64)
    else:
        C = torch.from_numpy(raw[:M * N].view(np.int16).copy()).view(torch.bfloat16).double().numpy()
    return C.reshape(M, N), ref.numpy(), obs


def check(C, ref, out, K):
    """fp32 accumulation of K products (any order) then, for bf16 out, one rounding to bf16."""
    scale = np.sqrt(K)                       # typical |C| for unit-variance inputs
    if out == "f32":
        tol = 1e-6 * scale * 8 + 1e-6 * np.abs(ref)
    else:
        tol = 2.0 ** -8 * np.abs(ref) + 1e-6 * scale * 8
    err = np.abs(C - ref)
    assert (err <= tol).all(), f"max error {err.max():.3g} (at {np.unravel_index(err.argmax(), err.shape)})"


def no_conflicts(obs):
    bad = obs.conflicts()
    assert not bad, "LDS bank conflicts: " + "; ".join(e.line() for e in bad)
    assert obs.instructions(), "the observer saw no LDS access"


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("schedule", ["pingpong8", "interleave4"])
def test_square_256(target, schedule):
    C, ref, obs = run_gemm(target, 256, 256, 256, schedule=schedule)
    check(C, ref, "bf16", 256)
    no_conflicts(obs)


@pytest.mark.parametrize("target,schedule,mfma", [("gfx942", "pingpong8", 16), ("gfx950", "pingpong8", 16),
                                                  ("gfx950", "interleave4", 32)])
def test_a_times_b(target, schedule, mfma):
    C, ref, obs = run_gemm(target, 256, 256, 192, layout="ab", schedule=schedule, mfma=mfma, seed=1)
    check(C, ref, "bf16", 192)
    no_conflicts(obs)


def test_non_square_odd_k_tiles():
    """512x768x320: 6 workgroups, 5 K-tiles of 64 (odd: the loop ends in its first half), fp32 out."""
    C, ref, obs = run_gemm("gfx950", 512, 768, 320, out_dtype="f32", mfma=32, seed=2)
    check(C, ref, "f32", 320)
    no_conflicts(obs)


def test_sixteen_tile_grid_through_the_chiplet_order():
    """64x64 tiles of a 256x256 C: 16 workgroups, remapped with W=2, C=2 (every id goes through both
    stages): each tile must be computed exactly once by some workgroup."""
    C, ref, obs = run_gemm("gfx942", 256, 256, 96, schedule="interleave4", block_m=64, block_n=64,
                           group_m=2, chunk=2, out_dtype="f32", seed=3)
    check(C, ref, "f32", 96)
    no_conflicts(obs)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_ragged_shapes(target):
    """M, N, K not multiples of the tile: leading partial K-tile (zeros in front; K=40 is a single K-tile
    on gfx950, two on gfx942), columns past N masked, rows past M dropped by the range check; a second
    tile column and row exist."""
    C, ref, obs = run_gemm(target, 300, 264, 40, schedule="pingpong8", seed=4)
    check(C, ref, "bf16", 40)
    no_conflicts(obs)


def test_launch_contract_refuses_what_it_cannot_do():
    spec, _ = built("gfx942", schedule="pingpong8")
    info = spec.launch_info("gfx942")
    with pytest.raises(LaunchError, match="K must be a positive multiple of 8"):
        info.grid_for({"m": 64, "n": 64, "k": 100}, "gemm")
    with pytest.raises(LaunchError, match="N must be a multiple of 8"):
        info.grid_for({"m": 64, "n": 60, "k": 64}, "gemm")
    with pytest.raises(LaunchError, match="A is too large"):
        info.grid_for({"m": 1 << 20, "n": 64, "k": 1 << 11}, "gemm")
    assert info.grid_for({"m": 257, "n": 512, "k": 8}, "gemm") == (4, 1, 1)


def test_isagen_build_runs_on_tensors(tmp_path, monkeypatch):
    """The runtime path: isagen.build(spec) -> Kernel(A, B, C) on the emulator backend."""
    import isagen
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path))
    kern = isagen.build("gemm_bf16", "gfx942", block_m=128, block_n=128, schedule="interleave4", out_dtype="f32")
    g = torch.Generator().manual_seed(5)
    A = torch.randn(128, 64, generator=g).to(torch.bfloat16)
    B = torch.randn(136, 64, generator=g).to(torch.bfloat16)
    C = torch.zeros(128, 136)
    res = kern.run(A, B, C, backend="emu")
    assert res.grid == (2, 1, 1)
    check(C.double().numpy(), (A.double() @ B.double().T).numpy(), "f32", 64)
