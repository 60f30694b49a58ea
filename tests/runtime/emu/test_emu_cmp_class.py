"""v_cmp_class's class bits (ops_valu._class_mask) against numpy's own classification of the values."""

import numpy as np
import pytest

from isagen.runtime.emu.ops_valu import _class_mask


def _expected_class(x: np.ndarray) -> np.ndarray:
    """0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0, 6 +0, 7 +denorm, 8 +normal, 9 +inf."""
    info = np.finfo(x.dtype)
    bits = x.view({4: np.uint32, 8: np.uint64, 2: np.uint16}[x.dtype.itemsize]).astype(np.uint64)
    quiet = ((bits >> np.uint64(info.nmant - 1)) & np.uint64(1)) == 1
    neg = np.signbit(x)
    sub = (np.abs(x) < info.tiny) & (x != 0)
    cls = np.where(neg, 3, 8)                                   # normal unless one of the below
    cls = np.where(sub, np.where(neg, 4, 7), cls)
    cls = np.where(x == 0, np.where(neg, 5, 6), cls)
    cls = np.where(np.isinf(x), np.where(neg, 2, 9), cls)
    return np.where(np.isnan(x), np.where(quiet, 1, 0), cls)


@pytest.mark.parametrize("dtype, ubits", [(np.float32, np.uint32), (np.float64, np.uint64), (np.float16, np.uint16)])
def test_class_of_every_kind_of_value(dtype, ubits):
    rng = np.random.default_rng(11)
    info = np.finfo(dtype)
    raw = rng.integers(0, np.iinfo(ubits).max, 4000, dtype=np.uint64).astype(ubits)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, info.tiny, -info.tiny], dtype)
    sub = np.array([info.smallest_subnormal, -info.smallest_subnormal], dtype)
    snan = (np.array([np.nan], dtype).view(ubits) & ~ubits(1 << (info.nmant - 1))) | ubits(1)   # signalling NaN
    x = np.concatenate([raw.view(dtype), special, sub, snan.view(dtype)])
    want = _expected_class(x)
    assert set(want.tolist()) == set(range(10))                 # every class occurs
    for c in range(10):
        got = _class_mask(x, np.uint32(1 << c))
        assert np.array_equal(got, want == c), c
    assert _class_mask(x, np.uint32(0x3FF)).all()
