"""runtime/emu/numerics.py against independent references: torch's dtypes (bf16, f16, the four fp8
formats) over every code and over large random + edge-case float32 arrays, and exact properties
(round toward zero, truncation, denormal flush) checked with float64 arithmetic."""

import numpy as np
import pytest
import torch

from isagen.runtime.emu import numerics as nx

TORCH_FP8 = {
    "e4m3fnuz": torch.float8_e4m3fnuz,
    "e5m2fnuz": torch.float8_e5m2fnuz,
    "e4m3fn": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}
RNG = np.random.default_rng(1234)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")


def torch_to(x: np.ndarray, dtype) -> np.ndarray:
    """torch's conversion of float32 values, returned as raw bits."""
    bits = {1: torch.uint8, 2: torch.int16}[torch.empty((), dtype=dtype).element_size()]
    out = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dtype).view(bits).numpy()
    return out.view(np.uint8 if bits == torch.uint8 else np.uint16)


def torch_from(codes: np.ndarray, dtype) -> np.ndarray:
    """torch's decode of raw bits to float32."""
    bits = torch.uint8 if codes.dtype == np.uint8 else torch.int16
    raw = torch.from_numpy(np.ascontiguousarray(codes).view(np.uint8 if bits == torch.uint8 else np.int16))
    return raw.view(dtype).to(torch.float32).numpy()


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as floats, NaN where the other is NaN, and the same sign of zero."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b))
                and np.array_equal(a[~nan], b[~nan])
                and np.array_equal(np.signbit(a[~nan]), np.signbit(b[~nan])))


def random_f32(n: int) -> np.ndarray:
    """Random bit patterns: every class of float32 (subnormals, inf, NaN) appears."""
    return RNG.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def special_f32() -> np.ndarray:
    f = np.finfo(np.float32)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, f.max, -f.max, f.tiny, -f.tiny,
            f.smallest_subnormal, -f.smallest_subnormal, 1.0, -1.0, 65504.0, 65520.0, 65519.99,
            3.0e38, 1e-40, -1e-45]
    return np.array(vals, dtype=np.float32)


# ----------------------------------------------------------------------------- fp8 decode

@pytest.mark.parametrize("fmt", nx.FP8_FORMATS)
def test_fp8_decode_every_code_matches_torch(fmt):
    codes = np.arange(256, dtype=np.uint8)
    ours = nx.fp8_to_f32(codes, fmt)
    ref = torch_from(codes, TORCH_FP8[fmt])
    assert ours.dtype == np.float32
    assert same_values(ours, ref)


def test_fp8_format_facts():
    """The per-arch formats and their documented special values (OCP spec, AMD CDNA3 ISA)."""
    assert nx.fp8_format("gfx942", "fp8") == "e4m3fnuz" and nx.fp8_format("gfx942", "bf8") == "e5m2fnuz"
    assert nx.fp8_format("gfx950", "fp8") == "e4m3fn" and nx.fp8_format("gfx950", "bf8") == "e5m2"
    assert (nx.fp8_formats("gfx942") == ("e4m3fnuz", "e5m2fnuz")
            and nx.fp8_formats("gfx950:sramecc+:xnack-") == ("e4m3fn", "e5m2"))
    assert {f: nx.fp8_max(f) for f in nx.FP8_FORMATS} == {
        "e4m3fnuz": 240.0, "e5m2fnuz": 57344.0, "e4m3fn": 448.0, "e5m2": 57344.0}
    nan_codes = {f: sorted(int(c) for c in np.flatnonzero(np.isnan(nx.fp8_table(f)))) for f in nx.FP8_FORMATS}
    assert nan_codes["e4m3fnuz"] == [0x80] and nan_codes["e5m2fnuz"] == [0x80]
    assert nan_codes["e4m3fn"] == [0x7F, 0xFF]
    assert nan_codes["e5m2"] == [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]
    assert nx.fp8_table("e5m2")[0x7C] == np.inf and nx.fp8_table("e5m2")[0xFC] == -np.inf
    with pytest.raises(ValueError):
        nx.fp8_to_f32([0], "e3m4")


# ----------------------------------------------------------------------------- fp8 encode

