"""The emulator's cuda engine (CuPy on an NVIDIA GPU) on real GEMMs, sanitizer off.

* the Triton gfx942 bf16 matmul of bench/emu_speed.py (128x128x64 tiles, 4 waves) at ``--triton-sizes``:
  cold (fresh Device + load + first launch) and warm (median of ``--reps`` launches) run times, C
  against torch (bf16 tolerance) and, at ``--bitwise-sizes``, against the CPU engine bit for bit;
* isagen's ``gemm_bf16`` (specs/gemm_bf16.yaml: 256x256 tiles, 8 waves, C = A·Bᵀ) on gfx942 and gfx950
  at ``--gemm-sizes``: one launch each (cold: it includes decoding and compiling the handlers), C
  against torch, and the CPU engine bit for bit at ``--bitwise-sizes``;
* the GPU memory the CuPy memory pool holds after each run (it keeps every block it ever allocated
  unless freed, so this is the run's peak of live arrays, rounded to the pool's blocks).

Inputs are torch CUDA tensors (handed to the emulator through DLPack, no host copy); the code objects
come from ``$ISAGEN_EMU_CUDA_FIXTURES`` or are compiled (tools/emu_cuda_fixtures.py).  Results:
``bench/results/emu_speed_gpu.json`` and ``.md``.

    python bench/emu_speed_gpu.py [--triton-sizes 1024 2048 4096] [--gemm-sizes 1024 8192] [--reps 2]
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


def _pool_mib():
    import cupy as cp  # type: ignore[import-not-found]
    cp.cuda.Device().synchronize()
    return cp.get_default_memory_pool().total_bytes() / 2**20


def _reset_pool():
    import cupy as cp  # type: ignore[import-not-found]
    cp.get_default_memory_pool().free_all_blocks()


def _check(C, ref, absref):
    return bool(((C - ref).abs() <= 2.0 ** -8 * ref.abs() + 1e-4 * absref).all())


def triton_row(kernel, n: int, reps: int, bitwise: bool) -> dict:
    import torch

    from isagen.runtime.emu import Device
    from tools import emu_cuda_fixtures as F
    g = torch.Generator().manual_seed(n)
    A = torch.randn(n, n, generator=g).bfloat16()
    B = torch.randn(n, n, generator=g).bfloat16()
    Ad, Bd = A.view(torch.int16).cuda(), B.view(torch.int16).cuda()
    _reset_pool()
    t0 = time.perf_counter()
    dev = Device("gfx942", sanitize=False, array_module="cuda")
    mod, c, kw = F.run_triton(dev, kernel, Ad, Bd, n, n, n)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(reps):
        t = time.perf_counter()
        mod.launch(kernel.name, **kw)
        warm.append(time.perf_counter() - t)
    pool = _pool_mib()
    raw = torch.from_dlpack(dev.to_array(c, (n, n), np.int16)).clone()     # C of the last launch with graphs
    from isagen.runtime.emu import cuda_graph
    graph_bytes = cuda_graph.STATS["graph_pool_bytes"]
    plain = []               # the same launches with CUDA graphs off (every handler plain), same process
    os.environ[cuda_graph.ENV] = "0"
    try:
        for _ in range(reps):
            t = time.perf_counter()
            mod.launch(kernel.name, **kw)
            plain.append(time.perf_counter() - t)
    finally:
        del os.environ[cuda_graph.ENV]
    same_plain = bool(torch.equal(raw, torch.from_dlpack(dev.to_array(c, (n, n), np.int16)))) if plain else None
    out = raw.view(torch.bfloat16).double()
    ref = Ad.view(torch.bfloat16).double() @ Bd.view(torch.bfloat16).double()
    absref = Ad.view(torch.bfloat16).double().abs() @ Bd.view(torch.bfloat16).double().abs()
    row = {"kernel": "triton_matmul_gfx942", "M": n, "N": n, "K": n, "waves": mod.last_stats["waves"],
           "wave_instructions": mod.last_stats["wave_instructions"], "cold_s": cold, "warm_s": warm,
           "warm_median_s": statistics.median(warm) if warm else None,
           "warm_no_graphs_s": plain, "warm_no_graphs_median_s": statistics.median(plain) if plain else None,
           "graph_pool_mib_all_captures_so_far": graph_bytes / 2**20, "graphs_same_bits_as_plain": same_plain,
           "correct_vs_torch": _check(out, ref, absref), "gpu_pool_mib": pool}
    if bitwise:
        host = Device("gfx942", sanitize=False)
        t = time.perf_counter()
        _, hc, _ = F.run_triton(host, kernel, A.view(torch.int16).numpy(), B.view(torch.int16).numpy(), n, n, n)
        row["cpu_engine_s"] = time.perf_counter() - t
        row["same_bits_as_cpu_engine"] = bool(np.array_equal(host.from_device(hc, (n * n,), np.int16),
                                                             raw.cpu().numpy().ravel()))
    del dev, mod
    return row


def gemm_row(target: str, co: bytes, n: int, bitwise: bool) -> dict:
    import torch

    from isagen.runtime.emu import Device
    from tools import emu_cuda_fixtures as F
    g = torch.Generator(device="cuda").manual_seed(n)
    A = torch.randn(n, n, generator=g, device="cuda").bfloat16()
    B = torch.randn(n, n, generator=g, device="cuda").bfloat16()
    _reset_pool()
    t0 = time.perf_counter()
    dev = Device(target, sanitize=False, array_module="cuda")
    mod, c, kw = F.run_gemm(dev, target, co, A.view(torch.int16), B.view(torch.int16), n, n, n)
    run_s = time.perf_counter() - t0
    pool = _pool_mib()
    out = torch.from_dlpack(dev.to_array(c, (n, n), np.int16)).view(torch.bfloat16)
    ref = A.double() @ B.double().T
    ok = bool(((out.double() - ref).abs() <= 2.0 ** -8 * ref.abs() + 1e-5 * n ** 0.5 * 8).all())
    row = {"kernel": f"gemm_bf16_{target}", "M": n, "N": n, "K": n, "waves": mod.last_stats["waves"],
           "wave_instructions": mod.last_stats["wave_instructions"], "cold_s": run_s,
           "emulator_run_s": mod.last_stats["seconds"], "correct_vs_torch": ok, "gpu_pool_mib": pool}
    if bitwise:
        host = Device(target, sanitize=False)
        t = time.perf_counter()
        _, hc, _ = F.run_gemm(host, target, co, A.view(torch.int16).cpu().numpy(), B.view(torch.int16).cpu().numpy(),
                              n, n, n)
        row["cpu_engine_s"] = time.perf_counter() - t
        row["same_bits_as_cpu_engine"] = bool(np.array_equal(host.from_device(hc, (n * n,), np.int16),
                                                             out.view(torch.int16).cpu().numpy().ravel()))
    del dev, mod
    return row


def write_markdown(path: Path, res: dict) -> None:
    lines = ["# Emulator, cuda engine (CuPy): GEMMs on one NVIDIA GPU", "",
             f"{res['date']}, {res['gpu']}, CuPy {res['cupy']}, torch {res['torch']}; sanitizer off; inputs "
             f"are CUDA torch tensors (DLPack).  `bench/emu_speed_gpu.py`; every sample in `emu_speed_gpu.json`.",
             "Warm: CUDA graphs on (the default, runtime/emu/cuda_graph.py); graphs off: the same launches in the "
             "same process with `ISAGEN_EMU_CUDA_GRAPHS=0`.  GPU pool: CuPy's default pool after the run (graphs "
             "keep their temporaries in pools of their own, not counted there).",
             "", "| kernel | size | waves | wave-instr | cold s | warm s (median) | warm s, graphs off | C vs torch "
             "| same bits as CPU engine "
             "(CPU engine s) | GPU pool MiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        warm = f"{r['warm_median_s']:.2f}" if r.get("warm_median_s") is not None else "-"
        plain = f"{r['warm_no_graphs_median_s']:.2f}" if r.get("warm_no_graphs_median_s") is not None else "-"
        if r.get("graphs_same_bits_as_plain") is not None:
            plain += " (same C)" if r["graphs_same_bits_as_plain"] else " (C DIFFERS)"
        same = (f"{r['same_bits_as_cpu_engine']} ({r['cpu_engine_s']:.1f})" if "same_bits_as_cpu_engine" in r
                else "not run")
        lines.append(f"| {r['kernel']} | {r['M']}^3 | {r['waves']} | {r['wave_instructions']:,} | {r['cold_s']:.2f} | "
                     f"{warm} | {plain} | {r['correct_vs_torch']} | {same} | {r['gpu_pool_mib']:.0f} |")
    for e in res.get("errors", []):
        lines.append(f"\nNot run: {e}")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triton-sizes", type=int, nargs="*", default=[1024, 2048, 4096])
    ap.add_argument("--gemm-sizes", type=int, nargs="*", default=[1024, 4096, 8192])
    ap.add_argument("--gemm-targets", nargs="*", default=["gfx942", "gfx950"])
    ap.add_argument("--bitwise-sizes", type=int, nargs="*", default=[1024])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    import cupy as cp  # type: ignore[import-not-found]
    import torch

    from tools import emu_cuda_fixtures as F
    res = {"benchmark": "emu_speed_gpu", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cupy": cp.__version__,
           "torch": torch.__version__, "python": platform.python_version(), "rows": [], "errors": []}
    args.out.mkdir(parents=True, exist_ok=True)

    def save():
        (args.out / "emu_speed_gpu.json").write_text(json.dumps(res, indent=1) + "\n")
        write_markdown(args.out / "emu_speed_gpu.md", res)

    jobs = [("triton", "gfx942", n) for n in args.triton_sizes]
    jobs += [("gemm", t, n) for n in args.gemm_sizes for t in args.gemm_targets]
    kernel = F.triton_matmul() if args.triton_sizes else None
    for kind, target, n in jobs:
        try:
            if kind == "triton":
                r = triton_row(kernel, n, args.reps, n in args.bitwise_sizes)
            else:
                r = gemm_row(target, F.gemm_co(target), n, n in args.bitwise_sizes)
        except Exception as e:
            res["errors"].append(f"{kind} {target} {n}^3: {type(e).__name__}: {str(e)[:400]}")
            print(res["errors"][-1], flush=True)
            save()
            continue
        res["rows"].append(r)
        print(json.dumps(r), flush=True)
        save()
    print(f"wrote {args.out / 'emu_speed_gpu.json'} and .md")
    return 0 if all(r["correct_vs_torch"] and r.get("graphs_same_bits_as_plain") is not False
                    for r in res["rows"]) and not res["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
