"""Row softmax in the emulator (sanitizer on) against float64 torch: every dtype, full rows and rows with
tails (the masked path must not let the zero-filled tail into the max or the sum), row counts that
leave a partial workgroup, 1/2/4 waves per row, large negative rows, -inf entries, and the bytes moved."""

import pytest
import torch
from mem_support import assert_close, kernel, rand, run

import isagen

WPR = {"bf16": 2, "f16": 4, "f32": 1}


def softmax_kernel(dtype, target="gfx942", max_cols=1024, wpr=None):
    return kernel("softmax", target, dtype=dtype, max_cols=max_cols, waves=4, waves_per_row=wpr or WPR[dtype],
                  rows_per_workgroup=4)


def check(k, x, dtype, what):
    out = torch.empty_like(x)
    stats = run(k, x, out)
    assert_close(out, torch.softmax(x.double(), -1), dtype, what)
    return out, stats


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_every_dtype_full_and_short_rows(dtype):
    k = softmax_kernel(dtype)
    for rows, cols in ((7, 1024), (7, 1000), (3, 2), (5, 130)):
        x = rand((rows, cols), dtype, seed=cols, scale=3)
        _, stats = check(k, x, dtype, f"softmax {dtype} {rows}x{cols}")
        nbytes = x.numel() * x.element_size()
        assert (stats["global_bytes_read"], stats["global_bytes_written"]) == (nbytes, nbytes)


def test_masking_is_not_biased_by_the_zero_filled_tail():
    """All-negative rows far from 0: a tail of zeros taken into the max would underflow every exp and
    divide 0 by 0; taken into the sum it would add exp(-max) per missing column."""
    k = softmax_kernel("f32")
    x = rand((6, 1000), "f32", seed=1, scale=2, shift=-200.0)
    check(k, x, "f32", "softmax of rows around -200")
    x = rand((6, 1000), "f32", seed=2, scale=0.1, shift=3.0)     # exp(-max) would be a visible extra term
    check(k, x, "f32", "softmax of rows around +3")


def test_special_values():
    k = softmax_kernel("bf16")
    x = rand((4, 1000), "bf16", seed=3, scale=4)
    x[0, :500] = float("-inf")                 # masked-out half (attention-style)
    x[1, 7] = 80.0                             # one dominant element
    x[2, :] = -1e4                             # a constant row
    x[3, :] = float("-inf")                    # all -inf: NaN, as torch
    out, _ = check(k, x, "bf16", "softmax with -inf / constant / dominant entries")
    assert torch.isnan(out[3]).all() and (out[0, :500] == 0).all()


def test_bundled_spec_over_lengths():
    k = isagen.build("softmax_bf16", "gfx942")
    for rows, cols in ((3, 128), (5, 1000), (2, 4096), (17, 8192)):
        x = rand((rows, cols), "bf16", seed=rows, scale=2)
        _, stats = check(k, x, "bf16", f"softmax_bf16 {rows}x{cols}")
        assert stats["global_bytes_by_width"] == {16: 2 * x.numel() * 2}


def test_gfx950():
    for dtype in ("bf16", "f32"):
        k = softmax_kernel(dtype, target="gfx950", wpr=2)
        check(k, rand((5, 1000), dtype, seed=4, scale=3), dtype, f"softmax {dtype} gfx950")
