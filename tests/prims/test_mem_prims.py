"""The primitives of isagen/prims on their own: DPP wave reductions against a numpy model of the documented
lane patterns (bit for bit), LDS cross-wave reductions (every wave of a row gets the same bits; the
double-buffered slots survive back-to-back reductions under the race checker), the dropout generator
against an independent copy of its definition, the fp32 math's accuracy against float64 (the bounds
docs/kernels.md states), and the emitted assembly's readability (every wait, nop and barrier says why;
registers by name)."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mem_support import keep_mask, kernel, lowbias32, run

from isagen.builders.program import KernelBuilder
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.prims import random as R
from isagen.prims.math import exp_of
from isagen.prims.reduce import CrossWave
from isagen.prims.rows import RowGeometry, RowLanes, lane_and_wave, log2
from isagen.runtime.emu import Device
from isagen.tiles.buffer import BufferResource


# ----------------------------------------------------------------------------- reductions
def reduction_kernel(target, waves, wpr, ops):
    """Each wave loads 64 floats; for each op the row group (wpr waves) reduces them; every wave stores
    each result at out[op][wave]."""
    k = KernelBuilder(f"red_{waves}_{wpr}", target, workgroup_size=64 * waves)
    k.args.pointer("x", "f32", "read_only")
    k.args.pointer("out", "f32", "write_only")
    xr, outr = BufferResource(k, "x"), BufferResource(k, "out")
    xr.load_pointer(k.args["x"].offset)
    outr.load_pointer(k.args["out"].offset)
    lane, wave = lane_and_wave(k)
    w_in, group = k.sgpr(1, "w_in", kernel=True), k.sgpr(1, "group", kernel=True)
    k.s_and_b32(w_in, wave, wpr - 1)
    k.s_lshr_b32(group, wave, log2(wpr))
    k.wait(lgkmcnt=0, why="pointers")
    xr.finish(0x7FFFFFF0)
    outr.finish(0x7FFFFFF0)
    off = k.vgpr(1, "off", kernel=True)
    with k.temps(s="s1") as t:
        k.s_lshl_b32(t.s, wave, 8)
        k.v_lshlrev_b32(off, 2, lane)
        k.v_add_u32(off, t.s, off, comment="(wave*64 + lane)*4")
    cw = CrossWave(k, groups=waves // wpr, waves_per_row=wpr, group=group, wave_in_group=w_in)
    v, data, total = k.vgpr(1, "v", kernel=True), k.vgpr(1, "data", kernel=True), k.sgpr(1, "total", kernel=True)
    k.buffer_load_dword(data, off, xr.regs, 0, offen=True)
    k.wait(vmcnt=0, why="x landed")
    store_at = k.vgpr(1, "store_at", kernel=True)
    for i, op in enumerate(ops):
        k.v_mov_b32(v, data)
        cw.reduce([v], op, [total], [op])
        k.v_mov_b32(v, total)
        with k.temps(s="s1") as t:
            k.s_lshl_b32(t.s, wave, 2)
            k.s_add_u32(t.s, t.s, i * 4 * waves)
            k.v_mov_b32(store_at, t.s)
        k.buffer_store_dword(v, store_at, outr.regs, 0, offen=True, comment="every lane: the same word")
    return k.finish()


def dpp_tree_sum(x: np.ndarray) -> np.float32:
    """The documented 6-step DPP tree (isagen/prims/reduce.py) in numpy, fp32 adds in the same pairs."""
    v = x.astype(np.float32).copy()
    lane = np.arange(64)
    for src in (lane ^ 1, lane ^ 2, (lane & ~7) + 7 - (lane & 7), (lane & ~15) + 15 - (lane & 15)):
        v = (v[src] + v).astype(np.float32)
    rows = lane // 16
    w = v.copy()
    sel = (rows == 1) | (rows == 3)
    w[sel] = v[lane[sel] - (lane[sel] & 15) - 1] + v[sel]
    v = w.copy()
    sel = rows >= 2
    v[sel] = w[31] + w[sel]
    return np.float32(v[63])


@pytest.mark.parametrize("waves,wpr", [(1, 1), (4, 2), (4, 4), (8, 8)])
def test_wave_and_cross_wave_reductions(waves, wpr):
    prog = reduction_kernel("gfx942", waves, wpr, ("add", "max", "add", "max", "add"))
    co = assemble(render_assembly(prog), "gfx942", name=prog.name)
    dev = Device("gfx942")
    mod = dev.load_module(co)
    rng = np.random.default_rng(waves * 10 + wpr)
    for case in range(2):
        x = (rng.standard_normal(64 * waves) * 100).astype(np.float32)
        x[5] = -np.inf if case else x[5]
        xb, ob = dev.to_device(x), dev.to_device(np.zeros(5 * waves, np.float32))
        # three workgroups (each with its own LDS) compute the same results into the same words
        mod.launch(prog.name, grid=(3, 1, 1), block=(64 * waves, 1, 1), args=[xb, ob])
        assert mod.last_stats["reports"] == 0
        got = dev.from_device(ob, (5, waves), np.float32)
        xs = x.reshape(waves // wpr, wpr, 64)
        for grp in range(waves // wpr):
            wave_sums = [dpp_tree_sum(xs[grp, w]) for w in range(wpr)]
            total = wave_sums[0]
            for s in wave_sums[1:]:
                total = np.float32(total + s)
            mx = np.float32(xs[grp].max())
            for i, want in enumerate((total, mx, total, mx, total)):
                row = got[i, grp * wpr:(grp + 1) * wpr]
                assert (row.view(np.uint32) == np.float32(want).view(np.uint32)).all(), (i, grp, row, want)


def exp_kernel(precise: bool):
    k = KernelBuilder(f"exp_{int(precise)}", "gfx942", workgroup_size=64)
    k.args.pointer("x", "f32", "read_only")
    k.args.pointer("out", "f32", "write_only")
    xr, outr = BufferResource(k, "x"), BufferResource(k, "out")
    xr.load_pointer(k.args["x"].offset)
    outr.load_pointer(k.args["out"].offset)
    lane, _ = lane_and_wave(k)
    k.wait(lgkmcnt=0, why="pointers")
    xr.finish(0x7FFFFFF0)
    outr.finish(0x7FFFFFF0)
    off, x, t = k.vgpr(1, "off", kernel=True), k.vgpr(1, "xv", kernel=True), k.vgpr(2, "t", kernel=True)
    with k.temps(s="s1") as tt:
        k.s_lshl_b32(tt.s, k.workgroup_id["x"], 8)
        k.v_lshlrev_b32(off, 2, lane)
        k.v_add_u32(off, tt.s, off)
    k.buffer_load_dword(x, off, xr.regs, 0, offen=True)
    k.wait(vmcnt=0, why="x landed")
    exp_of(k, [x], [x], [t], precise)
    k.buffer_store_dword(x, off, outr.regs, 0, offen=True)
    return k.finish()


def test_missing_temporaries_or_limit_are_named():
    """Precise e^a without its temporaries, and a chunk limit before ``make_limit``, fail with a line that
    names what is missing (they used to fail on None: a TypeError, or a None register handed on)."""
    k = KernelBuilder("misuse", "gfx942", workgroup_size=64)
    x = k.vgpr(1, "x")
    with pytest.raises(ValueError, match="needs two temporary VGPRs per value"):
        exp_of(k, [x], [x], None, precise=True)
    lanes = RowLanes(k, RowGeometry("f32", 512), None, k.vgpr(1, "lane"))
    with pytest.raises(RuntimeError, match="make_limit"):
        lanes.chunk_limit(0, x)


@pytest.mark.parametrize("precise", [False, True])
def test_exp_accuracy(precise):
    """e^a: fast within |a| 2^-24 relative (+ a little), precise within ~1 ulp; 0 and inf at the ends."""
    prog = exp_kernel(precise)
    dev = Device("gfx942")
    mod = dev.load_module(assemble(render_assembly(prog), "gfx942", name=prog.name))
    x = np.concatenate([np.linspace(-87, 88, 8192), [-np.inf, np.inf, -1000, 1000, 0, 89]]).astype(np.float32)
    x = np.concatenate([x, np.zeros(-x.size % 64, np.float32)])
    xb, ob = dev.to_device(x), dev.to_device(np.zeros_like(x))
    mod.launch(prog.name, grid=(x.size // 64, 1, 1), block=(64, 1, 1), args=[xb, ob])
    got = dev.from_device(ob, x.shape, np.float32).astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    normal = (want >= 1.2e-38) & (want < 3.4e38)
    bound = 1.5 if precise else 1 + 1.25 * np.abs(x[normal])      # fast: ~1 ulp per unit of |a|
    assert (_ulps(got[normal], want[normal]) <= bound).all()
    special = np.isin(x, [-np.inf, np.inf, -1000, 1000, 89])
    assert np.array_equal(got[special], np.where(x[special] > 0, np.inf, 0.0))


# ----------------------------------------------------------------------------- the dropout generator
def test_rng_matches_an_independent_definition():
    rng = np.random.default_rng(1)
    cases = [(0, 0, 0.5), (1, 2 ** 32 - 5, 0.1), (int(rng.integers(2 ** 32)), int(rng.integers(2 ** 32)), 0.77)]
    for seed, offset, p in cases:
        assert np.array_equal(R.keep_mask(seed, offset, 7, 33, p), keep_mask(seed, offset, 7, 33, p))
    assert lowbias32(0) == int(R.lowbias32(0)) and lowbias32(12345) == int(R.lowbias32(12345))
    assert R.threshold(0.0) == 0 and R.threshold(1.0) == 2 ** 32 - 1 and R.threshold(0.5) == 2 ** 31
    assert R.threshold(-1.0) == 0 and R.threshold(float("nan")) == 0
    # counter-based: the mask depends on offset + r*cols + c only
    a = R.keep_mask(9, 100, 4, 50, 0.5)
    b = R.keep_mask(9, 150, 3, 50, 0.5)
    assert np.array_equal(a[1:], b)
    frac = 1 - R.keep_mask(3, 0, 200, 1000, 0.3).mean()
    assert abs(frac - 0.3) < 0.005


def test_torch_dropout_reference():
    x = torch.ones(3, 40, dtype=torch.float64)
    y = R.torch_dropout(x, 0.25, 5, 7)
    keep = torch.from_numpy(keep_mask(5, 7, 3, 40, 0.25))
    assert torch.equal(y != 0, keep) and torch.allclose(y[keep], torch.tensor(4 / 3, dtype=torch.float64))


# ----------------------------------------------------------------------------- fp32 math accuracy
C2 = 2 * (2 / torch.pi) ** 0.5
REF64 = {"silu": lambda x: x * torch.sigmoid(x), "gelu": lambda x: 0.5 * x * torch.special.erfc(-x / 2 ** 0.5),
         "gelu_tanh": lambda x: x * torch.sigmoid(C2 * (x + 0.044715 * x ** 3)), "relu": F.relu,
         "tanh": torch.tanh}
# max error in fp32 ulps of the true value (docs/kernels.md, "Accuracy"): over x >= -3, and overall
# (the negative tails of gelu lose digits to the rounding of the exponent's argument: values < 1e-8)
BOUNDS = {"silu": (3, 3), "tanh": (2.5, 2.5), "relu": (0, 0), "gelu": (9, 130), "gelu_tanh": (12, 175)}


def _ulps(got, want):
    a = np.abs(want).astype(np.float32)
    ulp = (np.nextafter(a, np.float32(np.inf)) - a).astype(np.float64)
    return np.abs(got - want) / ulp


@pytest.mark.parametrize("op", sorted(BOUNDS))
def test_fp32_activation_accuracy(op):
    k = kernel("activation", op=op, dtype="f32")
    x = torch.cat([torch.linspace(-12, 12, 20001, dtype=torch.float64),
                   torch.logspace(-6, 0, 2001, dtype=torch.float64)]).float()
    x = torch.cat([x, -x[20001:]])
    out = torch.empty_like(x)
    run(k, x, out)
    want = REF64[op](x.double()).numpy()
    got = out.double().numpy()
    keep = np.abs(want) >= 1e-30
    u = _ulps(got[keep], want[keep])
    near = x.numpy()[keep] >= -3
    assert u[near].max() <= BOUNDS[op][0], f"{op}: {u[near].max():.2f} ulps for x >= -3"
    assert u.max() <= BOUNDS[op][1], f"{op}: {u.max():.2f} ulps"


def test_fp32_norm_and_softmax_accuracy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 1000, generator=g) * 2 + 0.5
    w, b = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    k = kernel("norm", op="layer_norm", dtype="f32", max_hidden=1024, waves_per_row=2, rows_per_workgroup=4, bias=True)
    out = torch.empty_like(x)
    run(k, x, w, b, out, eps=1e-5)
    want = F.layer_norm(x.double(), (1000,), w.double(), b.double(), 1e-5)
    rms = want.pow(2).mean(-1, keepdim=True).sqrt()
    assert ((out.double() - want).abs() / rms).max() < 16 * 2 ** -23
    k = kernel("softmax", dtype="f32", max_cols=1024, waves_per_row=1, rows_per_workgroup=4)
    xs = torch.randn(16, 1000, generator=g) * 3
    out = torch.empty_like(xs)
    run(k, xs, out)
    assert _ulps(out.double().numpy(), torch.softmax(xs.double(), -1).numpy()).max() <= 20


# ----------------------------------------------------------------------------- the emitted text
@pytest.mark.parametrize("generator,params", [
    ("norm", {"op": "dropout_add_layer_norm", "dtype": "bf16", "waves_per_row": 2, "bias": True, "max_hidden": 2048}),
    ("softmax", {"dtype": "f16", "waves_per_row": 4, "max_cols": 2048}),
    ("rotary", {"style": "interleaved", "dtype": "bf16"}),
    ("activation", {"op": "gelu", "dtype": "bf16"}),
    ("gated_activation", {"op": "silu", "dtype": "f32"}),
])
def test_emitted_assembly_is_readable(generator, params):
    asm = kernel(generator, **params).assembly
    body = asm[asm.index(":\n", asm.index(".type")):asm.index(".amdhsa_kernel")]
    lines = [ln.strip() for ln in body.splitlines()]
    for ln in lines:
        if re.match(r"s_(waitcnt|nop|barrier)\b", ln):
            assert "//" in ln and ln.split("//", 1)[1].strip(), f"no reason given: {ln}"
        code = ln.split("//", 1)[0]
        if re.match(r"[vs]_|buffer_|ds_", code):
            assert not re.search(r"\b[vs]\d+\b|\b[vs]\[\d+", code), f"physical register in: {ln}"


# ----------------------------------------------------------------------------- hazard nops
MEMORY_SPECS = ("rms_norm_bf16", "add_rms_norm_bf16", "layer_norm_bf16", "dropout_add_layer_norm_bf16", "softmax_bf16",
                "rotary_neox_bf16", "rotary_interleaved_bf16", "silu_bf16", "gelu_bf16", "gelu_tanh_bf16", "relu_bf16",
                "tanh_bf16", "silu_and_mul_bf16", "gelu_and_mul_bf16", "gelu_tanh_and_mul_bf16",
                "per_token_quant_fp8_bf16", "static_quant_fp8_bf16", "rms_norm_per_token_quant_fp8_bf16",
                "add_rms_norm_per_token_quant_fp8_bf16", "silu_and_mul_per_token_quant_fp8_bf16", "mxfp8_quant_bf16",
                "mxfp4_quant_bf16")
ROW_SPECS = MEMORY_SPECS[:5]
# the only wait states left to s_nop are latency with nothing independent to fill it: a reduction's DPP
# step reading the previous step of its own chain (two chains interleaved fill one of its two slots; the
# softmax max is one chain) and v_readlane of its last step, a transcendental's result read by the very
# next instruction (1 wait state), and with one wave per row the first VALU read of the v_readlane results
UNAVOIDABLE = re.compile(r"hazard: v_\w+ writes v\d+, v_\w+ reads \(DPP\) v\d+"
                         r"|hazard: v_(add|max)_f32 writes v\d+, v_readlane_b32 reads v\d+: 1 wait state$"
                         r"|hazard: v_max_u32 writes v\d+, v_readlane_b32 reads v\d+: 1 wait state$"
                         r"|hazard: v_(exp|rcp|rsq)_f32 writes v\d+, v_\w+ reads v\d+: 1 wait state$"
                         r"|hazard: v_readlane_b32 writes s\d+, v_\w+ reads s\d+: 2 wait states")


@pytest.mark.parametrize("spec,overrides", [(s, ()) for s in MEMORY_SPECS] +
                                           [(s, ("dtype=f32", "waves_per_row=4")) for s in ROW_SPECS] +
                                           [("softmax_bf16", ("dtype=f32", "waves_per_row=1", "max_cols=2048"))])
def test_no_avoidable_hazard_nops(spec, overrides):
    """Compare masks are issued ahead of their selects (two mask sets), cross-wave results are read from
    VGPRs, the wave index comes from v_readfirstlane of the hardware's tid: no s_nop waits for a VALU-written
    SGPR/VCC or a fresh VGPR in any memory-bound kernel (the lone-element tail of odd 16-bit activations,
    run once per launch, aside)."""
    from isagen.api import resolve_spec
    from isagen.builders.spec import load_spec
    s = load_spec(resolve_spec(spec), list(overrides))
    asm = render_assembly(s.build(s.select_targets()[0]))          # the first target listed (gfx942 but MXFP8's)
    body = asm.split("// tail:")[0]
    nops = [ln.strip() for ln in body.splitlines() if re.match(r"\s*s_nop\b", ln)]
    avoidable = [ln for ln in nops if not UNAVOIDABLE.search(ln)]
    assert not avoidable, f"{spec} {overrides}: {len(avoidable)} avoidable s_nop, e.g. {avoidable[0]}"


def test_numpy_free_min_scale_is_the_float32_quotient():
    # the generators take vLLM's scale floor from fp8_formats (no numpy); the model computes it in float32
    from isagen.prims.fp8_formats import min_scale_value
    from isagen.prims.fp8_model import FP8_MAX, min_scale
    for fmt in FP8_MAX:
        assert min_scale_value(fmt) == float(min_scale(fmt))
        assert np.float32(min_scale_value(fmt)) == np.float32(1.0) / np.float32(FP8_MAX[fmt] * 512.0)
