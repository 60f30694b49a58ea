"""``isagen.mx_mm`` / ``torch.ops.isagen.mx_mm`` (the gfx950 MX GEMM on torch tensors, in the emulator)
against float64 torch math on the dequantized inputs, its reference helper ``mx_dequantize`` against
values written out here, and every bad input as one LaunchError naming the argument."""

import pytest
import torch

import isagen
import isagen.runtime.torch_ops  # noqa: F401 -- registers torch.ops.isagen.*
from isagen.errors import LaunchError, TargetError

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def mx_inputs(fmt, M, N, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    if fmt == "e2m1":
        a = torch.randint(0, 256, (M, K // 2), generator=g, dtype=torch.int32).to(torch.uint8)
        b = torch.randint(0, 256, (N, K // 2), generator=g, dtype=torch.int32).to(torch.uint8)
    else:
        dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
        a, b = torch.randn(M, K, generator=g).to(dt), torch.randn(N, K, generator=g).to(dt)
    sa = torch.randint(120, 134, (M, K // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    sb = torch.randint(120, 134, (N, K // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    return a, b, sa, sb


def test_dequantize_e2m1_and_e8m0():
    """Byte 0x2B = high nibble 2 (1.0, k = 1), low nibble 0xB (-1.5, k = 0); scale 128 = 2, 255 = NaN."""
    x = torch.tensor([[0x2B] * 16, [0x70] * 16], dtype=torch.uint8)
    s = torch.tensor([[128], [255]], dtype=torch.uint8)
    v = isagen.mx_dequantize(x, s, "e2m1")
    assert v[0, 0].item() == -3.0 and v[0, 1].item() == 2.0 and v.shape == (2, 32)
    assert bool(torch.isnan(v[1]).all())
    codes = torch.arange(16, dtype=torch.uint8)
    both = (codes | (codes << 4)).reshape(1, 16).repeat(1, 2)        # 32 bytes: 64 elements, two blocks
    vals = isagen.mx_dequantize(both, torch.full((1, 2), 127, dtype=torch.uint8), "e2m1")[0, 0:32:2]
    assert vals.tolist() == E2M1 + [-e for e in E2M1]                 # the even k: low nibbles 0..15


@pytest.mark.parametrize("fmt,M,out", [("e4m3", 5, torch.bfloat16), ("e2m1", 70, torch.float32),
                                       ("e5m2", 33, torch.float16)])
def test_mx_mm_matches_float64(fmt, M, out):
    N, K = 64, 256
    a, b, sa, sb = mx_inputs(fmt, M, N, K, seed=M)
    c = isagen.mx_mm(a, b, sa, sb, out, a_format=fmt)
    assert c.shape == (M, N) and c.dtype == out
    ref = isagen.mx_dequantize(a, sa, fmt) @ isagen.mx_dequantize(b, sb, fmt).T
    mag = isagen.mx_dequantize(a, sa, fmt).abs() @ isagen.mx_dequantize(b, sb, fmt).abs().T
    unit = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}[out]
    assert bool(((c.double() - ref).abs() <= unit * ref.abs() + 2.0 ** -20 * mag + 2.0 ** -24).all())
    # the torch op is the same function
    c2 = torch.ops.isagen.mx_mm(a, b, sa, sb, out, fmt, fmt)
    assert torch.equal(c.view(torch.uint8), c2.view(torch.uint8))


def test_float4_and_e8m0_torch_dtypes_are_taken_as_bytes():
    a, b, sa, sb = mx_inputs("e2m1", 3, 32, 128)
    want = isagen.mx_mm(a, b, sa, sb, torch.float32, a_format="e2m1")
    got = isagen.mx_mm(a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2), sa.view(torch.float8_e8m0fnu),
                       sb.view(torch.float8_e8m0fnu), torch.float32, a_format="e2m1")
    assert torch.equal(want, got)


def test_fake_gives_shape_and_dtype():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(33, 64, dtype=torch.uint8)
        b = torch.empty(48, 64, dtype=torch.uint8)
        c = torch.ops.isagen.mx_mm(a, b, torch.empty(33, 4, dtype=torch.uint8), torch.empty(48, 4, dtype=torch.uint8),
                                   torch.float16, "e2m1", "e2m1")
    assert c.shape == (33, 48) and c.dtype == torch.float16


def bad_call(fmt="e4m3", M=8, N=16, K=128, **change):
    a, b, sa, sb = mx_inputs(fmt, M, N, K)
    args = {"a": a, "b": b, "scale_a": sa, "scale_b": sb, "out_dtype": torch.bfloat16, "a_format": fmt}
    args.update(change)
    return lambda: isagen.mx_mm(**args)


@pytest.mark.parametrize("call,message", [
    (bad_call(a=torch.zeros(8, 128).to(torch.float8_e4m3fnuz)), r"a must be torch.float8_e4m3fn for format e4m3"),
    (bad_call(b_format="e5m2"), r"b must be torch.float8_e5m2 for format e5m2"),
    (bad_call("e2m1", a=torch.zeros(8, 64)), r"a must be uint8 \(two e2m1 per byte"),
    (bad_call(b_format="e2m1"), r"a_format e4m3 with b_format e2m1: e2m1 \(MXFP4\) pairs only with e2m1"),
    (bad_call(a_format="e3m2"), r"a_format must be one of e4m3, e5m2, e2m1"),
    (bad_call(K=96, scale_a=torch.zeros(8, 3, dtype=torch.uint8), scale_b=torch.zeros(16, 3, dtype=torch.uint8)),
     r"K = 96 must be a positive multiple of 128"),
    (bad_call(N=18), r"N = 18 must be a multiple of 4"),
    (bad_call(b=torch.zeros(16, 256).to(torch.float8_e4m3fn)), r"their K differ"),
    (bad_call(scale_a=torch.zeros(8, 2, dtype=torch.uint8)), r"scale_a has shape \(8, 2\); it must be \(8, 4\)"),
    (bad_call(scale_b=torch.ones(16, 4)), r"scale_b must be uint8 E8M0 exponents"),
    (bad_call(out_dtype=torch.int8), r"out_dtype must be one of"),
    (bad_call(target="gfx942"), r"target gfx942 has no block-scaled MFMA .*MX GEMMs need gfx950"),
    (bad_call(target="gfx900"), r"unsupported target"),
])
def test_bad_inputs_one_line(call, message):
    with pytest.raises(Exception, match=message) as e:
        call()
    assert isinstance(e.value, (LaunchError, TargetError)) and "\n" not in str(e.value)
    assert str(e.value).startswith("mx_mm: ")


def test_mxfp8_quantizer_output_feeds_mx_mm():
    """End to end on gfx950: isagen's MXFP8 quantization kernel (e4m3fn + E8M0 [rows, K/32]) feeds
    mx_mm as is; the product equals float64 math on the dequantized tensors and stays within fp8's
    rounding of the bf16 product."""
    quant = isagen.build("mxfp8_quant_bf16", "gfx950")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(24, 256, generator=g).bfloat16()
    w = (torch.randn(32, 256, generator=g) * 0.05).bfloat16()

    def q(t):
        rows, k = t.shape
        out = torch.empty(rows, k // 32, 32, dtype=torch.float8_e4m3fn)
        scales = torch.empty(rows, k // 32, dtype=torch.uint8)
        quant.run(t.reshape(rows, k // 32, 32).contiguous(), out, scales, backend="emu")
        return out.reshape(rows, k), scales
    (qx, sx), (qw, sw) = q(x), q(w)
    c = isagen.mx_mm(qx, qw, sx, sw, torch.float32, target="gfx950")
    dx, dw = isagen.mx_dequantize(qx, sx, "e4m3"), isagen.mx_dequantize(qw, sw, "e4m3")
    ref = dx @ dw.T
    assert bool(((c.double() - ref).abs() <= 2.0 ** -22 * (dx.abs() @ dw.abs().T)).all())
    exact = x.double() @ w.double().T
    assert bool(((c.double() - exact).abs() <= 2.0 ** -3 * (x.double().abs() @ w.double().abs().T)).all())


def test_mxfp4_quantizer_output_feeds_mx_mm():
    """End to end on gfx950: isagen's MXFP4 quantization kernel (e2m1 packed two a byte, the even element
    in the low nibble, + E8M0 [rows, K/32]) feeds mx_mm as is."""
    quant = isagen.build("mxfp4_quant_bf16", "gfx950")
    g = torch.Generator().manual_seed(6)
    x = torch.randn(20, 256, generator=g).bfloat16()
    w = (torch.randn(36, 256, generator=g) * 0.1).bfloat16()

    def q(t):
        rows, k = t.shape
        out = torch.empty(rows, k // 32, 16, dtype=torch.uint8)
        scales = torch.empty(rows, k // 32, dtype=torch.uint8)
        quant.run(t.reshape(rows, k // 32, 32).contiguous(), out, scales, backend="emu")
        return out.reshape(rows, k // 2), scales
    (qx, sx), (qw, sw) = q(x), q(w)
    c = isagen.mx_mm(qx, qw, sx, sw, torch.float32, a_format="e2m1", target="gfx950")
    dx, dw = isagen.mx_dequantize(qx, sx, "e2m1"), isagen.mx_dequantize(qw, sw, "e2m1")
    assert bool(((c.double() - dx @ dw.T).abs() <= 2.0 ** -22 * (dx.abs() @ dw.abs().T)).all())
    # e2m1 keeps about one bit: the product still follows the bf16 one
    exact = x.double() @ w.double().T
    assert bool(((c.double() - exact).abs() <= 0.5 * (x.double().abs() @ w.double().abs().T)).all())
    assert torch.corrcoef(torch.stack([c.double().flatten(), exact.flatten()]))[0, 1] > 0.9
