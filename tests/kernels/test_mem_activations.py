"""Activations (silu, gelu, gelu_tanh, relu, tanh) and the gated silu/gelu/gelu_tanh _and_mul, run in the
emulator (sanitizer on) against float64 torch: every op and dtype, lengths with tails (odd n for 16-bit
types: the 2-byte tail), special values (NaN, +-inf, -0.0, huge), gated rows with any d, gfx950, and
the bytes moved."""

import math

import pytest
import torch
import torch.nn.functional as F
from mem_support import TORCH, assert_close, kernel, rand, run

import isagen

REF = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu,
       "tanh": torch.tanh}
OPS = tuple(REF)
DTYPES = ("bf16", "f16", "f32")


def act_kernel(op, dtype, target="gfx942", gated=False):
    return kernel("gated_activation" if gated else "activation", target, op=op, dtype=dtype, block=64, unroll=2)


def check_plain(k, op, x, dtype, what):
    out = torch.full_like(x, 7.0)
    stats = run(k, x, out)
    assert_close(out, REF[op](x.double()), dtype, what, scale=4)
    return out, stats


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_every_op_and_dtype(op, dtype):
    k = act_kernel(op, dtype)
    tile = 64 * (16 // TORCH[dtype].itemsize) * 2
    for n in (1, 2 * tile + 3, tile):
        x = rand((n,), dtype, seed=n, scale=3)
        _, stats = check_plain(k, op, x, dtype, f"{op} {dtype} n={n}")
        nbytes = x.numel() * x.element_size()
        assert (stats["global_bytes_read"], stats["global_bytes_written"]) == (nbytes, nbytes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(dtype):
    big = float(torch.finfo(TORCH[dtype]).max)
    vals = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), big, -big, 1e-3, -1e-3, 0.49, 0.51, -0.5,
            20.0, -20.0, 100.0, -100.0, 5.5, -5.5]
    x = torch.tensor(vals, dtype=torch.float32).to(TORCH[dtype])
    for op in OPS:
        out, _ = check_plain(act_kernel(op, dtype), op, x, dtype, f"{op} {dtype} special values")
        if op == "relu":
            assert math.copysign(1, out[1].item()) < 0, "relu(-0.0) keeps the sign, as torch"


@pytest.mark.parametrize("op,dtype", [("silu", "bf16"), ("silu", "f16"), ("silu", "f32"), ("gelu", "bf16"),
                                      ("gelu_tanh", "f32"), ("gelu_tanh", "f16")])
def test_gated(op, dtype):
    k = act_kernel(op, dtype, gated=True)
    for rows, d in ((3, 1000), (1, 2), (2, 64 * 8 * 2 + 6)):
        x = rand((rows, 2, d), dtype, seed=d, scale=2)
        out = torch.full((rows, d), 7.0, dtype=x.dtype)
        stats = run(k, x, out)
        assert_close(out, REF[op](x[:, 0].double()) * x[:, 1].double(), dtype, f"{op}_and_mul {dtype} {rows}x{d}",
                     scale=8)
        esize = x.element_size()
        assert (stats["global_bytes_read"], stats["global_bytes_written"]) == (esize * 2 * rows * d, esize * rows * d)


def test_bundled_specs_and_gfx950():
    for target in ("gfx942", "gfx950"):
        for op in OPS:
            check_plain(isagen.build(f"{op}_bf16", target), op, rand((5001,), "bf16", seed=1, scale=3), "bf16",
                        f"{op}_bf16 {target}")
        for op in ("silu", "gelu", "gelu_tanh"):
            k = isagen.build(f"{op}_and_mul_bf16", target)
            x = rand((2, 2, 14336), "bf16", seed=2, scale=2)
            out = torch.empty((2, 14336), dtype=torch.bfloat16)
            stats = run(k, x, out)
            assert_close(out, REF[op](x[:, 0].double()) * x[:, 1].double(), "bf16", f"{op}_and_mul {target}", scale=8)
            assert stats["global_bytes_by_width"] == {16: 3 * 2 * 14336 * 2}
