"""Static performance model of the attention forward kernel: what one SIMD does per KV tile of the hot loop.

    python bench/attention_model.py [--out DIR]

For gfx942 and gfx950, head_dim 128 and 64, bf16 and f16 (non-causal; the hot loop ``kvloop`` is the
same for causal kernels: causality only decides how many KV tiles run unmasked in it and how many run
in the masked copy of the body, ``kvmask``), it builds ``specs/attention_bf16.yaml`` with overrides,
takes the hot loop out of the finished program (its body holds two KV tiles, LDS stage 0 and 1) and
counts per KV tile and per SIMD (4 waves per workgroup, one per SIMD) with ``bench/gemm_model.py``'s
``mix()``:

- the **steady-state** mix: the loop body without the lazy-rescale block (the instructions between the
  labels ``*_rescale`` and ``*_no_rescale``, skipped by ``s_cbranch_scc0`` unless a row's max grew by
  more than 2^8 since its reference was set).  FA4 / HipKittens' lazy rescale: the branch is taken in
  the first tiles of a row and rarely after, so the steady state skips it; the **worst case** runs it
  every tile.  Both are reported, and the block's own mix.
- **the issue's metric** (as gemm_model): MFMA busy cycles (``MfmaInfo.cycles``) against every other
  issue cycle (one per non-MFMA instruction, ``s_nop N``: N+1).  ``mfma_share_serial = mfma / (mfma +
  other)``: nothing overlaps, the lower bound; the issue's targets (>= 0.80 gfx950, >= 0.75 gfx942,
  D=128 non-causal) are checked on it.  ``mfma_share_overlapped`` depends on the occupancy: with two
  or more waves per SIMD (a second workgroup's wave) the other wave's work issues under this wave's
  MFMAs, ``mfma / max(mfma, other)`` (gemm_model's rule; an upper bound, the two workgroups are not
  phase-locked); with one wave per SIMD only the wave's own instructions placed between its MFMAs can
  hide, and the estimate is an in-order walk of the loop (``walk`` below).
- **a throughput-aware figure**: a wave64 VALU instruction occupies the 16-lane SIMD for 4 clocks
  (``v_pk_*_f32`` does two fp32 per lane in those 4); F32 transcendentals (``v_exp_f32``, ``v_log_f32``,
  ``v_rcp_f32``: unit ``trans``) are quarter rate, 16 clocks (LLVM's AMDGPU scheduling model,
  SISchedule.td: "F16 or F32 transcendental instructions (these are quarter rate)"; no AMD document
  gives a CDNA3/CDNA4 figure, this is the assumption); conversions are taken as full rate.  Every other
  non-MFMA instruction takes one issue slot of the wave, 4 clocks (a GCN/CDNA SIMD is offered one issue
  cycle every 4 clocks, one instruction per wave in it).  ``mfma_share_valu_bound = mfma / (mfma +
  valu_cycles)``, ``mfma_share_throughput_serial = mfma / (mfma + valu_cycles + slot clocks of the
  rest)``, and the overlapped estimate: one wave per SIMD, the walk in these units; two or more,
  ``mfma / max(mfma, valu_cycles, walk / waves)`` (the matrix core and the VALU are shared by the
  SIMD's waves, and no wave runs faster than its own walk).
- bytes per KV tile per workgroup: global bytes of the K and V copies (2 x 64 x D x 2) against the
  FLOPs of the step (4 x 128 x 64 x D: Q·Kᵀ and P·V for the block's 128 query rows); LDS bank-slot
  cycles per CU (reads, ``ds_bpermute`` and the LDS-DMA writes) against the MFMA cycles; the HBM
  bandwidth the chip would need at MFMA peak if every K/V tile came from HBM, and the compulsory
  bandwidth for the spec's benchmark shape (K/V re-read by every query block and GQA head hit L2);
- registers, occupancy, LDS bytes per workgroup, ``s_nop`` in the hot loop, scratch instructions.

Waits and barriers are counted, not timed: their stalls depend on memory latency, which no source
gives authoritatively (the walk takes every wait as satisfied).  Results:
``bench/results/attention_model.json`` and ``.md``; summary in docs/benchmarks.md and docs/attention.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gemm_model import mix  # noqa: E402

from isagen.builders.spec import load_specs  # noqa: E402
from isagen.isa.instruction import Instruction  # noqa: E402
from isagen.isa.operands import Label  # noqa: E402
from isagen.kernels.attention import BLOCK_KV, BLOCK_Q, WAVES, hot_loops, make_plan  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SPEC = ROOT / "specs" / "attention_bf16.yaml"
VARIANTS = [(t, d, dt) for t in ("gfx942", "gfx950") for d in (128, 64) for dt in ("bf16", "f16")]
TILES_PER_TRIP = 2          # the loop body covers two KV tiles (LDS stage 0 and 1)
SLOT = 4                    # clocks between a wave's issue opportunities (one per SIMD every 4 clocks)
VALU_CLOCKS = 4             # wave64 on a 16-lane SIMD
TRANS_CLOCKS = 16           # quarter rate (LLVM SISchedule.td, WriteTrans32)
TARGETS = {"gfx950": 0.80, "gfx942": 0.75}      # the issue's MFMA-share targets, D=128 non-causal
ISSUE_DTYPE = "bf16"
_START, _END = re.compile(r"_kvloop(_\d+)?$"), re.compile(r"_kvloop_done(_\d+)?$")
_RESCALE, _NO_RESCALE = re.compile(r"_rescale(_\d+)?$"), re.compile(r"_no_rescale(_\d+)?$")


def split_hot_loop(program) -> tuple[list[Instruction], list[Instruction]]:
    """The hot loop's instructions in order, and those of its lazy-rescale blocks (``*_rescale`` ..
    ``*_no_rescale``).  Returns ``(body, rescale)``; ``body`` holds every instruction of the loop."""
    body: list[Instruction] = []
    rescale: list[Instruction] = []
    inside = in_rescale = False
    loops = 0
    for item in program.items:
        if isinstance(item, Label):
            if _START.search(item.name):
                inside, loops = True, loops + 1
            elif _END.search(item.name):
                inside = False
            elif inside and _NO_RESCALE.search(item.name):
                in_rescale = False
            elif inside and _RESCALE.search(item.name):
                in_rescale = True
        elif isinstance(item, Instruction) and inside:
            body.append(item)
            if in_rescale:
                rescale.append(item)
    if loops != 1:
        raise ValueError(f"{program.name}: expected one kvloop, found {loops}")
    return body, rescale


def _is_valu(i: Instruction) -> bool:
    return i.unit in ("valu", "trans")


def valu_clocks(i: Instruction, trans: int = TRANS_CLOCKS) -> int:
    return trans if i.unit == "trans" else VALU_CLOCKS if i.unit == "valu" else 0


def issue_cost(i: Instruction) -> int:
    """The issue's metric: one cycle per non-MFMA instruction, ``s_nop N``: N+1."""
    return i.ops[0] + 1 if i.name == "s_nop" else 1


