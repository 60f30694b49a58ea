"""Where a cuda-engine run of the Triton gfx942 bf16 matmul spends its time (the profile behind the
speed work on the cuda engine; bench/emu_speed_gpu.py has the timings themselves).

After one untimed launch (compiles, CuPy's kernel cache), three warm launches:

1. plain, timed (the reference figure of this run);
2. under cProfile: the host functions by own time (Python and the CuPy calls' host side);
3. every block's handlers timed one by one with a device synchronize before and after each
   (``--per-step``), summed by instruction name: host + device time per instruction kind, plus how
   often groups of waves ran a block (all waves at one PC, or a subset: branched apart).

Writes ``--out`` (JSON) and prints a summary.

    python bench/emu_profile_gpu.py [--size 4096] [--out prof.json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=Path("emu_profile_gpu.json"))
    ap.add_argument("--no-per-step", action="store_true")
    args = ap.parse_args(argv)
    import cupy as cp  # type: ignore[import-not-found]
    import torch

    from isagen.runtime.emu import Device
    from isagen.runtime.emu import executor as E
    from tools import emu_cuda_fixtures as F
    n = args.size
    kernel = F.triton_matmul()
    g = torch.Generator().manual_seed(n)
    A = torch.randn(n, n, generator=g).bfloat16().view(torch.int16).cuda()
    B = torch.randn(n, n, generator=g).bfloat16().view(torch.int16).cuda()
    dev = Device("gfx942", sanitize=False, array_module="cuda")
    t = time.perf_counter()
    mod, c, kw = F.run_triton(dev, kernel, A, B, n, n, n)
    out: dict = {"size": n, "cold_s": time.perf_counter() - t}
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    mod.launch(kernel.name, **kw)
    cp.cuda.Device().synchronize()
    out["warm_s"] = time.perf_counter() - t
    from isagen.runtime.emu import cuda_graph
    out["graph_stats_first_warm"] = dict(cuda_graph.STATS)
    out["capture_failed_by_name"] = dict(cuda_graph.FAILED)
    out["capture_failed_why"] = dict(cuda_graph.WHY)
    print("graphs", cuda_graph.STATS, cuda_graph.FAILED, flush=True)
    for k_, v_ in cuda_graph.WHY.items():
        print("  why", k_, v_, flush=True)
    out["stats"] = {k: v for k, v in mod.last_stats.items() if isinstance(v, (int, float, str))}
    print("warm", out["warm_s"], flush=True)
    import os
    os.environ[cuda_graph.ENV] = "0"
    t = time.perf_counter()
    mod.launch(kernel.name, **kw)
    cp.cuda.Device().synchronize()
    out["warm_no_graphs_s"] = time.perf_counter() - t
    del os.environ[cuda_graph.ENV]
    print("warm without graphs", out["warm_no_graphs_s"], flush=True)

    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    mod.launch(kernel.name, **kw)
    cp.cuda.Device().synchronize()
    pr.disable()
    out["cprofile_warm_s"] = time.perf_counter() - t
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(40)
    out["cprofile_tottime"] = s.getvalue()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(40)
    out["cprofile_cumtime"] = s.getvalue()
    print(out["cprofile_tottime"][:6000], flush=True)

    if not args.no_per_step:
        os.environ[cuda_graph.ENV] = "0"      # every handler plain: timed one by one
        by_name: dict = {}
        seen: set = set()
        groups = {"all": 0, "subset": 0}
        orig = E.run_batch

        def timed_batch(prog, st, rc):
            for b in prog._blocks.values():
                if id(b) in seen:
                    continue
                seen.add(id(b))
                names = [s.inst.name for s in b.steps]
                fns = list(b.fns)
                # fused handlers (MFMA runs) cover several steps: name them by their first step's kind
                label = names if len(fns) == len(names) else [f"fused:{names[0]}"] * len(fns)
                wrapped = []
                for lab, fn in zip(label, fns):
                    def w(st_, ws, fn=fn, lab=lab):
                        cp.cuda.Device().synchronize()
                        t0 = time.perf_counter()
                        fn(st_, ws)
                        cp.cuda.Device().synchronize()
                        e = by_name.setdefault(lab, [0, 0.0])
                        e[0] += 1
                        e[1] += time.perf_counter() - t0
                        groups["all" if isinstance(ws, slice) else "subset"] += 1
                    wrapped.append(w)
                b.fns = wrapped
            return orig(prog, st, rc)
        E.run_batch = timed_batch
        import isagen.runtime.emu.dispatch as D
        D_run = getattr(D, "run_batch", None)
        if D_run is not None:
            D.run_batch = timed_batch
        t = time.perf_counter()
        mod.launch(kernel.name, **kw)
        out["per_step_warm_s"] = time.perf_counter() - t
        top = sorted(by_name.items(), key=lambda kv: -kv[1][1])
        out["per_step"] = [{"name": k, "calls": v[0], "s": v[1]} for k, v in top]
        out["handler_calls"] = groups
        print(f"per-step run {out['per_step_warm_s']:.2f} s, handler calls {groups}")
        for r in out["per_step"][:40]:
            print(f"  {r['name']:40s} {r['calls']:7d} {r['s']:.3f} s  {1e6 * r['s'] / max(r['calls'], 1):.0f} us")
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
