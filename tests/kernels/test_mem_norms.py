"""RMSNorm, fused add + RMSNorm, LayerNorm and fused dropout + residual + LayerNorm, run in the emulator
(sanitizer on) against float64 torch: every op and dtype, hidden sizes with tails (128, 1000, 4096,
8192), row counts that leave a partial workgroup, 1/2/4 waves per row, the dropout mask against the
documented hash, p = 0 against plain LayerNorm bit for bit, gfx950, and the bytes moved."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mem_support import TORCH, assert_close, keep_mask, kernel, rand, run

from isagen.errors import LaunchError, SpecError

OPS = ("rms_norm", "add_rms_norm", "layer_norm", "dropout_add_layer_norm")
WPR = {"bf16": 1, "f16": 2, "f32": 4}          # every dtype on a different waves-per-row


def norm_kernel(op, dtype, target="gfx942", max_hidden=1024, waves=4, wpr=None, rows_per_workgroup=4):
    return kernel("norm", target, op=op, dtype=dtype, max_hidden=max_hidden, waves=waves,
                  waves_per_row=wpr or WPR[dtype], rows_per_workgroup=rows_per_workgroup, bias="layer" in op)


def inputs(op, dtype, rows, hidden, seed):
    t = {"x": rand((rows, hidden), dtype, seed, 2.0, 0.7), "weight": rand((hidden,), dtype, seed + 1)}
    if "add" in op:
        t["residual"] = rand((rows, hidden), dtype, seed + 2)
    if "layer" in op:
        t["bias"] = rand((hidden,), dtype, seed + 3)
    return t


def call(k, op, t, eps, **scalars):
    rows, hidden = t["x"].shape
    out = torch.empty_like(t["x"])
    args = dict(t, out=out)
    if "add" in op:
        args["residual_out"] = torch.empty_like(t["x"])
    stats = run(k, **args, eps=eps, **scalars)
    return out, args.get("residual_out"), stats


def reference(op, t, dtype, eps, h=None):
    """float64 reference of the documented semantics: h = x (+ residual, dropout) rounded to dtype."""
    x = t["x"].double()
    if h is None:
        h = x + t["residual"].double() if "add" in op else x
    if "add" in op:
        h = h.to(TORCH[dtype]).double()
    w = t["weight"].double()
    if "rms" in op:
        out = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) * w
    else:
        out = F.layer_norm(h, h.shape[-1:], w, t["bias"].double(), eps)
    return out, h


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("op", OPS)
def test_every_op_and_dtype_full_and_short_rows(op, dtype):
    """hidden 1024 fills the registers (unmasked path), 1000 leaves a tail (masked path); 7 rows with 4
    per workgroup leave a partial last workgroup."""
    k = norm_kernel(op, dtype)
    eps = 1e-5
    scalars = {"p": 0.0, "seed": 0, "offset": 0} if "dropout" in op else {}
    for hidden in (1024, 1000):
        t = inputs(op, dtype, 7, hidden, seed=hidden)
        out, res, stats = call(k, op, t, eps, **scalars)
        want, h = reference(op, t, dtype, eps)
        assert_close(out, want, dtype, f"{op} {dtype} hidden={hidden}", scale=4)
        if res is not None:
            assert_close(res, h, dtype, f"{op} {dtype} residual_out hidden={hidden}", scale=4)
        if op == "add_rms_norm":            # fp32 add, one round to nearest even: torch's own add, bit for bit
            assert torch.equal(res, (t["x"].float() + t["residual"].float()).to(TORCH[dtype]))
        # every tensor byte read once (the weight and bias once per workgroup), every output byte written once
        esize = t["x"].element_size()
        row_tensors = 2 if "add" in op else 1
        vectors = 2 if "layer" in op else 1
        assert stats["global_bytes_read"] == esize * hidden * (7 * row_tensors + vectors * 2)   # 2 workgroups
        assert stats["global_bytes_written"] == esize * hidden * 7 * (2 if "add" in op else 1)


@pytest.mark.parametrize("spec,op", [("rms_norm_bf16", "rms_norm"), ("layer_norm_bf16", "layer_norm")])
def test_bundled_specs_over_hidden_sizes(spec, op):
    import isagen
    k = isagen.build(spec, "gfx942")
    for rows, hidden in ((3, 128), (5, 1000), (2, 4096), (33, 8192)):
        t = inputs(op, "bf16", rows, hidden, seed=rows)
        out, _, stats = call(k, op, t, 1e-6)
        want, _ = reference(op, t, "bf16", 1e-6)
        assert_close(out, want, "bf16", f"{spec} rows={rows} hidden={hidden}", scale=4)
        assert stats["global_bytes_by_width"] == {16: stats["global_bytes_read"] + stats["global_bytes_written"]}


def test_layer_norm_keeps_precision_far_from_zero():
    """Mean 100, std 1: the two-pass variance keeps ~1e-5 (E[x^2] - mean^2 in fp32 would lose ~3e-4);
    the masked tail (1000 of 1024 columns) must not bias either pass."""
    k = norm_kernel("layer_norm", "f32")
    t = inputs("layer_norm", "f32", 6, 1000, seed=3)
    t["x"] = (torch.randn(6, 1000, generator=torch.Generator().manual_seed(9), dtype=torch.float64) + 100).float()
    out, _, _ = call(k, "layer_norm", t, 1e-5)
    want, _ = reference("layer_norm", t, "f32", 1e-5)
    assert_close(out, want, "f32", "layer_norm mean 100 std 1", rtol=2e-5, atol=2e-5)


def test_dropout_p0_is_layer_norm_bit_for_bit():
    """dropout_add_layer_norm with p = 0 and a zero residual gives exactly what layer_norm gives."""
    ln = norm_kernel("layer_norm", "bf16")
    dln = norm_kernel("dropout_add_layer_norm", "bf16")
    t = inputs("dropout_add_layer_norm", "bf16", 9, 1000, seed=5)
    t["residual"] = torch.zeros_like(t["x"])
    out, res, _ = call(dln, "dropout_add_layer_norm", t, 1e-5, p=0.0, seed=123, offset=77)
    plain, _, _ = call(ln, "layer_norm", {k: v for k, v in t.items() if k != "residual"}, 1e-5)
    assert torch.equal(res, t["x"])
    assert torch.equal(out.view(torch.int16), plain.view(torch.int16))


@pytest.mark.parametrize("dtype,p,seed,offset", [("bf16", 0.1, 1, 0), ("f32", 0.5, 0xDEADBEEF, 12345),
                                                 ("f16", 0.9, 7, 2 ** 32 - 100)])
def test_dropout_mask_is_the_documented_hash(dtype, p, seed, offset):
    k = norm_kernel("dropout_add_layer_norm", dtype)
    rows, hidden = 6, 1000
    t = inputs("dropout_add_layer_norm", dtype, rows, hidden, seed=11)
    t["x"] = t["x"].abs() + 1            # no zeros in x: a kept element is never 0
    t["residual"] = torch.zeros_like(t["x"])
    out, res, _ = call(k, "dropout_add_layer_norm", t, 1e-5, p=p, seed=seed, offset=offset)
    keep = keep_mask(seed, offset, rows, hidden, p)
    got_keep = (res != 0).numpy()
    assert np.array_equal(got_keep, keep), f"{int((got_keep != keep).sum())} mask bits differ"
    assert abs(1 - keep.mean() - p) < 4 * np.sqrt(p * (1 - p) / keep.size)
    scale = float(np.float32(1) / (np.float32(1) - np.float32(p)))
    h = torch.where(torch.from_numpy(keep), t["x"].double() * scale, torch.zeros((), dtype=torch.float64))
    assert_close(res, h.to(TORCH[dtype]).double(), dtype, "residual_out = dropout(x)", scale=4)
    want, _ = reference("dropout_add_layer_norm", t, dtype, 1e-5, h=h)
    assert_close(out, want, dtype, f"dropout_add_layer_norm {dtype} p={p}", scale=4)


def test_dropout_with_residual_and_p_one():
    k = norm_kernel("dropout_add_layer_norm", "f32")
    t = inputs("dropout_add_layer_norm", "f32", 5, 700, seed=2)
    out, res, _ = call(k, "dropout_add_layer_norm", t, 1e-5, p=0.3, seed=9, offset=3)
    keep = torch.from_numpy(keep_mask(9, 3, 5, 700, 0.3))
    scale = float(np.float32(1) / np.float32(0.7))
    h = torch.where(keep, t["x"].double() * scale, torch.zeros((), dtype=torch.float64)) + t["residual"].double()
    assert_close(res, h, "f32", "residual_out", scale=4)
    assert_close(out, reference("dropout_add_layer_norm", t, "f32", 1e-5, h=h)[0], "f32", "out", scale=4)
    _, res1, _ = call(k, "dropout_add_layer_norm", t, 1e-5, p=1.0, seed=9, offset=3)
    assert torch.equal(res1, t["residual"])           # p = 1 drops everything


def test_gfx950_runs_every_op():
    for op in OPS:
        k = norm_kernel(op, "bf16", target="gfx950", wpr=2)
        t = inputs(op, "bf16", 5, 1000, seed=8)
        scalars = {"p": 0.2, "seed": 4, "offset": 0} if "dropout" in op else {}
        out, res, _ = call(k, op, t, 1e-5, **scalars)
        h = None
        if "dropout" in op:
            keep = torch.from_numpy(keep_mask(4, 0, 5, 1000, 0.2))
            h = torch.where(keep, t["x"].double() * float(np.float32(1) / np.float32(0.8)),
                            torch.zeros((), dtype=torch.float64)) + t["residual"].double()
        want, hr = reference(op, t, "bf16", 1e-5, h=h)
        assert_close(out, want, "bf16", f"{op} gfx950", scale=4)
        if res is not None:
            assert_close(res, hr, "bf16", f"{op} gfx950 residual_out", scale=4)
        if op == "add_rms_norm":            # v_cvt_pk_bf16_f32 rounds to nearest even, as torch
            assert torch.equal(res, (t["x"].float() + t["residual"].float()).bfloat16())


def test_launch_and_spec_errors():
    k = norm_kernel("rms_norm", "bf16")
    x = torch.zeros(2, 1026, dtype=torch.bfloat16)
    w = torch.zeros(1026, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="max_hidden=1024"):
        k.run(x, w, torch.empty_like(x), eps=1e-6, backend="emu")
    x, w = torch.zeros(2, 999, dtype=torch.bfloat16), torch.zeros(999, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="hidden must be even for bf16"):
        k.run(x, w, torch.empty_like(x), eps=1e-6, backend="emu")
    with pytest.raises(SpecError, match="rows_per_workgroup=6 is not a multiple of the 4 row groups"):
        kernel("norm", op="rms_norm", dtype="bf16", waves=4, waves_per_row=1, rows_per_workgroup=6)
    with pytest.raises(SpecError, match="rms_norm has no bias"):
        kernel("norm", op="rms_norm", dtype="bf16", bias=True)
    with pytest.raises(SpecError, match="raise waves_per_row"):
        kernel("norm", op="dropout_add_layer_norm", dtype="f32", max_hidden=8192, waves_per_row=1, bias=True)