def walk(insts: list[Instruction], throughput: bool, trips: int = 3, trans: int = TRANS_CLOCKS) -> float:
    """Clocks per loop trip of one wave issuing ``insts`` in order, alone on its SIMD (steady state: the
    last of ``trips`` repetitions).  An MFMA starts when the matrix core is free and occupies it for
    ``MfmaInfo.cycles``; an instruction that reads or writes a register an MFMA in flight writes waits
    for that MFMA to finish (an MFMA accumulating into its predecessor's result does not: the matrix core
    serialises them already).  Issue cost: ``issue_cost`` (``throughput=False``) or one 4-clock slot per
    instruction, a VALU instruction occupying the VALU for ``valu_clocks`` and its result ready after
    them (``throughput=True``).  Memory latency is not modelled: every wait is taken as satisfied."""
    t = pipe = valu_free = 0.0
    ready: dict = {}
    from_mfma: set = set()
    marks = []
    for _ in range(trips):
        marks.append(t)
        for i in insts:
            uses, defs = i.uses(), i.defs()
            if i.unit == "mfma":
                dep = max([ready.get(k, 0.0) for k in uses if not (k in from_mfma and k in defs)], default=0.0)
                start = max(t, pipe, dep)
                pipe = start + i.desc.mfma.cycles
                for k in defs:
                    ready[k] = pipe
                    from_mfma.add(k)
                t = start + (SLOT if throughput else 1)
                continue
            start = max([t] + [ready.get(k, 0.0) for k in uses + defs])
            if throughput and _is_valu(i):
                start = max(start, valu_free)
                valu_free = start + valu_clocks(i, trans)
            done = start + (valu_clocks(i, trans) if throughput and _is_valu(i) else 1)
            for k in defs:
                ready[k] = done
                from_mfma.discard(k)
            if throughput:
                t = start + (SLOT * issue_cost(i) if i.name == "s_nop" else SLOT)
            else:
                t = start + issue_cost(i)
    marks.append(t)
    return marks[-1] - marks[-2]