def fp8_edge_cases(fmt: str) -> np.ndarray:
    """Every representable value, the midpoints between neighbours (ties), the float32 values
    just either side of each midpoint, half the smallest subnormal, and the overflow region."""
    t = nx.fp8_table(fmt).astype(np.float64)
    pos = np.unique(t[np.isfinite(t) & (t >= 0)])
    ulp_top = pos[-1] - pos[-2]
    pos = np.append(pos, pos[-1] + ulp_top)                       # one past max: overflow boundary
    mids = (pos[:-1] + pos[1:]) / 2
    mids32 = mids.astype(np.float32)
    around = np.concatenate([np.nextafter(mids32, np.float32(np.inf)), np.nextafter(mids32, np.float32(0))])
    extra = np.array([pos[1] / 2, pos[1] / 4, pos[1] * 0.75, pos[-2] * 2, pos[-2] * 1e6], np.float64)
    vals = np.concatenate([pos, mids, around, extra]).astype(np.float32)
    return np.concatenate([vals, -vals, special_f32()])


def fp8_test_inputs(fmt: str) -> np.ndarray:
    scale = nx.fp8_max(fmt)
    normal = (RNG.standard_normal(60000) * scale / 4).astype(np.float32)
    log_spread = (np.exp2(RNG.uniform(-30, 20, 60000)) * RNG.choice([-1, 1], 60000)).astype(np.float32)
    return np.concatenate([fp8_edge_cases(fmt), normal, log_spread, random_f32(60000)])


@pytest.mark.parametrize("fmt", ["e4m3fnuz", "e5m2fnuz", "e5m2"])
def test_fp8_encode_nonsaturating_matches_torch(fmt):
    """torch converts to these three formats without saturation (round to nearest even; overflow
    -> NaN for FNUZ, -> inf for e5m2), the instructions' default behaviour."""
    x = fp8_test_inputs(fmt)
    ours = nx.f32_to_fp8(x, fmt)
    ref = torch_to(x, TORCH_FP8[fmt])
    assert ours.dtype == np.uint8
    nan_in = np.isnan(x)
    assert np.array_equal(ours[~nan_in], ref[~nan_in])
    assert np.all(np.isnan(nx.fp8_to_f32(ours[nan_in], fmt)))


def test_fp8_encode_e4m3fn_saturating_matches_torch():
    """Saturating float32 -> e4m3fn (finite overflow and inf -> +-448) is torch's conversion of the input
    clamped to +-448 (the clamp is the saturation: torch's own overflow handling differs between
    versions, 2.13 saturates and 2.11 gives NaN, while its rounding of in-range values does not)."""
    fmt = "e4m3fn"
    x = fp8_test_inputs(fmt)
    ours = nx.f32_to_fp8(x, fmt, saturate=True)
    ref = torch_to(np.clip(x, np.float32(-448.0), np.float32(448.0)), torch.float8_e4m3fn)
    nan_in = np.isnan(x)
    assert np.array_equal(ours[~nan_in], ref[~nan_in])
    assert np.all(np.isnan(nx.fp8_to_f32(ours[nan_in], fmt)))


def test_fp8_encode_e4m3fn_nonsaturating():
    """Without saturation a value whose rounded magnitude exceeds 448 (i.e. |x| > 464, the tie at 464
    rounding to the even 448) and +-inf become NaN; everything else is the saturating result."""
    fmt = "e4m3fn"
    x = fp8_test_inputs(fmt)
    ours = nx.f32_to_fp8(x, fmt)
    ref = torch_to(x, torch.float8_e4m3fn)
    over = np.abs(x.astype(np.float64)) > 464.0
    nan_in = np.isnan(x)
    keep = ~over & ~nan_in
    assert np.array_equal(ours[keep], ref[keep])
    assert np.all(np.isnan(nx.fp8_to_f32(ours[over | nan_in], fmt)))
    assert (nx.f32_to_fp8(np.float32(464.0), fmt) == 0x7E
            and np.isnan(nx.fp8_to_f32(nx.f32_to_fp8(np.float32(464.5), fmt), fmt)))


