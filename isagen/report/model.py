"""The register report of one kernel: counts, occupancy, liveness, peaks, allocations, loops, mix.

:func:`analyze` turns a :class:`~isagen.report.sources.KernelInput` into a JSON-ready dict -- the
documented, versioned format of docs/report.md (``SCHEMA_VERSION``).  The text, HTML and PNG
renderers all read that dict, so every format says the same thing.
"""

from __future__ import annotations

from typing import Any

from isagen import __version__
from isagen.checks import occupancy as occ
from isagen.report.categories import mix
from isagen.report.flow import CLASS_MASK, CLASS_TITLE, CLASSES, count_class, format_mask, high_water, liveness

SCHEMA_VERSION = 1
CLASS_KEY = {"v": "vgpr", "a": "agpr", "s": "sgpr"}


def document(kernels: list[dict]) -> dict:
    """The top-level report: schema version, generator and one entry per kernel."""
    return {"schema_version": SCHEMA_VERSION, "generator": f"isagen {__version__}", "kernels": list(kernels)}


def analyze(kin) -> dict:
    flow = kin.flow
    steps = flow.steps
    t = kin.target
    live = liveness(flow)

    touched = kin.initial
    for s in steps:
        touched |= s.defs | s.uses
    used = {c: high_water(touched, c) for c in CLASSES}

    registers: dict[str, Any] = {}     # per class a dict of counts, then the kernel-wide counts
    for c in CLASSES:
        peak, at = live.peak(c)
        registers[CLASS_KEY[c]] = {"declared": kin.declared[CLASS_KEY[c]], "used": used[c], "peak_live": peak,
                                   "peak_at": at if peak else None}
    d = kin.declared
    registers.update({
        "unified_vgprs": d["unified_vgprs"], "accum_offset": d["accum_offset"],
        "allocated_vgprs": kin.allocated["vgprs"], "sgpr_count": d["sgpr_count"],
        "reserved_sgprs": occ.EXTRA_SGPRS, "allocated_sgprs": kin.allocated["sgprs"],
        "initialized": format_mask(kin.initial),
    })

    lds_total = kin.lds_static + kin.lds_dynamic
    occupancy = occ.occupancy(t, arch_vgprs=d["vgpr"], agprs=d["agpr"], sgpr_count=d["sgpr_count"],
                              lds_bytes=lds_total, workgroup_size=kin.workgroup_size, unified=d["unified_vgprs"])
    used_occ = occ.occupancy(t, arch_vgprs=used["v"], agprs=used["a"],
                             sgpr_count=used["s"] + occ.EXTRA_SGPRS, lds_bytes=lds_total,
                             workgroup_size=kin.workgroup_size)
    occ_dict = occupancy.as_dict()
    occ_dict["waves_with_used_counts"] = used_occ.waves_per_simd

    allocations = _allocation_rows(kin, live)
    depth = [0] * len(steps)
    for lp in flow.loops:
        for i in lp.body:
            depth[i] = max(depth[i], lp.depth)

    return {
        "name": kin.name,
        "target": t.name,
        "source": dict(kin.source),
        "instruction_count": len(steps),
        "unreachable_instructions": sum(1 for s in steps if not s.reachable),
        "code_bytes": kin.code_bytes,
        "workgroup_size": kin.workgroup_size,
        "registers": registers,
        "warnings": _warnings(kin, used, occupancy, used_occ, allocations),
        "notes": list(flow.notes) + _notes(kin, registers, steps),
        "occupancy": occ_dict,
        "lds": {"static_bytes": kin.lds_static, "dynamic_bytes": kin.lds_dynamic, "total_bytes": lds_total,
                "allocated_bytes": occupancy.allocated_lds, "target_bytes": t.lds_bytes,
                "regions": [dict(r) for r in kin.lds_regions]},
        "peaks": {CLASS_KEY[c]: _peak(kin, live, c) for c in CLASSES},
        "allocations": allocations,
        "loops": [_loop_row(kin, live, lp) for lp in flow.loops],
        "mix": mix(s.category for s in steps if s.reachable),
        "instructions": [
            {"index": s.index, "offset": s.offset, "text": s.text, "comment": s.comment, "category": s.category,
             "labels": list(s.labels), "reachable": s.reachable, "loop_depth": depth[s.index],
             "live": {CLASS_KEY[c]: live.counts[c][s.index] for c in CLASSES}}
            for s in steps],
    }


