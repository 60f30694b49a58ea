"""The terminal form of the register report (``isagen report ... --format text``)."""

from __future__ import annotations

_TITLES = {"vgpr": "VGPR", "agpr": "AGPR", "sgpr": "SGPR"}
_FACTOR = {"hardware": "the hardware maximum", "vgprs": "VGPRs", "sgprs": "SGPRs", "lds": "LDS",
           "workgroup": "workgroup size (barriers per CU)"}


def render_text(doc: dict, listing: bool = False, width: int = 100) -> str:
    out: list[str] = []
    for n, k in enumerate(doc["kernels"]):
        if n:
            out += ["", "=" * min(width, 100), ""]
        out += kernel_text(k, listing=listing)
    return "\n".join(out) + "\n"


def _where(k: dict, i) -> str:
    if i is None:
        return "-"
    return f"#{i}"


def _short(text: str | None, n: int = 60) -> str:
    if not text:
        return ""
    return text if len(text) <= n else text[: n - 1] + "…"


def occupancy_cause(k: dict) -> str:
    o = k["occupancy"]
    waves = o["waves_per_simd"]
    factor = o["limited_by"]
    text = f"{waves} wave{'s' if waves != 1 else ''}/SIMD, limited by {_FACTOR.get(factor, factor)}"
    if o.get("vgpr_granule_bound"):
        r = k["registers"]
        text += (f" -- the unified-file granule: {r['agpr']['declared']} AGPRs start at accum_offset "
                 f"{r['accum_offset']} and the {o['unified_vgprs']} registers round up to {o['allocated_vgprs']}")
    return text


