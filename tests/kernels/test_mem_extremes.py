"""Every kernel with an exp (softmax, the activations, the gated activations) at the extremes of each
dtype's range, in the emulator (sanitizer on), on gfx942 and gfx950, against torch's float64 op rounded
to the dtype.

The right answer at the extremes is torch's: ``torch.softmax`` on a row whose max is +inf or NaN (or
that is all -inf) is a NaN row, a -inf element of a row with a finite max gives 0; ``silu(-inf)`` and
``gelu(-inf)`` are NaN (-inf * 0), ``tanh(+-inf)`` is +-1, every op of NaN is NaN; an activation whose
true result is finite but beyond the dtype's max rounds to inf, as torch's rounding does.  The kernels
flush results that underflow fp32 (silu(-104) ~ -7e-44, a denormal in torch) to -0: the comparison's
absolute term (2e-6 per unit of scale, tests/mem_support.py) allows that, and nothing else of the
same size.

Shapes are tiny and the extremes batched into a few rows per launch: the emulator is slow.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mem_support import TOL, TORCH, assert_close, kernel, run

DTYPES = ("bf16", "f16", "f32")
TARGETS = ("gfx942", "gfx950")
INF, NAN = math.inf, math.nan
COLS = 64
ACT_FLOOR = 1e-36          # the absolute error of an fp32 activation whose true value is below fp32's range


def _round(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """float64 values as the dtype holds them (the kernel's inputs), back in float64."""
    return x.to(TORCH[dtype]).double()


def softmax_rows(dtype: str) -> torch.Tensor:
    """Rows of COLS: each a case, on a background of ordinary N(0, 1) values unless it replaces it."""
    g = torch.Generator().manual_seed(13)
    fi = torch.finfo(TORCH[dtype])
    big = float(fi.max)
    rows: list[list[float]] = []

    def row(special: dict[int, float] | None = None, fill: float | None = None, scale: float = 1.0) -> None:
        r = (torch.randn(COLS, generator=g, dtype=torch.float64) * scale).tolist() if fill is None else [fill] * COLS
        for i, v in (special or {}).items():
            r[i] = v
        rows.append(r)

    # the largest magnitudes the dtype holds: one dominant element, a constant row, a row of both signs
    row({3: big})
    row(fill=big)
    row(fill=-big)
    row({0: big, 1: -big, 2: big})
    row({5: -big})
    # the failure point of the fused (x - max) log2 e (bf16 and f32 only: f16 ends at 65504)
    if dtype != "f16":
        for m in (1e9, 2e9, 3e9, 5e9, 1e10, 3e38, 1e20, -1e10):
            row({7: m})
        row(fill=1e10)
        row(fill=-1e10)
        row({i: 3e9 for i in range(0, COLS, 3)}, fill=3e9 - 2 ** 10)
    if dtype == "f32":
        # the max far out with neighbours a few ulps below it: tiny but normal outputs, exact x - max
        for m in (1e9, 1e10, 1e30):
            u = math.ulp(float(torch.tensor(m, dtype=torch.float32)))
            row({i: m - (i % 5) * u for i in range(COLS)})
    # around the split of exp_shifted (|max| = 65536): both sides, both signs, with near neighbours
    for m in (65536.0, 65536.0 + 2 ** -6, 65504.0, -65536.0, -70000.0, 70000.0):
        row({i: m - (i % 7) * 0.75 for i in range(COLS)})
    # a row of large values with ordinary spread
    row(scale=3e4 if dtype == "f16" else 1e6)
    # tiny and denormal values (softmax ~ uniform), and mixed with ordinary ones
    tiny = float(fi.tiny)
    row({i: tiny * (i % 4) / 8 for i in range(COLS)})
    row({1: tiny, 2: -tiny, 3: tiny / 8, 4: 1e-30 if dtype != "f16" else 1e-7})
    # infinities and NaN: a -inf element (0), half the row -inf, +inf (NaN row), NaN (NaN row), all -inf
    row({4: -INF})
    row({i: -INF for i in range(COLS // 2)})
    row({9: INF})
    row({9: INF, 10: -INF})
    row({11: NAN})
    row(fill=-INF)
    row({0: -INF, 1: big}, fill=-big)
    return torch.tensor(rows, dtype=torch.float64).to(TORCH[dtype])


def softmax_kernel(dtype, target):
    return kernel("softmax", target, dtype=dtype, max_cols=2 * COLS, waves=2, waves_per_row=1, rows_per_workgroup=4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_at_the_extremes(dtype, target):
    x = softmax_rows(dtype)
    k = softmax_kernel(dtype, target)
    for cols in (COLS, 2 * COLS):          # a short row (masked tail) and a row that fills the kernel
        xs = x if cols == COLS else torch.cat([x, x.flip(-1)], -1)
        out = torch.full_like(xs, 7.0)
        run(k, xs, out)
        want = _round(torch.softmax(xs.double(), -1), dtype)
        assert_close(out, want, dtype, f"softmax {dtype} {target} {cols} cols at the extremes")
        # torch's answers at the extremes, spelled out: NaN rows exactly where torch's are
        assert torch.equal(torch.isnan(out), torch.isnan(want)), f"softmax {dtype}: NaN where torch has none"
        finite = ~torch.isnan(want).any(-1)
        sums = out[finite].double().sum(-1)
        assert ((sums - 1).abs() < 0.02).all(), f"softmax {dtype}: rows that do not sum to 1: {sums}"


def test_softmax_large_rows_are_one_hot_and_uniform():
    """The issue's cases, by their meaning: a bf16 row with one 1e10 is [.., 1, ..], a row of 1e10 is
    1/64 each, one 3e38 is one-hot; fp32 from 2e9 to 1e10 likewise."""
    for dtype, m in (("bf16", 1e10), ("bf16", 3e38), ("f32", 2e9), ("f32", 3e9), ("f32", 1e10)):
        x = torch.zeros(2, COLS, dtype=TORCH[dtype])
        x[0, 17] = m
        x[1, :] = m
        out = torch.empty_like(x)
        run(softmax_kernel(dtype, "gfx942"), x, out)
        one_hot = torch.zeros(COLS, dtype=TORCH[dtype])
        one_hot[17] = 1
        assert torch.equal(out[0], one_hot), f"softmax {dtype} one {m:g}: {out[0]}"
        assert (out[1] == 1 / COLS).all(), f"softmax {dtype} a row of {m:g}: {out[1]}"


def test_softmax_accuracy_above_the_split():
    """fp32 rows whose |max| is above 65536 take the subtract-first path: as accurate as the fused path
    below it (tests/prims/test_mem_prims.py holds that one to 20 fp32 ulps on N(0, 3^2) rows)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 1000, generator=g) * 3 + torch.tensor([1e5, -1e5, 7e4, -2e6]).repeat(2)[:, None]
    k = kernel("softmax", "gfx942", dtype="f32", max_cols=1024, waves=4, waves_per_row=1, rows_per_workgroup=4)
    out = torch.empty_like(x)
    run(k, x, out)
    want = torch.softmax(x.double(), -1).numpy()
    a = np.abs(want).astype(np.float32)
    ulp = (np.nextafter(a, np.float32(np.inf)) - a).astype(np.float64)
    assert (np.abs(out.double().numpy() - want) / ulp).max() <= 20


# ----------------------------------------------------------------------------- activations
# float64 references; gelu and gelu_tanh in forms without cancellation: torch's float64 gelu computes
# 1 + erf(x/sqrt 2), 0 below x = -8.3, and its tanh form 1 + tanh(u), 0 below about -9, where the true
# values (gelu(-10) = -7.6e-23) are ordinary fp32 numbers and, times a large up, ordinary results
REF = {"silu": F.silu,
       "gelu": lambda x: x * torch.special.erfc(-x / math.sqrt(2)) / 2,
       "gelu_tanh": lambda x: x * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)),
       "relu": F.relu, "tanh": torch.tanh}
TORCH_OP = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


def extreme_values(dtype: str) -> torch.Tensor:
    fi = torch.finfo(TORCH[dtype])
    big, tiny = float(fi.max), float(fi.tiny)
    vals = [big, -big, INF, -INF, NAN, 0.0, -0.0, tiny, -tiny, tiny / 8, -tiny / 8, 1.5, -2.5, 10.0, -10.0,
            88.0, -88.0, 89.0, -104.0, -150.0, 6e4, -6e4, big / 2, -big / 2]
    if dtype != "f16":
        vals += [1e9, -1e9, 2e9, -2e9, 3e9, -3e9, 1e10, -1e10, 1e20, -1e20, 1.9e19, -1.9e19, 3e38, -3e38, 1e30,
                 -1e30, 1e-30, -1e-30, 1e-40, -1e-40]
    else:
        vals += [65504.0, -65504.0, 1e-7, -1e-7, 3e-5, -3e-5]
    return torch.tensor(vals, dtype=torch.float64).to(TORCH[dtype])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_activations_at_the_extremes(dtype, target):
    x = extreme_values(dtype)
    for op, ref in REF.items():
        k = kernel("activation", target, op=op, dtype=dtype, block=64, unroll=2)
        out = torch.full_like(x, 7.0)
        run(k, x, out)
        want = _round(ref(x.double()), dtype)
        if op in TORCH_OP:       # the forms agree with torch's own op, up to its cancellation
            torch_want = _round(TORCH_OP[op](x.double()), dtype)
            assert_close(torch_want, want, dtype, f"torch's {op} against its form without cancellation", scale=4)
        assert_close(out, want, dtype, f"{op} {dtype} {target} at the extremes", scale=4)
        assert torch.equal(torch.isnan(out), torch.isnan(want)), f"{op} {dtype}: NaN where torch has none"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_activations_at_the_extremes(dtype, target):
    """act(gate) * up with the extremes in the gate against ordinary and extreme ups, and ordinary gates
    against extreme ups (the product in fp32, rounded once; torch's float64 product rounded)."""
    v = extreme_values(dtype).double()
    n = v.numel()
    big = float(torch.finfo(TORCH[dtype]).max)
    ups = torch.tensor([1.0, -3.0, 1e-3, big, -INF, 0.0], dtype=torch.float64)
    gate = torch.cat([v.repeat(len(ups)), torch.full((2,), 0.75, dtype=torch.float64)])
    up = torch.cat([ups.repeat_interleave(n), torch.tensor([big, INF], dtype=torch.float64)])
    d = gate.numel() + gate.numel() % 2                  # 16-bit rows need an even d
    x = torch.zeros(1, 2, d, dtype=torch.float64)
    x[0, 0, :gate.numel()], x[0, 1, :up.numel()] = gate, up
    x = x.to(TORCH[dtype])
    for op in ("silu", "gelu", "gelu_tanh"):
        k = kernel("gated_activation", target, op=op, dtype=dtype, block=64, unroll=2)
        out = torch.full((1, d), 7.0, dtype=x.dtype)
        run(k, x, out)
        act, up = REF[op](x[:, 0].double()), x[:, 1].double()
        want = _round(act * up, dtype)
        # act(gate) is an fp32 value: where its true value is below fp32's range (silu(-104) ~ -7e-44;
        # silu(-89) ~ -2e-37 needs e^89, beyond fp32) it is 0 here and in torch's own fp32 op, so a
        # product with a huge up is off by that floor times |up|, and with an infinite up it is NaN
        # (0 * inf) where float64 says inf: the allowance grows with |up| and covers nothing else
        rtol, atol = TOL[dtype]
        allow = 4 * atol + rtol * want.abs() + ACT_FLOOR * up.abs()
        under = (act.abs() < ACT_FLOOR) & torch.isinf(up)
        g = out.double()
        ok = ((g - want).abs() <= allow) | (torch.isnan(g) & torch.isnan(want)) | (torch.isinf(want) & (g == want))
        ok |= under & (torch.isnan(g) | (g == want))
        bad = torch.nonzero(~ok).flatten().tolist()
        assert not bad, (f"{op}_and_mul {dtype} {target} at the extremes: {len(bad)} elements off, first "
                         f"act({x[0, 0, bad[1]].item():g}) * {x[0, 1, bad[1]].item():g}: got {g[0, bad[1]].item()!r}, "
                         f"want {want[0, bad[1]].item()!r}")
        assert torch.equal(torch.isnan(out) & ~under, torch.isnan(want) & ~under), \
            f"{op}_and_mul {dtype}: NaN where torch has none"