def _per_tile(m: dict) -> dict:
    return {k: v / TILES_PER_TRIP for k, v in m.items()}


def _other(p: dict) -> float:
    return (p["ds_read"] + p["ds_other"] + p["vmem"] + p["salu"] + p["valu"] + p["nop_wait_states"]
            + p["s_waitcnt"] + p["s_barrier"] + p["sopp_other"])


def _costs(insts: list[Instruction]) -> dict:
    """Per KV tile: VALU clocks, trans count, slot clocks of the non-VALU non-MFMA instructions, LDS bytes
    of ``ds_bpermute`` and the LDS bank slots (one per lane per dword touched) of every DS instruction."""
    valu = sum(valu_clocks(i) for i in insts)
    slots = sum(SLOT * issue_cost(i) for i in insts if not _is_valu(i) and i.unit != "mfma")
    lane_dwords = 0
    for i in insts:
        if i.unit == "ds":
            lane_dwords += 64 * _lane_dwords(i.name)
    return {"valu_cycles": valu / TILES_PER_TRIP, "trans": sum(i.unit == "trans" for i in insts) / TILES_PER_TRIP,
            "nonvalu_slot_cycles": slots / TILES_PER_TRIP, "lds_lane_dwords": lane_dwords / TILES_PER_TRIP}


def _lane_dwords(name: str) -> int:
    """Bank accesses per lane of a DS instruction: one per dword, at least one (``ds_read_u16`` takes a
    whole bank slot for its 2 bytes)."""
    return {"ds_read_b128": 4, "ds_read_b64": 2, "ds_read_b64_tr_b16": 2}.get(name, 1)


def metrics(insts: list[Instruction], waves_per_simd: int) -> dict:
    per = _per_tile(mix(insts))
    c = _costs(insts)
    mf = per["mfma_cycles"]
    other = _other(per)
    walk_issue = walk(insts, throughput=False) / TILES_PER_TRIP
    walk_tp = walk(insts, throughput=True) / TILES_PER_TRIP
    walk_fast = walk(insts, throughput=True, trans=VALU_CLOCKS) / TILES_PER_TRIP
    valu_fast = sum(valu_clocks(i, VALU_CLOCKS) for i in insts) / TILES_PER_TRIP
    if waves_per_simd >= 2:
        over_issue = mf / max(mf, other)
        over_tp = mf / max(mf, c["valu_cycles"], walk_tp / waves_per_simd)
        over_fast = mf / max(mf, valu_fast, walk_fast / waves_per_simd)
    else:
        over_issue = mf / walk_issue
        over_tp = mf / walk_tp
        over_fast = mf / walk_fast
    return {
        "mix": per, **c,
        "mfma_busy_cycles": mf,
        "other_issue_cycles": other,
        "mfma_share_serial": mf / (mf + other),
        "mfma_share_overlapped": over_issue,
        "walk_cycles_issue": walk_issue,
        "mfma_share_walk_issue": mf / walk_issue,
        "mfma_share_valu_bound": mf / (mf + c["valu_cycles"]),
        "mfma_share_throughput_serial": mf / (mf + c["valu_cycles"] + c["nonvalu_slot_cycles"]),
        "walk_cycles_throughput": walk_tp,
        "mfma_share_walk_throughput": mf / walk_tp,
        "mfma_share_throughput_overlapped": over_tp,
        "mfma_share_throughput_overlapped_if_trans_full_rate": over_fast,
    }


