"""FP8 quantization (kernels/quant.py) in the emulator, sanitizer on, bit for bit against the numpy model
``isagen.prims.fp8_model`` (written from the e4m3 formats' definitions), on gfx942 (e4m3fnuz) and gfx950
(OCP e4m3fn); the model itself against torch's float8 conversions; the scales against torch's own
``amax / FP8_MAX``; the torch ops, ``isagen run`` and the refusals."""

import numpy as np
import pytest
import torch
from mem_support import TORCH, kernel, run

import isagen.runtime.torch_ops
from isagen.api import torch_dtype
from isagen.cli import main as cli_main
from isagen.errors import LaunchError, SpecError
from isagen.prims import fp8_model as m

FORMATS = {"gfx942": "e4m3fnuz", "gfx950": "e4m3fn"}
TORCH_FP8 = {"e4m3fnuz": torch.float8_e4m3fnuz, "e4m3fn": torch.float8_e4m3fn}


# ---------------------------------------------------------------------------- the model against torch
def _values_near_codes(fmt):
    """Every finite code's value, the midpoints between neighbours and the floats just either side."""
    vals = m.decode(np.arange(256), fmt)
    pos = np.unique(np.abs(vals[np.isfinite(vals)])).astype(np.float32)
    mids = ((pos[1:].astype(np.float64) + pos[:-1]) / 2).astype(np.float32)     # exact in fp32
    up, down = np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0))
    x = np.concatenate([pos, mids, up, down])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("fmt", list(TORCH_FP8))
def test_model_matches_torch_conversions(fmt):
    """encode = torch's float32 -> float8 (round to nearest even) on every code, every midpoint (ties to
    the even code) and its neighbours, and on random values of every scale in range; decode = torch's
    float8 -> float32 on all 256 codes; NaN maps to NaN; FNUZ has no -0."""
    rng = np.random.default_rng(1)
    rand = np.concatenate([rng.standard_normal(20000) * s for s in (1e-3, 0.03, 1.0, 40.0)]).astype(np.float32)
    x = np.concatenate([_values_near_codes(fmt), rand[np.abs(rand) <= m.FP8_MAX[fmt]]])
    want = torch.from_numpy(x).to(TORCH_FP8[fmt]).view(torch.uint8).numpy()
    np.testing.assert_array_equal(m.encode(x, fmt), want)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    t = codes.view(TORCH_FP8[fmt]).double().numpy()
    np.testing.assert_array_equal(m.decode(np.arange(256), fmt), t)     # NaN == NaN in assert_array_equal
    assert m.decode(m.encode(np.float32([np.nan]), fmt), fmt)[0] != m.decode(0, fmt)
    assert np.isnan(m.decode(m.encode(np.float32([np.nan, -np.nan]), fmt), fmt)).all()
    assert m.encode(np.float32([-1e-20]), fmt)[0] == (0x00 if fmt == "e4m3fnuz" else 0x80)
    assert m.decode(m.encode(np.float32([m.FP8_MAX[fmt]]), fmt), fmt)[0] == m.FP8_MAX[fmt]


def test_model_overflow_and_clamp():
    """Without saturation a value past FP8_MAX + half an ulp is NaN (the instruction's mode); the quantizer
    clamps first: +-inf and large values to +-FP8_MAX, NaN kept (torch.clamp's rule)."""
    for fmt, big in (("e4m3fnuz", 248.0), ("e4m3fn", 480.0)):
        assert np.isnan(m.decode(m.encode(np.float32([big, np.inf]), fmt), fmt)).all()
        q = m.quantize_fp8(np.float32([big, -np.inf, np.inf, np.nan, 1e30]), np.float32(1.0), fmt)
        v = m.decode(q, fmt)
        mx = m.FP8_MAX[fmt]
        assert list(v[[0, 1, 2, 4]]) == [mx, -mx, mx, mx] and np.isnan(v[3])
    assert m.min_scale("e4m3fnuz") == np.float32(1) / np.float32(240 * 512)


# ---------------------------------------------------------------------------- the kernels
def quant_kernel(op, dtype, target, wpr):
    return kernel("quant_fp8", target, op=op, dtype=dtype, max_hidden=2048, waves=4, waves_per_row=wpr,
                  rows_per_workgroup=4)