def _warnings(kin, used: dict, occupancy, used_occ, allocations: list[dict]) -> list[str]:
    out = []
    d = kin.declared
    for c in CLASSES:
        declared, have = d[CLASS_KEY[c]], used[c]
        title = CLASS_TITLE[c]
        compare = have
        if c == "v" and kin.source.get("kind") == "code_object" and d["agpr"]:
            # the metadata gives accum_offset + AGPRs: the arch count is only known rounded up to 4
            g = kin.target.accum_offset_granule
            compare = max(g, (have + g - 1) // g * g)
        if compare > declared:
            out.append(f"{title}s: the code uses {have} ({c}0..{c}{have - 1}) but the kernel declares only "
                       f"{declared}: registers past the allocation are not the wave's own")
        elif compare < declared:
            msg = f"{title}s: the kernel declares {declared} but the code touches only {have}"
            idle = [f"{a['name']} {a['range']}" for a in allocations
                    if a["class"] == CLASS_KEY[c] and a["first_def"] is None and a["last_use"] is None
                    and not a["initialized"]]
            if kin.named and idle:
                msg += f"; never touched: {', '.join(idle)}"
            if used_occ.waves_per_simd > occupancy.waves_per_simd:
                msg += (f"; declaring what it uses would give {used_occ.waves_per_simd} waves/SIMD instead of "
                        f"{occupancy.waves_per_simd}")
            out.append(msg)
    sp = kin.spills
    if sp.get("sgpr_spill_count"):
        out.append(f"the compiler spilled {sp['sgpr_spill_count']} SGPRs (into VGPR lanes: v_writelane/v_readlane)")
    if sp.get("vgpr_spill_count"):
        out.append(f"the compiler spilled {sp['vgpr_spill_count']} VGPRs (to AGPRs or scratch; "
                   f"{sp.get('private_segment_bytes', 0)} bytes of scratch per lane)")
    return out


def _notes(kin, registers: dict, steps) -> list[str]:
    out = []
    unreachable = sum(1 for s in steps if not s.reachable)
    if unreachable:
        out.append(f"{unreachable} instructions are unreachable from the entry (e.g. padding after a "
                   "kernarg-preload prologue); they hold no live registers")
    g = kin.target.vgpr_alloc_granule
    v = registers["vgpr"]
    if v["used"] - v["peak_live"] >= g:
        out.append(f"at most {v['peak_live']} VGPRs are live at once but registers up to v{v['used'] - 1} are used: "
                   f"a tighter assignment could need as few as {v['peak_live']} (alignment of register tuples "
                   "permitting)")
    return out


def _alive(a, i: int) -> bool:
    return a.first <= i and (a.end is None or i < a.end)


def _peak(kin, live, c: str) -> dict:
    count, at = live.peak(c)
    if not count:
        return {"count": 0, "instruction": None, "text": None, "registers": "", "live": []}
    mask = live.live[at] & CLASS_MASK[c]
    rows, covered = [], 0
    for a in kin.allocations:
        if a.cls != c or not _alive(a, at):
            continue
        hit = mask & a.mask
        if hit:
            covered |= hit
            rows.append(({"name": a.name, "range": a.range, "live": hit.bit_count(), "size": a.count}, a.index))
    rest = mask & ~covered
    if rest:
        rows.append(({"name": "(unnamed)", "range": format_mask(rest), "live": rest.bit_count(),
                      "size": rest.bit_count()}, 1 << 30))
    rows.sort(key=lambda r: (-r[0]["live"], r[1]))
    return {"count": count, "instruction": at, "text": kin.flow.steps[at].text, "registers": format_mask(mask),
            "live": [r for r, _ in rows]}


def _allocation_rows(kin, live) -> list[dict]:
    steps = kin.flow.steps
    n = len(steps)
    rows = []
    for a in kin.allocations:
        m = a.mask
        lo, hi = a.first, (n if a.end is None else a.end)
        first_def = next((i for i in range(lo, hi) if steps[i].defs & m), None)
        last_use = next((i for i in range(hi - 1, lo - 1, -1) if steps[i].uses & m), None)
        rows.append({"name": a.name, "class": CLASS_KEY[a.cls], "range": a.range, "size": a.count,
                     "first_def": first_def, "last_use": last_use, "initialized": a.initialized,
                     "live_instructions": sum(1 for i in range(lo, hi) if live.live[i] & m)})
    return rows


def _loop_row(kin, live, lp) -> dict:
    steps = kin.flow.steps
    return {"header": lp.header, "latches": list(lp.latches), "first": lp.body[0], "last": lp.body[-1],
            "runs": [list(r) for r in lp.runs], "depth": lp.depth, "instructions": len(lp.body),
            "mix": mix(steps[i].category for i in lp.body),
            "peak_live": {CLASS_KEY[c]: max(count_class(live.live[i], c) for i in lp.body) for c in CLASSES}}
