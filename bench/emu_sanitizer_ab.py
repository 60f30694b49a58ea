"""The emulator sanitizer's cost with both settings in one process: the Triton gfx942 bf16 matmul of
bench/emu_speed.py (128x128x64 tiles, 4 waves), a device with the sanitizer off and one with it on,
their launches alternating (off, on, off, on ...) so that both see the same machine moments.

    python bench/emu_sanitizer_ab.py CHECKOUT SIZE [REPS]

CHECKOUT is the tree whose ``isagen`` is imported (so two checkouts can be compared from one copy of this
script, run alternately).  Prints one line: the checkout's name, median (and minimum) wall time of REPS
launches per setting, the median CPU time (``time.process_time``, every thread), the on/off ratios and
the load average.  Results: bench/results/emu_sanitizer_cost.md.
"""

from __future__ import annotations

import os
import statistics
import sys
import time


def main(argv: list[str]) -> None:
    root, n = argv[0], int(argv[1])
    reps = int(argv[2]) if len(argv) > 2 else 15
    sys.path.insert(0, root)
    import torch

    from isagen.runtime.emu.device import Device
    from tools.triton_kernels import compile_matmul

    kernel = compile_matmul("gfx942", 128, 128, 64, 4, "bf16", aligned=True)
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=g).bfloat16()
    b = torch.randn(n, n, generator=g).bfloat16()
    launch = dict(grid=kernel.grid(n, n), block=kernel.block, shared_bytes=kernel.shared, on_error="collect")
    mods = {}
    for san in (False, True):
        dev = Device("gfx942", sanitize=san)
        mod = dev.load_module(kernel.hsaco)
        A, B, C = dev.to_device(a), dev.to_device(b), dev.alloc(n * n * 2, "C")
        args = kernel.args(A, B, C, n, n, n)
        for _ in range(2):                                     # cold, then the memo learning
            mod.launch(kernel.name, args=args, **launch)
        mods[san] = (mod, args)
    wall: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(reps):
        for san in (False, True):
            mod, args = mods[san]
            t, c = time.perf_counter(), time.process_time()
            reports = mod.launch(kernel.name, args=args, **launch)
            wall[san].append(time.perf_counter() - t)
            cpu[san].append(time.process_time() - c)
            assert not reports, reports
    med = {k: statistics.median(v) for k, v in wall.items()}
    low = {k: min(v) for k, v in wall.items()}
    mc = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"{os.path.basename(root.rstrip('/')):8s} {n}^3 off {med[False] * 1e3:6.1f} ms (min {low[False] * 1e3:6.1f}, "
          f"cpu {mc[False] * 1e3:6.1f}) on {med[True] * 1e3:6.1f} ms (min {low[True] * 1e3:6.1f}, cpu "
          f"{mc[True] * 1e3:6.1f})  ratio med {med[True] / med[False]:.2f} min {low[True] / low[False]:.2f} "
          f"cpu {mc[True] / mc[False]:.2f}  load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
