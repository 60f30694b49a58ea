"""The generator stage of a build, timed alone: spec -> KernelBuilder (load and validate the YAML, run
the generator), before ``finish()`` (checks) and before any code object is written.

Each case runs ``--reps`` times in one process, the memo of checked instructions emptied before every
run (``forget_made``: each build from nothing), the cyclic collector paused as ``Spec.build`` pauses
it; CPU time (``time.process_time``) and wall time are reported, minimum and median, with the load
average (the machine may be shared: CPU time is the steadier figure).

``--baseline DIR`` times another checkout of isagen the same way (e.g. ``main``) in alternating
subprocesses, so the two are compared side by side in one run.

    python bench/gen_build.py [--reps 9] [--rounds 2] [--baseline /path/to/other/checkout]

Results: ``bench/results/gen_build.json`` and ``bench/results/gen_build.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [("specs/gemm_bf16.yaml", "gfx942"), ("specs/gemm_bf16.yaml", "gfx950"),
         ("specs/attention_bf16.yaml", "gfx942")]


def measure(reps: int) -> list[dict]:
    """Run in the checkout on ``sys.path``: every case, ``reps`` timed builds after one warm-up."""
    from isagen.builders.program import cyclic_gc_paused
    from isagen.builders.spec import load_spec
    from isagen.isa.table import forget_made

    def generate(path: str, target: str):
        forget_made()
        spec = load_spec(path)
        t = spec.validate(target)
        with cyclic_gc_paused():
            return spec.generator.fn(spec.params, t)

    out = []
    for path, target in CASES:
        generate(path, target)
        cpu, wall = [], []
        for _ in range(reps):
            c0, w0 = time.process_time(), time.perf_counter()
            k = generate(path, target)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        out.append({"spec": path, "target": target, "items": len(k.items), "cpu": cpu, "wall": wall})
    return out


def run_checkout(checkout: Path, reps: int) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    code = f"import json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import gen_build; " \
           f"print(json.dumps(gen_build.measure({reps})))"
    done = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, capture_output=True, text=True,
                          check=True)
    result: list[dict] = json.loads(done.stdout.splitlines()[-1])
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of this checkout and the baseline")
    ap.add_argument("--baseline", type=Path, help="another isagen checkout to time side by side")
    args = ap.parse_args(argv)
    checkouts = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    samples: dict[str, dict[tuple[str, str], dict]] = {name: {} for name in checkouts}
    load = [os.getloadavg()]
    for _ in range(args.rounds):
        for name, path in checkouts.items():
            for r in run_checkout(path, args.reps):
                s = samples[name].setdefault((r["spec"], r["target"]), {"items": r["items"], "cpu": [], "wall": []})
                s["cpu"] += r["cpu"]
                s["wall"] += r["wall"]
    load.append(os.getloadavg())
    rows = []
    for name, path in checkouts.items():
        for (spec, target), s in samples[name].items():
            rows.append({"checkout": name, "path": str(path), "spec": spec, "target": target, "items": s["items"],
                         "cpu_min_ms": 1e3 * min(s["cpu"]), "cpu_median_ms": 1e3 * statistics.median(s["cpu"]),
                         "wall_min_ms": 1e3 * min(s["wall"]), "wall_median_ms": 1e3 * statistics.median(s["wall"])})
    doc = {"reps": args.reps, "rounds": args.rounds, "load_before_after": load, "rows": rows}
    results = ROOT / "bench" / "results"
    (results / "gen_build.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["# Generator stage (spec load + generator, before finish())", "",
             f"{args.reps} builds x {args.rounds} rounds per checkout, alternating; memo of checked instructions "
             f"emptied before each build. Load average before/after: {load[0][0]:.2f} / {load[1][0]:.2f}.", "",
             "| checkout | spec | target | items | CPU min | CPU median | wall min | wall median |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['checkout']} | {Path(r['spec']).stem} | {r['target']} | {r['items']} | "
                     f"{r['cpu_min_ms']:.1f} ms | {r['cpu_median_ms']:.1f} ms | {r['wall_min_ms']:.1f} ms | "
                     f"{r['wall_median_ms']:.1f} ms |")
    (results / "gen_build.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
