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
in an earlier session and quoted in issue 19 (``TINYGRAD``; ``--tinygrad`` below runs it again, side
by side), and this emulator's own earlier results (``EARLIER``).  Results go to
``bench/results/emu_speed.json`` (every sample, machine facts) and ``bench/results/emu_speed.md``.

    python bench/emu_speed.py [--sizes 1024 2048 4096] [--reps 3] [--sanitize-sizes 1024] [--numpy-sizes 1024]

Every size runs with the sanitizer off (the speed figure); ``--sanitize-sizes`` are run once more
with it on (missing waits, LDS races, bounds), to show its cost.

Side by side with tinygrad's emulator (``--tinygrad PATH``; results then go to
``bench/results/emu_speed_tinygrad.json`` and ``.md`` instead, with isagen's rows of the same run):
after each size's isagen row (sanitizer off), tinygrad's Python emulator (``test/mockgpu/amd/emu.py``,
the mock GPU of its AMD backend) runs the same code object on the same inputs, grid, block, kernarg
and LDS size in a fresh process (bench/emu_tinygrad.py, which says how it is driven), cold (empty
compile cache) and warm; its C is checked against torch like isagen's.  tinygrad is an optional
dependency of this benchmark only, from source at a pinned commit (no pip packages; it needs clang)::

    # commit a9069c177a9da9cca18593edf55acd2e6073cca6 (2026-08-22)
    git clone https://github.com/tinygrad/tinygrad /tmp/tinygrad && git -C /tmp/tinygrad checkout a9069c17
    python bench/emu_speed.py --tinygrad /tmp/tinygrad [--tinygrad-sizes 1024 2048] [--tinygrad-timeout 1500]

A tinygrad size that runs past ``--tinygrad-timeout`` seconds (cold + warm) is recorded as not run,
with the reason.  At the pinned commit tinygrad's C is wrong on this kernel (its 32x32 MFMA result
layout, see ``_undo_tinygrad_mfma32_layout``); the tables say so and show that undoing that layout
makes it right, so its times are those of the same work.
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


TINYGRAD_COMMIT = "a9069c177a9da9cca18593edf55acd2e6073cca6"   # pinned: see bench/emu_tinygrad.py


def _wrong_fraction(c_bits: np.ndarray, a, b) -> float:
    """The fraction of C's elements (bf16 bits) outside the tolerance of isagen's rows against torch's
    double product of A and B."""
    import torch
    c = torch.from_numpy(c_bits.view(np.int16)).view(torch.bfloat16).double()
    ref = a.double() @ b.double()
    bad = (c - ref).abs() > 2.0 ** -8 * ref.abs() + 1e-4 * (a.double().abs() @ b.double().abs())
    return float(bad.double().mean())


