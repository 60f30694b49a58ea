"""bench/emu_speed.py's side by side with tinygrad's emulator (``--tinygrad PATH``), on a small matmul:
tinygrad's process runs the same Triton code object on the same inputs, its C is checked against
torch, and at the pinned commit it is wrong only by its 32x32 MFMA result layout (right once that is
undone).  Needs a tinygrad source tree at the pinned commit in ``$ISAGEN_TINYGRAD`` (see
bench/emu_tinygrad.py for how to get it) and triton; skipped otherwise."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _emu_speed():
    spec = importlib.util.spec_from_file_location("emu_speed", ROOT / "bench" / "emu_speed.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("emu_speed", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_tinygrad_runs_the_same_code_object():
    tree = os.environ.get("ISAGEN_TINYGRAD")
    if not tree:
        pytest.skip("ISAGEN_TINYGRAD (a tinygrad source tree at the pinned commit) is not set")
    pytest.importorskip("triton")
    from tools.triton_kernels import compile_matmul
    emu_speed = _emu_speed()
    info = emu_speed.check_tinygrad(Path(tree))
    if not info["emu_matches_pinned"]:
        pytest.skip(f"{tree} is not tinygrad at {emu_speed.TINYGRAD_COMMIT[:12]}")
    kernel = compile_matmul("gfx942", 128, 128, 64, 4, "bf16", aligned=True)
    row = emu_speed.run_tinygrad_size(kernel, 256, 1, Path(tree), 600)
    assert row["ran"], row.get("why")
    assert row["warm_same_as_cold"] and len(row["warm_s"]) == 1 and row["cold_s"] > 0
    # wrong as it stands (the MFMA layout moves 24 of each 32 columns), right with the layout undone
    assert not row["correct"] and 0.5 < row["wrong_fraction"] < 0.9
    assert row["correct_with_mfma32_layout_fix"]