def model(target: str, head_dim: int, dtype: str) -> dict:
    spec = load_specs([str(SPEC)], overrides=[f"head_dim={head_dim}", f"dtype={dtype}", "causal=false"])[0]
    program = spec.build(target)
    plan = make_plan(spec.params, target)
    body, rescale = split_hot_loop(program)
    assert len(body) == sum(len(b) for b in hot_loops(program))
    rescale_ids = {id(i) for i in rescale}
    steady = [i for i in body if id(i) not in rescale_ids]
    occ = program.occupancy()
    waves_per_simd = occ["waves_per_simd"]
    st = metrics(steady, waves_per_simd)
    worst = metrics(body, waves_per_simd)
    rmix = _per_tile(mix(rescale))
    rcost = _costs(rescale)

    tgt = plan.target
    prod = tgt.flagship
    flops = 4 * BLOCK_Q * BLOCK_KV * head_dim                 # per KV tile per workgroup: Q·Kᵀ and P·V
    mfma_flops = st["mix"]["mfma"] * plan.mfma.flops * WAVES
    global_bytes = 2 * BLOCK_KV * head_dim * 2                # the K and V tiles
    copy_bytes = st["mix"]["vmem"] * 64 * plan.dma_width * WAVES
    peak_cycles = flops / prod.bf16_flop_per_cu_clk           # CU clocks per KV tile at MFMA peak
    lds_bw = tgt.lds_banks * 4
    lds_read_cu = st["mix"]["lds_read_bytes"] * WAVES
    lds_slots_cu = st["lds_lane_dwords"] * WAVES + copy_bytes / 4     # reads + bpermute + DMA writes
    lds_cycles_cu = lds_slots_cu / tgt.lds_banks
    clock = prod.clock_mhz * 1e6
    # the spec's benchmark shape: compulsory bytes (Q, K, V read once, O and LSE written once)
    sh = spec.shapes
    b, h, h_kv, n_q, n_kv = sh["b"], sh["h"], sh["h_kv"], sh["n_q"], sh["n_kv"]
    shape_flops = 4 * b * h * n_q * n_kv * head_dim
    shape_bytes = 2 * (2 * b * h * n_q * head_dim + 2 * b * h_kv * n_kv * head_dim) + 4 * b * h * n_q
    shape_time = shape_flops / (prod.peak_bf16_tflops * 1e12)
    return {
        "spec": spec.name, "target": tgt.name, "product": prod.name, "dtype": dtype, "head_dim": head_dim,
        "causal": False, "mfma": plan.mfma.mnemonic, "mfma_cycles_each": plan.mfma.cycles,
        "v_read": plan.v_read, "mfmas_per_tile_plan": plan.mfmas_per_tile,
        "waves_per_workgroup": WAVES, "waves_per_simd": waves_per_simd, "occupancy": occ,
        "vgprs": program.vgprs, "agprs": program.agprs, "lds_bytes_per_workgroup": program.lds_bytes,
        "hot_loop_instructions": len(body), "hot_loop_nops": sum(i.name == "s_nop" for i in body),
        "scratch_instructions": sum(i.name.startswith("scratch_") for i in program.instructions()),
        "rescale_instructions_per_tile": len(rescale) / TILES_PER_TRIP,
        "steady": st, "steady_valu_ops": valu_ops(steady), "worst_case_rescale_every_tile": worst,
        "rescale_block": {"mix": rmix, **rcost},
        "target_share": TARGETS[tgt.name] if head_dim == 128 else None,
        "flops_per_tile_per_workgroup": flops, "mfma_flops_per_tile_per_workgroup": mfma_flops,
        "global_bytes_per_tile_per_workgroup": global_bytes, "copy_bytes_per_tile_per_workgroup": copy_bytes,
        "bytes_per_flop_hbm_l2": global_bytes / flops,
        "mfma_peak_cycles_per_tile": peak_cycles,
        "hbm_tb_s_needed_at_peak_no_reuse": global_bytes / peak_cycles * prod.cus * clock / 1e12,
        "hbm_tb_s_peak": prod.hbm_tb_s,
        "lds_read_bytes_per_cu": lds_read_cu,
        "lds_bytes_per_flop": lds_read_cu / flops,
        "lds_bank_slot_cycles_per_cu": lds_cycles_cu,
        "lds_bytes_per_clock_per_cu": lds_bw,
        "lds_vs_mfma": lds_cycles_cu / st["mfma_busy_cycles"],
        "shape": sh, "shape_flops": shape_flops, "shape_compulsory_bytes": shape_bytes,
        "shape_time_at_peak_s": shape_time,
        "shape_hbm_tb_s_needed_compulsory": shape_bytes / shape_time / 1e12,
        "shape_kv_reads_per_byte": (n_q // BLOCK_Q) * (h // h_kv),
    }


# ------------------------------------------------------------------------------------------- backward
BWD_SPEC = ROOT / "specs" / "attention_bwd_bf16.yaml"
BWD_TARGET = {"gfx950": 0.75}          # issue 15: modelled MFMA share at D=128 on gfx950 (issue's metric)


def model_backward(target: str, head_dim: int, dtype: str, part: str, dq_atomic: bool = False) -> dict:
    """One backward kernel (``part`` dkdv or dq, non-causal): its hot loop ``bwdloop`` per SIMD per
    streamed tile of 64 rows, with the forward's metrics; no lazy block here."""
    from isagen.kernels import attention_bwd as bwd
    spec = load_specs([str(BWD_SPEC)], overrides=[f"head_dim={head_dim}", f"dtype={dtype}", f"part={part}",
                                                  "causal=false", f"dq_atomic={str(dq_atomic).lower()}"])[0]
    program = spec.build(target)
    plan = bwd.make_plan(spec.params, target)
    loops = bwd.hot_loops(program)
    if len(loops) != 1:
        raise ValueError(f"{program.name}: expected one bwdloop, found {len(loops)}")
    body = loops[0]
    waves_per_simd = program.occupancy()["waves_per_simd"]
    m = metrics(body, waves_per_simd)
    # FLOPs per streamed tile per workgroup: 64 resident x 64 streamed rows, 2·D each, per product
    products = (4 + dq_atomic) if part == "dkdv" else 3
    flops = products * 2 * bwd.BLOCK * bwd.TILE * head_dim
    return {"spec": spec.name, "target": target, "part": part + ("+atomic dQ" if dq_atomic else ""),
            "dtype": dtype, "head_dim": head_dim,
            "mfma": plan.mfma.mnemonic, "t_read": plan.t_read, "waves_per_simd": waves_per_simd,
            "vgprs": program.vgprs, "agprs": program.agprs, "lds_bytes_per_workgroup": program.lds_bytes,
            "hot_loop_nops": sum(i.name == "s_nop" for i in body), "mfmas_per_tile_plan": plan.mfmas_per_tile,
            "steady": m, "flops_per_tile_per_workgroup": flops,
            "target_share": BWD_TARGET.get(target) if head_dim == 128 else None}


def markdown_backward(rows: list[dict]) -> str:
    out = ["# Attention backward: modelled MFMA share (`bench/attention_model.py`)", "",
           "Static model, no hardware: every figure is a prediction of this model.  Per SIMD per streamed tile "
           "of 64 rows (4 waves per workgroup, one per SIMD; a second workgroup's wave where the occupancy "
           "allows).  Non-causal (the causal band runs a masked copy of the same body).  The deterministic "
           "backward runs two kernels: dkdv computes S, dP, dV and dK (4 products per tile), dq recomputes S "
           "and dP and computes dQ (3): 14·N_q·N_kv·D MFMA FLOPs for the 10·N_q·N_kv·D (2.5x the forward's) "
           "the backward needs, so the useful share of MFMA time is 10/14 of the figures below; with `dq_atomic` "
           "the dkdv kernel does all five products (10·N_q·N_kv·D) and no dq pass runs.", "",
           "| target | kernel | D | dtype | waves/SIMD | VGPR + AGPR | MFMA busy | other issue | issue's metric: "
           "serial / overlapped | VALU-bound | throughput: overlapped | s_nop | target (serial, D=128) |",
           "|---|---|---:|---|---:|---|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        st = r["steady"]
        tgt = r["target_share"]
        verdict = "" if tgt is None else f"{tgt:.2f}: {'met' if st['mfma_share_serial'] >= tgt else 'NOT met'}"
        out.append(f"| {r['target']} | {r['part']} | {r['head_dim']} | {r['dtype']} | {r['waves_per_simd']} | "
                   f"{r['vgprs']} + {r['agprs']} | {st['mfma_busy_cycles']:g} | {st['other_issue_cycles']:g} | "
                   f"{st['mfma_share_serial']:.2f} / {st['mfma_share_overlapped']:.2f} | "
                   f"{st['mfma_share_valu_bound']:.2f} | {st['mfma_share_throughput_overlapped']:.2f} | "
                   f"{r['hot_loop_nops']} | {verdict} |")
    out += ["", "Instruction mix per SIMD per tile (MFMA / DS read / DS other / VMEM / SALU / VALU / s_nop / "
            "waitcnt / barrier / other SOPP):", ""]
    for r in rows:
        out.append(f"- {r['target']} {r['part']} D={r['head_dim']} {r['dtype']}: {_mix_str(r['steady']['mix'])}")
    return "\n".join(out) + "\n"


def _mix_str(p: dict) -> str:
    return " / ".join(f"{p[k]:g}" for k in ("mfma", "ds_read", "ds_other", "vmem", "salu", "valu", "s_nop",
                                            "s_waitcnt", "s_barrier", "sopp_other"))


def markdown(rows: list[dict]) -> str:
    out = ["# Attention forward: modelled MFMA share (`bench/attention_model.py`)", "",
           "Static model, no hardware: every figure is a prediction of this model.  Per SIMD per KV tile "
           "(one wave per SIMD; 4 waves per workgroup).  Steady state: the lazy-rescale block skipped; "
           "worst case: it runs every tile.  Non-causal (the hot loop of a causal kernel is the same).", "",
           "## MFMA share", "",
           "| target | D | dtype | waves/SIMD | MFMA busy | other issue | issue's metric: serial / overlapped "
           "(steady) | same, rescale every tile | VALU clk (of it exp) | VALU-bound share | throughput: serial / "
           "overlapped (trans full rate) | target (issue's metric, serial, D=128) |",
           "|---|---:|---|---:|---:|---:|---|---|---:|---:|---|---|"]
    for r in rows:
        s, w = r["steady"], r["worst_case_rescale_every_tile"]
        tgt = r["target_share"]
        met = "" if tgt is None else f"{tgt:.2f}: {'met' if s['mfma_share_serial'] >= tgt else 'NOT met'}"
        out.append(f"| {r['target']} | {r['head_dim']} | {r['dtype']} | {r['waves_per_simd']} | "
                   f"{s['mfma_busy_cycles']:g} | {s['other_issue_cycles']:g} | "
                   f"{s['mfma_share_serial']:.2f} / {s['mfma_share_overlapped']:.2f} | "
                   f"{w['mfma_share_serial']:.2f} / {w['mfma_share_overlapped']:.2f} | "
                   f"{s['valu_cycles']:g} ({s['trans'] * TRANS_CLOCKS:g}) | {s['mfma_share_valu_bound']:.2f} | "
                   f"{s['mfma_share_throughput_serial']:.2f} / {s['mfma_share_throughput_overlapped']:.2f} "
                   f"({s['mfma_share_throughput_overlapped_if_trans_full_rate']:.2f}) | {met} |")
    out += ["", "## Instruction mix per SIMD per KV tile", "",
            "MFMA / DS read / DS other (bpermute) / VMEM (LDS-DMA) / SALU / VALU (incl. trans) / s_nop / "
            "waitcnt / barrier / other SOPP.", "",
            "| target | D | dtype | steady state | rescale block (when taken) | VALU by opcode (steady, per tile) |",
            "|---|---:|---|---|---|---|"]
    for r in rows:
        ops = ", ".join(f"{n} {c:g}" for n, c in r["steady_valu_ops"])
        out.append(f"| {r['target']} | {r['head_dim']} | {r['dtype']} | {_mix_str(r['steady']['mix'])} | "
                   f"{_mix_str(r['rescale_block']['mix'])} | {ops} |")
    out += ["", "## Registers, memory", "",
            "| target | D | dtype | VGPR / AGPR | waves/SIMD (limit) | LDS/WG | hot-loop s_nop | scratch | "
            "HBM/L2 B/FLOP | HBM TB/s at peak, no reuse | compulsory TB/s (spec shape) | LDS slot cyc / MFMA cyc |",
            "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['target']} | {r['head_dim']} | {r['dtype']} | {r['vgprs']} / {r['agprs']} | "
                   f"{r['waves_per_simd']} ({r['occupancy']['limited_by']}) | {r['lds_bytes_per_workgroup']} | "
                   f"{r['hot_loop_nops']} | {r['scratch_instructions']} | {r['bytes_per_flop_hbm_l2']:.4f} | "
                   f"{r['hbm_tb_s_needed_at_peak_no_reuse']:.1f} (peak {r['hbm_tb_s_peak']:g}) | "
                   f"{r['shape_hbm_tb_s_needed_compulsory']:.2f} | {r['lds_vs_mfma']:.2f} |")
    out += ["", "## Assumptions", "",
            "- MFMA busy cycles: `MfmaInfo.cycles` (4 x LLVM passes): 16 per 16x16x16 (gfx942) / 16x16x32 "
            "(gfx950) bf16/f16 MFMA.",
            "- Issue's metric: every non-MFMA instruction one issue cycle (`s_nop N`: N+1); serial = nothing "
            "overlaps.  Overlapped: 2+ waves per SIMD: `mfma / max(mfma, other)`; 1 wave per SIMD: an in-order "
            "walk of the loop (an MFMA holds the matrix core for its cycles; an instruction touching an "
            "in-flight MFMA's result waits for it; memory latency, waits and barriers cost one issue cycle).",
            "- Throughput-aware: VALU 4 clocks per wave64 instruction (`v_pk_*_f32`: two fp32 per lane in "
            "those 4), transcendentals 16 (quarter rate, LLVM SISchedule.td; assumed for CDNA3/CDNA4), "
            "conversions full rate; every other instruction one 4-clock issue slot.  In brackets: the same "
            "with transcendentals at full rate, the bound of that assumption.",
            "- Lazy rescale (FA4 / HipKittens): the block runs when some row's max grew by more than 2^8; after "
            "the first tiles of a row that is rare, so the steady state skips it.",
            "- LDS: one bank access per lane per dword per clock (gfx942 32 banks = 128 B/clk; gfx950 64 banks = "
            "256 B/clk, the read bandwidth chipsandcheese's CDNA 4 article gives); reads (`ds_read_u16`: a whole "
            "bank slot), `ds_bpermute` and the LDS-DMA writes of the K/V copies counted.",
            "- HBM: K/V of one (batch, kv-head) are re-read by every query block and every head of the GQA "
            "group; L2 (and the MALL) hold them, so the compulsory traffic is Q, K, V, O and LSE once.",
            ]
    return "\n".join(out) + "\n"


def valu_ops(insts: list[Instruction]) -> list[tuple[str, float]]:
    counts: dict[str, int] = {}
    for i in insts:
        if _is_valu(i):
            counts[i.name] = counts.get(i.name, 0) + 1
    return sorted(((n, c / TILES_PER_TRIP) for n, c in counts.items()), key=lambda x: -x[1])


BENCH_SHAPE = (16, 64, 8, 2048, 2048)       # specs/attention_bf16.yaml shapes: (b, h, h_kv, n_q, n_kv)
MACHINES_OF = {"gfx942": ("mi300x", "mi325x"), "gfx950": ("mi350x", "mi355x")}


def predict(target: str, head_dim: int, dtype: str) -> dict:
    """The timing model's forward prediction per machine of ``target`` at BENCH_SHAPE (docs/model.md)."""
    from isagen.model.machines import get_machine
    from isagen.model.workloads import isagen_attention

    out = {}
    for mach in MACHINES_OF[target]:
        try:
            p = isagen_attention(*BENCH_SHAPE, head_dim, get_machine(mach), dtype=dtype)
            out[mach] = {"predicted_us": round(p.us, 2), "predicted_tflops": round(p.tflops, 1),
                         "limiter": p.limiter, "clock_mhz": round(p.clock_mhz)}
        except Exception as e:                # reported, not hidden
            out[mach] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--no-predict", action="store_true", help="skip the timing model's predictions")
    args = ap.parse_args(argv)
    rows = []
    for target, d, dtype in VARIANTS:
        r = model(target, d, dtype)
        rows.append(r)
        s = r["steady"]
        print(f"{target} D={d:3d} {dtype}: MFMA share {s['mfma_share_serial']:.2f} serial / "
              f"{s['mfma_share_overlapped']:.2f} overlapped (issue's metric); "
              f"VALU-bound {s['mfma_share_valu_bound']:.2f}, throughput {s['mfma_share_throughput_overlapped']:.2f}; "
              f"waves/SIMD {r['waves_per_simd']}; nops {r['hot_loop_nops']}")
    if not args.no_predict:
        for r in rows:
            r["predicted"] = predict(r["target"], r["head_dim"], r["dtype"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "attention_model.json").write_text(json.dumps(rows, indent=1) + "\n")
    text = markdown(rows)
    pred = [r for r in rows if r.get("predicted")]
    if pred:
        text += ("\nTiming model (isagen.model, docs/model.md): **predictions, never measurements**, of the forward "
                 f"at HipKittens' GQA shape {BENCH_SHAPE} (B, H, H_kv, N_q, N_kv), non-causal.\n\n"
                 "| target | D | dtype | machine | predicted us | predicted TFLOP/s | limiter |\n"
                 "|---|---|---|---|---:|---:|---|\n")
        for r in pred:
            for mach, x in r["predicted"].items():
                if "error" in x:
                    text += f"| {r['target']} | {r['head_dim']} | {r['dtype']} | {mach} | - | - | {x['error']} |\n"
                else:
                    text += (f"| {r['target']} | {r['head_dim']} | {r['dtype']} | {mach} | {x['predicted_us']:g} | "
                             f"{x['predicted_tflops']:g} | {x['limiter']} |\n")
    (out / "attention_model.md").write_text(text)
    print(f"wrote {out / 'attention_model.json'} and {out / 'attention_model.md'}")
    brows = []
    for target in ("gfx942", "gfx950"):
        for d in (128, 64):
            for part in ("dkdv", "dq"):
                r = model_backward(target, d, "bf16", part)
                brows.append(r)
                if part == "dkdv" and (target, d) != ("gfx942", 128):       # LDS: see docs/attention.md
                    brows.append(model_backward(target, d, "bf16", part, dq_atomic=True))
                s = r["steady"]
                print(f"backward {target} {part} D={d:3d}: MFMA share {s['mfma_share_serial']:.2f} serial / "
                      f"{s['mfma_share_overlapped']:.2f} overlapped; "
                      f"throughput {s['mfma_share_throughput_overlapped']:.2f}; "
                      f"waves/SIMD {r['waves_per_simd']}; nops {r['hot_loop_nops']}")
    (out / "attention_bwd_model.json").write_text(json.dumps(brows, indent=1) + "\n")
    (out / "attention_bwd_model.md").write_text(markdown_backward(brows))
    print(f"wrote {out / 'attention_bwd_model.json'} and {out / 'attention_bwd_model.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
