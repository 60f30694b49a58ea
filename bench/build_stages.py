"""Where a build's time goes: the generator, then each pass ``finish()`` runs, per spec and target.

For each spec (default: the GEMM and the longest memory-bound kernel) and target, ``--reps`` times:
the generator alone (``finish()``'s checks switched off), then on its item list ``insert_nops``,
``check_hazards`` (on the padded list), ``check_waits``, the LDS bank check, and the whole build
(``Spec.build``: load + generator + every check).  CPU time of the process (``time.process_time``,
less disturbed than wall time on a shared machine), the fastest repetition kept; each stage starts
after a full collection and with the memo of checked instructions emptied before the generator and
the build (``forget_made``), so that no stage pays for, or profits from, another.  Results go to
``bench/results/build_stages.json`` and ``bench/results/build_stages.md``.

    python bench/build_stages.py [--reps 5] [SPEC:TARGET ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import isagen.builders.program as program_module  # noqa: E402
from isagen import __version__  # noqa: E402
from isagen.builders.spec import bundled_specs_dir, load_spec  # noqa: E402
from isagen.checks import hazards, lds_banks, waits  # noqa: E402

try:
    from isagen.isa.table import forget_made  # noqa: E402
except ImportError:        # an isagen from before the memo of checked instructions (a before/after run)
    def forget_made() -> None:
        pass

DEFAULT = ["gemm_bf16:gfx942", "gemm_bf16:gfx950", "dropout_add_layer_norm_bf16:gfx942",
           "dropout_add_layer_norm_bf16:gfx950"]


def unchecked_items(spec, target: str) -> list:
    """The generator's item list before the checks (finish_program stubbed out for one build)."""
    seen = {}
    real = program_module.pipeline.finish_program

    def keep(program):
        seen["items"] = list(program.items)
        return []
    program_module.pipeline.finish_program = keep
    try:
        spec.build(target)
    finally:
        program_module.pipeline.finish_program = real
    return seen["items"]


def measure(name: str, target: str, reps: int) -> dict:
    spec = load_spec(bundled_specs_dir() / f"{name}.yaml")
    spec.build(target)                                    # imports, tables, caches: not timed
    best: dict[str, float] = {}

    def timed(stage, fn, *args):
        gc.collect()        # no collection owed by an earlier stage lands in this one
        t0 = time.process_time()
        out = fn(*args)
        best[stage] = min(best.get(stage, float("inf")), time.process_time() - t0)
        return out

    for _ in range(reps):
        forget_made()       # every stage from nothing: no instruction facts kept from an earlier run
        items = timed("generator", unchecked_items, spec, target)
        padded = timed("insert_nops", hazards.insert_nops, items, target)
        timed("check_hazards", hazards.check_hazards, padded, target)
        timed("check_waits", waits.check_waits, padded, target)
        timed("lds_banks", lds_banks.check_program, padded, target)
        forget_made()
        program = timed("build", spec.build, target)
    n = len(program.instructions())
    ms = {k: 1e3 * v for k, v in best.items()}
    return {"spec": name, "target": target, "instructions": n, "ms": ms,
            "us_per_instruction": {k: 1e3 * v / n for k, v in ms.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", nargs="*", help="SPEC:TARGET (default: %(default)s)", default=DEFAULT)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    rows = []
    for k in args.kernels:
        name, target = k.split(":")
        r = measure(name, target, args.reps)
        rows.append(r)
        print(f"{name} {target} ({r['instructions']} instructions): " +
              "  ".join(f"{s} {v:.1f}" for s, v in r["ms"].items()) + " ms", flush=True)
    doc = {"what": "isagen build stages: CPU ms of the generator and of each check pass",
           "isagen": __version__, "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "reps": args.reps, "results": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "build_stages.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "build_stages.md").write_text(markdown(doc))
    print(f"wrote {out / 'build_stages.json'} and {out / 'build_stages.md'}")
    return 0


def markdown(doc: dict) -> str:
    stages = list(doc["results"][0]["ms"]) if doc["results"] else []
    lines = [f"# Build stages (isagen {doc['isagen']}, {doc['date']})", "",
             f"Python {doc['python']} on {doc['machine']} ({doc['cpus']} CPUs, shared); CPU milliseconds, the "
             f"fastest of {doc['reps']} runs; `build` is the whole `Spec.build` (generator and every check), "
             "the last column its cost per instruction.", "",
             "| spec | target | instructions | " + " | ".join(stages) + " | build us/instr |",
             "|---|---|---:|" + "---:|" * len(stages) + "---:|"]
    for r in doc["results"]:
        lines.append(f"| {r['spec']} | {r['target']} | {r['instructions']} | "
                     + " | ".join(f"{r['ms'][s]:.1f}" for s in stages)
                     + f" | {r['us_per_instruction']['build']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
