"""The sanitizer's cost on the emulator's cuda engine (CuPy on an NVIDIA GPU).

The Triton gfx942 bf16 matmul of bench/emu_speed.py (128x128x64 tiles, 4 waves) at ``--sizes``, on the cuda
engine with the sanitizer off (the engine's defaults: large batches, CUDA graphs) and on (its bookkeeping is
host-side numpy fed from the device: CPU-engine batch sizes, no graphs), each cold (fresh Device, load, first
launch) and warm (median of ``--reps`` more launches); C of the two runs compared bit for bit, and against
torch (bf16 tolerance); the reports of the sanitized run (none expected).  Inputs are CUDA torch tensors
(DLPack).  Results: ``bench/results/emu_san_gpu.json`` and ``.md``.

    python bench/emu_san_gpu.py [--sizes 256 1024] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def run(kernel, n: int, sanitize: bool, reps: int, A, B) -> dict:
    import torch

    from isagen.runtime.emu import Device
    from tools import emu_cuda_fixtures as F
    t0 = time.perf_counter()
    c0 = time.process_time()
    dev = Device("gfx942", sanitize=sanitize, array_module="cuda")
    mod, c, kw = F.run_triton(dev, kernel, A, B, n, n, n)
    cold, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
    warm, warm_cpu = [], []
    for _ in range(reps):
        t, cc = time.perf_counter(), time.process_time()
        mod.launch(kernel.name, **kw)
        warm.append(time.perf_counter() - t)
        warm_cpu.append(time.process_time() - cc)
    C = torch.from_dlpack(dev.to_array(c, (n, n), np.int16)).clone()
    st = mod.last_stats
    return {"sanitize": sanitize, "cold_s": cold, "cold_process_cpu_s": cold_cpu, "warm_s": warm,
            "warm_process_cpu_s": warm_cpu, "warm_median_s": statistics.median(warm) if warm else None,
            "waves": st["waves"], "wave_instructions": st["wave_instructions"],
            "reports": st["reports"], "C": C}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[256, 1024])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "emu_san_gpu"))
    a = ap.parse_args()
    import torch

    from tools import emu_cuda_fixtures as F
    kernel = F.triton_matmul()
    rows = []
    for n in a.sizes:
        g = torch.Generator().manual_seed(n)
        A = torch.randn(n, n, generator=g).bfloat16().view(torch.int16).cuda()
        B = torch.randn(n, n, generator=g).bfloat16().view(torch.int16).cuda()
        off = run(kernel, n, False, a.reps, A, B)
        on = run(kernel, n, True, a.reps, A, B)
        ref = A.view(torch.bfloat16).double() @ B.view(torch.bfloat16).double()
        absref = A.view(torch.bfloat16).double().abs() @ B.view(torch.bfloat16).double().abs()
        out = on["C"].view(torch.bfloat16).double()
        row = {"kernel": "triton_matmul_gfx942", "M": n, "N": n, "K": n,
               "same_bits_sanitized_and_not": bool(torch.equal(off.pop("C"), on.pop("C"))),
               "correct_vs_torch": bool(((out - ref).abs() <= 2.0 ** -8 * ref.abs() + 1e-4 * absref).all()),
               "off": off, "on": on,
               "warm_ratio_on_off": on["warm_median_s"] / off["warm_median_s"] if a.reps else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
    dev = torch.cuda.get_device_name()
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": dev,
            "cpu_count": __import__("os").cpu_count(), "python": platform.python_version(),
            "reps": a.reps}
    Path(a.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# Sanitizer cost on the cuda engine ({dev}, {meta['date']})", "",
             "`python bench/emu_san_gpu.py " + " ".join(sys.argv[1:]) + "`: the Triton gfx942 bf16 matmul "
             "(128x128x64 tiles, 4 waves) on the cuda engine, sanitizer off (large batches, CUDA graphs) and "
             "on (host-side bookkeeping, CPU-engine batches, no graphs); wall seconds, warm = median of "
             f"{a.reps} launches after the first.", "",
             "| size | off cold s | off warm s | on cold s | on warm s | on/off warm | on warm process CPU s "
             "| reports on | same C | C vs torch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        off, on = r["off"], r["on"]
        lines.append(f"| {r['M']}^3 | {off['cold_s']:.2f} | {off['warm_median_s']:.3f} | {on['cold_s']:.2f} | "
                     f"{on['warm_median_s']:.3f} | {r['warm_ratio_on_off']:.1f}x | "
                     f"{statistics.median(on['warm_process_cpu_s']):.2f} | {on['reports']} | "
                     f"{r['same_bits_sanitized_and_not']} | {r['correct_vs_torch']} |")
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
