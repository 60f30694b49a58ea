"""How long ``isagen run SPEC --backend emu`` takes for every bundled spec, typed with no other argument.

    PYTHONPATH=. python bench/run_times.py [--spec NAME ...]

Each spec runs as a user would type it: a new process (``python -m isagen run NAME --backend emu``),
with an empty isagen cache (``ISAGEN_CACHE_DIR`` set to a fresh directory, so generation and assembly
are part of the time).  Reports per spec the whole command's wall time, the emulation time
``isagen run`` prints (``time_ms`` of the launch), the sizes it chose (the first line of its output)
and PASS/FAIL.  The issue's bound: each under 120 s on this 2-core machine.  Writes
bench/results/run_times.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
LIMIT_S = 120.0


def bundled() -> list[str]:
    return sorted(p.stem for p in (ROOT / "specs").glob("*.yaml"))


def run_one(name: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "ISAGEN_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "isagen", "run", name, "--backend", "emu"],
                              capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - t0
    out = proc.stdout.splitlines()
    emu = re.search(r"emulated in ([0-9.]+) ms", proc.stdout)        # format_report's time line
    emu_s = float(emu.group(1)) / 1000 if emu else None
    return {"spec": name, "wall_s": round(wall, 2), "emulation_s": None if emu_s is None else round(emu_s, 2),
            "first_line": out[0] if out else "", "passed": proc.returncode == 0 and "PASS" in proc.stdout,
            "exit_code": proc.returncode, "stderr_tail": proc.stderr.strip().splitlines()[-1:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", action="append", help="only these specs (default: every bundled one)")
    args = ap.parse_args()
    rows = [run_one(name) for name in (args.spec or bundled())]
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"machine": f"{os.cpu_count()} cores", "python": sys.version.split()[0], "limit_s": LIMIT_S}
    (RESULTS / "run_times.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = ["# `isagen run SPEC --backend emu`, no other argument, empty cache", "",
             f"{meta['machine']}, Python {meta['python']}; written by bench/run_times.py.", "",
             "| spec | whole command, s | emulation, s | result | sizes (first line of the output) |",
             "|---|---|---|---|---|"]
    for r in rows:
        emu = "" if r["emulation_s"] is None else f"{r['emulation_s']:.2f}"
        sizes = r["first_line"].split(": grid")[0]
        lines.append(f"| `{r['spec']}` | {r['wall_s']:.1f} | {emu} | {'PASS' if r['passed'] else 'FAIL'} | {sizes} |")
    worst = max(rows, key=lambda r: r["wall_s"])
    lines += ["", f"Slowest: `{worst['spec']}`, {worst['wall_s']:.1f} s (limit {LIMIT_S:.0f} s); "
              f"{sum(r['passed'] for r in rows)} of {len(rows)} pass."]
    (RESULTS / "run_times.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["passed"] and r["wall_s"] < LIMIT_S for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
