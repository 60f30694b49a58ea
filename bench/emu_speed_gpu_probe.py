"""Why a warm launch of the Triton gfx942 bf16 matmul is slower after other launches in one process (the
diagnostic behind bench/emu_speed_gpu.py's process-per-size rows).

Runs the rows ``--sizes`` in one process as bench/emu_speed_gpu.py does (fresh Device per row; the first
with the CPU-engine comparison when ``--bitwise``) and, for each warm launch of the last row, records:
wall and process CPU time, the time Python's cyclic garbage collector ran during the launch (``gc.callbacks``)
and how many collections of each generation, the objects it tracks, the CUDA graphs and graph memory
pools still alive (weak references), CuPy's default pool.  Then, on the last row: one launch under
cProfile (top functions by own time), launches after ``gc.collect()``, with ``gc.disable()`` and after
``gc.freeze()``.  Prints one JSON line per measurement and writes ``--out``.

    python bench/emu_speed_gpu_probe.py --sizes 1024 2048 4096 --bitwise --out probe.json
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import sys
import time
import weakref
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

GC = {"t": 0.0, "n": [0, 0, 0], "start": 0.0, "collected": 0}


def _gc_cb(phase, info):
    if phase == "start":
        GC["start"] = time.perf_counter()
    else:
        GC["t"] += time.perf_counter() - GC["start"]
        GC["n"][info["generation"]] += 1
        GC["collected"] += info.get("collected", 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--bitwise", action="store_true", help="the CPU-engine comparison at the first size")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--experiments", action="store_true", help="cProfile and the gc experiments at the last size")
    ap.add_argument("--out", type=Path, default=Path("emu_speed_gpu_probe.json"))
    args = ap.parse_args(argv)
    import cupy as cp  # type: ignore[import-not-found]
    import torch

    from isagen.runtime.emu import Device, cuda_graph
    from tools import emu_cuda_fixtures as F
    graphs: weakref.WeakSet = weakref.WeakSet()
    g_init = cuda_graph._Graph.__init__

    def init(self, *a):
        g_init(self, *a)
        graphs.add(self)
    cuda_graph._Graph.__init__ = init
    gc.callbacks.append(_gc_cb)
    kernel = F.triton_matmul()
    out: dict = {"sizes": args.sizes, "bitwise": args.bitwise, "rows": []}

    def state():
        cp.cuda.Device().synchronize()
        return {"gc_tracked": len(gc.get_objects()), "graphs_alive": len(graphs),
                "graph_pool_mib_captured_so_far": cuda_graph.STATS["graph_pool_bytes"] / 2**20,
                "default_pool_mib": cp.get_default_memory_pool().total_bytes() / 2**20,
                "default_pool_used_mib": cp.get_default_memory_pool().used_bytes() / 2**20,
                "gpu_free_mib": cp.cuda.runtime.memGetInfo()[0] / 2**20}

    def timed(mod, kw, label):
        s0 = state()
        GC.update(t=0.0, n=[0, 0, 0], collected=0)
        g0 = dict(cuda_graph.STATS)
        t, c = time.perf_counter(), time.process_time()
        mod.launch(kernel.name, **kw)
        cp.cuda.Device().synchronize()
        r = {"label": label, "wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
             "gc_s": GC["t"], "gc_collections": list(GC["n"]), "gc_collected": GC["collected"], "before": s0,
             "graphs": {k: v - g0[k] for k, v in cuda_graph.STATS.items()}}
        print(json.dumps(r), flush=True)
        out["rows"].append(r)
        return r

    for i, n in enumerate(args.sizes):
        last = i == len(args.sizes) - 1
        g = torch.Generator().manual_seed(n)
        A = torch.randn(n, n, generator=g).bfloat16()
        B = torch.randn(n, n, generator=g).bfloat16()
        Ad, Bd = A.view(torch.int16).cuda(), B.view(torch.int16).cuda()
        cp.get_default_memory_pool().free_all_blocks()
        t = time.perf_counter()
        dev = Device("gfx942", sanitize=False, array_module="cuda")
        mod, c, kw = F.run_triton(dev, kernel, Ad, Bd, n, n, n)
        out["rows"].append({"label": f"{n} cold", "wall_s": time.perf_counter() - t})
        print(json.dumps(out["rows"][-1]), flush=True)
        for _ in range(args.reps):
            timed(mod, kw, f"{n} warm")
        import os
        os.environ[cuda_graph.ENV] = "0"
        for _ in range(args.reps if last else 1):
            timed(mod, kw, f"{n} warm graphs off")
        del os.environ[cuda_graph.ENV]
        if last and args.experiments:
            pr = cProfile.Profile()
            pr.enable()
            timed(mod, kw, f"{n} under cProfile")
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
            out["cprofile_tottime"] = s.getvalue()
            print(s.getvalue()[:5000], flush=True)
            t = time.perf_counter()
            got = gc.collect()
            out["rows"].append({"label": "gc.collect()", "wall_s": time.perf_counter() - t, "collected": got,
                                "after": state()})
            print(json.dumps(out["rows"][-1]), flush=True)
            for _ in range(2):
                timed(mod, kw, f"{n} after gc.collect")
            gc.disable()
            for _ in range(2):
                timed(mod, kw, f"{n} gc disabled")
            gc.enable()
            gc.collect()
            gc.freeze()
            for _ in range(2):
                timed(mod, kw, f"{n} after gc.freeze")
            gc.unfreeze()
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
            for _ in range(2):
                timed(mod, kw, f"{n} after freeing CuPy's pools")
            dev2 = Device("gfx942", sanitize=False, array_module="cuda")
            mod2, _, kw2 = F.run_triton(dev2, kernel, Ad, Bd, n, n, n)
            for _ in range(2):
                timed(mod2, kw2, f"{n} fresh Device again")
            del dev2, mod2, kw2
        if i == 0 and args.bitwise:
            host = Device("gfx942", sanitize=False)
            t = time.perf_counter()
            _, hc, _ = F.run_triton(host, kernel, A.view(torch.int16).numpy(), B.view(torch.int16).numpy(), n, n, n)
            same = bool(np.array_equal(host.from_device(hc, (n * n,), np.int16),
                                       torch.from_dlpack(dev.to_array(c, (n, n), np.int16)).cpu().numpy().ravel()))
            out["rows"].append({"label": f"{n} cpu engine", "wall_s": time.perf_counter() - t, "same": same})
            print(json.dumps(out["rows"][-1]), flush=True)
            del host
        del dev, mod, c, kw
        out["rows"].append({"label": f"after row {n}", "state": state()})
        print(json.dumps(out["rows"][-1]), flush=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
