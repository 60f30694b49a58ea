"""The MX GEMM rows of bench/gemm_model.py (``--mx``), checked against independent counts: no ``s_nop``
in the hot loop, MFMA share of issue cycles >= 0.90 for the large tiles (the issue's bar), the MFMA
cycles per SIMD per K-step equal to the K-step's FLOPs at the MI355X data sheet's MX peak (MXFP8 as
fp8, MXFP4 twice that), and the bytes per FLOP from the tile's geometry with one scale byte per 32 k."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from isagen.builders.spec import load_specs

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gemm_model", ROOT / "bench" / "gemm_model.py")
assert _spec and _spec.loader
gemm_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gemm_model)

SPECS = load_specs([ROOT / "specs" / "gemm_mxfp8.yaml", ROOT / "specs" / "gemm_mxfp4.yaml"])
# MI355X data sheet, dense: MXFP8 5.0 PFLOP/s, MXFP4 10.1 PFLOP/s over 256 CUs at 2.4 GHz -> FLOP/CU/clock
MX_PEAK = {"e4m3": 8192, "e2m1": 16384}


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_mx_rows(spec):
    r = gemm_model.mx_model(spec, "gfx950")
    assert r["hot_loop_nops"] == 0
    assert r["mfma_share_serial"] >= 0.90
    bm, bn, bk = r["tile"]
    flops = 2 * bm * bn * bk
    peak = MX_PEAK[r["formats"][0]]
    assert r["peak_flop_per_cu_clk"] == peak
    assert r["mfma_busy_cycles"] == flops / peak == r["mfma_cycles_check"]
    data = bk if r["formats"][0] == "e4m3" else bk // 2
    assert r["tile_bytes_per_flop"] == (bm + bn) * (data + bk // 32) / flops
