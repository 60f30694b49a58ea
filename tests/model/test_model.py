"""The timing model's pieces against hand-computed cases, and its extrapolation against direct simulation.

Kernels: small gfx942 kernels assembled by isagen's toolchain (tests/emu_support.py), traced in the
emulator through ``Module.trace``; expectations are computed here from the machine description and the
ISA table (MFMA passes, LDS banks, HBM bandwidth), not taken from the model.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from emu_support import build

from isagen.model import ModelError
from isagen.model.cu import simulate
from isagen.model.machines import DEFAULT_PARAMS, MACHINES, get_machine
from isagen.model.trace import MFMA, Recorder, lane_bytes, workgroups
from isagen.model.workloads import bf16_gemm, predict_traced
from isagen.objects.codeobject import read_code_object
from isagen.runtime.emu import Device
from isagen.targets import get_target

MI300X = get_machine("mi300x")
PARAMS = replace(DEFAULT_PARAMS, clock_fraction=1.0)     # hand computations at the peak clock
AITER = Path(__file__).resolve().parents[1] / "data" / "aiter"
AITER_CO = AITER / "gfx942" / "bf16gemm__bf16gemm_fp32bf16_tn_64x64_splitk_clean.co"
AITER_PF3 = AITER / "gfx942" / "bf16gemm__bf16gemm_fp32bf16_tn_64x64_pf3_splitk.co"


def _trace(co: bytes, name: str, grid, block, args):
    dev = Device("gfx942", sanitize=False)
    mod = dev.load_module(co)
    rec = Recorder()
    mod.trace = rec
    mod.launch(name, grid=grid, block=block, args=args)
    kernel = read_code_object(co).kernels[name]
    return workgroups(rec.ops("gfx942")), kernel, mod


def test_trace_counts_every_executed_instruction():
    """The recorder's streams hold exactly the instructions the emulator's statistics count."""
    body = """
  v_mov_b32 v1, 0
  s_mov_b32 s4, 5
L:
  v_add_u32 v1, 1, v1
  s_sub_u32 s4, s4, 1
  s_cmp_lg_u32 s4, 0
  s_cbranch_scc1 L
"""
    co = build("loop5", body)
    wgs, _, mod = _trace(co, "loop5", (3, 1, 1), (128, 1, 1), [0])
    assert len(wgs) == 3 and all(len(w) == 2 for w in wgs.values())
    assert sum(len(s) for w in wgs.values() for s in w) == mod.last_stats["wave_instructions"]
    assert all(len(s) == 2 + 4 * 5 + 1 for w in wgs.values() for s in w)     # prologue, 5 trips, s_endpgm


def test_lane_bytes():
    assert lane_bytes("buffer_load_dwordx4") == 16
    assert lane_bytes("ds_read2_b64") == 16
    assert lane_bytes("global_store_short") == 2
    assert lane_bytes("buffer_load_dword") == 4


def test_mfma_chain_takes_passes_times_four_cycles_each():
    """One wave, N dependent MFMAs (same opcode, C = previous D): the matrix core is busy N x passes x 4
    cycles; the few instructions before them add one issue slot (4 cycles) each."""
    name, n = "v_mfma_f32_32x32x8_f16", 24
    body = "  v_mov_b32 v2, 0\n  v_mov_b32 v3, 0\n  v_mov_b32 v4, 0\n  v_mov_b32 v5, 0\n  s_nop 4\n" + \
        f"  {name} a[0:15], v[2:3], v[4:5], a[0:15]\n" * n
    co = build("chain", body, vgprs=8, agprs=16)
    wgs, _, _ = _trace(co, "chain", (1, 1, 1), (64, 1, 1), [0])
    res = simulate(list(wgs.values()), MI300X, params=PARAMS)
    passes = get_target("gfx942").mfma(name).passes
    prologue = 4 * 4 + 5 * 4                      # four v_mov, s_nop 4 (5 wait states)
    assert res.cycles == pytest.approx(prologue + n * passes * 4, abs=8)
    assert res.simds[0].mfma_busy == n * passes * 4
    assert res.simds[0].stalls["mfma_pipe"] == pytest.approx(n * (passes * 4 - 4) - passes * 4 + 4, abs=8)


def test_lds_bound_loop_runs_at_the_lds_bandwidth():
    """Four waves each reading 12 x 1 KiB per trip from LDS: bytes / (banks x 4 B/clk) is the floor; the
    latency of each trip's last read (one per trip) adds at most 64 cycles per trip."""
    trips, reads = 16, 12
    body = f"  v_lshlrev_b32 v1, 4, v0\n  s_mov_b32 s4, {trips}\nL:\n" + \
        "  ds_read_b128 v[4:7], v1\n" * reads + \
        "  s_waitcnt lgkmcnt(0)\n  s_sub_u32 s4, s4, 1\n  s_cmp_lg_u32 s4, 0\n  s_cbranch_scc1 L\n"
    co = build("ldsloop", body, vgprs=8, lds=4096)
    wgs, kernel, _ = _trace(co, "ldsloop", (1, 1, 1), (256, 1, 1), [0])
    res = simulate(list(wgs.values()), MI300X, params=PARAMS)
    floor = trips * 4 * reads * 64 * 16 / (4 * get_target("gfx942").lds_banks)
    assert floor <= res.cycles <= floor + trips * (PARAMS.lds_latency_cycles + 8 * 4) + 64
    assert res.lds_busy == pytest.approx(floor)
    p = predict_traced(wgs, kernel, MI300X, threads=256, params=PARAMS)
    assert p.limiter.startswith("LDS bandwidth")


