"""How fast the CPU emulator runs a real GEMM: a Triton-compiled bf16 ``tl.dot`` matmul for gfx942
(128x128x64 tiles, 4 waves per workgroup, ``v_mfma_f32_32x32x8_bf16``) at 1024^3, 2048^3, 4096^3.

Per size it reports:

* cold: a fresh ``Device`` + ``load_module`` + first ``launch`` (reads the code object, decodes the
  machine code, compiles the handlers, runs), wall time;
* warm: further launches of the same kernel (median of ``--reps``), the emulator's own run time;
* emulated wave-instructions (each instruction executed by one wave counts once, as the launch
  statistics count them) per second of the warm run, and the part of it spent inside ``mfma()``;
* whether C matches torch (bf16 tolerance), so a fast wrong run cannot pass as a result;
* the process's peak resident memory after the size (sizes run in increasing order, so the peak of
  the largest size is its own), and the engine: ``native`` (the C MFMA kernel of
  ``runtime/emu/native.py``) or ``numpy`` (``--numpy-sizes``: the same sizes with the numpy MFMA path,
  for comparison).

The reference points are tinygrad's Python emulator on the same code object, measured side by side
in an earlier session and quoted in issue 19 (``TINYGRAD``: not re-run by this script; tinygrad is
not installed here), and this emulator's own earlier results (``EARLIER``).  Results go to
``bench/results/emu_speed.json`` (every sample, machine facts) and ``bench/results/emu_speed.md``.

    python bench/emu_speed.py [--sizes 1024 2048 4096] [--reps 3] [--sanitize-sizes 1024] [--numpy-sizes 1024]

Every size runs with the sanitizer off (the speed figure); ``--sanitize-sizes`` are run once more
with it on (missing waits, LDS races, bounds), to show its cost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

# tinygrad's Python emulator (test/mockgpu/amd/emu.py) on this same Triton code object, warm / cold
# seconds, measured side by side on this 2-core machine in an earlier session (issue 19's numbers)
TINYGRAD = {1024: {"warm_s": 0.94, "cold_s": 5.4}, 2048: {"warm_s": 6.5}}
# this emulator before the engine work (bench/results/emu_speed.md of 2026-11-23, warm, sanitizer off/on)
EARLIER = {1024: {"warm_s": 0.94, "warm_san_s": 1.51}, 2048: {"warm_s": 6.97}}


class MfmaClock:
    """Wraps runtime.emu.mfma.mfma (one MFMA over a group of waves) and mfma.call_run (a fused run of
    MFMAs, executor.py) to add up the time spent in MFMAs."""

    def __init__(self):
        from isagen.runtime.emu import mfma as M
        self.module, self.seconds, self.calls = M, 0.0, 0
        for attr in ("mfma", "call_run"):
            setattr(M, attr, self._timed(getattr(M, attr)))

    def _timed(self, orig):
        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t
                self.calls += 1
        return timed

    def reset(self):
        self.seconds, self.calls = 0.0, 0


def run_size(kernel, n: int, reps: int, sanitize: bool, clock: MfmaClock, engine: str = "native") -> dict:
    import torch

    from isagen.runtime.emu import mfma as mfma_mod
    from isagen.runtime.emu import native
    from isagen.runtime.emu.device import Device

    native_ok = mfma_mod._native_ok
    if engine == "numpy":
        mfma_mod._native_ok = lambda *a: False
    elif not native.available():
        engine = "numpy"
    try:
        return _run_size(kernel, n, reps, sanitize, clock, engine, Device, torch)
    finally:
        mfma_mod._native_ok = native_ok


def _run_size(kernel, n, reps, sanitize, clock, engine, Device, torch) -> dict:
    import resource

    M = N = K = n
    g = torch.Generator().manual_seed(n)
    a = torch.randn(M, K, generator=g).bfloat16()
    b = torch.randn(K, N, generator=g).bfloat16()
    launch = dict(grid=kernel.grid(M, N), block=kernel.block, shared_bytes=kernel.shared,
                  on_error="collect")

    clock.reset()
    t0, cpu0 = time.perf_counter(), time.process_time()
    dev = Device("gfx942", sanitize=sanitize)
    mod = dev.load_module(kernel.hsaco)
    A, B, C = dev.to_device(a), dev.to_device(b), dev.alloc(M * N * 2, "C")
    reports = mod.launch(kernel.name, args=kernel.args(A, B, C, M, N, K), **launch)
    cold = time.perf_counter() - t0
    cold_cpu = time.process_time() - cpu0
    cold_stats = dict(mod.last_stats)
    cold_mfma = clock.seconds

    c = torch.from_numpy(dev.from_device(C, (M, N), np.uint16).view(np.int16)).view(torch.bfloat16).double()
    ref = a.double() @ b.double()
    correct = bool(((c - ref).abs() <= 2.0 ** -8 * ref.abs() + 1e-4 * (a.double().abs() @ b.double().abs())).all())

    warm, mfma_s, walls, cpus = [], [], [], []
    for _ in range(reps):
        clock.reset()
        t, cpu = time.perf_counter(), time.process_time()
        mod.launch(kernel.name, args=kernel.args(A, B, C, M, N, K), **launch)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - cpu)
        warm.append(mod.last_stats["seconds"])
        mfma_s.append(clock.seconds)
    st = mod.last_stats
    med = statistics.median(warm) if warm else cold_stats["seconds"]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "engine": engine, "peak_rss_mib": peak_mib,
        "M": M, "N": N, "K": K, "grid": list(st["grid"]), "block": list(st["block"]),
        "workgroups": st["workgroups"], "waves": st["waves"],
        "wave_instructions": st["wave_instructions"], "categories": st["categories"],
        "sanitize": sanitize, "reports": [str(r) for r in reports][:5], "correct": correct,
        "cold_wall_s": cold, "cold_cpu_s": cold_cpu, "cold_run_s": cold_stats["seconds"],
        "cold_mfma_s": cold_mfma,
        "warm_run_s": warm, "warm_wall_s": walls, "warm_cpu_s": cpus, "warm_mfma_s": mfma_s,
        "warm_median_s": med,
        "wave_inst_per_s": st["wave_instructions"] / med,
        "mfma_share": (statistics.median(mfma_s) / med) if mfma_s else cold_mfma / cold_stats["seconds"],
    }


def machine() -> dict:
    info = {"python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "processor": platform.processor()}
    try:
        info["loadavg_at_start"] = os.getloadavg()
    except OSError:
        pass
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def write_markdown(path: Path, res: dict) -> None:
    lines = [
        "# Emulator speed: Triton bf16 matmul on gfx942 (128x128x64 tiles, 4 waves)",
        "",
        f"Measured {res['date']} on {res['machine'].get('cpu', '?')} ({res['machine']['cpu_count']} cores, "
        f"load average {', '.join(f'{x:.1f}' for x in res['machine'].get('loadavg_at_start', ()))} at start: "
        "a shared machine, so timings carry noise), numpy " + res["machine"]["numpy"] + ".",
        f"Triton compile (not included below): {res['triton_compile_s']:.2f} s.",
        "",
        "cold = fresh device, load, decode, compile and first launch; warm = median later launch "
        "(emulator run time); CPU = the process's CPU time for the same warm launch.",
        "",
        "| size | engine | sanitizer | waves | wave-instr | cold (s) | warm (s) | warm CPU (s) | wave-instr/s (warm) "
        "| in mfma() | peak RSS (MiB) | correct |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["sizes"]:
        cpu = statistics.median(r["warm_cpu_s"]) if r["warm_cpu_s"] else r["cold_cpu_s"]
        lines.append(f"| {r['M']}^3 | {r['engine']} | {'on' if r['sanitize'] else 'off'} | {r['waves']} | "
                     f"{r['wave_instructions']:,} | {r['cold_wall_s']:.2f} | "
                     f"{r['warm_median_s']:.2f} | {cpu:.2f} | {r['wave_inst_per_s'] / 1e6:.2f} M | "
                     f"{100 * r['mfma_share']:.0f}% | {r['peak_rss_mib']:.0f} | {'yes' if r['correct'] else 'NO'} |")
    lines += ["", "Against the earlier measurements (not re-run here; warm, sanitizer off unless said): tinygrad's "
              "Python emulator on this same code object side by side on this machine (issue 19), and this "
              "emulator before the engine work (2026-11-23):", "",
              "(ratios: the earlier warm time over this run's warm wall time, and over its CPU time, which the "
              "other jobs of a loaded machine inflate less; the earlier runs were on an idle machine, wall ~ CPU)",
              "",
              "| size | tinygrad warm (s) | tinygrad cold (s) | earlier isagen warm (s) | now warm (s) | now CPU (s) "
              "| vs tinygrad (wall / CPU) | vs earlier (wall / CPU) |", "|---|---|---|---|---|---|---|---|"]
    for n in sorted({r["M"] for r in res["sizes"]}):
        now = [r for r in res["sizes"] if r["M"] == n and not r["sanitize"] and r["engine"] == res["engine"]]
        if not now:
            continue
        r = now[0]
        cpu = statistics.median(r["warm_cpu_s"]) if r["warm_cpu_s"] else r["cold_cpu_s"]
        tg, ea = TINYGRAD.get(n, {}), EARLIER.get(n, {})
        lines.append(f"| {n}^3 | {tg.get('warm_s', '-')} | {tg.get('cold_s', '-')} | {ea.get('warm_s', '-')} | "
                     f"{r['warm_median_s']:.2f} | {cpu:.2f} | "
                     + (f"{tg['warm_s'] / r['warm_median_s']:.1f}x / {tg['warm_s'] / cpu:.1f}x" if 'warm_s' in tg
                        else "-") + " | "
                     + (f"{ea['warm_s'] / r['warm_median_s']:.1f}x / {ea['warm_s'] / cpu:.1f}x" if 'warm_s' in ea
                        else "-") + " |")
    lines += ["", "The emulator before this work and this one measured side by side on one machine (bit-identical C, "
              "speed-ups 1.9-2.9x): bench/results/emu_engine_compare.md (bench/emu_engine_compare.py)."]
    lines += ["", "Instruction mix (wave-instructions) of the largest size:", ""]
    big = max(res["sizes"], key=lambda r: r["M"])
    lines += [f"- {k}: {v:,}" for k, v in sorted(big["categories"].items(), key=lambda kv: -kv[1])]
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--reps", type=int, default=3, help="warm launches per size (2048^3 and up: at most 1)")
    ap.add_argument("--sanitize-sizes", type=int, nargs="*", default=[1024],
                    help="sizes to run once more with the sanitizer on")
    ap.add_argument("--numpy-sizes", type=int, nargs="*", default=[1024],
                    help="sizes to run once more with the numpy MFMA path instead of the native kernel")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)

    from tools.triton_kernels import compile_matmul
    t = time.perf_counter()
    kernel = compile_matmul("gfx942", 128, 128, 64, 4, "bf16", aligned=True)
    compile_s = time.perf_counter() - t
    clock = MfmaClock()
    from isagen.runtime.emu import native
    res = {"engine": "native" if native.available() else "numpy", "native_why_not": native.why_not(),
           "benchmark": "emu_speed", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": machine(), "triton_compile_s": compile_s,
           "kernel": {"name": kernel.name, "tile": [kernel.block_m, kernel.block_n, kernel.block_k],
                      "num_warps": kernel.num_warps, "lds_bytes": kernel.shared, "mfma": "v_mfma_f32_32x32x8_bf16",
                      "specialisation": ("contiguous, sizes and row strides divisible by 16 "
                                         "(as the JIT compiles 512^3..2048^3)")},
           "tinygrad_earlier": TINYGRAD, "isagen_earlier": EARLIER, "sizes": []}
    eng = res["engine"]
    runs = sorted([(n, False, eng) for n in args.sizes] + [(n, True, eng) for n in args.sanitize_sizes]
                  + [(n, False, "numpy") for n in args.numpy_sizes if eng != "numpy"])
    for n, san, engine in runs:
        reps = args.reps if n < 2048 else min(args.reps, 1)
        r = run_size(kernel, n, reps, san, clock, engine)
        res["sizes"].append(r)
        print(f"{n}^3 ({engine}, sanitizer {'on' if san else 'off'}): {r['wave_instructions']:,} wave-instr, "
              f"cold {r['cold_wall_s']:.2f} s, "
              f"warm {r['warm_median_s']:.2f} s, {r['wave_inst_per_s'] / 1e6:.2f} M wave-instr/s, "
              f"mfma {100 * r['mfma_share']:.0f}%, peak RSS {r['peak_rss_mib']:.0f} MiB, correct={r['correct']}",
              flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "emu_speed.json").write_text(json.dumps(res, indent=1) + "\n")
    write_markdown(args.out / "emu_speed.md", res)
    print(f"wrote {args.out / 'emu_speed.json'} and {args.out / 'emu_speed.md'}")
    return 0 if all(r["correct"] for r in res["sizes"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