@pytest.mark.parametrize("fmt", ["e4m3fnuz", "e5m2fnuz", "e5m2"])
def test_fp8_encode_saturating_is_clip_then_round(fmt):
    """Saturation (the clamp bit): finite values and +-inf are clipped to +-max, then rounded; the
    clipped values round exactly, so torch's conversion of the clipped input is the reference."""
    x = fp8_test_inputs(fmt)
    m = np.float32(nx.fp8_max(fmt))
    ours = nx.f32_to_fp8(x, fmt, saturate=True)
    nan_in = np.isnan(x)
    ref = torch_to(np.clip(x, -m, m), TORCH_FP8[fmt])
    assert np.array_equal(ours[~nan_in], ref[~nan_in])
    assert np.all(np.isnan(nx.fp8_to_f32(ours[nan_in], fmt)))


def test_fp8_encode_documented_cases():
    """Published facts: tinygrad's hardware test on gfx950 (v_cvt_pk_bf8_f32: 61440.0 and +-inf ->
    e5m2 +-inf 0x7c/0xfc; v_cvt_pk_fp8_f32 of 1.0 / 2.0 -> 0x38 / 0x40), FNUZ has no -0."""
    assert list(nx.f32_to_fp8(np.array([61440.0, np.inf, -np.inf], np.float32), "e5m2")) == [0x7C, 0x7C, 0xFC]
    assert list(nx.f32_to_fp8(np.array([1.0, 2.0], np.float32), "e4m3fn")) == [0x38, 0x40]
    assert list(nx.f32_to_fp8(np.array([1.0, 2.0], np.float32), "e4m3fnuz")) == [0x40, 0x48]
    assert list(nx.f32_to_fp8(np.array([-0.0, -1e-30], np.float32), "e4m3fnuz")) == [0x00, 0x00]
    assert list(nx.f32_to_fp8(np.array([-0.0, -1e-30], np.float32), "e4m3fn")) == [0x80, 0x80]


# ----------------------------------------------------------------------------- bf16

def bf16_inputs() -> np.ndarray:
    ties = ((RNG.integers(0, 2**16, 20000, dtype=np.uint64) << 16) | 0x8000).astype(np.uint32).view(np.float32)
    near = ((RNG.integers(0, 2**16, 20000, dtype=np.uint64) << 16)
            | RNG.choice(np.array([0x7FFF, 0x8001, 0x0001, 0xFFFF], np.uint64), 20000)
            ).astype(np.uint32).view(np.float32)
    return np.concatenate([random_f32(100000), ties, near, special_f32()])


def test_bf16_decode_every_code_matches_torch():
    codes = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    assert same_values(nx.bf16_to_f32(codes), torch_from(codes, torch.bfloat16))


def test_bf16_encode_rne_matches_torch():
    x = bf16_inputs()
    ours = nx.f32_to_bf16(x)
    ref = torch_to(x, torch.bfloat16)
    assert ours.dtype == np.uint16
    nan_in = np.isnan(x)
    assert np.array_equal(ours[~nan_in], ref[~nan_in])
    # NaN: quiet (bit 6 of the bf16 mantissa), sign kept
    nan_out = ours[nan_in].astype(np.uint32)
    assert np.all((nan_out & 0x7FC0) == 0x7FC0)
    assert np.array_equal(nan_out >> 15, nx.f32_bits(x[nan_in]) >> 31)


def test_bf16_truncation_rounds_toward_zero():
    x = bf16_inputs()
    x = x[np.isfinite(x)]
    t = nx.bf16_to_f32(nx.f32_to_bf16_trunc(x)).astype(np.float64)
    xd = x.astype(np.float64)
    assert np.all(np.abs(t) <= np.abs(xd))
    assert np.array_equal(np.signbit(t), np.signbit(xd))
    # the next bf16 up in magnitude is beyond |x|
    up = nx.bf16_to_f32(nx.f32_to_bf16_trunc(x).astype(np.uint32) + 1).astype(np.float64)
    assert np.all(np.abs(up) > np.abs(xd))


# ----------------------------------------------------------------------------- f16

def f16_inputs() -> np.ndarray:
    mags = np.exp2(RNG.uniform(-30, 17, 80000)) * RNG.choice([-1, 1], 80000)
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    h = h[np.isfinite(h)]
    mids = ((h[:-1] + h[1:]) / 2)
    mids = mids[np.isfinite(mids)].astype(np.float32)
    return np.concatenate([random_f32(60000), mags.astype(np.float32), mids,
                           np.nextafter(mids, np.float32(np.inf)), special_f32()])


def test_f16_decode_every_code_matches_torch():
    codes = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    assert same_values(nx.f16_to_f32(codes), torch_from(codes, torch.float16))