def special_rows(dtype, fmt, hidden, seed):
    """7 rows: random; zeros; a NaN; +inf; tiny values; values near the type's largest; the fp8
    midpoints with amax = FP8_MAX (scale 1: every tie is exercised)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(7, hidden, generator=g) * 3
    x[1] = 0
    x[2, 5] = float("nan")
    x[3, 7] = float("inf")
    x[3, 9] = -float("inf")
    x[4] *= 1e-3 if dtype == "f16" else 1e-30
    x[5] *= 2e4 if dtype == "f16" else 1e37
    ties = torch.from_numpy(_values_near_codes(fmt)[:hidden - 2].astype(np.float32))
    row = torch.zeros(hidden)
    row[0], row[1] = m.FP8_MAX[fmt], -m.FP8_MAX[fmt]
    row[2:2 + len(ties)] = ties
    x[6] = row
    x = x.to(TORCH[dtype])
    if dtype != "f32":      # the tie values are exact in bf16/f16 (4 significant bits), except the tiniest
        x[6] = torch.where(x[6].float() == row, x[6], torch.zeros((), dtype=x.dtype))
    return x


CASES = [("gfx942", "bf16", 1), ("gfx942", "f16", 2), ("gfx942", "f32", 4),
         ("gfx950", "bf16", 2), ("gfx950", "f16", 1), ("gfx950", "f32", 4)]


@pytest.mark.parametrize("target,dtype,wpr", CASES)
def test_per_token_bit_exact(target, dtype, wpr):
    """q and the scales equal the model's bits: hidden 1000 (a partial last chunk) and 2048 (every chunk
    full), 7 rows (a partial workgroup) with zeros, NaN, +-inf, tiny and huge rows and every fp8 tie; each
    byte read once, q and the scales written once."""
    k = quant_kernel("per_token", dtype, target, wpr)
    fmt = FORMATS[target]
    for hidden in (1000, 2048):
        x = special_rows(dtype, fmt, hidden, seed=hidden)
        q = torch.empty(7, hidden, dtype=torch_dtype("fp8", target))
        scales = torch.empty(7)
        stats = run(k, x=x, q=q, scales=scales)
        want_q, want_s = m.per_token_quant(x.float().numpy(), fmt)
        got_s = scales.numpy()
        assert np.array_equal(np.isnan(got_s), np.isnan(want_s))           # a NaN's payload is unspecified
        keep = ~np.isnan(got_s)
        np.testing.assert_array_equal(got_s[keep].view(np.uint32), want_s[keep].view(np.uint32))
        got = q.view(torch.uint8).numpy()
        bad = np.argwhere(got != want_q)
        assert not len(bad), f"{len(bad)} codes differ, first at {tuple(bad[0])}: {got[tuple(bad[0])]:#x} vs " \
                             f"{want_q[tuple(bad[0])]:#x} (x = {x[tuple(bad[0])].item()!r})"
        assert stats["global_bytes_read"] == x.element_size() * 7 * hidden
        assert stats["global_bytes_written"] == 7 * hidden + 4 * 7
        # independent of the model: the scale is torch's amax / FP8_MAX (floored), and the finite rows' q
        # is torch's own conversion of x * (1/scale)
        amax = x.float().abs().amax(-1)
        ts = torch.clamp_min(amax / m.FP8_MAX[fmt], float(m.min_scale(fmt)))
        finite = torch.isfinite(x.float()).all(-1)
        assert torch.equal(scales[finite], ts[finite]) and torch.isnan(scales[2]) and torch.isinf(scales[3])
        tq = (x.float()[finite] * (1 / scales[finite, None])).to(TORCH_FP8[fmt])
        assert torch.equal(q[finite].view(torch.uint8), tq.view(torch.uint8))
        assert torch.isnan(q[2].float()).all()
        assert (q[1].float() == 0).all() and scales[1] == float(m.min_scale(fmt))


@pytest.mark.parametrize("target,dtype,wpr", [("gfx942", "bf16", 1), ("gfx950", "f16", 2), ("gfx950", "f32", 4)])
def test_static_bit_exact_with_saturation(target, dtype, wpr):
    """A scale small enough that most of the row saturates to +-FP8_MAX, +-inf saturating too, NaN kept,
    and a scale of 1 over the fp8 ties."""
    k = quant_kernel("static", dtype, target, wpr)
    fmt = FORMATS[target]
    x = special_rows(dtype, fmt, 1000, seed=3)
    for scale in (0.01, 1.0, 7.5):
        q = torch.empty(7, 1000, dtype=torch_dtype("fp8", target))
        run(k, x=x, scale=torch.tensor([scale]), q=q)
        want = m.static_quant(x.float().numpy(), np.float32(scale), fmt)
        np.testing.assert_array_equal(q.view(torch.uint8).numpy(), want)
    v = q.float()
    assert torch.isnan(v[2, 5]) and v[3, 7] == m.FP8_MAX[fmt] and v[3, 9] == -m.FP8_MAX[fmt]


def test_refusals():
    k = quant_kernel("static", "bf16", "gfx942", 1)
    x = torch.randn(3, 64).to(torch.bfloat16)
    for bad in (0.0, -2.0, float("nan"), float("inf")):
        with pytest.raises(LaunchError, match="tensor 'scale' must hold finite positive values"):
            k.run(x=x, scale=torch.tensor([bad]), q=torch.empty(3, 64, dtype=torch.float8_e4m3fnuz), backend="emu")
    with pytest.raises(LaunchError, match=r"tensor 'q' has dtype torch.float8_e4m3fn, expected "
                                          r"torch.float8_e4m3fnuz \(the fp8 format of gfx942\)"):
        k.run(x=x, scale=torch.tensor([1.0]), q=torch.empty(3, 64, dtype=torch.float8_e4m3fn), backend="emu")
    with pytest.raises(LaunchError, match="hidden must be a multiple of 4"):
        k.run(x=torch.randn(3, 66).to(torch.bfloat16), scale=torch.tensor([1.0]),
              q=torch.empty(3, 66, dtype=torch.float8_e4m3fnuz), backend="emu")
    with pytest.raises(SpecError, match="rows_per_workgroup"):
        kernel("quant_fp8", "gfx942", op="per_token", waves=4, waves_per_row=1, rows_per_workgroup=2)


# ---------------------------------------------------------------------------- torch ops and isagen run
def test_torch_ops():
    ops = isagen.runtime.torch_ops.registered_ops()
    assert ops["per_token_quant_fp8"] == "(Tensor x) -> (Tensor, Tensor)"
    assert ops["static_quant_fp8"] == "(Tensor x, Tensor scale) -> Tensor"
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 520, generator=g).to(torch.float16)          # [..., hidden]: leading dims kept
    q, s = torch.ops.isagen.per_token_quant_fp8(x)
    assert q.shape == x.shape and q.dtype == torch.float8_e4m3fnuz and s.shape == (2, 3) and s.dtype == torch.float32
    wq, ws = m.per_token_quant(x.float().reshape(6, 520).numpy(), "e4m3fnuz")
    np.testing.assert_array_equal(q.view(torch.uint8).reshape(6, 520).numpy(), wq)
    np.testing.assert_array_equal(s.reshape(6).numpy(), ws)
    xf = x.float()                                                    # fp32 x, fp32 scale: the dtype follows x
    q = torch.ops.isagen.static_quant_fp8(xf, torch.tensor([0.05]))
    np.testing.assert_array_equal(q.view(torch.uint8).reshape(6, 520).numpy(),
                                  m.static_quant(xf.reshape(6, 520).numpy(), np.float32(0.05), "e4m3fnuz"))
    with pytest.raises(LaunchError, match="finite positive"):
        torch.ops.isagen.static_quant_fp8(x, torch.tensor([float("nan")]))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a, b = torch.ops.isagen.per_token_quant_fp8(torch.empty(4, 8, 256, dtype=torch.bfloat16))
        assert a.shape == (4, 8, 256) and a.dtype == torch.float8_e4m3fnuz and b.shape == (4, 8)


@pytest.mark.parametrize("spec", ["per_token_quant_fp8_bf16", "static_quant_fp8_bf16"])
def test_isagen_run(spec, capsys):
    for target in ("gfx942", "gfx950"):
        code = cli_main(["run", spec, "--backend", "emu", "--target", target, "--shape", "rows=5",
                         "--shape", "hidden=1000"])
        out = capsys.readouterr().out
        assert code == 0 and "q: max abs err 0" in out and out.splitlines()[-1] == "PASS", out


# ---------------------------------------------------------------------------- the fused kernels
FUSED = [("gfx942", "bf16", "rms_norm", 1), ("gfx950", "f16", "add_rms_norm", 2), ("gfx942", "f32", "rms_norm", 1),
         ("gfx950", "bf16", "silu_and_mul", 2), ("gfx942", "f32", "silu_and_mul", 1),
         ("gfx942", "f16", "add_rms_norm", 1)]


@pytest.mark.parametrize("target,dtype,op,wpr", FUSED)
def test_fused_per_token(target, dtype, op, wpr):
    """RMSNorm, add + RMSNorm and SiLU-and-mul followed by per-token quantization, against the float64
    reference (``torch_fused_reference``): the scales within 1e-5, every code the nearest-even one of
    y / scale except where that lies within 1e-5 of a rounding boundary (then either neighbour), fewer
    than 1% of them differing; residual_out exact; a row of zeros gives the floor scale and zeros;
    hidden 1000 (a partial chunk), 7 rows (a partial workgroup); bytes moved the minimum (the weight once
    per workgroup)."""
    k = quant_kernel(f"{op}_per_token", dtype, target, wpr)
    fmt = FORMATS[target]
    g = torch.Generator().manual_seed(7)
    rows, n = 7, 1000
    gated = op == "silu_and_mul"
    x = (torch.randn((rows, 2, n) if gated else (rows, n), generator=g) * 2 + 0.3).to(TORCH[dtype])
    x[1] = 0
    args = {"x": x}
    weight = residual = None
    if not gated:
        weight = torch.randn(n, generator=g).to(TORCH[dtype])
        args.update(weight=weight, eps=1e-6)
    if op == "add_rms_norm":
        residual = torch.randn(rows, n, generator=g).to(TORCH[dtype])
        residual[1] = 0
        args.update(residual=residual, residual_out=torch.empty(rows, n, dtype=TORCH[dtype]))
    q = torch.empty(rows, n, dtype=torch_dtype("fp8", target))
    scales = torch.empty(rows)
    stats = run(k, **args, q=q, scales=scales)
    kind = "silu_and_mul" if gated else "rms"
    ref = m.torch_fused_reference(kind, x, weight, residual, 1e-6, target, dtype)
    bound = m.torch_fused_bound(kind, x, weight, residual, 1e-6, target, dtype)
    assert ((q.double() - ref[0]).abs() <= bound[0]).all()
    assert int((q.double() != ref[0]).sum()) < 0.01 * q.numel()
    assert ((scales.double() - ref[-1]).abs() <= bound[-1]).all()
    assert scales[1] == float(m.min_scale(fmt)) and (q[1].float() == 0).all()
    if residual is not None:
        assert torch.equal(args["residual_out"], (x.float() + residual.float()).to(TORCH[dtype]))
    esize = x.element_size()
    reads = x.numel() * esize + (n * esize * 2 if weight is not None else 0) + (residual.numel() * esize
                                                                             if residual is not None else 0)
    assert stats["global_bytes_read"] == reads                   # 2 workgroups: the weight twice
    assert stats["global_bytes_written"] == rows * n + 4 * rows + (rows * n * esize if residual is not None else 0)


def test_fused_refusal_and_ops():
    with pytest.raises(SpecError, match="waves_per_row.*weight is staged through LDS"):
        kernel("quant_fp8", "gfx942", op="rms_norm_per_token", dtype="f32", waves=4, waves_per_row=4,
               rows_per_workgroup=4)
    ops = isagen.runtime.torch_ops.registered_ops()
    assert ops["add_rms_norm_per_token_quant_fp8"] == ("(Tensor x, Tensor residual, Tensor weight, float eps) -> "
                                                        "(Tensor, Tensor, Tensor)")
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, 520, generator=g)                       # fp32: the 8-wave variant
    w = torch.randn(520, generator=g)
    q, s = torch.ops.isagen.rms_norm_per_token_quant_fp8(x, w, 1e-6)
    assert q.shape == x.shape and s.shape == (2, 3)
    ref = m.torch_fused_reference("rms", x.reshape(6, 520), w, None, 1e-6, "gfx942", "f32")
    bound = m.torch_fused_bound("rms", x.reshape(6, 520), w, None, 1e-6, "gfx942", "f32")
    assert ((q.reshape(6, 520).double() - ref[0]).abs() <= bound[0]).all()
    q, s = torch.ops.isagen.silu_and_mul_per_token_quant_fp8(x.to(torch.bfloat16))
    assert q.shape == (2, 3, 260) and s.shape == (2, 3)


@pytest.mark.parametrize("spec", ["rms_norm_per_token_quant_fp8_bf16", "add_rms_norm_per_token_quant_fp8_bf16",
                                  "silu_and_mul_per_token_quant_fp8_bf16"])
def test_isagen_run_fused(spec, capsys):
    size = "d" if spec.startswith("silu") else "hidden"
    code = cli_main(["run", spec, "--backend", "emu", "--target", "gfx950", "--shape", "rows=5",
                     "--shape", f"{size}=1000"])
    out = capsys.readouterr().out
    assert code == 0 and out.splitlines()[-1] == "PASS", out


# ---------------------------------------------------------------------------- MXFP8 (gfx950)
def test_mx_model_against_the_spec_and_torch():
    """The E8M0 scale is floor(log2(amax)) - 8 + 127 (numpy's log2 on the block max, independent of the
    model's exponent bits) for normal maxima, 0 for zero/subnormal blocks, 0xff with a NaN or an inf; the
    codes are torch's own conversion of clamp(x / 2^X, -448, 448)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 256)) * np.exp2(rng.integers(-30, 30, (5, 256)) / 3)).astype(np.float32)
    x[1, :32] = 0
    x[1, 32:64] = 1e-40                                      # subnormal block
    x[2, 70] = np.nan
    x[3, 100] = -np.inf
    q, s = m.mxfp8_quant(x)
    amax = np.abs(x).reshape(5, 8, 32).max(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.floor(np.log2(amax)) - 8 + 127
    want = np.where(amax == 0, 0, np.maximum(want, 0))
    want = np.where(np.isfinite(x).reshape(5, 8, 32).all(-1), want, 255)
    np.testing.assert_array_equal(s, want.astype(np.uint8))
    finite = s != 255
    scale = np.exp2(s.astype(np.float64) - 127)
    y = torch.from_numpy(x.reshape(5, 8, 32) / scale[..., None]).float().clamp(-448, 448)
    tq = y.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(q.reshape(5, 8, 32)[finite], tq[finite])


@pytest.mark.parametrize("dtype,wpr", [("bf16", 1), ("f16", 2), ("f32", 1)])
def test_mxfp8_bit_exact(dtype, wpr):
    """Codes and E8M0 bytes equal the model's: 31 blocks (a partial chunk), 7 rows with zeros, NaN, inf,
    tiny values and maxima spread over many binades (saturation at 448 included); every byte once."""
    k = kernel("quant_fp8", "gfx950", op="mxfp8", dtype=dtype, max_hidden=2048, waves=4, waves_per_row=wpr,
               rows_per_workgroup=4)
    g = torch.Generator().manual_seed(11)
    rows, blocks = 7, 31
    x = torch.randn(rows, blocks * 32, generator=g) * torch.exp2(torch.randint(-20, 20, (rows, blocks * 32),
                                                                               generator=g).float() / 4)
    x[1] = 0
    x[2, 5] = float("nan")
    x[3, 40] = float("inf")
    x[4] *= 1e-3 if dtype == "f16" else 1e-30
    x = x.to(TORCH[dtype]).reshape(rows, blocks, 32)
    q = torch.empty(rows, blocks, 32, dtype=torch.float8_e4m3fn)
    scales = torch.empty(rows, blocks, dtype=torch.uint8)
    stats = run(k, x=x, q=q, scales=scales)
    wq, ws = m.mxfp8_quant(x.float().reshape(rows, -1).numpy())
    np.testing.assert_array_equal(scales.numpy(), ws)
    np.testing.assert_array_equal(q.view(torch.uint8).reshape(rows, -1).numpy(), wq)
    assert (q.float().abs() == 448).any()                    # some blocks saturate
    assert stats["global_bytes_read"] == x.numel() * x.element_size()
    assert stats["global_bytes_written"] == x.numel() + rows * blocks


def test_mxfp8_refusals_and_op(monkeypatch, capsys):
    with pytest.raises(SpecError, match=r"mxfp8 is an OCP format .*: gfx950, not gfx942 \(FNUZ fp8\)"):
        kernel("quant_fp8", "gfx942", op="mxfp8")
    import isagen.runtime.gpu as gpu
    monkeypatch.setattr(gpu, "default_target", lambda: "gfx950")
    x = torch.randn(2, 3, 96, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    q, s = torch.ops.isagen.mxfp8_quant(x)
    assert q.shape == x.shape and q.dtype == torch.float8_e4m3fn and s.shape == (2, 3, 3) and s.dtype == torch.uint8
    wq, ws = m.mxfp8_quant(x.float().reshape(6, 96).numpy())
    np.testing.assert_array_equal(q.view(torch.uint8).reshape(6, 96).numpy(), wq)
    np.testing.assert_array_equal(s.reshape(6, 3).numpy(), ws)
    with pytest.raises(LaunchError, match="hidden a multiple of 32"):
        torch.ops.isagen.mxfp8_quant(x[..., :40])
    assert cli_main(["run", "mxfp8_quant_bf16", "--backend", "emu", "--target", "gfx950", "--shape", "rows=5",
                     "--shape", "blocks=31"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PASS"


# ---------------------------------------------------------------------------- MXFP4 (gfx950)
def test_fp4_model_against_the_format():
    """encode_fp4 from the e2m1 definition: every code's value encodes to itself; midpoints round to the
    even code, the floats either side to the nearer; above 6, inf saturate; -0 keeps its sign; decode and
    pack/unpack are inverses (element 2i in the low nibble)."""
    vals = m.decode_fp4(np.arange(16))
    assert list(vals[:8]) == [0, 0.5, 1, 1.5, 2, 3, 4, 6] and list(vals[8:]) == [-v for v in vals[:8]]
    np.testing.assert_array_equal(m.encode_fp4(vals.astype(np.float32)), np.arange(16))
    pos = vals[:8]
    mids = ((pos[1:] + pos[:-1]) / 2).astype(np.float32)
    even = [c if c % 2 == 0 else c + 1 for c in range(7)]              # the tie goes to the even code
    np.testing.assert_array_equal(m.encode_fp4(mids), even)
    np.testing.assert_array_equal(m.encode_fp4(np.nextafter(mids, np.float32(0))), np.arange(7))
    np.testing.assert_array_equal(m.encode_fp4(np.nextafter(mids, np.float32(9))), np.arange(1, 8))
    big = np.array([6.5, 7, 8, 1e30, np.inf, -7.5, -np.inf], np.float32)
    np.testing.assert_array_equal(m.encode_fp4(big), [7, 7, 7, 7, 7, 15, 15])
    assert m.encode_fp4(np.float32(-0.0)) == 8 and m.encode_fp4(np.float32(-0.2)) == 8
    codes = np.arange(32, dtype=np.uint8) % 16
    packed = m.pack_fp4(codes)
    assert packed[0] == (codes[0] | codes[1] << 4)
    np.testing.assert_array_equal(m.unpack_fp4(packed), codes)


def test_mxfp4_model_against_the_spec():
    """The E8M0 scale is floor(log2(amax)) - 2 + 127 (numpy's log2), 0 for zero blocks, 0xff with a NaN or
    an inf; the values are x / 2^X rounded to the nearest fp4 value (ties to even), saturated to 6."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((4, 256)) * np.exp2(rng.integers(-30, 30, (4, 256)) / 3)).astype(np.float32)
    x[1, :32] = 0
    x[2, 70] = np.nan
    x[3, 100] = -np.inf
    q, s = m.mxfp4_quant(x)
    amax = np.abs(x).reshape(4, 8, 32).max(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.floor(np.log2(amax)) - 2 + 127
    want = np.where(amax == 0, 0, np.maximum(want, 0))
    want = np.where(np.isfinite(x).reshape(4, 8, 32).all(-1), want, 255)
    np.testing.assert_array_equal(s, want.astype(np.uint8))
    finite = (s != 255)[..., None]
    y = x.reshape(4, 8, 32) / np.exp2(s.astype(np.float64) - 127)[..., None]
    got = m.decode_fp4(m.unpack_fp4(q)).reshape(4, 8, 32)
    err = np.abs(got - np.clip(y, -6, 6))
    grid_half = np.where(np.abs(y) < 2, 0.25, np.where(np.abs(y) < 4, 0.5, 1.0))
    assert (np.where(finite, err <= grid_half, True)).all()       # the nearest grid value
    assert (np.abs(got[finite.repeat(32, -1)]) <= 6).all()


@pytest.mark.parametrize("dtype,wpr", [("bf16", 1), ("f16", 2), ("f32", 1)])
def test_mxfp4_bit_exact(dtype, wpr):
    """Packed codes and E8M0 bytes equal the model's: 31 blocks (a partial chunk), rows with zeros, NaN,
    inf, tiny values, exact ties (values on the fp4 midpoints) and maxima over many binades."""
    k = kernel("quant_fp8", "gfx950", op="mxfp4", dtype=dtype, max_hidden=2048, waves=4, waves_per_row=wpr,
               rows_per_workgroup=4)
    g = torch.Generator().manual_seed(12)
    rows, blocks = 7, 31
    x = torch.randn(rows, blocks * 32, generator=g) * torch.exp2(torch.randint(-20, 20, (rows, blocks * 32),
                                                                               generator=g).float() / 4)
    x[1] = 0
    x[2, 5] = float("nan")
    x[3, 40] = float("inf")
    x[4] *= 1e-3 if dtype == "f16" else 1e-30
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4)      # amax 6 -> X = 0: y = x
    x[5, :32] = ties * torch.where(torch.arange(32) % 3 == 0, -1.0, 1.0)
    x = x.to(TORCH[dtype]).reshape(rows, blocks, 32)
    q = torch.empty(rows, blocks, 16, dtype=torch.uint8)
    scales = torch.empty(rows, blocks, dtype=torch.uint8)
    stats = run(k, x=x, q=q, scales=scales)
    wq, ws = m.mxfp4_quant(x.float().reshape(rows, -1).numpy())
    np.testing.assert_array_equal(scales.numpy(), ws)
    np.testing.assert_array_equal(q.reshape(rows, -1).numpy(), wq)
    # the ties, by hand: -0.25 -> -0, 0.75 -> 1, 1.25 -> 1, -1.75 -> -2, 2.5 -> 2, 3.5 -> 4, -5 -> -4, 6
    assert scales[5, 0] == 127
    assert list(m.unpack_fp4(q[5, 0].numpy())[:8]) == [8, 2, 2, 12, 4, 6, 14, 7]
    assert stats["global_bytes_read"] == x.numel() * x.element_size()
    assert stats["global_bytes_written"] == x.numel() // 2 + rows * blocks


def test_mxfp4_refusals_and_op(monkeypatch, capsys):
    with pytest.raises(SpecError, match=r"mxfp4 is an OCP format \(fp4 e2m1 elements.*: gfx950, not gfx942"):
        kernel("quant_fp8", "gfx942", op="mxfp4")
    import isagen.runtime.gpu as gpu
    monkeypatch.setattr(gpu, "default_target", lambda: "gfx950")
    x = torch.randn(2, 3, 96, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    q, s = torch.ops.isagen.mxfp4_quant(x)
    assert q.shape == (2, 3, 48) and q.dtype == torch.uint8 and s.shape == (2, 3, 3) and s.dtype == torch.uint8
    wq, ws = m.mxfp4_quant(x.float().reshape(6, 96).numpy())
    np.testing.assert_array_equal(q.reshape(6, 48).numpy(), wq)
    np.testing.assert_array_equal(s.reshape(6, 3).numpy(), ws)
    with pytest.raises(LaunchError, match="hidden a multiple of 32"):
        torch.ops.isagen.mxfp4_quant(x[..., :40])
    assert cli_main(["run", "mxfp4_quant_bf16", "--backend", "emu", "--target", "gfx950", "--shape", "rows=5",
                     "--shape", "blocks=31"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PASS"
