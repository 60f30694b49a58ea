"""Side-by-side emulator timings of two source trees on one machine, without Triton there: the Triton
bf16 matmul of bench/emu_speed.py (gfx942, 128x128x64 tiles, 4 waves) from a prebuilt code object.

    python bench/emu_engine_compare.py TREE SIZES SANITIZE [numpy] [--co DIR]

TREE: a checkout whose ``isagen`` is imported (e.g. this one, and ``git archive <commit>`` of an earlier
one); SIZES: comma-separated (1024,2048); SANITIZE: 0/1; ``numpy``: the numpy MFMA path, MFMA by MFMA
(no native kernel, no fused runs).  The code object is ``DIR/kernel.co`` with ``DIR/kernel.json``
({name, shared, num_warps, block_m, block_n}); write them with ``--write DIR`` on a machine with Triton.
One JSON line per size: cold and best warm wall/CPU seconds, peak RSS, whether C matches torch, and
an md5 of C's bits (equal across trees and engines = bit-identical results).  Results of the run on
the GPU lender's host CPU: bench/results/emu_engine_compare.md.
"""
import hashlib
import json
import os
import resource
import sys
import time

if sys.argv[1] == "--write":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tools.triton_kernels import compile_matmul
    k = compile_matmul("gfx942", 128, 128, 64, 4, "bf16", aligned=True)
    os.makedirs(sys.argv[2], exist_ok=True)
    open(os.path.join(sys.argv[2], "kernel.co"), "wb").write(k.hsaco)
    json.dump(dict(name=k.name, shared=k.shared, num_warps=k.num_warps, block_m=k.block_m, block_n=k.block_n),
              open(os.path.join(sys.argv[2], "kernel.json"), "w"))
    raise SystemExit(0)
co_dir = sys.argv[sys.argv.index("--co") + 1] if "--co" in sys.argv else os.path.dirname(os.path.abspath(__file__))
argv = [a for i, a in enumerate(sys.argv) if a != "--co" and (i == 0 or sys.argv[i - 1] != "--co")]
tree = argv[1]; sizes = [int(x) for x in argv[2].split(",")]
san = argv[3] == "1"
engine = argv[4] if len(argv) > 4 else "default"
sys.path.insert(0, tree)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from isagen.runtime.emu.device import Device  # noqa: E402

meta = json.load(open(os.path.join(co_dir, "kernel.json")))
co = open(os.path.join(co_dir, "kernel.co"), "rb").read()
if engine == "numpy":
    from isagen.runtime.emu import executor as E
    from isagen.runtime.emu import mfma as M
    M._native_ok = lambda *a: False
    E._fuse_mfma_runs = lambda steps: [s.fn for s in steps]
for n in sizes:
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=g).bfloat16()
    b = torch.randn(n, n, generator=g).bfloat16()

    def args(A, B, C, n=n):
        i = np.int32(n)
        return [A, B, C, i, i, i, i, i, i, np.uint64(0), np.uint64(0)]
    L = dict(grid=(-(-n // meta["block_m"]), -(-n // meta["block_n"]), 1), block=(64 * meta["num_warps"], 1, 1),
             shared_bytes=meta["shared"], on_error="collect")
    t0 = time.perf_counter()
    dev = Device("gfx942", sanitize=san)
    mod = dev.load_module(co)
    A, B, C = dev.to_device(a.view(torch.int16)), dev.to_device(b.view(torch.int16)), dev.alloc(n * n * 2, "C")
    mod.launch(meta["name"], args=args(A, B, C), **L)
    cold = time.perf_counter() - t0
    reps = 3 if n <= 1024 else 1
    best = (1e9, 1e9)
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        mod.launch(meta["name"], args=args(A, B, C), **L)
        best = min(best, (time.perf_counter() - t, time.process_time() - c))
    out = dev.from_device(C, (n, n), np.uint16)
    cc = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16).double()
    ref = a.double() @ b.double()
    ok = bool(((cc - ref).abs() <= 2.0 ** -8 * ref.abs() + 1e-4 * (a.double().abs() @ b.double().abs())).all())
    print(json.dumps(dict(tree=os.path.basename(tree.rstrip("/")) or tree, engine=engine, n=n, sanitize=san,
                          cold_s=round(cold, 3), warm_s=round(best[0], 3), warm_cpu_s=round(best[1], 3),
                          waves=mod.last_stats["waves"],
                          wave_instr=mod.last_stats["wave_instructions"],
                          peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                          correct=ok, md5=hashlib.md5(out.tobytes()).hexdigest()[:12])), flush=True)
