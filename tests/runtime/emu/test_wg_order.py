"""The emulator's workgroup order (ISAGEN_EMU_WG_ORDER): forward, reversed or a seeded shuffle, always a
permutation of the launch's workgroups; anything else is one LaunchError line."""

import numpy as np
import pytest

from isagen.errors import LaunchError
from isagen.runtime.emu.dispatch import workgroup_order


@pytest.mark.parametrize("value", ["", "forward", "reverse", "shuffle:0", "shuffle:12345"])
def test_orders_are_permutations(monkeypatch, value):
    monkeypatch.setenv("ISAGEN_EMU_WG_ORDER", value)
    order = workgroup_order(37)
    assert sorted(order.tolist()) == list(range(37))
    if value in ("", "forward"):
        assert order.tolist() == list(range(37))
    if value == "reverse":
        assert order.tolist() == list(range(36, -1, -1))
    if value.startswith("shuffle"):
        assert np.array_equal(order, workgroup_order(37))          # seeded: the same every launch
        assert order.tolist() != list(range(37))


@pytest.mark.parametrize("value", ["backwards", "shuffle:", "shuffle:x", "shuffle:-3"])
def test_bad_orders_are_one_line(monkeypatch, value):
    monkeypatch.setenv("ISAGEN_EMU_WG_ORDER", value)
    with pytest.raises(LaunchError, match="ISAGEN_EMU_WG_ORDER") as e:
        workgroup_order(4)
    assert "\n" not in str(e.value)
