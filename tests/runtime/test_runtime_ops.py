"""torch.library ops: schemas derived from the launch contracts, fake implementations (meta tensors,
FakeTensorMode, torch.compile tracing), and real runs on CPU tensors through the emulator checked
against torch."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from isagen.errors import LaunchError, SpecError


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ISAGEN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    from isagen.runtime import torch_ops
    yield torch_ops
    mp.undo()


def test_schemas_come_from_the_launch_contracts(ops):
    expected = {
        "axpy_f32": "isagen::axpy_f32(Tensor x, Tensor y, float alpha) -> Tensor",
        "add_bf16": "isagen::add_bf16(Tensor x, Tensor y) -> Tensor",
        "scale_f16": "isagen::scale_f16(Tensor x, float alpha) -> Tensor",
        "axpy": "isagen::axpy(Tensor x, Tensor y, float alpha) -> Tensor",
        "scale": "isagen::scale(Tensor x, float alpha) -> Tensor",
        "add": "isagen::add(Tensor x, Tensor y) -> Tensor",
    }
    for name, schema in expected.items():
        assert str(getattr(torch.ops.isagen, name).default._schema) == schema


def test_fake_implementations(ops):
    m = torch.empty(1000, device="meta")
    assert torch.ops.isagen.axpy_f32(m, m, 2.0).shape == (1000,)
    b = torch.empty(77, device="meta", dtype=torch.bfloat16)
    out = torch.ops.isagen.add_bf16(b, b)
    assert out.dtype == torch.bfloat16 and out.shape == (77,) and out.device.type == "meta"
    with FakeTensorMode():
        h = torch.empty(33, dtype=torch.float16)
        r = torch.ops.isagen.scale(h, 0.5)
        assert r.dtype == torch.float16 and r.shape == (33,)
        with pytest.raises(LaunchError,
                           match=r"isagen::scale: no kernel for torch.float64 tensors \(it has: f32, bf16, f16\)"):
            torch.ops.isagen.scale(h.double(), 0.5)


def test_registration_is_idempotent_and_guarded(ops):
    assert ops.register_op("axpy_f32", "axpy_f32") == "isagen::axpy_f32"
    with pytest.raises(SpecError, match="already registered for spec 'axpy_f32'"):
        ops.register_op("axpy_f32", "add_bf16")


# --------------------------------------------------------------------------- real runs (the emulator)
def test_ops_run_in_the_emulator_and_match_torch(ops):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    x0, y0 = x.clone(), y.clone()
    out = torch.ops.isagen.axpy_f32(x, y, 1.5)
    torch.testing.assert_close(out, (1.5 * x.double() + y.double()).float(), rtol=0, atol=0)
    assert torch.equal(x, x0) and torch.equal(y, y0)                  # functional: inputs untouched
    xb, yb = x.bfloat16(), y.bfloat16()
    torch.testing.assert_close(torch.ops.isagen.add(xb, yb), xb + yb, rtol=0, atol=0)
    xh = x[:999].half()                                                # odd n: the 16-bit tail path
    torch.testing.assert_close(torch.ops.isagen.scale(xh, -0.75), (xh.float() * -0.75).half(), rtol=0, atol=0)


def test_torch_compile_traces_through_the_op(ops):
    def f(a, b):
        return torch.ops.isagen.axpy(a, b, 2.0) * 0.5 + 1.0

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    a, b = torch.randn(512), torch.randn(512)
    torch.testing.assert_close(compiled(a, b), f(a, b), rtol=0, atol=0)
    torch.testing.assert_close(compiled(a, b), (2.0 * a + b) * 0.5 + 1.0)
