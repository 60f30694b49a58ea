"""The native block engine (runtime/emu/cgen.py) on and off, side by side: ``bench/emu_speed.py`` (the
Triton bf16 GEMM on gfx942) run in fresh processes with ``ISAGEN_EMU_CGEN=0`` and ``=1`` alternately,
``--rounds`` times, so the other jobs of a shared machine load both alike.  Reports per size and
setting the warm wall and CPU times of every round (CPU: the process's, the steadier figure on a loaded
machine) and whether C matches torch; both settings must give the same bits (the engine's tests check
that), this only measures.  The generated library is built before the first timed round (a warm-up
launch), as a second run of any kernel finds it cached.

    python bench/emu_cgen_compare.py [--sizes 1024 2048] [--rounds 2]

Results: ``bench/results/emu_cgen_compare.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(setting: str, sizes: list[int], reps: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, ISAGEN_EMU_CGEN=setting, PYTHONPATH=str(ROOT))
        subprocess.run([sys.executable, str(ROOT / "bench" / "emu_speed.py"), "--sizes", *map(str, sizes),
                        "--reps", str(reps), "--sanitize-sizes", "--numpy-sizes", "--out", out],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        return json.loads((Path(out) / "emu_speed.json").read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    one("1", [min(args.sizes)], 1)             # warm-up: the generated library is in the cache after it
    runs: dict[str, list[dict]] = {"0": [], "1": []}
    load = [os.getloadavg()]
    for _ in range(args.rounds):
        for setting in ("0", "1"):
            runs[setting].append(one(setting, args.sizes, args.reps))
            load.append(os.getloadavg())
    res = {"benchmark": "emu_cgen_compare", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "cpu": runs["0"][0]["machine"].get("cpu"), "cpu_count": os.cpu_count(), "loadavg": load,
           "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "emu_cgen_compare.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# The native block engine on and off (Triton bf16 GEMM, gfx942, sanitizer off, warm)", "",
             f"Measured {res['date']} on {res['cpu']} ({res['cpu_count']} cores, a shared machine: load average "
             f"{min(x[0] for x in load):.1f}-{max(x[0] for x in load):.1f} during the runs), "
             f"`ISAGEN_EMU_CGEN=0` and `=1` alternately in fresh processes, {args.rounds} rounds.", "",
             "| size | engine | warm wall (s), each round | warm CPU (s), each round | median CPU (s) | correct |",
             "|---|---|---|---|---|---|"]
    for n in args.sizes:
        med = {}
        for setting, label in (("0", "numpy (cgen off)"), ("1", "native blocks (cgen on)")):
            rows = [s for r in runs[setting] for s in r["sizes"] if s["M"] == n]
            walls = [statistics.median(s["warm_wall_s"]) for s in rows]
            cpus = [statistics.median(s["warm_cpu_s"]) for s in rows]
            med[setting] = statistics.median(cpus)
            lines.append(f"| {n}^3 | {label} | {', '.join(f'{x:.2f}' for x in walls)} | "
                         f"{', '.join(f'{x:.2f}' for x in cpus)} | {med[setting]:.2f} | "
                         f"{'yes' if all(s['correct'] for s in rows) else 'NO'} |")
        lines.append(f"| {n}^3 | CPU ratio off/on | | | {med['0'] / med['1']:.2f}x | |")
    (args.out / "emu_cgen_compare.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
