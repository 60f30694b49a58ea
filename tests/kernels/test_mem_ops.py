"""The memory-bound kernels as torch operators (``torch.ops.isagen.*``, dtype-generic) and through
``isagen run``: schemas from the launch contracts, results against torch in every dtype (the row ops over
hidden 128 and 8192 too), torch-style shapes ([..., hidden] rows, any-shape activations, [..., 2d]
gate|up halves, rotary head_dim from x), fake (meta) implementations, and the dropout spec checked with p > 0 against
its documented mask."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mem_support import TORCH, assert_close, keep_mask

import isagen.runtime.torch_ops as ops
from isagen.cli import main as cli_main
from isagen.errors import LaunchError


def test_schemas():
    schemas = ops.registered_ops()
    assert schemas["rms_norm"] == "(Tensor x, Tensor weight, float eps) -> Tensor"
    assert schemas["add_rms_norm"] == "(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)"
    assert schemas["layer_norm"] == "(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor"
    assert schemas["dropout_add_layer_norm"] == ("(Tensor x, Tensor residual, Tensor weight, Tensor bias, float eps, "
                                                 "float p, int seed, int offset) -> (Tensor, Tensor)")
    assert schemas["softmax"] == "(Tensor x) -> Tensor"
    assert schemas["rotary_neox"] == "(Tensor x, Tensor cos, Tensor sin) -> Tensor"
    for op in ("silu", "gelu", "gelu_tanh", "relu", "tanh", "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        assert schemas[op] == "(Tensor x) -> Tensor", op


def test_ops_in_every_dtype():
    g = torch.Generator().manual_seed(0)
    for dtype in ("f32", "bf16", "f16"):
        t = TORCH[dtype]
        x = (torch.randn(5, 1000, generator=g) * 2).to(t)
        w = torch.randn(1000, generator=g).to(t)
        y = torch.ops.isagen.rms_norm(x, w, 1e-6)
        assert_close(y, F.rms_norm(x.double(), (1000,), w.double(), 1e-6), dtype, f"rms_norm {dtype}", scale=4)
        y = torch.ops.isagen.softmax(x)
        assert_close(y, torch.softmax(x.double(), -1), dtype, f"softmax {dtype}")
        y = torch.ops.isagen.silu_and_mul(x)
        assert_close(y, F.silu(x[:, :500].double()) * x[:, 500:].double(), dtype, f"silu_and_mul {dtype}", scale=8)
        assert y.dtype == t and y.shape == (5, 500)


def _rand(shape, dtype, g, scale=2.0):
    return (torch.randn(shape, generator=g) * scale).to(TORCH[dtype])


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_row_ops_over_hidden_sizes(dtype):
    """Every row op at hidden 128 and 8192 (the bundled max_hidden) in the 16-bit type the bundled bf16
    tests do not cover and in fp32 (4 waves per row), 3 rows: a partial workgroup of 16."""
    g = torch.Generator().manual_seed(7)
    for hidden in (128, 8192):
        x, r = _rand((3, hidden), dtype, g), _rand((3, hidden), dtype, g)
        w, b = _rand((hidden,), dtype, g, 1.0), _rand((hidden,), dtype, g, 1.0)
        what = f"{dtype} hidden={hidden}"
        xd, rd, wd, bd = x.double(), r.double(), w.double(), b.double()
        assert_close(torch.ops.isagen.rms_norm(x, w, 1e-6), F.rms_norm(xd, (hidden,), wd, 1e-6), dtype,
                     f"rms_norm {what}", scale=4)
        out, res = torch.ops.isagen.add_rms_norm(x, r, w, 1e-6)
        h = (x.double() + r.double()).to(TORCH[dtype]).double()
        assert_close(res, h, dtype, f"add_rms_norm residual_out {what}", scale=4)
        assert_close(out, F.rms_norm(h, (hidden,), wd, 1e-6), dtype, f"add_rms_norm {what}", scale=4)
        assert_close(torch.ops.isagen.layer_norm(x, w, b, 1e-5), F.layer_norm(xd, (hidden,), wd, bd, 1e-5), dtype,
                     f"layer_norm {what}", scale=4)
        out, res = torch.ops.isagen.dropout_add_layer_norm(x, r, w, b, 1e-5, 0.25, 3, 11)
        keep = torch.from_numpy(keep_mask(3, 11, 3, hidden, 0.25))
        scale = float(np.float32(1) / np.float32(0.75))
        h = (torch.where(keep, xd * scale, torch.zeros((), dtype=torch.float64)) + rd).to(TORCH[dtype]).double()
        assert_close(res, h, dtype, f"dropout_add_layer_norm residual_out {what}", scale=4)
        assert_close(out, F.layer_norm(h, (hidden,), wd, bd, 1e-5), dtype, f"dropout_add_layer_norm {what}", scale=4)
        assert_close(torch.ops.isagen.softmax(x), torch.softmax(xd, -1), dtype, f"softmax {what}")


def test_torch_style_shapes():
    """Row ops take [..., hidden] (as F.rms_norm / F.layer_norm / softmax(dim=-1)), activations any shape,
    the gated ops [..., 2d] = gate | up (vLLM's and AITER's silu_and_mul) -> [..., d]."""
    g = torch.Generator().manual_seed(3)
    x, r, w = _rand((2, 3, 256), "bf16", g), _rand((2, 3, 256), "bf16", g), _rand((256,), "bf16", g, 1.0)
    y = torch.ops.isagen.rms_norm(x, w, 1e-6)
    assert y.shape == x.shape
    assert_close(y, F.rms_norm(x.double(), (256,), w.double(), 1e-6), "bf16", "rms_norm [2, 3, 256]", scale=4)
    out, res = torch.ops.isagen.add_rms_norm(x, r, w, 1e-6)
    assert out.shape == res.shape == x.shape
    y = torch.ops.isagen.rms_norm(x[0, 0], w, 1e-6)                  # one row, 1-D
    assert y.shape == (256,)
    assert_close(y, F.rms_norm(x[0, 0].double(), (256,), w.double(), 1e-6), "bf16", "rms_norm [256]", scale=4)
    assert_close(torch.ops.isagen.softmax(x), torch.softmax(x.double(), -1), "bf16", "softmax [2, 3, 256]")
    y = torch.ops.isagen.gelu(x)
    assert y.shape == x.shape
    assert_close(y, F.gelu(x.double()), "bf16", "gelu [2, 3, 256]", scale=4)
    y = torch.ops.isagen.gelu_tanh_and_mul(x)
    assert y.shape == (2, 3, 128)
    want = F.gelu(x[..., :128].double(), approximate="tanh") * x[..., 128:].double()
    assert_close(y, want, "bf16", "gelu_tanh_and_mul [2, 3, 256]", scale=8)
    q = _rand((5, 3, 64), "f32", g)                                   # head_dim 64: built from x's shape
    ang = torch.rand(5, 32, generator=g) * 6.3
    y = torch.ops.isagen.rotary_interleaved(q, ang.cos(), ang.sin())
    a, b, c, s = q[..., 0::2].double(), q[..., 1::2].double(), ang.cos().double()[:, None], ang.sin().double()[:, None]
    assert_close(y, torch.stack([a * c - b * s, b * c + a * s], -1).flatten(-2), "f32", "rotary_interleaved 64",
                 scale=2)
    meta = torch.ops.isagen.silu_and_mul(torch.empty(4, 5, 64, device="meta"))
    assert meta.shape == (4, 5, 32)
    with pytest.raises(LaunchError, match=r"isagen::silu_and_mul: x has shape \(3, 5\); expected \[\.\.\., 2\*d\]"):
        torch.ops.isagen.silu_and_mul(torch.randn(3, 5))
    with pytest.raises(LaunchError, match=r"isagen::add_rms_norm: tensor 'residual' has shape \(3, 256\), but"):
        torch.ops.isagen.add_rms_norm(x, r[0], w, 1e-6)
    with pytest.raises(LaunchError, match=r"isagen::silu_and_mul_bf16: tensor 'x' has shape \(3, 256\), expected 3 "
                                          r"dimension\(s\) \[rows, 2, d\]"):
        torch.ops.isagen.silu_and_mul_bf16(x[0])                      # the per-spec op keeps the contract's shape


def test_functional_and_fake():
    x = torch.randn(4, 256)
    r = torch.randn(4, 256)
    before = r.clone()
    out, res = torch.ops.isagen.add_rms_norm(x, r, torch.ones(256), 1e-6)
    assert torch.equal(r, before)                                   # inputs are never modified
    assert_close(res, x.double() + r.double(), "f32", "residual_out")
    meta = torch.ops.isagen.dropout_add_layer_norm(torch.empty(3, 64, device="meta"), torch.empty(3, 64, device="meta"),
                                                   torch.empty(64, device="meta"), torch.empty(64, device="meta"),
                                                   1e-5, 0.1, 1, 0)
    assert [m.shape for m in meta] == [(3, 64), (3, 64)] and meta[0].device.type == "meta"
    rot = torch.ops.isagen.rotary_neox(torch.empty(7, 2, 128, device="meta"), torch.empty(7, 64, device="meta"),
                                       torch.empty(7, 64, device="meta"))
    assert rot.shape == (7, 2, 128)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_isagen_run_dropout_spec_with_p(target, capsys):
    assert cli_main(["run", "dropout_add_layer_norm_bf16", "--target", target, "--shape", "rows=9", "--shape",
                     "hidden=1000", "--scalar", "p=0.3", "--scalar", "seed=11", "--scalar", "offset=5"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "PASS" and "residual_out" in out and f"[{target}, emu]" in out