def _undo_tinygrad_mfma32_layout(c_bits: np.ndarray) -> np.ndarray:
    """tinygrad's emulator (at the pinned commit) writes row ``16*(L//32) + r`` of a 32x32 MFMA's
    result to register r of lane L; AMD's layout (isagen's runtime/emu/mfma.py, checked against the
    Matrix Instruction Calculator) puts row ``8*(r//4) + 4*(L//32) + r%4`` there.  This Triton kernel
    feeds the MFMA B^T and A^T (so an MFMA row is a column of C) and stores register r of lane L at
    that AMD position, so C column ``p(L, r)`` of each 32-wide block holds the true column ``q(L, r)``.
    Undoing that permutation shows whether tinygrad's run differs from the right answer only by it."""
    p = [8 * (r // 4) + 4 * h + r % 4 for h in range(2) for r in range(16)]
    q = [16 * h + r for h in range(2) for r in range(16)]
    out = np.empty_like(c_bits)
    for blk in range(0, c_bits.shape[1], 32):
        out[:, [blk + x for x in q]] = c_bits[:, [blk + x for x in p]]
    return out


def _clang_env(workdir: Path) -> dict:
    """The environment for tinygrad's process: ``CC`` and a ``clang`` on ``PATH`` (tinygrad calls
    ``clang`` by that name for its DAZ/FTZ helper) where only versioned clangs are installed."""
    import shutil
    env = dict(os.environ)
    cc = env.get("CC") or shutil.which("clang") or shutil.which("clang-19") or shutil.which("clang-22")
    if cc is None:
        raise SystemExit("--tinygrad: no clang found (tinygrad's emulator compiles each instruction with it)")
    env["CC"] = cc
    if shutil.which("clang") is None:
        bindir = workdir / "bin"
        bindir.mkdir(exist_ok=True)
        if not (bindir / "clang").exists():
            (bindir / "clang").symlink_to(cc)
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["CACHEDB"] = str(workdir / "tinygrad-cache.db")       # fresh per size: cold compiles everything
    if Path(env["CACHEDB"]).exists():
        Path(env["CACHEDB"]).unlink()
    env.pop("PYTHONPATH", None)                                # tinygrad's own imports only
    return env


def run_tinygrad_size(kernel, n: int, reps: int, tinygrad: Path, timeout_s: float) -> dict:
    """tinygrad's emulator on the same code object, arguments and inputs as isagen's row for ``n``
    (bench/emu_tinygrad.py in a fresh process, so its imports do not mix with isagen's)."""
    import resource
    import subprocess
    import tempfile

    import torch

    from isagen.objects.codeobject import read_code_object

    co = read_code_object(kernel.hsaco)
    k = co.kernel(kernel.name)
    M = N = K = n
    g = torch.Generator().manual_seed(n)                       # the inputs of isagen's row
    a = torch.randn(M, K, generator=g).bfloat16()
    b = torch.randn(K, N, generator=g).bfloat16()
    row = {"emulator": "tinygrad", "commit": TINYGRAD_COMMIT, "M": M, "N": N, "K": K, "reps": reps}
    with tempfile.TemporaryDirectory(prefix="emu-tinygrad-") as tmp:
        w = Path(tmp)
        np.save(w / "a.npy", a.view(torch.int16).numpy().view(np.uint16))
        np.save(w / "b.npy", b.view(torch.int16).numpy().view(np.uint16))
        (w / "text.bin").write_bytes(co.text)
        kernarg = []
        for spec, val in zip(k.args, kernel.args("A", "B", "C", M, N, K)):
            kernarg.append([spec[".offset"], spec[".size"], val if isinstance(val, str) else int(val)])
        job = {"tinygrad": str(tinygrad), "commit": TINYGRAD_COMMIT, "a": str(w / "a.npy"), "b": str(w / "b.npy"),
               "c_shape": [M, N], "c_out": str(w / "c.npy"), "text": str(w / "text.bin"),
               "entry_offset": k.code_address - co.text_address, "rsrc2": k.descriptor.compute_pgm_rsrc2,
               "lds_bytes": k.descriptor.group_segment_fixed_size + kernel.shared,
               "kernarg_size": k.descriptor.kernarg_size, "kernarg": kernarg,
               "grid": list(kernel.grid(M, N)), "block": list(kernel.block), "reps": reps}
        (w / "job.json").write_text(json.dumps(job))
        t = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            p = subprocess.run([sys.executable, str(ROOT / "bench" / "emu_tinygrad.py"), str(w / "job.json")],
                               env=_clang_env(w), capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            row.update(ran=False, why=f"not run to the end: over the {timeout_s:.0f} s limit (cold + {reps} warm)")
            return row
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        row["process_wall_s"] = time.perf_counter() - t
        row["process_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        if p.returncode != 0:
            row.update(ran=False, why="tinygrad's process failed: " + (p.stderr.strip().splitlines() or ["?"])[-1])
            return row
        row.update(json.loads(p.stdout.strip().splitlines()[-1]))
        row["ran"] = True
        c = np.load(w / "c.npy")
        row["wrong_fraction"] = _wrong_fraction(c, a, b)
        row["correct"] = row["wrong_fraction"] == 0.0
        row["correct_with_mfma32_layout_fix"] = _wrong_fraction(_undo_tinygrad_mfma32_layout(c), a, b) == 0.0
    row["warm_median_s"] = statistics.median(row["warm_s"]) if row["warm_s"] else None
    return row


TINYGRAD_EMU_SHA256 = "b16551e8c6dbe901c231a98b7ce45ba510be9545b4e0c62c4eca36999c226b0d"  # its emu.py there


def check_tinygrad(path: Path) -> dict:
    """The facts of a tinygrad tree given to ``--tinygrad``: its emulator file's hash against the
    pinned commit's (a ``git archive`` export has no .git to ask), and the commit where .git exists."""
    import hashlib
    import subprocess
    emu = path / "test" / "mockgpu" / "amd" / "emu.py"
    if not emu.is_file():
        raise SystemExit(f"--tinygrad: {path} is not a tinygrad source tree (no test/mockgpu/amd/emu.py)")
    info = {"path": str(path), "pinned_commit": TINYGRAD_COMMIT,
            "emu_sha256": hashlib.sha256(emu.read_bytes()).hexdigest()}
    info["emu_matches_pinned"] = info["emu_sha256"] == TINYGRAD_EMU_SHA256
    if (path / ".git").exists():
        p = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
        info["commit"] = p.stdout.strip() or None
    if not info["emu_matches_pinned"]:
        print(f"warning: {emu} is not the pinned commit's ({TINYGRAD_COMMIT[:12]}); recording its hash",
              file=sys.stderr)
    return info


def write_tinygrad_markdown(path: Path, res: dict) -> None:
    """Append the side-by-side table: isagen's rows of this run against tinygrad's on the same sizes."""
    tg = res["tinygrad"]
    lines = ["", "## Side by side with tinygrad's emulator (same code object, same inputs, same run)", "",
             f"tinygrad {tg['pinned_commit']} (test/mockgpu/amd/emu.py sha256 {tg['emu_sha256'][:16]}..., "
             f"{'the pinned file' if tg['emu_matches_pinned'] else 'NOT the pinned file'}), run by "
             "bench/emu_tinygrad.py in its own process per size: its ``run_asm`` on the code object's machine "
             "code with the kernarg, grid, block and LDS size isagen's launch gets.  Its cold = the first "
             "``run_asm`` of a fresh process with an empty tinygrad compile cache (each distinct instruction is "
             "compiled to C with clang; the import, below, not included); its CPU includes the clang processes.  "
             "isagen's cold = fresh ``Device`` + load + first launch.  Speed-up = tinygrad's time over isagen's.",
             "",
             "| size | wave-instr | isagen cold (s) | tinygrad cold (s) [CPU] | isagen warm (s) [CPU] "
             "| tinygrad warm (s) [CPU] | speed-up warm (wall / CPU) | speed-up cold | tinygrad C vs torch "
             "| tinygrad peak RSS (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for t in tg["sizes"]:
        n = t["M"]
        rows = [r for r in res["sizes"] if r["M"] == n and not r["sanitize"] and r["engine"] == res["engine"]]
        if not rows:
            continue
        r = rows[0]
        icpu = statistics.median(r["warm_cpu_s"]) if r["warm_cpu_s"] else r["cold_cpu_s"]
        iso = f"| {n}^3 | {r['wave_instructions']:,} | {r['cold_wall_s']:.2f} | "
        if not t["ran"]:
            lines.append(iso + f"not run: {t['why']} | {r['warm_median_s']:.2f} [{icpu:.2f}] | - | - | - | - | - |")
            continue
        tw = t["warm_median_s"] if t["warm_median_s"] is not None else t["cold_s"]
        tcpu = statistics.median(t["warm_cpu_s"]) if t["warm_cpu_s"] else t["cold_cpu_s"]
        ok = ("yes" if t["correct"] else
              f"NO ({100 * t['wrong_fraction']:.0f}% of elements wrong; "
              + ("right once its 32x32 MFMA result layout is undone" if t["correct_with_mfma32_layout_fix"]
                 else "still wrong with its MFMA layout undone") + ")")
        lines.append(iso + f"{t['cold_s']:.2f} [{t['cold_cpu_s']:.2f}] | {r['warm_median_s']:.2f} [{icpu:.2f}] | "
                     f"{tw:.2f} [{tcpu:.2f}] | {tw / r['warm_median_s']:.1f}x / {tcpu / icpu:.1f}x | "
                     f"{t['cold_s'] / r['cold_wall_s']:.1f}x | {ok} | {t['peak_rss_mib']:.0f} |")
    end = res["machine"].get("loadavg_at_end")
    if end:
        lines += ["", f"Load average at the end of the run: {', '.join(f'{x:.1f}' for x in end)} (1, 5, 15 min): the "
                  "other jobs of the machine slow both emulators' wall times; the CPU times are the steadier "
                  "comparison."]
    imports = [t["import_s"] for t in tg["sizes"] if t.get("ran")]
    if imports:
        lines += ["", f"Importing tinygrad's emulator took {min(imports):.2f}-{max(imports):.2f} s per process "
                  "(not in its cold column)."]
    lines += ["", "tinygrad's result is wrong on this kernel at the pinned commit: its ``v_mfma_f32_32x32x8_bf16`` "
              "writes row ``16*(L//32) + r`` of the 32x32 result to register r of lane L, where AMD's layout "
              "(runtime/emu/mfma.py, checked against the Matrix Instruction Calculator; isagen's C matches torch) "
              "puts row ``8*(r//4) + 4*(L//32) + r%4``.  The column marked 'right once ... undone' applies the "
              "inverse permutation to tinygrad's C and compares again: the layout is its only difference here, so "
              "the instructions it executes, and their cost, are the same as a correct run's."]
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")


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
        "(emulator run time); CPU = the process's CPU time for the same warm launch.  in mfma() = the share "
        "of the warm run inside ``mfma.mfma`` and ``mfma.call_run``; the MFMAs the native block engine runs "
        "inside its generated code (runtime/emu/cgen.py, sanitizer off, once it is built) are not counted "
        "there, so with the engine in use the share is ~0% (the MFMAs are not gone).",
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
    ap.add_argument("--tinygrad", type=Path, metavar="PATH",
                    help="a tinygrad source tree at the pinned commit: run its emulator on the same code object "
                         "beside each size (results then go to emu_speed_tinygrad.json/.md)")
    ap.add_argument("--tinygrad-sizes", type=int, nargs="*", default=None,
                    help="sizes to run on tinygrad's emulator (default: --sizes)")
    ap.add_argument("--tinygrad-timeout", type=float, default=1500.0,
                    help="seconds allowed to tinygrad's process per size (cold + warm); over it the size is "
                         "recorded as not run")
    args = ap.parse_args(argv)
    tg_info = check_tinygrad(args.tinygrad) if args.tinygrad else None

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
        if tg_info is not None and not san and engine == eng:
            res.setdefault("tinygrad", {**tg_info, "sizes": []})
            tg_sizes = args.sizes if args.tinygrad_sizes is None else args.tinygrad_sizes
            if n in tg_sizes:
                tr = run_tinygrad_size(kernel, n, reps, args.tinygrad, args.tinygrad_timeout)
            else:
                tr = {"emulator": "tinygrad", "M": n, "N": n, "K": n, "ran": False, "why": "not in --tinygrad-sizes"}
            res["tinygrad"]["sizes"].append(tr)
            print(f"{n}^3 tinygrad: " + (f"cold {tr['cold_s']:.2f} s (CPU {tr['cold_cpu_s']:.2f}), warm "
                                         f"{tr['warm_median_s'] or float('nan'):.2f} s, correct={tr['correct']} "
                                         f"(with its 32x32 MFMA layout undone: {tr['correct_with_mfma32_layout_fix']})"
                                         if tr["ran"] else f"not run: {tr['why']}"), flush=True)
        print(f"{n}^3 ({engine}, sanitizer {'on' if san else 'off'}): {r['wave_instructions']:,} wave-instr, "
              f"cold {r['cold_wall_s']:.2f} s, "
              f"warm {r['warm_median_s']:.2f} s, {r['wave_inst_per_s'] / 1e6:.2f} M wave-instr/s, "
              f"mfma {100 * r['mfma_share']:.0f}%, peak RSS {r['peak_rss_mib']:.0f} MiB, correct={r['correct']}",
              flush=True)
    try:
        res["machine"]["loadavg_at_end"] = os.getloadavg()
    except OSError:
        pass
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "emu_speed_tinygrad" if tg_info is not None else "emu_speed"
    (args.out / f"{stem}.json").write_text(json.dumps(res, indent=1) + "\n")
    write_markdown(args.out / f"{stem}.md", res)
    if tg_info is not None:
        write_tinygrad_markdown(args.out / f"{stem}.md", res)
    print(f"wrote {args.out / (stem + '.json')} and {args.out / (stem + '.md')}")
    return 0 if all(r["correct"] for r in res["sizes"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
