"""``isagen.scaled_mm`` and ``torch.ops.isagen.scaled_mm`` (the FP8 GEMM on torch tensors, emulator)
against float64 math on the dequantised inputs: per-tensor, row-wise and mixed scales, every output
type, bias, decode-size M, on both targets; the fake for torch.compile; every bad input refused in one
line naming the argument."""

import math

import pytest
import torch

import isagen
import isagen.runtime.torch_ops  # noqa: F401 -- registers torch.ops.isagen.scaled_mm
from isagen.api import torch_dtype
from isagen.errors import LaunchError

UNIT = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def operands(target, M, N, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    f8 = torch_dtype("fp8", target)
    return torch.randn(M, K, generator=g).to(f8), torch.randn(N, K, generator=g).to(f8)


def expect(c, a, b, sa, sb, bias=None):
    """|C - ref| <= (K+4)·2⁻²⁴·|ref|(|inputs|) + u(out)·|ref| (products of fp8 are exact in fp32)."""
    K = a.shape[1]
    ref = sa.double() * (a.double() @ b.double().T) * sb.double()
    mag = sa.double().abs() * (a.double().abs() @ b.double().abs().T) * sb.double().abs()
    if bias is not None:
        ref, mag = ref + bias.float().double(), mag + bias.float().double().abs()
    err = (c.double() - ref).abs()
    tol = (K + 4) * 2.0 ** -24 * mag + UNIT[c.dtype] * ref.abs() + 1e-30
    assert c.shape == ref.shape and (err <= tol).all(), f"max error {err.max():.3g}"
    assert ref.abs().max() > 1


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("form", ["tensor", "row", "mixed"])
def test_scalings(target, form):
    M, N, K = 70, 40, 96
    a, b = operands(target, M, N, K)
    g = torch.Generator().manual_seed(1)
    if form == "tensor":
        sa, sb = torch.tensor(0.75), torch.tensor([1.5])
    elif form == "row":
        sa, sb = torch.rand(M, 1, generator=g) + 0.25, torch.rand(1, N, generator=g) - 0.5
    else:
        sa, sb = torch.tensor(2.0), torch.rand(1, N, generator=g) + 0.25
    c = isagen.scaled_mm(a, b, sa, sb, torch.bfloat16, target=target)
    assert c.dtype == torch.bfloat16
    expect(c, a, b, sa, sb)


@pytest.mark.parametrize("target,out", [("gfx942", torch.float16), ("gfx950", torch.float32)])
def test_out_dtypes_bias_and_decode_m(target, out):
    """One token (M = 1), bias in bf16 (added in fp32), f16 / fp32 out, through the torch op."""
    a, b = operands(target, 1, 28, 64, seed=2)
    sa, sb = torch.tensor([[0.5]]), torch.rand(1, 28) + 0.5
    bias = torch.randn(28).to(torch.bfloat16)
    c = torch.ops.isagen.scaled_mm(a, b, sa, sb, out, bias, target)
    assert c.dtype == out and c.shape == (1, 28)
    expect(c, a, b, sa.reshape(1, 1), sb, bias)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_e5m2_gradient_operand(target):
    """dgrad-style: e5m2 gradient a times e4m3 weights b, and e5m2 times e5m2."""
    g = torch.Generator().manual_seed(4)
    e5, e4 = torch_dtype("bf8", target), torch_dtype("fp8", target)
    a, b = torch.randn(24, 64, generator=g).to(e5), torch.randn(20, 64, generator=g).to(e4)
    sa, sb = torch.tensor(0.25), torch.rand(1, 20, generator=g) + 0.5
    expect(isagen.scaled_mm(a, b, sa, sb, torch.float32, target=target), a, b, sa, sb)
    expect(isagen.scaled_mm(a, b.to(torch.float32).to(e5), sa, sb, torch.float32, target=target), a,
           b.to(torch.float32).to(e5), sa, sb)


def expect_block(c, a, b, sa, sb):
    """Block scales: the float64 sum over K-blocks of scale_a·scale_b·(a·bᵀ of the block), within the
    kernel's bound (tests/kernels/test_gemm_fp8_blockscale_emu.py explains it)."""
    from isagen.prims.fp8_model import torch_block_scaled_mm
    ref = torch_block_scaled_mm(a, b, sa, sb)
    mag = torch_block_scaled_mm(a.double().abs(), b.double().abs(), sa.abs(), sb.abs())
    kb = a.shape[1] // 128
    err = (c.double() - ref).abs()
    tol = (128 + 2 * kb + 4) * kb * 2.0 ** -24 * mag + UNIT[c.dtype] * ref.abs() + 1e-30
    assert c.shape == ref.shape and (err <= tol).all(), f"max error {err.max():.3g}"
    assert ref.abs().max() > 1


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("M", [5, 70])
def test_block_scales(target, M):
    """block_size [128, 128]: scale_a (M, K/128), scale_b (cdiv(N,128), K/128); decode-size M (64x256 tile)
    and M above 64 (128x256), N past a 128-block, through the torch op too."""
    N, K = 136, 256
    a, b = operands(target, M, N, K, seed=M)
    g = torch.Generator().manual_seed(3)
    sa, sb = torch.rand(M, 2, generator=g) + 0.25, torch.rand(2, 2, generator=g) + 0.25
    expect_block(isagen.scaled_mm(a, b, sa, sb, torch.bfloat16, target=target, block_size=[128, 128]), a, b, sa, sb)
    c = torch.ops.isagen.scaled_mm(a, b, sa, sb, torch.float32, None, target, [128, 128])
    expect_block(c, a, b, sa, sb)


def test_fake_gives_shape_and_dtype():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(33, 64, dtype=torch.float8_e4m3fnuz)
        b = torch.empty(48, 64, dtype=torch.float8_e4m3fnuz)
        c = torch.ops.isagen.scaled_mm(a, b, torch.empty(()), torch.empty(()), torch.float16)
        d = torch.ops.isagen.scaled_mm(a, b, torch.empty(33, 1), torch.empty(1, 1), torch.float32, None, None,
                                       [128, 128])
    assert c.shape == (33, 48) and c.dtype == torch.float16
    assert d.shape == (33, 48) and d.dtype == torch.float32


def bad_call(target="gfx942", M=8, N=16, K=32, **change):
    a, b = operands(target if target in ("gfx942", "gfx950") else "gfx942", M, N, K)
    args = {"a": a, "b": b, "scale_a": torch.tensor(1.0), "scale_b": torch.tensor(1.0),
            "out_dtype": torch.bfloat16, "bias": None, "target": target}
    args.update(change)
    return lambda: isagen.scaled_mm(**args)


@pytest.mark.parametrize("call,message", [
    (bad_call(a=torch.zeros(8, 32).to(torch.float8_e4m3fn)),
     r"a must be torch.float8_e4m3fnuz or torch.float8_e5m2fnuz \(e4m3 or e5m2 on gfx942\); "
     r"torch.float8_e4m3fn is gfx950's e4m3 format"),
    (bad_call("gfx950", b=torch.zeros(16, 32).to(torch.float8_e4m3fnuz)),
     r"b must be torch.float8_e4m3fn or torch.float8_e5m2 .*; torch.float8_e4m3fnuz is gfx942's e4m3"),
    (bad_call(b=torch.zeros(16, 32).to(torch.float8_e5m2)), r"torch.float8_e5m2 is gfx950's e5m2 format"),
    (bad_call(b=torch.zeros(16, 32).to(torch.bfloat16)), r"got torch.bfloat16"),
    (bad_call(b=torch.zeros(16, 48).to(torch.float8_e4m3fnuz)), r"their K differ"),
    (bad_call(K=40), r"K = 40 must be a positive multiple of 16"),
    (bad_call(N=18), r"N = 18 must be a multiple of 4"),
    (bad_call(scale_a=torch.ones(16, 1)), r"scale_a has shape \(16, 1\); it must be \(\) or \(1,\) .* \(8, 1\)"),
    (bad_call(scale_b=torch.ones(16, 1)), r"scale_b has shape \(16, 1\); .* \(1, 16\)"),
    (bad_call(scale_b=torch.tensor(math.inf)), r"scale_b holds a non-finite value"),
    (bad_call(scale_a=torch.full((8, 1), math.nan)), r"scale_a holds a non-finite value"),
    (bad_call(scale_a=torch.tensor(1.0, dtype=torch.float64)), r"scale_a must be float32, got torch.float64"),
    (bad_call(out_dtype=torch.int8), r"out_dtype must be one of"),
    (bad_call(bias=torch.ones(8)), r"bias must be a float tensor of shape \(16,\), got shape \(8,\)"),
    (bad_call(target="gfx900"), r"unsupported target"),
    (bad_call(K=192, block_size=[128, 128]), r"K = 192 must be a multiple of 128 with block_size \[128, 128\]"),
    (bad_call(K=256, block_size=[128, 128], scale_a=torch.ones(8, 1), scale_b=torch.ones(1, 2)),
     r"scale_a has shape \(8, 1\); with block_size \[128, 128\] it must be \(8, 2\)"),
    (bad_call(K=256, block_size=[128, 128], scale_a=torch.ones(8, 2), scale_b=torch.ones(16, 2)),
     r"scale_b has shape \(16, 2\); with block_size \[128, 128\] it must be \(1, 2\)"),
    (bad_call(K=256, block_size=[128, 128], scale_a=torch.ones(8, 2),
              scale_b=torch.tensor([[1.0, math.inf]])), r"scale_b holds a non-finite value"),
    (bad_call(K=256, block_size=[128, 128], scale_a=torch.ones(8, 2, dtype=torch.float16),
              scale_b=torch.ones(1, 2)), r"scale_a must be float32"),
    (bad_call(K=256, block_size=[1, 128], scale_a=torch.ones(8, 2), scale_b=torch.ones(1, 2)),
     r"block_size must be \[128, 128\]"),
    (bad_call(K=256, scale_a=torch.ones(8, 2), scale_b=torch.ones(1, 2)),
     r"scale_a has shape \(8, 2\); it must be \(\) or \(1,\)"),
])
def test_bad_inputs_one_line(call, message):
    with pytest.raises(Exception, match=message) as e:
        call()
    assert isinstance(e.value, (LaunchError, isagen.errors.TargetError)) and "\n" not in str(e.value)
    assert str(e.value).startswith("scaled_mm: ")
