"""Every bundled spec at its full hardware shape (its ``shapes:``, not ``emulator_shapes:``) through
``isagen run``'s plan and execute on the emulator backend, as ``isagen run SPEC --backend emu --shape ...``
runs it: on the cuda engine with ``ISAGEN_EMU_DEVICE=cuda`` (sanitizer off, its default there).

Each spec gets ``--limit`` seconds (inputs, emulator run and the CPU torch reference together; SIGALRM):
a spec over it is recorded as such, not as a failure of the emulator.  ``--no-reference SPEC ...`` runs those
specs' kernels without their reference (the emulation's time alone: for a reference too large for the
machine's memory).  The code objects come from the
build cache (``ISAGEN_CACHE_DIR``; the GPU machine has no AMDGPU assembler: ``--build`` fills the cache
on a machine that has one).  Results: ``bench/results/emu_run_specs_gpu.json`` and ``.md``
(``--markdown-only JSON`` writes the table of an earlier run).

    python bench/emu_run_specs_gpu.py [--limit 20] [--build] [SPEC ...]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(names: list[str], limit: int, build_only: bool, save=None, no_reference: frozenset = frozenset()) -> dict:
    from isagen.runtime.run import execute, load_spec, plan_run, random_inputs, random_scalars, resolve_spec

    def alarm(*_):
        raise TimeoutError(f"over {limit} s")
    signal.signal(signal.SIGALRM, alarm)
    res: dict = {}
    for p in sorted((ROOT / "specs").glob("*.yaml")):
        if names and p.stem not in names:
            continue
        t = time.perf_counter()
        row: dict = {}
        try:
            shapes = {k: int(v) for k, v in load_spec(resolve_spec(str(p))).shapes.items()}
            plan = plan_run(str(p), backend="emu", shapes=shapes)
            row = {"sizes": plan.sizes, "grid": list(plan.grid), "target": plan.kernel.target}
            if not build_only:
                signal.alarm(limit)
                try:
                    if p.stem in no_reference:      # the emulator's run alone (see --no-reference)
                        tensors = random_inputs(plan.kernel, plan.sizes)
                        result = plan.kernel.run(**tensors, **random_scalars(plan.kernel, {}), backend="emu",
                                                 timing=True)
                        row.update(ok=None, reference="not evaluated", s=time.perf_counter() - t,
                                   emu_ms=result.time_ms)
                    else:
                        rep = execute(plan, iters=0)
                        row.update(ok=bool(rep.ok), s=time.perf_counter() - t, emu_ms=rep.time_ms,
                                   reference_on=rep.reference_on, reference_s=rep.reference_s,
                                   checks=[{"name": c.name, "ok": bool(c.ok), "mismatches": int(c.mismatches),
                                            "numel": int(c.numel), "max_abs": float(c.max_abs),
                                            "max_rel": float(c.max_rel), "worst": float(c.worst)}
                                           for c in rep.checks])
                finally:
                    signal.alarm(0)
            res[p.stem] = row
        except BaseException as e:     # noqa: BLE001 -- recorded per spec (a timeout included)
            res[p.stem] = {**{k: row[k] for k in ("sizes", "grid", "target") if k in row}, "ok": False,
                           "error": f"{type(e).__name__}: {str(e)[:300]}", "s": time.perf_counter() - t}
        print(p.stem, json.dumps(res[p.stem], default=str)[:300], flush=True)
        if save is not None:
            save(res)              # after every spec: a run cut short keeps what it measured
    return res


def markdown(res: dict, meta: str) -> str:
    ok = sum(1 for r in res.values() if r.get("ok"))
    emu_only = sum(1 for r in res.values() if r.get("reference") == "not evaluated" and "error" not in r)
    lines = ["# `isagen run SPEC --backend emu` at each bundled spec's full hardware shape, cuda engine", "",
             meta, "", f"{ok} of {len(res)} finish and match their reference within the limit"
             + (f"; {emu_only} more finish their emulation, their reference not evaluated." if emu_only else "."), "",
             "| spec | sizes | grid | result | wall s | emulator s |", "|---|---|---|---|---|---|"]
    for name, r in res.items():
        sizes = " ".join(f"{k}={v}" for k, v in r.get("sizes", {}).items())
        grid = "x".join(str(g) for g in r.get("grid", []))
        if r.get("reference") == "not evaluated":
            what = "emulation finished; reference not evaluated (--no-reference)"
        elif r.get("ok"):
            shares = [f"{c['name']} {c['worst']:.2g}" for c in r.get("checks", []) if "worst" in c]
            what = "matches the reference" + (f" (worst error / bound: {', '.join(shares)})" if shares else "")
        elif "Timeout" in r.get("error", ""):
            what = ("the CPU torch reference ran past the limit" if "reference" in r["error"]
                    else "ran past the limit (no error before it)")
        elif "error" in r:
            what = f"error: {r['error']}"
        else:
            bad = [c for c in r.get("checks", []) if not c["ok"]]
            what = "; ".join(f"{c['name']}: {c['mismatches']:,} of {c['numel']:,} elements outside the tolerance "
                             f"(max rel err {c['max_rel']:.3g})" for c in bad) or "mismatch"
        emu = f"{r['emu_ms'] / 1e3:.1f}" if r.get("emu_ms") else "-"
        lines.append(f"| {name} | {sizes} | {grid} | {what} | {r.get('s', 0):.1f} | {emu} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--build", action="store_true", help="only build (fill the cache)")
    ap.add_argument("--markdown-only", type=Path, metavar="JSON")
    ap.add_argument("--meta", default="", help="the line under the title (machine, date)")
    ap.add_argument("--no-reference", nargs="*", default=[], metavar="SPEC",
                    help="run these specs' kernels on the emulator without evaluating their reference (one "
                         "too large for the machine's memory)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    if args.markdown_only:
        res = json.loads(args.markdown_only.read_text())
    def save(res):
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "emu_run_specs_gpu.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
        (args.out / "emu_run_specs_gpu.md").write_text(markdown(res, args.meta))

    if not args.markdown_only:
        res = run(args.specs, args.limit, args.build, None if args.build else save, frozenset(args.no_reference))
        if args.build:
            return 0
    save(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