COPY = """
  v_lshlrev_b32 v1, 4, v0                 // 16 bytes per lane, four 4 KiB blocks per trip
  v_add_u32 v2, 0x1000, v1
  v_add_u32 v3, 0x2000, v1
  v_add_u32 v20, 0x3000, v1
  s_load_dwordx4 s[4:7], s[0:1], 0
  s_mov_b32 s8, %d
  s_waitcnt lgkmcnt(0)
L:
  global_load_dwordx4 v[4:7], v1, s[4:5]
  global_load_dwordx4 v[8:11], v2, s[4:5]
  global_load_dwordx4 v[12:15], v3, s[4:5]
  global_load_dwordx4 v[16:19], v20, s[4:5]
  s_waitcnt vmcnt(0)
  global_store_dwordx4 v1, v[4:7], s[6:7]
  global_store_dwordx4 v2, v[8:11], s[6:7]
  global_store_dwordx4 v3, v[12:15], s[6:7]
  global_store_dwordx4 v20, v[16:19], s[6:7]
  s_add_u32 s4, s4, 0x4000
  s_addc_u32 s5, s5, 0
  s_add_u32 s6, s6, 0x4000
  s_addc_u32 s7, s7, 0
  s_sub_u32 s8, s8, 1
  s_cmp_lg_u32 s8, 0
  s_cbranch_scc1 L
"""


def test_hbm_bound_copy_runs_at_the_hbm_bandwidth():
    """A copy over two full rounds of the chip: every byte read and written once at the achievable HBM
    bandwidth (``hbm_efficiency`` x the data sheet's 5.3 TB/s), plus the launch cost."""
    trips = 8
    co = build("copy", COPY % trips, args=(("ptr", "src"), ("ptr", "dst")), vgprs=24)
    dev = Device("gfx942", sanitize=False)
    nbytes = trips * 16384
    src, dst = dev.to_device(np.zeros(nbytes, np.uint8)), dev.to_device(np.zeros(nbytes, np.uint8))
    mod = dev.load_module(co)
    rec = Recorder()
    mod.trace = rec
    mod.launch("copy", grid=(1, 1, 1), block=(256, 1, 1), args=[src, dst])
    assert (dev.from_device(dst, (nbytes,), np.uint8) == 0).all()
    wgs = workgroups(rec.ops("gfx942"))
    kernel = read_code_object(co).kernels["copy"]
    per_cu = 8                                     # 8 waves per SIMD, 4 waves per workgroup
    total = MI300X.cus * per_cu * 2
    moved = total * 2 * nbytes
    p = predict_traced(wgs, kernel, MI300X, threads=256, total_wgs=total, unique_bytes=moved, params=PARAMS)
    assert p.grid.per_cu == per_cu and len(p.grid.rounds) == 2
    expect_us = moved / (PARAMS.hbm_efficiency * MI300X.hbm_tb_s * 1e12) * 1e6
    core = p.us - PARAMS.launch_us
    assert expect_us <= core <= 1.15 * expect_us
    assert p.limiter.startswith("memory bandwidth")
    assert p.tb_s == pytest.approx(moved / (p.us * 1e-6) / 1e12)


def test_steady_state_extrapolation_matches_direct_simulation():
    """The line through the predictions at 4 and 8 K iterations gives the prediction at 24 within 2%."""
    M, N, split = 64, 256, 2
    K = 24 * 64 * split
    ext = bf16_gemm(str(AITER_CO), M, N, K, MI300X, splitk=split, params=PARAMS)
    direct = bf16_gemm(str(AITER_CO), M, N, K, MI300X, splitk=split, params=PARAMS, exact=True)
    assert ext.extrapolated and not direct.extrapolated
    assert ext.us == pytest.approx(direct.us, rel=0.02)


