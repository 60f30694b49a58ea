"""Property: a kernel called through the Python API with any tensors and scalars (wrong dtypes, shapes,
devices, strides, layouts; scalars of any type and value) either runs, and then computes what torch
computes, or raises an ``IsagenError`` of one line and leaves every tensor it was given untouched."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from fuzz_support import assert_one_line, examples
from hypothesis import given
from hypothesis import strategies as st

import isagen
from isagen.errors import IsagenError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")      # torch's beta-sparse / prototype-nested notes


@functools.cache
def kernel(name: str):
    return isagen.build(name, "gfx942", use_cache=False)     # the fuzz run leaves the user's cache alone


DTYPES = [torch.float32, torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.bool,
          torch.complex64, torch.uint8]
LAYOUTS = ["transposed", "every_other", "expanded", "sparse", "sparse_csr", "nested", "meta", "scalar"]


@st.composite
def tensors(draw, dims: int, size: int, want=torch.float32):
    """A tensor near what a kernel of ``dims`` dimensions and element type ``want`` takes: right, or wrong
    in a few of its dtype, shape and layout/device (one wrong thing at a time is the likeliest, so that
    each check is reached; a right tensor lets calls run and their results be checked)."""
    wrong = draw(st.sets(st.sampled_from(["dtype", "shape", "layout"]), max_size=3))
    dtype = draw(st.sampled_from(DTYPES)) if "dtype" in wrong else want
    shape = [size] * dims
    if "shape" in wrong:
        ndim = draw(st.sampled_from([dims, dims, dims - 1, dims + 1]))
        shape = [draw(st.sampled_from([size, size, 0, 1, 3, 65])) for _ in range(max(ndim, 0))]
    base = (torch.randn(shape) * 4).to(dtype) if dtype != torch.bool else torch.rand(shape) > 0.5
    layout = draw(st.sampled_from(LAYOUTS)) if "layout" in wrong else "contiguous"
    if layout == "transposed" and base.dim() >= 2:
        return base.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "every_other" and base.dim() >= 1:
        return torch.cat([base, base], dim=-1)[..., ::2]
    if layout == "expanded" and base.dim() >= 1:
        return base[..., :1].expand(base.shape)
    if layout == "sparse" and base.dim() >= 1 and dtype != torch.bool:
        return base.to_sparse()
    if layout == "sparse_csr" and base.dim() == 2 and dtype != torch.bool:
        return base.to_sparse_csr()
    if layout == "nested" and base.dim() >= 1 and dtype.is_floating_point:
        return torch.nested.nested_tensor([base, base])
    if layout == "meta":
        return base.to("meta")
    if layout == "scalar":
        return base.sum() if base.numel() else torch.tensor(1.0)
    return base


scalar_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-4, 4), st.integers(-2 ** 70, 2 ** 70),
    st.booleans(), st.none(), st.text(max_size=4), st.complex_numbers(max_magnitude=4),
    st.sampled_from([torch.tensor(1.5), [1.0], (1.0,), float("nan"), 2 ** 128, -0.0, 1e39, 3.4e38]))
extra = st.dictionaries(st.sampled_from(["alpha", "eps", "beta", "x", "backend_", "n"]), scalar_values, max_size=2)


def snapshot(t):
    if not isinstance(t, torch.Tensor) or t.device.type == "meta":
        return None
    if t.is_nested:
        return [u.clone() for u in t.unbind()]
    return t.to_dense().clone() if t.layout != torch.strided else t.clone()


def unchanged(t, before) -> bool:
    if before is None:
        return True
    now = snapshot(t)
    if isinstance(before, list):
        return all(torch.equal(a, b) for a, b in zip(now, before))
    return bool(torch.equal(now, before))


RAN: dict[str, int] = {}        # calls that ran, per kernel: the property is checked on both outcomes


def call(name, args, scalars):
    before = [snapshot(t) for t in args]
    try:
        result = kernel(name).run(*args, backend="emu", **scalars)
    except IsagenError as e:
        assert_one_line(e)
        assert all(unchanged(t, b) for t, b in zip(args, before)), "a refused call changed a tensor"
        return None, before
    RAN[name] = RAN.get(name, 0) + 1
    return result, before


@examples(30)
@given(tensors(1, 70), tensors(1, 70), st.one_of(st.just({"alpha": 1.5}), extra))
def test_axpy_calls(x, y, scalars):
    result, before = call("axpy_f32", [x, y], scalars)
    if result is None:
        return
    # it ran: x untouched, y = alpha*x + y (one fma, rounded once: within an ulp of the float64 value)
    assert unchanged(x, before[0])
    want = (float(scalars["alpha"]) * before[0].double() + before[1].double()).float()
    assert torch.allclose(y, want, rtol=2 ** -23, atol=0, equal_nan=True)


@examples(20)
@given(tensors(2, 64, torch.bfloat16), tensors(1, 64, torch.bfloat16), tensors(2, 64, torch.bfloat16),
       st.one_of(st.just({}), extra))
def test_rms_norm_calls(x, w, out, scalars):
    result, before = call("rms_norm_bf16", [x, w, out], scalars)
    if result is None:
        return
    assert unchanged(x, before[0]) and unchanged(w, before[1])
    eps = float(scalars.get("eps", 1e-6))
    want = torch.nn.functional.rms_norm(before[0].double(), before[0].shape[-1:], before[1].double(), eps)
    if math.isfinite(eps) and eps >= 0:
        assert torch.allclose(out.double(), want, rtol=2 ** -7, atol=1e-2, equal_nan=True)


@examples(20)
@given(st.lists(st.one_of(tensors(1, 8), scalar_values), max_size=4), extra)
def test_any_positional_arguments(args, scalars):
    call("axpy_f32", args, scalars)


def test_some_calls_ran():
    # the fuzz tests above (run first, in file order) checked results, not only refusals
    if RAN:
        assert RAN.get("axpy_f32", 0) > 0 and RAN.get("rms_norm_bf16", 0) > 0, RAN
