"""What the emulator's sanitizer costs: the Triton gfx942 bf16 matmul of bench/emu_speed.py (128x128x64
tiles, 4 waves), warm launches with the sanitizer off and on, in one process.

    python bench/emu_sanitizer_cost.py SIZE [REPS]

prints one line per setting: median wall and CPU time (``time.process_time``: every thread of the
process, the native MFMA kernel's helpers included) of REPS warm launches, the reports, whether C is
right against torch, and the load average.  To compare two checkouts, run it from each, alternating,
on the same machine (results: bench/results/emu_sanitizer_cost.md).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> None:
    import torch

    from isagen.runtime.emu.device import Device
    from tools.triton_kernels import compile_matmul

    n = int(argv[0])
    reps = int(argv[1]) if len(argv) > 1 else 3
    kernel = compile_matmul("gfx942", 128, 128, 64, 4, "bf16", aligned=True)
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=g).bfloat16()
    b = torch.randn(n, n, generator=g).bfloat16()
    launch = dict(grid=kernel.grid(n, n), block=kernel.block, shared_bytes=kernel.shared, on_error="collect")
    ref = a.double() @ b.double()
    tol = 2.0 ** -8 * ref.abs() + 1e-4 * (a.double().abs() @ b.double().abs())
    for san in (False, True):
        dev = Device("gfx942", sanitize=san)
        mod = dev.load_module(kernel.hsaco)
        A, B, C = dev.to_device(a), dev.to_device(b), dev.alloc(n * n * 2, "C")
        mod.launch(kernel.name, args=kernel.args(A, B, C, n, n, n), **launch)     # cold
        walls, cpus = [], []
        reports: list = []
        for _ in range(reps):
            t, c = time.perf_counter(), time.process_time()
            reports = mod.launch(kernel.name, args=kernel.args(A, B, C, n, n, n), **launch)
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        out = torch.from_numpy(dev.from_device(C, (n, n), np.uint16).view(np.int16)).view(torch.bfloat16).double()
        ok = bool(((out - ref).abs() <= tol).all())
        print(f"{n}^3 sanitizer {'on ' if san else 'off'}: wall {statistics.median(walls):.3f} s, CPU "
              f"{statistics.median(cpus):.3f} s (walls {' '.join(f'{x:.2f}' for x in walls)}; CPU "
              f"{' '.join(f'{x:.2f}' for x in cpus)}), reports {len(reports)}, correct {ok}, load "
              f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
