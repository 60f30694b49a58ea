"""What ``KernelBuilder.finish()``'s checks cost (``isagen.checks.pipeline.finish_program``), per pass.

For each SPEC:TARGET, ``--reps`` builds, each from a cold memo of checked instructions
(``forget_made``): the generator runs as usual and ``finish_program`` is timed whole (CPU time of the
process, ``time.process_time``, and wall time) and per pass (the CFG, the nop pass, the verifier, the
wait check, the LDS bank check).  The median of the repetitions is kept.  With ``--baseline DIR``
(another isagen checkout, e.g. ``git worktree add /tmp/base main``) the same is measured for that tree
in a separate process, alternating with this one, so the two columns share the machine's load.
Results go to ``bench/results/finish_cost.json`` and ``.md``.

    python bench/finish_cost.py [--reps 9] [--rounds 2] [--baseline DIR] [SPEC:TARGET ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["gemm_bf16:gfx942", "attention_bf16:gfx942"]


def child(name: str, target: str, reps: int) -> dict:
    """Run in the tree on PYTHONPATH: the medians of ``reps`` cold builds, in ms."""
    import isagen.builders.program as program_module
    import isagen.checks.cfg as cfg_module
    from isagen.builders.spec import bundled_specs_dir, load_spec
    from isagen.checks import hazards, lds_banks, pipeline, waits
    from isagen.isa.table import forget_made

    acc: dict[str, float] = {}

    def wrap(owner, attr: str, label: str) -> None:
        real = getattr(owner, attr)

        def timed(*a, **k):
            t0 = time.process_time()
            try:
                return real(*a, **k)
            finally:
                acc[label] = acc.get(label, 0.0) + time.process_time() - t0
        setattr(owner, attr, timed)

    wrap(hazards, "pad" if hasattr(hazards, "pad") else "insert_nops", "insert_nops")
    wrap(hazards, "check_hazards", "check_hazards")
    wrap(waits, "check_waits", "check_waits")
    wrap(lds_banks, "check_program", "lds_banks")
    if hasattr(pipeline, "CFG"):                      # the graph built once in the pipeline
        wrap(pipeline, "CFG", "cfg")
        if hasattr(cfg_module.CFG, "with_insertions"):
            wrap(cfg_module.CFG, "with_insertions", "cfg")
    real_finish = pipeline.finish_program
    spec = load_spec(bundled_specs_dir() / f"{name}.yaml")
    spec.build(target)                                # imports, tables: not timed
    rows = []
    for _ in range(reps):
        forget_made()
        row: dict[str, float] = {}

        def finish(program, row=row):
            acc.clear()
            t0, w0 = time.process_time(), time.perf_counter()
            out = real_finish(program)
            row.update({k: 1e3 * v for k, v in acc.items()})
            row["finish"] = 1e3 * (time.process_time() - t0)
            row["finish_wall"] = 1e3 * (time.perf_counter() - w0)
            row["instructions"] = len(program.instructions())
            return out
        program_module.pipeline.finish_program = finish
        try:
            spec.build(target)
        finally:
            program_module.pipeline.finish_program = real_finish
        rows.append(row)
    keys = sorted({k for r in rows for k in r})
    return {k: statistics.median(r.get(k, 0.0) for r in rows) for k in keys}


def measure(tree: Path, kernel: str, reps: int) -> dict:
    name, target = kernel.split(":")
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", name, target, str(reps)],
                         env=env, cwd=str(tree), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", nargs="*", default=DEFAULT, help="SPEC:TARGET (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the trees (medians of the rounds' medians)")
    ap.add_argument("--baseline", help="another isagen tree to measure beside this one")
    ap.add_argument("--child", nargs=3, metavar=("SPEC", "TARGET", "REPS"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]))))
        return 0
    trees = {"this": ROOT}
    if args.baseline:
        trees = {"baseline": Path(args.baseline).resolve(), "this": ROOT}
    results = []
    for kernel in args.kernels:
        runs: dict[str, list[dict]] = {k: [] for k in trees}
        loads = []
        for _ in range(args.rounds):
            for label, tree in trees.items():
                loads.append(os.getloadavg()[0])
                runs[label].append(measure(tree, kernel, args.reps))
        row = {"kernel": kernel, "load": round(statistics.mean(loads), 2)}
        for label, got in runs.items():
            keys = sorted({k for r in got for k in r})
            row[label] = {k: round(statistics.median(r.get(k, 0.0) for r in got), 3) for k in keys}
        results.append(row)
        print(json.dumps(row), flush=True)
    doc = {"what": "CPU ms of finish()'s checks per pass, cold memo, median of reps (and of rounds)",
           "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "reps": args.reps,
           "rounds": args.rounds, "baseline": args.baseline, "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "finish_cost.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "finish_cost.md").write_text(markdown(doc))
    print(f"wrote {out / 'finish_cost.json'} and {out / 'finish_cost.md'}")
    return 0


def markdown(doc: dict) -> str:
    stages = ["cfg", "insert_nops", "check_hazards", "check_waits", "lds_banks", "finish", "finish_wall"]
    lines = [f"# finish() check cost ({doc['date']})", "",
             f"Python {doc['python']} on {doc['machine']} ({doc['cpus']} CPUs, shared; load average beside each "
             f"row). CPU milliseconds (`finish_wall`: wall), median of {doc['reps']} cold builds "
             f"(`forget_made()` before each) and of {doc['rounds']} alternating rounds per tree. `finish` is all of "
             "`finish_program` (registers, nops, verifier, waits, LDS banks, bookkeeping); `cfg` the graph built "
             "in the pipeline (a pass that builds its own counts it in its own column).", "",
             "| kernel | tree | instructions | load | " + " | ".join(stages) + " | us/instr |",
             "|---|---|---:|---:|" + "---:|" * len(stages) + "---:|"]
    for r in doc["results"]:
        for label in ("baseline", "this"):
            if label not in r:
                continue
            m = r[label]
            n = m.get("instructions", 0) or 1
            lines.append(f"| {r['kernel']} | {label} | {int(n)} | {r['load']} | "
                         + " | ".join(f"{m.get(s, 0.0):.1f}" for s in stages)
                         + f" | {1e3 * m['finish'] / n:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
