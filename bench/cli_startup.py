"""Start-up time of the command line: ``python -m isagen --help`` (and ``isagen list``), new processes.

    PYTHONPATH=. python bench/cli_startup.py [--reps 15]

``cli.py`` imports at module level only what every command needs; the builders, the report model
and the runtime are imported by the commands that use them (docs/cli.md, issue 17); this measures
what a command still pays before it starts.  Reports min and median wall seconds over ``--reps`` runs each.  Writes
bench/results/cli_startup.json and .md.
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
RESULTS = ROOT / "bench" / "results"
COMMANDS = {"isagen --help": ["--help"], "isagen list": ["list"]}


def time_command(argv: list[str], reps: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "isagen", *argv], capture_output=True, check=True, env=env, cwd=ROOT)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    time_command(["--help"], 2)                      # warm the file cache and the .pyc files first
    rows = []
    for name, argv in COMMANDS.items():
        samples = time_command(argv, args.reps)
        rows.append({"command": name, "min_s": round(min(samples), 3),
                     "median_s": round(statistics.median(samples), 3), "samples": [round(s, 3) for s in samples]})
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"machine": f"{os.cpu_count()} cores", "python": sys.version.split()[0], "reps": args.reps}
    (RESULTS / "cli_startup.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = ["# CLI start-up (new process each run)", "",
             f"{meta['machine']}, Python {meta['python']}, {args.reps} runs each; written by bench/cli_startup.py.", "",
             "| command | min, s | median, s |", "|---|---|---|"]
    lines += [f"| `{r['command']}` | {r['min_s']:.3f} | {r['median_s']:.3f} |" for r in rows]
    (RESULTS / "cli_startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
