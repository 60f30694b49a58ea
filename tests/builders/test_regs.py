"""Register pools: aligned named check-out, loud overflow, scoped temporaries, leak check."""

import pytest

from isagen.builders.regs import RegisterPool
from isagen.errors import AllocationError


def test_aligned_allocation_and_peak():
    pool = RegisterPool("v", 256)
    a = pool.alloc(1, "a")
    b = pool.alloc(4, "b", align=4)
    c = pool.alloc(2, "c", align=2)
    assert (a.index, b.index, c.index) == (0, 4, 2)
    assert pool.peak == 8
    pool.free(b)
    d = pool.alloc(3, "d")
    assert d.index == 4 and pool.peak == 8
    assert str(b) == "v[vgpr_b:vgpr_b+3]" and str(b[1:3]) == "v[vgpr_b+1:vgpr_b+2]"


def test_overflow_names_what_is_live():
    pool = RegisterPool("a", 16)
    pool.alloc(8, "acc_tile0")
    pool.alloc(4, "acc_tile1")
    with pytest.raises(AllocationError) as err:
        pool.alloc(8, "acc_tile2")
    msg = str(err.value)
    assert "out of AGPRs allocating 'acc_tile2'" in msg
    assert "acc_tile0=a[0:7]" in msg and "acc_tile1=a[8:11]" in msg
    assert "\n" not in msg


def test_fragmentation_respects_alignment():
    pool = RegisterPool("s", 8)
    pool.alloc(1, "x", index=1)
    # s[4:7] is the only 4-aligned free quad
    assert pool.alloc(4, "q", align=4).index == 4
    with pytest.raises(AllocationError):
        pool.alloc(4, "q2", align=4)


def test_scoped_and_leaks():
    pool = RegisterPool("v", 8)
    keep = pool.alloc(1, "keep", kernel=True)
    with pool.scoped(2, "tmp", align=2) as tmp:
        assert tmp.index == 2
    assert pool.free_count() == 7
    leaked = pool.alloc(1, "forgot")
    assert [a.name for a in pool.leaks()] == ["forgot"]
    pool.free(leaked)
    assert pool.leaks() == [] and keep.index in pool.live


def test_double_free_and_fixed_index_conflicts():
    pool = RegisterPool("s", 16)
    r = pool.alloc(2, "p", align=2)
    pool.free(r)
    with pytest.raises(AllocationError, match="not a live SGPR allocation"):
        pool.free(r)
    pool.alloc(2, "ptr", index=0)
    with pytest.raises(AllocationError, match="s\\[1:2\\] is not free"):
        pool.alloc(2, "other", index=1)


def test_symbols_unique():
    pool = RegisterPool("v", 8)
    r1 = pool.alloc(1, "x")
    pool.free(r1)
    r2 = pool.alloc(1, "x")
    assert r1.sym != r2.sym
