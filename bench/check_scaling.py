"""How the check passes scale with program length: time per instruction at N, 2N, 4N, 8N ...

Each pass of ``isagen.checks`` that every finished kernel goes through is timed on synthetic programs
of increasing length (seeded, so every run measures the same programs):

* ``line``: one straight-line block of a GEMM-like mix (MFMA chains on a few accumulators, AGPR
  reads, VALU, DPP, transcendental, buffer and DS loads with their waits, wide stores, M0 writes for
  LDS DMA), so every hazard rule and every wait rule has work;
* ``loop``: the same mix cut into a loop of 64-instruction iterations with a branch back to the top
  of each (a back edge per iteration: the passes' work across blocks).

Passes: ``insert_nops`` (the s_nop pass), ``check_hazards`` (the independent verifier, on the padded
program), ``check_waits``.  Each is timed ``--reps`` times, the minimum kept (the machine is shared).
CPU time of the process (``time.process_time``: less disturbed than wall time on a shared machine).
A pass whose cost per instruction stays flat as the program grows 8x is linear in it.  Results go to
``bench/results/check_scaling.json`` and ``bench/results/check_scaling.md``.

    python bench/check_scaling.py [--sizes 1000 2000 4000 8000] [--reps 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from isagen import __version__  # noqa: E402
from isagen.checks import hazards, waits  # noqa: E402
from isagen.isa.operands import EXEC, M0, VCC, A, Label, S, V  # noqa: E402
from isagen.isa.table import isa_table  # noqa: E402


def synthetic(target: str, n: int, shape: str, seed: int = 17) -> list:
    """``n`` instructions of the mix (plus labels and branches for ``loop``)."""
    rng = random.Random(f"{seed}-{target}-{n}-{shape}")
    I = isa_table(target)
    mfma = "v_mfma_f32_32x32x16_bf16" if target == "gfx950" else "v_mfma_f32_32x32x8_bf16"
    k = 4 if target == "gfx950" else 2
    items: list = []
    loads = 0

    def one() -> None:
        nonlocal loads
        r = rng.randrange(16)
        v = V[rng.randrange(0, 32)]
        if r < 4:
            a0 = 16 * rng.randrange(4)
            acc = A[a0:a0 + 16]
            items.append(I[mfma](acc, V[40:40 + k], V[44:44 + k], acc))
        elif r == 4:
            items.append(I["v_accvgpr_read_b32"](v, A[rng.randrange(64)]))
        elif r < 8:
            items.append(I["v_fma_f32"](v, V[rng.randrange(32)], V[rng.randrange(32)], v))
        elif r == 8:
            items.append(I["v_mov_b32"](v, V[rng.randrange(32)], row_shr=1))
        elif r == 9:
            items.append(I["v_exp_f32"](v, V[rng.randrange(32)]))
        elif r == 10:
            items.append(I["v_cmp_gt_f32"](rng.choice([VCC, S[20:22]]), 0, v))
        elif r == 11:
            d = 48 + 4 * (loads % 4)
            items.append(I["buffer_load_dwordx4"](V[d:d + 4], V[1], S[8:12], 0, offen=True))
            loads += 1
        elif r == 12:
            items.append(I["s_waitcnt"](vmcnt=0))           # the LDS DMA above may write what it reads
            items.append(I["ds_read_b128"](V[64:68], V[2]))
            items.append(I["s_waitcnt"](lgkmcnt=0))
        elif r == 13:
            items.append(I["buffer_store_dwordx4"](V[8:12], V[1], S[8:12], S[13], offen=True))
        elif r == 14:
            items.append(I["s_mov_b32"](M0, rng.randrange(64)))
            items.append(I["buffer_load_dword_lds"](V[1], S[8:12], S[13], offen=True))
        else:
            items.append(I["s_waitcnt"](vmcnt=0))
            items.append(I["v_add_f32"](V[70], V[48], V[52]))
        if rng.random() < 0.02:
            items.append(I["v_cmpx_gt_f32"](EXEC, 0, V[3]) if rng.random() < 0.5 else I["s_nop"](1))

    if shape == "line":
        while len(items) < n:
            one()
    else:
        it = 0
        while len(items) < n:
            top = Label(f".Lscale_{it}")
            items.append(top)
            start = len(items)
            while len(items) - start < 64:
                one()
            items.append(I["s_cbranch_vccnz"](top))
            it += 1
    items.append(I["s_waitcnt"](vmcnt=0, lgkmcnt=0))
    items.append(I["s_endpgm"]())
    return items


def time_pass(fn, reps: int) -> float:
    """The fastest of ``reps`` runs, with the cyclic garbage collector paused as ``finish()`` pauses
    it (its collections re-scan every live object, so with it on a pass's time would also grow with
    whatever else the process holds)."""
    best = float("inf")
    for _ in range(reps):
        gc.collect()
        gc.disable()
        try:
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
        finally:
            gc.enable()
    return best


def measure(target: str, n: int, shape: str, reps: int) -> dict:
    items = synthetic(target, n, shape)
    count = sum(1 for x in items if hasattr(x, "desc"))
    padded = hazards.insert_nops(items, target)
    problems = len(hazards.check_hazards(padded, target)) + len(waits.check_waits(padded, target))
    assert not hazards.check_hazards(padded, target), "the s_nop pass left a hazard"
    seconds = {
        "insert_nops": time_pass(lambda: hazards.insert_nops(items, target), reps),
        "check_hazards": time_pass(lambda: hazards.check_hazards(padded, target), reps),
        "check_waits": time_pass(lambda: waits.check_waits(padded, target), reps),
    }
    return {"target": target, "shape": shape, "size": n, "instructions": count,
            "padded": sum(1 for x in padded if hasattr(x, "desc")), "problems_after_nops": problems,
            "seconds": seconds, "us_per_instruction": {k: 1e6 * v / count for k, v in seconds.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    ap.add_argument("--targets", nargs="+", default=["gfx942", "gfx950"])
    ap.add_argument("--shapes", nargs="+", default=["line", "loop"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)

    rows = []
    for target in args.targets:
        for shape in args.shapes:
            for n in args.sizes:
                r = measure(target, n, shape, args.reps)
                rows.append(r)
                us = r["us_per_instruction"]
                print(f"{target} {shape:4} {r['instructions']:6d} instr: " +
                      "  ".join(f"{k} {v:6.1f} us" for k, v in us.items()), flush=True)
    doc = {
        "what": "isagen check passes: time per instruction against program length (synthetic programs)",
        "isagen": __version__, "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "reps": args.reps, "results": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "check_scaling.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "check_scaling.md").write_text(markdown(doc))
    print(f"wrote {out / 'check_scaling.json'} and {out / 'check_scaling.md'}")
    return 0


def markdown(doc: dict) -> str:
    passes = list(doc["results"][0]["us_per_instruction"]) if doc["results"] else []
    lines = [f"# Check passes against program length (isagen {doc['isagen']}, {doc['date']})", "",
             f"Python {doc['python']} on {doc['machine']} ({doc['cpus']} CPUs, shared); CPU microseconds per "
             f"instruction, the fastest of {doc['reps']} runs; synthetic programs of `bench/check_scaling.py` "
             "(`line`: one block; `loop`: 64-instruction blocks, each branching back to its own top).", "",
             "| target | shape | instructions | " + " | ".join(passes) + " | last/first |",
             "|---|---|---:|" + "---:|" * len(passes) + "---:|"]
    first: dict[tuple[str, str], dict] = {}
    for r in doc["results"]:
        us = r["us_per_instruction"]
        base = first.setdefault((r["target"], r["shape"]), us)
        ratio = max(us[k] / base[k] for k in passes)
        lines.append(f"| {r['target']} | {r['shape']} | {r['instructions']} | "
                     + " | ".join(f"{us[k]:.1f}" for k in passes) + f" | {ratio:.2f} |")
    lines += ["", "last/first: the largest ratio, over the passes, of a row's cost per instruction to the "
              "smallest program's of the same target and shape (1.0 = linear)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