def test_8192_cubed_prediction_is_fast_and_below_peak():
    """8192^3 through AITER's 64x64 pf3 kernel on MI300X: predicted in well under 30 s, never above the
    chip's bf16 peak."""
    t0 = time.perf_counter()
    p = bf16_gemm(str(AITER_PF3), 8192, 8192, 8192, MI300X, splitk=1, params=PARAMS)
    assert time.perf_counter() - t0 < 30
    peak = MI300X.cus * get_target("gfx942").products[0].bf16_flop_per_cu_clk * MI300X.clock_mhz * 1e6 / 1e12
    assert 0 < p.tflops <= peak
    assert p.shape["grid"] == (128, 128, 1) and len(p.grid.rounds) >= 2


def test_machines_and_errors():
    assert set(MACHINES) == {"mi300x", "mi308x", "mi325x", "mi350x", "mi355x"}
    assert get_machine("MI308X").cus == 80
    assert get_machine("mi355x").lds_bytes == 160 * 1024
    with pytest.raises(ModelError, match="--machine"):
        get_machine("mi250")
    with pytest.raises(ModelError, match="tileN"):
        bf16_gemm(str(AITER_CO), 64, 100, 512, MI300X)
    assert all(op.kind != MFMA for op in [])


def test_cli_model_prints_prediction_and_timeline(tmp_path, capsys):
    from isagen.cli import main

    html = tmp_path / "tl.html"
    rc = main(["model", str(AITER_PF3), "--shape", "256,512,1024", "--machine", "mi308x", "--timeline", str(html)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "predicted" in out and "limiter" in out and "not a measurement" in out
    assert len([ln for ln in out.splitlines() if ln.strip()[:1].isdigit() and "%" in ln]) == 4   # one row per SIMD
    text = html.read_text()
    assert "<svg" in text and "mfma" in text
    rc = main(["model", str(AITER_PF3), "--shape", "256,512", "--machine", "mi308x"])
    err = capsys.readouterr().err
    assert rc == 2 and "--shape" in err and len(err.strip().splitlines()) == 1
    rc = main(["model", str(AITER_PF3), "--shape", "256,512,1024", "--machine", "mi355x"])
    assert rc == 2 and "gfx950" in capsys.readouterr().err


def test_isagen_gemm_spec_prediction_is_matrix_bound_and_below_peak():
    """isagen's own BF16 GEMM (specs/gemm_bf16.yaml) at 8192^3 on MI300X: the emulated tile passes its torch
    check, the prediction stays under the chip's peak and names the matrix core as the limiter."""
    from isagen.model.workloads import isagen_gemm

    spec = Path(__file__).resolve().parents[2] / "specs" / "gemm_bf16.yaml"
    p = isagen_gemm(str(spec), 8192, 8192, 8192, MI300X)
    peak = MI300X.cus * get_target("gfx942").products[0].bf16_flop_per_cu_clk * MI300X.clock_mhz * 1e6 / 1e12
    assert 0.3 * peak < p.tflops < peak
    assert p.limiter.startswith("MFMA") and p.extrapolated


def test_cli_model_any_kernel_with_explicit_launch(tmp_path, capsys):
    from isagen.cli import main

    co = tmp_path / "copy.co"
    co.write_bytes(build("copy", COPY % 4, args=(("ptr", "src"), ("ptr", "dst")), vgprs=24))
    rc = main(["model", str(co), "--grid", "1,1,1", "--block", "256", "--arg", "buf:65536", "--arg", "buf:65536",
               "--total-workgroups", str(MI300X.cus * 8), "--machine", "mi300x", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    import json
    d = json.loads(out)
    assert d["prediction_not_measurement"] is True and d["predicted_us"] > 0 and len(d["simds"]) == 4
    rc = main(["model", str(co), "--grid", "1,1,1", "--block", "256", "--arg", "nonsense"])
    assert rc == 2 and "--arg" in capsys.readouterr().err


def test_isagen_attention_prediction_below_peak():
    """isagen's attention forward at HipKittens' GQA shape on MI300X: extrapolated over the KV tiles, under the
    chip's bf16 peak, FLOPs counted as 4 B H N_q N_kv D."""
    from isagen.model.workloads import isagen_attention

    p = isagen_attention(16, 64, 8, 2048, 2048, 128, MI300X)
    peak = MI300X.cus * get_target("gfx942").products[0].bf16_flop_per_cu_clk * MI300X.clock_mhz * 1e6 / 1e12
    assert p.extrapolated and p.flops == 4.0 * 16 * 64 * 2048 * 2048 * 128
    assert 0.1 * peak < p.tflops < peak
    assert p.shape["kv_tiles"] == 32 and p.grid.rounds[0].workgroups <= MI300X.cus * p.grid.per_cu
