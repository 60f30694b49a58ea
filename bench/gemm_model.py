"""Static performance model of the BF16 and FP8 GEMM kernels: what one SIMD issues per K-step of the hot loop.

    python bench/gemm_model.py [SPEC ...]          (default: specs/gemm_bf16*.yaml and gemm_fp8*.yaml, every target)

For every spec and target it builds the kernel, takes the hot loop(s) out of the finished program
(between the ``kloop`` and ``kloop_done`` labels; the loop body holds two K-tiles, one per LDS stage)
and counts, per K-step (one K-tile) and per SIMD (pingpong8: one wave of each group; interleave4:
one wave):

- the instruction mix: MFMAs, DS reads, VMEM (LDS-DMA copies), SALU, VALU, ``s_nop`` (and their wait
  states), ``s_waitcnt``, ``s_barrier`` and other SOPP;
- MFMA busy cycles, from ``isagen.targets`` (``MfmaInfo.cycles``: 16 for 16x16x16/16x16x32 bf16 and
  16x16x32 fp8, 32 for 32x32x8/32x32x16 and 16x16x128 f8f6f4, 64 for 32x32x64 f8f6f4), checked against
  the product's peak rate (bf16 or fp8 FLOP per CU per clock) for the K-step's FLOPs;
- the MFMA share of all issue cycles, ``mfma / (mfma + other)``, where every other instruction takes
  one issue cycle (``s_nop N``: N+1) and nothing overlaps: a lower bound (on hardware the other wave of
  the SIMD, and independent instructions of the same wave, issue while the matrix core is busy), and
  the overlapped estimate ``mfma / max(mfma, other)``;
- per CU and K-step: LDS bytes read by ``ds_read`` vs the LDS bandwidth (banks x 4 bytes per clock),
  and the global bytes the copies move, as the bandwidth the whole chip would need at MFMA peak if
  every tile came from HBM (what L2 reuse through the chiplet-aware order must cover);
- HBM bytes per FLOP: the tile's streaming ratio (A and B bytes of a K-step over its FLOPs, no reuse
  between workgroups), the compulsory ratio of the spec's full-size problem (A, B read once and C
  written once), and the product's ridge point (HBM bandwidth over peak FLOP/s): a GEMM is compute
  bound when the bytes it really moves per FLOP stay below the ridge.

Waits and barriers are counted, not timed here; the timing model (``isagen.model``, docs/model.md) times
them: each spec's predicted run time and TFLOP/s at its ``shapes:`` on every machine of its target
(``predicted``), beside HipKittens' published BF16 8192^3 figures (1610 TFLOP/s on MI355X, 749 on MI325X).
Those are **predictions of a model** of the accuracy docs/model.md measures, never measurements
(``--no-predict`` skips them).  Results: ``bench/results/gemm_model.json`` and ``.md``; summary in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isagen.builders.spec import load_specs  # noqa: E402
from isagen.isa.instruction import Instruction  # noqa: E402
from isagen.kernels import gemm, gemm_fp8  # noqa: E402
from isagen.kernels.gemm import hot_loops  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MACHINES_OF = {"gfx942": ("mi300x", "mi325x"), "gfx950": ("mi350x", "mi355x")}
# HipKittens (arXiv 2511.08083), BF16 GEMM 8192^3: published TFLOP/s, for comparison with predictions only
HIPKITTENS_BF16_8192 = {"mi355x": 1610, "mi325x": 749}


def predict(spec, target_name: str) -> dict:
    """The timing model's prediction per machine of the target at the spec's shapes (docs/model.md)."""
    from isagen.model.machines import get_machine
    from isagen.model.workloads import isagen_gemm

    m, n, k = (spec.shapes[d] for d in ("m", "n", "k"))
    out = {}
    for mach in MACHINES_OF[target_name]:
        try:
            p = isagen_gemm(str(spec.path), m, n, k, get_machine(mach))
            out[mach] = {"predicted_us": round(p.us, 2), "predicted_tflops": round(p.tflops, 1),
                         "limiter": p.limiter, "clock_mhz": round(p.clock_mhz)}
        except Exception as e:                # reported, not hidden
            out[mach] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    return out


def mix(insts: list[Instruction]) -> dict:
    m = {"mfma": 0, "ds_read": 0, "ds_other": 0, "vmem": 0, "salu": 0, "valu": 0, "s_nop": 0,
         "nop_wait_states": 0, "s_waitcnt": 0, "s_barrier": 0, "sopp_other": 0, "mfma_cycles": 0, "lds_read_bytes": 0}
    for i in insts:
        u = i.unit
        if u == "mfma":
            m["mfma"] += 1
            m["mfma_cycles"] += i.desc.mfma.cycles
        elif u == "ds":
            if "lds_read" in i.desc.flags:
                m["ds_read"] += 1
                m["lds_read_bytes"] += 64 * _read_bytes(i.name)
            else:
                m["ds_other"] += 1
        elif u in ("vmem", "flat"):
            m["vmem"] += 1
        elif u == "salu" or u == "smem":
            m["salu"] += 1
        elif u in ("valu", "trans"):
            m["valu"] += 1
        elif i.name == "s_nop":
            m["s_nop"] += 1
            m["nop_wait_states"] += i.ops[0] + 1
        elif i.name == "s_waitcnt":
            m["s_waitcnt"] += 1
        elif i.name == "s_barrier":
            m["s_barrier"] += 1
        else:
            m["sopp_other"] += 1
    return m


def _read_bytes(name: str) -> int:
    return {"ds_read_b128": 16, "ds_read_b64": 8, "ds_read_b64_tr_b16": 8, "ds_read_u16": 2,
            "ds_read_b32": 4}.get(name, 4)


def model(spec, target) -> dict:
    program = spec.build(target)
    plan = (gemm_fp8 if spec.kernel == "gemm_fp8" else gemm).make_plan(spec.params, target)
    bodies = hot_loops(program)
    waves_per_simd = plan.waves // plan.target.simds_per_cu
    total = {}
    for body in bodies:                       # pingpong8: group 0's and group 1's loop; each runs on every SIMD
        for key, v in mix(body).items():
            total[key] = total.get(key, 0) + v
    steps = 2                                  # each loop body covers two K-tiles (LDS stage 0 and 1)
    per = {k: v / steps for k, v in total.items()}
    if len(bodies) == 1:                       # interleave4: one wave per SIMD runs the one loop
        per = {k: v * waves_per_simd for k, v in per.items()}
    other = (per["ds_read"] + per["ds_other"] + per["vmem"] + per["salu"] + per["valu"] + per["nop_wait_states"]
             + per["s_waitcnt"] + per["s_barrier"] + per["sopp_other"])
    mf = per["mfma_cycles"]
    prod = plan.target.flagship
    lds_bw = plan.target.lds_banks * 4                      # bytes per clock per CU (one access per bank)
    lds_bytes_cu = per["lds_read_bytes"] * plan.target.simds_per_cu
    global_bytes = (plan.block_m + plan.block_n) * plan.block_k_bytes   # one workgroup (one per CU) per K-step
    flops_cu = 2 * plan.block_m * plan.block_n * plan.block_k
    fp8 = plan.in_dtype != "bf16"
    peak_flop = prod.fp8_flop_per_cu_clk if fp8 else prod.bf16_flop_per_cu_clk
    peak_cycles = flops_cu / peak_flop                          # CU cycles per K-step at MFMA peak
    m, n, k = (spec.shapes[d] for d in ("m", "n", "k"))
    compulsory = ((m + n) * k * plan.elem_bytes + m * n * plan.out_bytes) / (2 * m * n * k)
    peak_flops = prod.cus * peak_flop * prod.clock_mhz * 1e6
    return {
        "spec": spec.name, "target": plan.target.name, "in_dtype": plan.in_dtype, "schedule": plan.schedule,
        "layout": plan.layout,
        "tile": [plan.block_m, plan.block_n, plan.block_k], "mfma": plan.mfma.mnemonic,
        "mfma_cycles_each": plan.mfma.cycles,
        "waves_per_simd": waves_per_simd, "b_read": plan.b_read,
        "per_simd_per_kstep": per,
        "mfma_busy_cycles": mf,
        "other_issue_cycles": other,
        "mfma_share_serial": mf / (mf + other),
        "mfma_share_overlapped": mf / max(mf, other),
        "hot_loop_nops": total["s_nop"],
        "lds_read_bytes_per_cu": lds_bytes_cu,
        "lds_cycles_per_cu": lds_bytes_cu / lds_bw,
        "lds_vs_mfma": lds_bytes_cu / lds_bw / mf,
        "mfma_cycles_check": peak_cycles,
        "global_bytes_per_cu": global_bytes,
        "hbm_tb_s_needed_at_peak": global_bytes / peak_cycles * prod.cus * prod.clock_mhz * 1e6 / 1e12,
        "hbm_tb_s_peak": prod.hbm_tb_s,
        "tile_bytes_per_flop": global_bytes / flops_cu,
        "problem": [m, n, k],
        "compulsory_bytes_per_flop": compulsory,
        "ridge_bytes_per_flop": prod.hbm_tb_s * 1e12 / peak_flops,
        "peak_tflops": peak_flops / 1e12,
        "product": prod.name,
        "vgprs": program.vgprs, "agprs": program.agprs,
        "occupancy": program.occupancy()["waves_per_simd"],
    }


def markdown(rows: list[dict]) -> str:
    out = ["| spec | target | schedule | tile | MFMA | per SIMD per K-step: MFMA / DS read / VMEM / SALU / VALU / "
           "nop / waitcnt / barrier | MFMA busy cyc | other issue cyc | MFMA share (serial / overlapped) | "
           "LDS cyc / MFMA cyc | HBM TB/s needed at peak (no reuse) | HBM bytes/FLOP: tile / problem / ridge |",
           "|---|---|---|---|---|---|---:|---:|---|---:|---:|---|"]
    for r in rows:
        p = r["per_simd_per_kstep"]
        mix_s = " / ".join(f"{p[k]:g}" for k in ("mfma", "ds_read", "vmem", "salu", "valu", "s_nop", "s_waitcnt",
                                                  "s_barrier"))
        out.append(f"| {r['spec']} | {r['target']} | {r['schedule']} | {'x'.join(map(str, r['tile']))} | "
                   f"{r['mfma'].replace('v_mfma_f32_', '')} | {mix_s} | {r['mfma_busy_cycles']:g} | "
                   f"{r['other_issue_cycles']:g} | {r['mfma_share_serial']:.2f} / {r['mfma_share_overlapped']:.2f} | "
                   f"{r['lds_vs_mfma']:.2f} | {r['hbm_tb_s_needed_at_peak']:.1f} (peak {r['hbm_tb_s_peak']:g}) | "
                   f"{r['tile_bytes_per_flop']:.2g} / {r['compulsory_bytes_per_flop']:.2g} / "
                   f"{r['ridge_bytes_per_flop']:.2g} |")
    pred = [r for r in rows if r.get("predicted")]
    if pred:
        out += ["", "Timing model (isagen.model, docs/model.md): **predictions, never measurements**, at each "
                "spec's shapes; HipKittens' published BF16 8192^3 TFLOP/s for comparison.", "",
                "| spec | target | shape | machine | predicted us | predicted TFLOP/s | limiter | HipKittens TFLOP/s |",
                "|---|---|---|---|---:|---:|---|---:|"]
        for r in pred:
            for mach, x in r["predicted"].items():
                hk = HIPKITTENS_BF16_8192.get(mach, "") if (r["in_dtype"] == "bf16" and
                                                             r["problem"] == [8192, 8192, 8192]) else ""
                if "error" in x:
                    out.append(f"| {r['spec']} | {r['target']} | {'x'.join(map(str, r['problem']))} | {mach} | "
                               f"- | - | {x['error']} | {hk} |")
                else:
                    out.append(f"| {r['spec']} | {r['target']} | {'x'.join(map(str, r['problem']))} | {mach} | "
                               f"{x['predicted_us']:g} | {x['predicted_tflops']:g} | {x['limiter']} | {hk} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("specs", nargs="*", default=sorted(str(p) for pat in ("gemm_bf16*.yaml", "gemm_fp8*.yaml")
                                                       for p in (ROOT / "specs").glob(pat)))
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--no-predict", action="store_true", help="skip the timing model's predictions")
    args = ap.parse_args(argv)
    rows = []
    for spec in load_specs(args.specs):
        for target in spec.select_targets("all"):
            r = model(spec, target)
            if not args.no_predict:
                r["predicted"] = predict(spec, target.name)
            rows.append(r)
            print(f"{r['spec']:24s} {r['target']}  MFMA share {r['mfma_share_serial']:.2f} serial / "
                  f"{r['mfma_share_overlapped']:.2f} overlapped; nops in hot loop: {r['hot_loop_nops']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemm_model.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "gemm_model.md").write_text(markdown(rows))
    print(f"wrote {out / 'gemm_model.json'} and {out / 'gemm_model.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
