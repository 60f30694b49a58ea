"""The memory-bound kernels as torch operators (``torch.ops.isagen.*``, dtype-generic) and through
``isagen run``: schemas from the launch contracts, results against torch in every dtype, fake (meta)
implementations, and the dropout spec checked with p > 0 against its documented mask."""

import torch
import torch.nn.functional as F

import isagen.runtime.torch_ops as ops
from isagen.cli import main as cli_main
from mem_support import TORCH, assert_close


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
        y = torch.ops.isagen.silu_and_mul(x.view(5, 2, 500))
        assert_close(y, F.silu(x[:, :500].double()) * x[:, 500:].double(), dtype, f"silu_and_mul {dtype}", scale=8)
        assert y.dtype == t and y.shape == (5, 500)


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


def test_isagen_run_dropout_spec_with_p(capsys):
    assert cli_main(["run", "dropout_add_layer_norm_bf16", "--shape", "rows=9", "--shape", "hidden=1000",
                     "--scalar", "p=0.3", "--scalar", "seed=11", "--scalar", "offset=5"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "PASS" and "residual_out" in out