def test_f16_encode_rne_matches_torch():
    x = f16_inputs()
    ours = nx.f32_to_f16(x)
    ref = torch_to(x, torch.float16)
    nan_in = np.isnan(x)
    assert np.array_equal(ours[~nan_in], ref[~nan_in])
    nan_out = ours[nan_in].astype(np.uint32)
    assert np.all((nan_out & 0x7E00) == 0x7E00)


def test_f16_rtz():
    x = f16_inputs()
    ours = nx.f32_to_f16_rtz(x)
    vals = nx.f16_to_f32(ours).astype(np.float64)
    xd = x.astype(np.float64)
    fin = np.isfinite(xd)
    assert np.all(np.abs(vals[fin]) <= np.abs(xd[fin]))              # never rounds up in magnitude
    assert np.all(np.isfinite(vals[fin]))                            # so finite never overflows to inf
    nxt = nx.f16_to_f32(ours[fin].astype(np.uint32) + 1).astype(np.float64)
    assert np.all(np.abs(nxt) > np.abs(xd[fin]))                     # and it is the largest such value
    assert np.array_equal(np.signbit(vals[fin]), np.signbit(xd[fin]))
    assert np.array_equal(vals[np.isinf(xd)], xd[np.isinf(xd)])
    assert np.all(np.isnan(vals[np.isnan(xd)]))
    assert nx.f32_to_f16_rtz(np.float32(1e9)) == 0x7BFF and nx.f32_to_f16_rtz(np.float32(-1e9)) == 0xFBFF


# ----------------------------------------------------------------------------- packing, denormals

def test_packing_matches_little_endian_memory():
    words = RNG.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32)
    halves = words.view(np.uint16).reshape(-1, 2)                    # little-endian: [lo, hi]
    bytes4 = words.view(np.uint8).reshape(-1, 4)
    assert np.array_equal(nx.lo16(words), halves[:, 0]) and np.array_equal(nx.hi16(words), halves[:, 1])
    assert np.array_equal(nx.pack16(halves[:, 0], halves[:, 1]), words)
    for i in range(4):
        assert np.array_equal(nx.byte_of(words, i), bytes4[:, i])
    assert np.array_equal(nx.pack_bytes(*bytes4.T), words)
    assert nx.pack16(nx.f32_to_bf16(np.float32(1.0)), nx.f32_to_bf16(np.float32(-2.0))) == 0xC0003F80


def test_denormal_flush():
    x = np.concatenate([random_f32(50000), special_f32()])
    tiny = np.finfo(np.float32).tiny
    ref = np.where(np.abs(x) < tiny, np.copysign(np.float32(0), x), x)
    assert same_values(nx.flush_denorm_f32(x), ref)
    assert np.array_equal(nx.is_denorm_f32(x), (np.abs(x) < tiny) & (x != 0))
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    hv = h.view(np.float16).astype(np.float64)
    ref16 = np.where(np.abs(hv) < 2.0 ** -14, np.copysign(0.0, hv), hv)
    assert same_values(nx.f16_to_f32(nx.flush_denorm_f16(h)), ref16)


def test_shapes_and_scalars_preserved():
    """Every helper keeps the input's shape, 0-d scalars included (the executor passes both)."""
    grid = RNG.standard_normal((3, 5)).astype(np.float32)[:, ::2]          # strided view
    for fn, arg in [(nx.f32_to_bf16, grid), (nx.f32_to_f16, grid), (nx.f32_to_f16_rtz, grid),
                    (nx.f32_bits, grid), (nx.flush_denorm_f32, grid), (nx.f32_to_bf16_trunc, grid),
                    (lambda x: nx.f32_to_fp8(x, "e4m3fn"), grid)]:
        assert fn(arg).shape == (3, 3) and fn(np.float32(1.5)).shape == ()
    codes = np.arange(6, dtype=np.uint16).reshape(2, 3)
    for fn in (nx.bf16_to_f32, nx.f16_to_f32, lambda c: nx.fp8_to_f32(c, "e5m2"), nx.bits_f32):
        assert fn(codes).shape == (2, 3) and fn(np.uint16(7)).shape == ()
    assert nx.f32_to_bf16(np.float32(1.0)) == 0x3F80 and nx.bf16_to_f32(np.uint16(0x3F80)) == 1.0
