"""Where a cuda-engine run of the Triton gfx942 bf16 matmul spends its time (the profile behind the
speed work on the cuda engine; bench/emu_speed_gpu.py has the timings themselves).

After one untimed launch (compiles, CuPy's kernel cache), three warm launches:

1. plain, timed (the reference figure of this run);
2. under cProfile: the host functions by own time (Python and the CuPy calls' host side);
3. every block's handlers timed one by one with a device synchronize before and after each
   (``--per-step``), summed by instruction name: host + device time per instruction kind, plus how
   often groups of waves ran a block (all waves at one PC, or a subset: branched apart).

With ``--spec NAME [--shape k=v ...]`` it profiles a bundled spec instead (``isagen run SPEC --backend emu``'s
plan and execute on the cuda engine, its ``shapes:`` unless ``--shape`` overrides some): one run with
graphs on (timed), one with every handler timed as in 3.

Writes ``--out`` (JSON) and prints a summary.

    python bench/emu_profile_gpu.py [--size 4096] [--out prof.json]
    python bench/emu_profile_gpu.py --spec attention_bf16 --shape b=1 h=16 [--out prof.json]
"""

from __future__ import annotations

import argparse
import contextlib
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
    ap.add_argument("--spec", help="profile this bundled spec instead of the Triton matmul")
    ap.add_argument("--shape", nargs="*", default=[], help="k=v sizes overriding the spec's shapes")
    args = ap.parse_args(argv)
    if args.spec:
        return profile_spec(args)
    import cupy as cp  # type: ignore[import-not-found]
    import torch

    from isagen.runtime.emu import Device
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
        t = time.perf_counter()
        with per_step() as steps:
            mod.launch(kernel.name, **kw)
        out["per_step_warm_s"] = time.perf_counter() - t
        out.update(steps)
        _print_steps(out)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _print_steps(out: dict) -> None:
    print(f"per-step run {out['per_step_warm_s']:.2f} s, handler calls {out['handler_calls']}")
    for r in out["per_step"][:40]:
        print(f"  {r['name']:40s} {r['calls']:7d} {r['s']:.3f} s  {1e6 * r['s'] / max(r['calls'], 1):.0f} us")


@contextlib.contextmanager
def per_step():
    """Every block's handlers timed one by one (device synchronized around each), summed by instruction
    name, while the block is active; yields a dict filled with ``per_step`` and ``handler_calls`` on exit."""
    import cupy as cp  # type: ignore[import-not-found]

    from isagen.runtime.emu import executor as E
    res: dict = {}
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
            # one handler per step (a fused MFMA run of the CPU engine's native kernel runs its steps'
            # handlers one by one on the cuda engine anyway)
            fns = [s.fn for s in b.steps]
            wrapped = []
            for lab, fn in zip(names, fns):
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
    try:
        yield res
    finally:
        E.run_batch = orig
        if D_run is not None:
            D.run_batch = D_run
        top = sorted(by_name.items(), key=lambda kv: -kv[1][1])
        res["per_step"] = [{"name": k, "calls": v[0], "s": v[1]} for k, v in top]
        res["handler_calls"] = groups


def profile_spec(args) -> int:
    """--spec: the spec's run through isagen run's plan and execute, graphs on, then every handler timed."""
    import os

    from isagen.runtime.emu import cuda_graph
    from isagen.runtime.run import execute, load_spec, plan_run, resolve_spec
    os.environ["ISAGEN_EMU_DEVICE"] = "cuda"
    path = resolve_spec(args.spec)
    shapes = {k: int(v) for k, v in load_spec(path).shapes.items()}
    shapes.update({k: int(v) for k, v in (a.split("=", 1) for a in args.shape)})
    plan = plan_run(path, backend="emu", shapes=shapes)
    out: dict = {"spec": args.spec, "sizes": plan.sizes, "grid": list(plan.grid)}
    t = time.perf_counter()
    rep = execute(plan, iters=0)
    out.update(graphs_s=time.perf_counter() - t, graphs_emu_s=rep.time_ms / 1e3, ok=bool(rep.ok),
               graph_stats=dict(cuda_graph.STATS), capture_failed=dict(cuda_graph.FAILED))
    print(json.dumps({k: out[k] for k in ("spec", "sizes", "grid", "graphs_s", "graphs_emu_s", "ok")}), flush=True)
    if not args.no_per_step:
        os.environ[cuda_graph.ENV] = "0"
        t = time.perf_counter()
        with per_step() as steps:
            rep = execute(plan, iters=0)
        out["per_step_warm_s"] = time.perf_counter() - t
        out["per_step_emu_s"] = rep.time_ms / 1e3
        out.update(steps)
        _print_steps(out)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
