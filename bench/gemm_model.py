"""Static performance model of the BF16 and FP8 GEMM kernels: what one SIMD issues per K-step of the hot loop.

    python bench/gemm_model.py [SPEC ...]          (default: specs/gemm_bf16*.yaml and FP8_SPECS, every target)

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
  between workgroups; block scaling adds its scale_a rows and scale_b blocks per K-block), the
  compulsory ratio of the spec's full-size problem (A, B read once and C written once, plus the block
  scales), and the product's ridge point (HBM bandwidth over peak FLOP/s): a GEMM is compute bound when
  the bytes it really moves per FLOP stay below the ridge.

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
# the FP8 GEMM specs the default run models (a list, so other scaled formats' specs add lines here);
# "large tile" ones are held to an MFMA share >= 0.90 (``target_share``), the decode tile is memory bound
FP8_SPECS = [
    ("gemm_fp8.yaml", "large"),                 # per-tensor scales, 256x256
    ("gemm_fp8_rowwise.yaml", "large"),         # row-wise scales, 256x256
    ("gemm_fp8_blockscale.yaml", "large"),      # DeepSeek-style 1x128 / 128x128 block scales, 128x256
    ("gemm_fp8_decode.yaml", "decode"),         # row-wise, 32x64 interleave4 (M <= 32)
]
TARGET_SHARE = 0.90

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
    scale_bytes = 0.0
    compulsory_scales = 0
    if spec.kernel == "gemm_fp8" and spec.params.scaling == "block":
        blk = gemm_fp8.BLOCK
        # per K-block: scale_a of the tile's rows, scale_b of its 128-column blocks (fp32); per K-step
        scale_bytes = (plan.block_m + -(-plan.block_n // blk)) * 4 * plan.block_k / blk
        compulsory_scales = (m + -(-n // blk)) * (k // blk) * 4
        global_bytes += scale_bytes
    compulsory = ((m + n) * k * plan.elem_bytes + m * n * plan.out_bytes + compulsory_scales) / (2 * m * n * k)
    peak_flops = prod.cus * peak_flop * prod.clock_mhz * 1e6
    scaling = spec.params.scaling if spec.kernel == "gemm_fp8" else "-"
    return {
        "spec": spec.name, "target": plan.target.name, "in_dtype": plan.in_dtype, "schedule": plan.schedule,
        "scaling": scaling, "scale_bytes_per_kstep": scale_bytes,
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
    out = ["| spec | target | scaling | schedule | tile | MFMA | per SIMD per K-step: MFMA / DS read / VMEM / SALU / "
           "VALU / nop / waitcnt / barrier | MFMA busy cyc | other issue cyc | MFMA share (serial / overlapped) | "
           "LDS cyc / MFMA cyc | HBM TB/s needed at peak (no reuse) | HBM bytes/FLOP: tile / problem / ridge |",
           "|---|---|---|---|---|---|---|---:|---:|---|---:|---:|---|"]
    for r in rows:
        p = r["per_simd_per_kstep"]
        mix_s = " / ".join(f"{p[k]:g}" for k in ("mfma", "ds_read", "vmem", "salu", "valu", "s_nop", "s_waitcnt",
                                                  "s_barrier"))
        out.append(f"| {r['spec']} | {r['target']} | {r['scaling']} | {r['schedule']} | "
                   f"{'x'.join(map(str, r['tile']))} | "
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
    ap.add_argument("specs", nargs="*", default=sorted(str(p) for p in (ROOT / "specs").glob("gemm_bf16*.yaml"))
                    + [str(ROOT / "specs" / name) for name, _ in FP8_SPECS])
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
            large = dict(FP8_SPECS).get(Path(spec.path).name) == "large"
            r["large_tile_fp8"] = large
            note = ""
            if large:
                r["meets_target_share"] = r["mfma_share_serial"] >= TARGET_SHARE
                note = f" (target {TARGET_SHARE:.2f}: {'met' if r['meets_target_share'] else 'NOT met'})"
            print(f"{r['spec']:24s} {r['target']}  MFMA share {r['mfma_share_serial']:.2f} serial / "
                  f"{r['mfma_share_overlapped']:.2f} overlapped{note}; nops in hot loop: {r['hot_loop_nops']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemm_model.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "gemm_model.md").write_text(markdown(rows))
    print(f"wrote {out / 'gemm_model.json'} and {out / 'gemm_model.md'}")
    return 0




# ====================================================================================== MX GEMMs (gemm_mx)
# Kept apart from the BF16/FP8 rows above (own entry point and results file) so the two can change
# independently:  python bench/gemm_model.py --mx [SPEC ...]   -> bench/results/gemm_mx_model.{json,md}
#
# The same counts as ``model`` with what the MX kernels add: the scale copies (ubyte LDS-DMA, one VALU
# and one M0 update each) and scale reads (ds_read_b32) in the mix; MFMA cycles per instruction from
# ``MfmaInfo.passes_for(cbsz, blgp)`` (fp4 A and B: half the fp8 passes); the peak the MFMAs reach
# (FLOP per CU per clock from the MFMA's own rate, 2·m·n·k per ``cycles`` per SIMD: the MI355X's MXFP8
# rate for fp8 inputs, twice it for fp4); HBM bytes including the E8M0 scales (one byte per 32 k).

MX_SPECS = ("gemm_mxfp8.yaml", "gemm_mxfp4.yaml")


def _mx_mfma_cycles(insts) -> int:
    return sum(4 * i.desc.mfma.passes_for(i.mods.get("cbsz", 0), i.mods.get("blgp", 0))
               for i in insts if i.unit == "mfma")


def mx_model(spec, target) -> dict:
    from isagen.kernels import gemm_mx
    program = spec.build(target)
    p = spec.params
    plan = gemm_mx.make_plan(p, target)
    epb = gemm_mx.elems_per_byte(p)
    bodies = hot_loops(program)
    waves_per_simd = plan.waves // plan.target.simds_per_cu
    total: dict = {}
    for body in bodies:
        for key, v in mix(body).items():
            total[key] = total.get(key, 0) + v
        total["mx_mfma_cycles"] = total.get("mx_mfma_cycles", 0) + _mx_mfma_cycles(body)
    per = {k: v / 2 for k, v in total.items()}             # a loop body is two K-tiles
    if len(bodies) == 1:
        per = {k: v * waves_per_simd for k, v in per.items()}
    other = (per["ds_read"] + per["ds_other"] + per["vmem"] + per["salu"] + per["valu"] + per["nop_wait_states"]
             + per["s_waitcnt"] + per["s_barrier"] + per["sopp_other"])
    mf = per["mx_mfma_cycles"]
    info = plan.mfma
    mods = dict(plan.mfma_mods)
    cyc = 4 * info.passes_for(mods.get("cbsz", 0), mods.get("blgp", 0))
    peak_flop = 2 * info.m * info.n * info.k * plan.target.simds_per_cu // cyc      # FLOP per CU per clock
    prod = plan.target.flagship
    k_elems = plan.block_k * epb                            # K elements per K-step
    flops_cu = 2 * plan.block_m * plan.block_n * k_elems
    sb = k_elems // gemm_mx.BLOCK
    global_bytes = (plan.block_m + plan.block_n) * (plan.block_k_bytes + sb)
    peak_cycles = flops_cu / peak_flop
    m, n = spec.shapes["m"], spec.shapes["n"]
    kk = spec.shapes["k"] if epb == 1 else 2 * spec.shapes["kp"]
    compulsory = ((m + n) * (kk // epb + kk // gemm_mx.BLOCK) + m * n * plan.out_bytes) / (2 * m * n * kk)
    peak_flops = prod.cus * peak_flop * prod.clock_mhz * 1e6
    lds_bytes_cu = per["lds_read_bytes"] * plan.target.simds_per_cu
    return {
        "spec": spec.name, "target": plan.target.name, "formats": [p.a_format, p.a_format if p.b_format == "same"
                                                                     else p.b_format], "schedule": plan.schedule,
        "tile": [plan.block_m, plan.block_n, k_elems], "mfma": info.mnemonic, "mfma_mods": mods,
        "mfma_cycles_each": cyc, "waves_per_simd": waves_per_simd,
        "per_simd_per_kstep": per, "mfma_busy_cycles": mf, "other_issue_cycles": other,
        "mfma_share_serial": mf / (mf + other), "mfma_share_overlapped": mf / max(mf, other),
        "hot_loop_nops": total["s_nop"],
        "lds_vs_mfma": lds_bytes_cu / (plan.target.lds_banks * 4) / mf,
        "mfma_cycles_check": peak_cycles, "peak_flop_per_cu_clk": peak_flop,
        "global_bytes_per_cu": global_bytes,
        "hbm_tb_s_needed_at_peak": global_bytes / peak_cycles * prod.cus * prod.clock_mhz * 1e6 / 1e12,
        "hbm_tb_s_peak": prod.hbm_tb_s,
        "tile_bytes_per_flop": global_bytes / flops_cu,
        "problem": [m, n, kk], "compulsory_bytes_per_flop": compulsory,
        "ridge_bytes_per_flop": prod.hbm_tb_s * 1e12 / peak_flops, "peak_tflops": peak_flops / 1e12,
        "product": prod.name, "vgprs": program.vgprs, "agprs": program.agprs,
        "occupancy": program.occupancy()["waves_per_simd"],
    }


def mx_markdown(rows: list[dict]) -> str:
    out = ["| spec | formats | schedule | tile (M x N x K elems) | MFMA | per SIMD per K-step: MFMA / DS read / VMEM / "
           "SALU / VALU / nop / waitcnt / barrier | MFMA busy cyc | other issue cyc | MFMA share (serial / "
           "overlapped) | LDS cyc / MFMA cyc | peak TFLOP/s | HBM TB/s needed at peak (no reuse) | HBM bytes/FLOP: "
           "tile / problem / ridge |",
           "|---|---|---|---|---|---|---:|---:|---|---:|---:|---|---|"]
    for r in rows:
        pk = r["per_simd_per_kstep"]
        mix_s = " / ".join(f"{pk[k]:g}" for k in ("mfma", "ds_read", "vmem", "salu", "valu", "s_nop", "s_waitcnt",
                                                   "s_barrier"))
        mods = " ".join(f"{k}:{v}" for k, v in r["mfma_mods"].items())
        out.append(f"| {r['spec']} | {'x'.join(r['formats'])} | {r['schedule']} | {'x'.join(map(str, r['tile']))} | "
                   f"{r['mfma'].replace('v_mfma_scale_f32_', 'scale ')} {mods} | {mix_s} | {r['mfma_busy_cycles']:g} | "
                   f"{r['other_issue_cycles']:g} | {r['mfma_share_serial']:.2f} / {r['mfma_share_overlapped']:.2f} | "
                   f"{r['lds_vs_mfma']:.2f} | {r['peak_tflops']:.0f} | {r['hbm_tb_s_needed_at_peak']:.1f} (peak "
                   f"{r['hbm_tb_s_peak']:g}) | {r['tile_bytes_per_flop']:.2g} / {r['compulsory_bytes_per_flop']:.2g} / "
                   f"{r['ridge_bytes_per_flop']:.2g} |")
    return "\n".join(out) + "\n"


def mx_main(argv) -> int:
    ap = argparse.ArgumentParser(description="MX GEMM rows of the static model")
    ap.add_argument("specs", nargs="*", default=[str(ROOT / "specs" / s) for s in MX_SPECS])
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    rows = []
    for spec in load_specs(args.specs):
        for target in spec.select_targets("all"):
            r = mx_model(spec, target)
            rows.append(r)
            print(f"{r['spec']:24s} {r['target']}  MFMA share {r['mfma_share_serial']:.2f} serial / "
                  f"{r['mfma_share_overlapped']:.2f} overlapped; nops in hot loop: {r['hot_loop_nops']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemm_mx_model.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "gemm_mx_model.md").write_text(mx_markdown(rows))
    print(f"wrote {out / 'gemm_mx_model.json'} and {out / 'gemm_mx_model.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(mx_main(sys.argv[2:]) if sys.argv[1:2] == ["--mx"] else main())