def kernel_text(k: dict, listing: bool = False) -> list[str]:
    r = k["registers"]
    src = k["source"]
    where = src.get("path") or "(in memory)"
    kind = {"spec": "spec", "code_object": "code object", "program": "isagen program"}.get(src.get("kind"), "")
    out = [f"{k['name']} · {k['target']} · {where} ({kind}{', ' + src['target_id'] if src.get('target_id') else ''})"]
    unreach = f" ({k['unreachable_instructions']} unreachable)" if k["unreachable_instructions"] else ""
    waves_wg = k["occupancy"]["waves_per_workgroup"]
    out.append(f"{k['instruction_count']} instructions{unreach}, {k['code_bytes']} bytes; workgroup "
               f"{k['workgroup_size']} work-items ({waves_wg} wave{'s' if waves_wg != 1 else ''})")
    out.append("")
    out.append(f"  {'registers':<10} {'declared':>8} {'used':>6} {'peak live':>10}  at")
    for cls in ("vgpr", "agpr", "sgpr"):
        c = r[cls]
        p = k["peaks"][cls]
        at = f"{_where(k, p['instruction'])}  {_short(p['text'], 56)}" if p["instruction"] is not None else "-"
        out.append(f"  {_TITLES[cls]:<10} {c['declared']:>8} {c['used']:>6} {c['peak_live']:>10}  {at}")
    if r["agpr"]["declared"]:
        uni = (f"{r['unified_vgprs']} registers (accum_offset {r['accum_offset']} + {r['agpr']['declared']} AGPRs)")
    else:
        uni = f"{r['unified_vgprs']} registers"
    out.append(f"  unified VGPR file: {uni} -> {r['allocated_vgprs']} allocated per lane")
    out.append(f"  SGPRs: {r['sgpr']['declared']} + {r['reserved_sgprs']} reserved (VCC, FLAT_SCRATCH, XNACK_MASK) = "
               f"{r['sgpr_count']} -> {r['allocated_sgprs']} allocated; set at launch: {r['initialized'] or '-'}")
    out.append("")

    o = k["occupancy"]
    out.append(f"occupancy: {occupancy_cause(k)}")
    out.append("  limits (waves/SIMD): " + " · ".join(f"{f} {w}" for f, w in o["limits"].items()))
    if o.get("waves_with_used_counts", o["waves_per_simd"]) != o["waves_per_simd"]:
        out.append(f"  with the counts the code uses: {o['waves_with_used_counts']} waves/SIMD")
    for step in o["to_next_wave"]:
        out.append(f"  for {o['waves_per_simd'] + 1} waves ({step['factor']}): {step['detail']}")
    if not o["to_next_wave"]:
        out.append("  (at the hardware maximum)")
    lds = k["lds"]
    dyn = f" + {lds['dynamic_bytes']} B dynamic" if lds["dynamic_bytes"] else ""
    out.append(f"LDS: {lds['static_bytes']} B{dyn} = {lds['total_bytes']} B per workgroup "
               f"(allocated {lds['allocated_bytes']} of {lds['target_bytes']} per CU)")
    for reg in lds["regions"]:
        out.append(f"  {reg['name']:<20} offset {reg['offset']:>6}  {reg['size']:>6} B")

    if k["warnings"]:
        out.append("")
        out.append("warnings:")
        out += [f"  ! {w}" for w in k["warnings"]]
    if k["notes"]:
        out.append("")
        out.append("notes:")
        out += [f"  - {x}" for x in k["notes"]]

    for cls in ("vgpr", "agpr", "sgpr"):
        p = k["peaks"][cls]
        if not p["count"]:
            continue
        out.append("")
        out.append(f"peak {_TITLES[cls]} pressure: {p['count']} live at #{p['instruction']}  {p['text']}")
        out.append(f"  registers: {p['registers']}")
        if k["source"].get("kind") == "code_object":
            continue                                   # foreign code: the ranges are the whole story
        parts = [f"{x['name']} {x['range']}" if x["name"] != x["range"] else x["range"] for x in p["live"]]
        counts = [f"{x['live']}/{x['size']}" if x["live"] != x["size"] else "" for x in p["live"]]
        line = "  "
        for part, cnt in zip(parts, counts):
            item = part + (f" ({cnt})" if cnt else "")
            if len(line) + len(item) > 100:
                out.append(line.rstrip(", "))
                line = "  "
            line += item + ", "
        out.append(line.rstrip(", "))

    out.append("")
    out.append("instruction mix: " + _mix(k["mix"]))
    if k["loops"]:
        out.append("loops:")
        for lp in k["loops"]:
            span = " ".join(f"#{a}..#{b}" for a, b in lp["runs"])
            pk = lp["peak_live"]
            out.append(f"  {'  ' * (lp['depth'] - 1)}{span}  depth {lp['depth']}, {lp['instructions']} instructions, "
                       f"peak live v{pk['vgpr']} a{pk['agpr']} s{pk['sgpr']}")
            out.append(f"  {'  ' * (lp['depth'] - 1)}  mix: {_mix(lp['mix'])}")

    allocs = k["allocations"]
    out.append("")
    out.append(f"allocations ({len(allocs)}):")
    nw = max([4] + [len(a["name"]) for a in allocs])
    rw = max([5] + [len(a["range"]) for a in allocs])
    out.append(f"  {'name':<{nw}}  {'class':<5}  {'range':<{rw}}  {'first def':>9}  {'last use':>8}  {'live for':>8}")
    for a in allocs:
        fd = "launch" if a["initialized"] and (a["first_def"] is None) else (
            "-" if a["first_def"] is None else f"#{a['first_def']}")
        lu = "-" if a["last_use"] is None else f"#{a['last_use']}"
        out.append(f"  {a['name']:<{nw}}  {a['class']:<5}  {a['range']:<{rw}}  {fd:>9}  {lu:>8}  "
                   f"{a['live_instructions']:>8}")

    if listing:
        out.append("")
        out.append("listing (live registers after each instruction's reads and writes: VGPR AGPR SGPR):")
        top = max(1, max((i["live"]["vgpr"] + i["live"]["agpr"] for i in k["instructions"]), default=1))
        for ins in k["instructions"]:
            lv = ins["live"]
            bar = "#" * round(24 * (lv["vgpr"] + lv["agpr"]) / top)
            for lab in ins["labels"]:
                out.append(f"{lab}:")
            mark = " " if ins["reachable"] else "x"
            loop = "|" * ins["loop_depth"]
            off = f"+0x{ins['offset']:x}" if ins["offset"] is not None else ""
            cmt = f"  // {ins['comment']}" if ins["comment"] else ""
            out.append(f"{mark}#{ins['index']:<5} {off:>8} {lv['vgpr']:>4} {lv['agpr']:>4} {lv['sgpr']:>4} "
                       f"{bar:<24} {loop:<2} {ins['text']}{cmt}")
    return out


def _mix(m: dict) -> str:
    total = sum(m.values())
    return f"{total} total: " + " · ".join(f"{c} {n}" for c, n in m.items())
