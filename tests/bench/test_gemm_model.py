"""What bench/gemm_model.py reports for the FP8 GEMM, checked against independent counts: no ``s_nop``
in the hot loop, MFMA share of issue cycles >= 0.90 (the issue's bar for the large-tile FP8 GEMMs on
both targets), the MFMA cycles per SIMD per K-step equal to the K-step's FLOPs at the product's fp8
peak, and the bytes per FLOP from the tile's geometry.  No timing."""

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

SPECS = load_specs([ROOT / "specs" / "gemm_fp8.yaml", ROOT / "specs" / "gemm_fp8_rowwise.yaml"])


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_fp8_rows(spec, target):
    r = gemm_model.model(spec, target)
    assert r["in_dtype"] == "fp8" and r["hot_loop_nops"] == 0
    assert r["mfma_share_serial"] >= 0.90
    bm, bn, bk = r["tile"]
    flops = 2 * bm * bn * bk                                  # per workgroup (one per CU) per K-step
    fp8_peak = {"gfx942": 4096, "gfx950": 8192}[target]       # FLOP per CU per clock: MI300X, MI355X data sheets
    assert r["mfma_busy_cycles"] == flops / fp8_peak == r["mfma_cycles_check"]
    assert r["tile_bytes_per_flop"] == (bm + bn) * bk / flops


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_blockscale_row(target):
    """The block-scaled GEMM: no ``s_nop``; its VALU per SIMD per K-step is exactly one v_pk_fma_f32 per two
    accumulators and one v_pk_mul_f32 per two row fragments, per K-block (a K-step is one K-block on
    gfx950, half of one on gfx942), for the two waves of a SIMD; its tile bytes include the scales.  The
    MFMA share is below the 0.90 bar (docs/gemm.md says why); this guards it from getting worse."""
    (spec,) = load_specs([ROOT / "specs" / "gemm_fp8_blockscale.yaml"])
    r = gemm_model.model(spec, target)
    assert r["scaling"] == "block" and r["hot_loop_nops"] == 0
    bm, bn, bk = r["tile"]
    wave_m, wave_n = bm // 2, bn // 4                              # pingpong8: 2 x 4 waves
    acc_regs = wave_m * wave_n // 64                                 # fp32 accumulators per lane
    per_kblock = 2 * (acc_regs // 2 + (wave_m // 16 + 1) // 2)    # 2 waves a SIMD: fma pairs + factor pairs
    assert r["per_simd_per_kstep"]["valu"] == per_kblock * bk / 128
    flops = 2 * bm * bn * bk
    scale_bytes = (bm + -(-bn // 128)) * 4 * bk / 128
    assert r["tile_bytes_per_flop"] == ((bm + bn) * bk + scale_bytes) / flops
    assert 0.85 <= r["mfma_share_serial"] < 0.90
