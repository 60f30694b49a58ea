"""Predictions for whole launches: AITER's bf16 GEMMs at any shape, with steady-state extrapolation.

Extrapolation (stated, and tested in tests/model): a GEMM's workgroups differ at one shape only in how
many K iterations their main loop runs.  The emulator runs one output tile's workgroups (grid
``(1, 1, splitK)``, the real kernel arguments but ``K = splitK x n x 64``) at two small iteration counts
``n1 < n2``; the grid model predicts the cycles of the full grid at each, and the cycles at the real
count ``n`` follow the line through the two: ``c(n) = c(n1) + (n - n1) (c(n2) - c(n1)) / (n2 - n1)``.
When ``n <= n2`` the emulator runs ``n`` itself and nothing is extrapolated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from isagen.model import ModelError
from isagen.model.cu import CuResult, simulate
from isagen.model.grid import GridResult, mem_share, run_grid, workgroups_per_cu
from isagen.model.machines import DEFAULT_PARAMS, Machine, Params, sustained
from isagen.model.trace import LDS_DMA, MFMA, VLOAD, VSTORE, Recorder, workgroups

N1, N2 = 4, 8                   # the iteration counts the emulator runs for the extrapolation
_TRACES: dict = {}              # (code object path, split, n, out dtype) -> (workgroup streams, kernel)


@dataclass
class Prediction:
    """A predicted run time -- a model's output, never a measurement."""

    us: float
    flops: float
    bytes: float                      # compulsory bytes (inputs read once, output written once)
    limiter: str
    grid: GridResult
    detail: CuResult                  # the busiest CU of the first round, at the larger traced count
    machine: str
    kernel: str
    shape: dict
    extrapolated: bool
    notes: list[str] = field(default_factory=list)
    mfma_utilization: float = 0.0     # the chip's matrix cores busy, over the whole (extrapolated) launch
    clock_mhz: float = 0.0            # the clock the prediction ran at (peak lowered by the power limit)
    replay: Callable[[float], list] | None = None   # replay(until): timeline of the first round's busiest CU

    @property
    def tflops(self) -> float:
        return self.flops / (self.us * 1e-6) / 1e12

    @property
    def tb_s(self) -> float:
        return self.bytes / (self.us * 1e-6) / 1e12


def _trace_bf16(co_path: str, split: int, n: int, out_dtype: str, tile_m: int, tile_n: int):
    key = (co_path, split, n, out_dtype)
    hit = _TRACES.get(key)
    if hit is not None:
        return hit
    import torch

    from isagen.objects.codeobject import read_code_object
    from isagen.runtime import aiter

    K = split * n * 64
    g = torch.Generator().manual_seed(0)
    A = torch.randn(tile_m, K, generator=g).bfloat16()
    B = torch.randn(tile_n, K, generator=g).bfloat16()
    rec = Recorder()
    aiter.gemm_a16w16(A, B, co_path, splitk=split, out_dtype=out_dtype, sanitize=False, trace=rec)
    co = read_code_object(co_path)
    kernel = next(iter(co.kernels.values()))
    wgs = workgroups(rec.ops(co.mach))
    # the slowest representative: the workgroup with the most instructions (split-K: the one that reduces)
    slowest = max(wgs.values(), key=lambda ws: sum(len(s) for s in ws))
    _TRACES[key] = (slowest, kernel)
    return _TRACES[key]


def bf16_gemm(co_path: str, M: int, N: int, K: int, machine: Machine, *, splitk: int | None = None,
              out_dtype: str = "float32", params: Params = DEFAULT_PARAMS, exact: bool = False) -> Prediction:
    """Predict AITER's bf16 GEMM ``co_path`` (``bf16gemm_*_tn_<tM>x<tN>_*.co``) at ``M x N x K``.

    ``exact``: emulate the real iteration count instead of extrapolating from two small ones."""
    from isagen.errors import LaunchError
    from isagen.runtime.aiter import Bf16GemmConfig, bf16gemm_splitk

    try:
        cfg = Bf16GemmConfig.from_name(bf16_kernel_name(co_path))
        split = bf16gemm_splitk(cfg, M, N, K, splitk, machine.cus)
    except LaunchError as e:
        raise ModelError(str(e)) from None
    if cfg.b_preshuffle:
        raise ModelError(f"{cfg.name}: pre-shuffled B kernels are not launched by the model yet")
    if min(M, N, K) <= 0:
        raise ModelError(f"--shape: M, N, K must be positive, got {M}, {N}, {K}")
    name = machine.name
    if cfg.name.startswith("bf16gemm_bf16"):
        out_dtype = "bfloat16"
    gdx, gdy = -(-N // cfg.tile_n), -(-M // cfg.tile_m)
    total = gdx * gdy * split
    if split > 1:
        ks = K // split // 64 * 64
        n_real = (K - (split - 1) * ks) // 64
    else:
        n_real = K // 64
    esize = 4 if out_dtype in ("float32", "fp32") else 2
    unique = (M * K + N * K) * 2
    requested = total * (cfg.tile_m + cfg.tile_n) * (K / split) * 2
    miss = min(1.0, unique / requested) if requested else 1.0
    counts = [n_real] if (n_real <= N2 or exact) else [N1, N2]
    traces = [_trace_bf16(co_path, split, n, out_dtype, cfg.tile_m, cfg.tile_n) for n in counts]
    shape = {"M": M, "N": N, "K": K, "splitK": split, "grid": (gdx, gdy, split), "iterations": n_real}
    return _predict_gemm(cfg.name, name, machine, params, traces, counts, n_real, total, miss,
                         2.0 * M * N * K, unique + M * N * esize, shape)


def _predict_gemm(kname: str, name: str, machine: Machine, params: Params, traces, counts, n_real: int, total: int,
                  miss: float, flops: float, nbytes: float, shape: dict) -> Prediction:
    """The grid prediction at the traced iteration counts, extrapolated to ``n_real`` (module docstring),
    run again at the clock the power limit leaves for the predicted matrix-core load."""
    return _predict_gemm_threads(kname, name, machine, params, traces, counts, n_real, total, miss, flops, nbytes,
                                 shape, 256)


def _predict_gemm_threads(kname: str, name: str, machine: Machine, params: Params, traces, counts, n_real: int,
                          total: int, miss: float, flops: float, nbytes: float, shape: dict,
                          threads: int) -> Prediction:
    kernel = traces[0][1]

    def at(m: Machine):
        grids = []
        for streams, _ in traces:
            per_cu, limit = workgroups_per_cu(kernel, m, threads)
            grids.append(run_grid(streams, total, per_cu, m, params=params, miss=miss, occupancy_limit=limit))
        cyc = [g.cycles for g in grids]
        work = [matrix_work(g) for g in grids]
        if len(grids) == 1:
            return grids[0], cyc[0], work[0]
        f = (n_real - counts[0]) / (counts[1] - counts[0])
        return grids[1], cyc[0] + f * (cyc[1] - cyc[0]), work[0] + f * (work[1] - work[0])

    grid, cycles, work = at(machine)
    loaded = loaded_clock(machine, params, work / max(machine.cus * machine.simds_per_cu * cycles, 1.0))
    if loaded.clock_mhz != machine.clock_mhz:
        machine = loaded
        grid, cycles, work = at(machine)
    us = params.launch_us + machine.cycles_to_us(cycles)
    pred = Prediction(us, flops, nbytes, "", grid, grid.rounds[0].result, name, kname,
                      {**shape, "workgroups_per_cu": grid.per_cu}, len(counts) > 1)
    pred.mfma_utilization = work / max(machine.cus * machine.simds_per_cu * cycles, 1.0)
    pred.clock_mhz = machine.clock_mhz
    pred.replay = _replayer(traces[0][0], grid, machine, params, miss)
    pred.limiter = limiter(pred)
    return pred


def _trace_fp8(co_path: str, split: int, n: int, tile_m: int):
    key = (co_path, split, n, "fp8bs")
    hit = _TRACES.get(key)
    if hit is not None:
        return hit
    import torch

    from isagen.objects.codeobject import read_code_object
    from isagen.runtime import aiter
    from isagen.targets import get_target

    co = read_code_object(co_path)
    fp8 = torch.float8_e4m3fnuz if get_target(co.mach).fp8_format == "fnuz" else torch.float8_e4m3fn
    K = split * n * 128
    g = torch.Generator().manual_seed(0)
    A = torch.randn(tile_m, K, generator=g).to(fp8)
    B = torch.randn(128, K, generator=g).to(fp8)
    xs = torch.ones(tile_m, K // 128)
    ws = torch.ones(1, K // 128)
    rec = Recorder()
    aiter.gemm_a8w8_blockscale_bpreshuffle(A, aiter.shuffle_weight_16x16(B), xs, ws, co_path, splitk=split,
                                           sanitize=False, trace=rec)
    wgs = workgroups(rec.ops(co.mach))
    slowest = max(wgs.values(), key=lambda ws_: sum(len(s_) for s_ in ws_))
    _TRACES[key] = (slowest, next(iter(co.kernels.values())))
    return _TRACES[key]


def fp8_blockscale_gemm(co_path: str, M: int, N: int, K: int, machine: Machine, *, splitk: int = 1,
                        params: Params = DEFAULT_PARAMS, exact: bool = False) -> Prediction:
    """Predict AITER's fp8 block-scale GEMM with pre-shuffled B (``fp8gemm_bf16_blockscale_BpreShuffle_*``)."""
    from isagen.errors import LaunchError
    from isagen.objects.codeobject import read_code_object
    from isagen.runtime.aiter import Fp8BlockscaleConfig, fp8bs_splitk

    try:
        cfg = Fp8BlockscaleConfig.from_name(next(iter(read_code_object(co_path).kernels)))
        split = fp8bs_splitk(K, splitk)
    except LaunchError as e:
        raise ModelError(str(e)) from None
    if min(M, N, K) <= 0 or N % 128 or K % 128:
        raise ModelError(f"--shape: M, N, K must be positive with N and K multiples of 128, got {M}, {N}, {K}")
    per = _ceil(_ceil(K, split), 128) * 128          # each split's K range (the last may be shorter)
    n_real = per // 128
    gdx, gdy = (N // 128) * split, -(-M // cfg.tile_m)
    total = gdx * gdy
    unique = M * K + N * K + 4 * (M + N // 128) * (K // 128)
    requested = total * (cfg.tile_m + 128) * (K / split)
    miss = min(1.0, unique / requested) if requested else 1.0
    counts = [n_real] if (n_real <= N2 or exact) else [N1, N2]
    traces = [_trace_fp8(co_path, split, n, cfg.tile_m) for n in counts]
    shape = {"M": M, "N": N, "K": K, "splitK": split, "grid": (gdx, gdy, 1), "iterations": n_real}
    return _predict_gemm(cfg.name, machine.name, machine, params, traces, counts, n_real, total, miss,
                         2.0 * M * N * K, unique + M * N * 2, shape)


def _trace_i8(co_path: str, split: int, n: int, tile_m: int, tile_n: int):
    key = (co_path, split, n, "i8")
    hit = _TRACES.get(key)
    if hit is not None:
        return hit
    import torch

    from isagen.objects.codeobject import read_code_object
    from isagen.runtime import aiter

    co = read_code_object(co_path)
    K = split * n * 128
    g = torch.Generator().manual_seed(0)
    A = torch.randint(-8, 8, (tile_m, K), generator=g, dtype=torch.int8)
    B = torch.randint(-8, 8, (tile_n, K), generator=g, dtype=torch.int8)
    rec = Recorder()
    aiter.gemm_a8w8_asm(A, aiter.shuffle_weight_16x16(B), torch.ones(tile_m, 1), torch.ones(tile_n, 1),
                        torch.zeros(1, tile_n), co_path, splitk=split, sanitize=False, trace=rec)
    wgs = workgroups(rec.ops(co.mach))
    slowest = max(wgs.values(), key=lambda ws_: sum(len(s_) for s_ in ws_))
    _TRACES[key] = (slowest, next(iter(co.kernels.values())))
    return _TRACES[key]


def i8_gemm(co_path: str, M: int, N: int, K: int, machine: Machine, *, splitk: int = 1,
            params: Params = DEFAULT_PARAMS, exact: bool = False) -> Prediction:
    """Predict AITER's int8 GEMM with per-token scales and pre-shuffled B (``I8gemm_bf16_perTokenI8_*``)."""
    from isagen.errors import LaunchError
    from isagen.objects.codeobject import read_code_object
    from isagen.runtime.aiter import fp8bs_splitk, i8_tiles

    try:
        kname = next(iter(read_code_object(co_path).kernels))
        tile_m, tile_n = i8_tiles(kname)
        split = fp8bs_splitk(K, splitk)
    except LaunchError as e:
        raise ModelError(str(e)) from None
    if min(M, N, K) <= 0 or N % tile_n:
        raise ModelError(f"--shape: M, N, K must be positive with N a multiple of {tile_n}, got {M}, {N}, {K}")
    per = _ceil(_ceil(K, split), 128) * 128
    n_real = per // 128
    gdx, gdy = (N // tile_n) * split, -(-M // tile_m)
    total = gdx * gdy
    unique = M * K + N * K + 4 * (M + 2 * N)
    requested = total * (tile_m + tile_n) * (K / split)
    miss = min(1.0, unique / requested) if requested else 1.0
    counts = [n_real] if (n_real <= N2 or exact) else [N1, N2]
    traces = [_trace_i8(co_path, split, n, tile_m, tile_n) for n in counts]
    shape = {"M": M, "N": N, "K": K, "splitK": split, "grid": (gdx, gdy, 1), "iterations": n_real}
    return _predict_gemm(f"I8gemm_bf16_perTokenI8_BpreShuffle_{tile_m}x{tile_n}", machine.name, machine, params,
                         traces, counts, n_real, total, miss, 2.0 * M * N * K, unique + M * N * 2, shape)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _replayer(streams, grid: GridResult, machine: Machine, params: Params, miss: float):
    r0 = grid.rounds[0]

    def replay(until: float):
        res = simulate([streams] * r0.per_cu, machine, params=params, hit_rate=1.0 - miss, timeline_until=until,
                       mem_bytes_per_clk=mem_share(machine, params, r0.active_cus, miss))
        return res.timeline
    return replay


def matrix_work(grid: GridResult) -> float:
    """MFMA-busy SIMD-cycles of the whole launch (each round: its busiest CU's SIMDs x active CUs)."""
    return sum(r.active_cus * sum(s.mfma_busy for s in r.result.simds) for r in grid.rounds)


def loaded_clock(machine: Machine, params: Params, utilization: float) -> Machine:
    """The machine at the clock it holds with its matrix cores ``utilization`` busy: peak when idle,
    ``Params.clock_fraction`` of peak when every matrix core is busy, linear between (a power limit)."""
    u = min(max(utilization, 0.0), 1.0)
    return sustained(machine, replace(params, clock_fraction=1.0 - (1.0 - params.clock_fraction) * u))


def bf16_kernel_name(co_path: str) -> str:
    """The AITER bf16 GEMM a code object holds, from its kernel symbol (``_ZN5aiter..bf16gemm_..E``), else
    from the file name."""
    import re

    from isagen.objects.codeobject import read_code_object

    try:
        names = list(read_code_object(co_path).kernels)
    except Exception as e:
        raise ModelError(f"{co_path}: not a code object the model can read ({e})") from None
    for n in names:
        m = re.search(r"bf16gemm_(?:fp32bf16|bf16)_tn_\w+?(?=E$|$)", n)
        if m:
            return m.group(0)
    return co_path


def limiter(p: Prediction) -> str:
    """What bounds the prediction.  A resource busy 70% or more of the busiest CU's time (matrix core of
    the busiest SIMD, the CU's memory share, its LDS), or a launch cost over half the total, is the
    limiter; otherwise the largest average wait of a wave (vmcnt: memory latency, lgkmcnt, barrier)."""
    d = p.detail
    cyc = max(d.cycles, 1.0)
    waves = max(len(d.wave_end), 1)
    resources = {"launch overhead": p.grid.launch_us / p.us,
                 "MFMA (matrix core busy)": max(max(s.mfma_busy for s in d.simds) / cyc, p.mfma_utilization),
                 "memory bandwidth": d.mem_busy / cyc, "LDS bandwidth": d.lds_busy / cyc}
    rounds = p.grid.rounds
    if len(rounds) > 1 and rounds[-1].workgroups < 0.5 * rounds[0].workgroups:
        resources["grid tail (last round under half full)"] = rounds[-1].cycles / max(sum(r.cycles for r in rounds), 1)
    k = max(resources, key=lambda x: resources[x])
    if resources[k] >= 0.7 or (k == "launch overhead" and resources[k] >= 0.5):
        return f"{k} ({resources[k]:.0%})"
    waits = {"memory latency (vmcnt waits)": "vmcnt", "LDS/scalar latency (lgkmcnt waits)": "lgkmcnt",
             "barrier waits": "barrier"}
    shares = {n: sum(s.stalls[c] for s in d.simds) / (waves * cyc) for n, c in waits.items()}
    w = max(shares, key=lambda x: shares[x])
    if shares[w] > resources[k]:
        return f"{w} ({shares[w]:.0%} of each wave's time)"
    return f"{k} ({resources[k]:.0%})"


def mfma_count(streams) -> int:
    return sum(1 for s in streams for op in s if op.kind == MFMA)


def predict_traced(wgs: dict, kernel, machine: Machine, *, threads: int, total_wgs: int | None = None,
                   unique_bytes: float | None = None, flops: float = 0.0, dynamic_lds: int = 0,
                   params: Params = DEFAULT_PARAMS) -> Prediction:
    """Predict a launch from traced workgroups (``trace.workgroups(recorder.ops(target))``).

    The slowest traced workgroup (most instructions) stands for every workgroup of the launch;
    ``total_wgs`` (default: the traced count) is the launch's size, ``unique_bytes`` the distinct bytes it
    reads and writes (for the L2 miss fraction; default: every requested byte misses), ``flops`` for the
    TFLOP/s figure.
    """
    if not wgs:
        raise ModelError("no workgroup was traced (did the launch run?)")
    name = machine.name
    slowest = max(wgs.values(), key=lambda ws: sum(len(s) for s in ws))
    total = total_wgs if total_wgs is not None else len(wgs)
    per_cu, limit = workgroups_per_cu(kernel, machine, threads, dynamic_lds)
    requested = total * sum(op.nbytes for s in slowest for op in s if op.kind in (VLOAD, VSTORE, LDS_DMA))
    miss = min(1.0, unique_bytes / requested) if unique_bytes is not None and requested else 1.0
    grid = run_grid(slowest, total, per_cu, machine, params=params, miss=miss, occupancy_limit=limit)
    util = matrix_work(grid) / max(machine.cus * machine.simds_per_cu * grid.cycles, 1.0)
    if util > 0 and params.clock_fraction != 1.0:
        machine = loaded_clock(machine, params, util)
        grid = run_grid(slowest, total, per_cu, machine, params=params, miss=miss, occupancy_limit=limit)
        util = matrix_work(grid) / max(machine.cus * machine.simds_per_cu * grid.cycles, 1.0)
    nbytes = unique_bytes if unique_bytes is not None else requested
    pred = Prediction(grid.us, flops, float(nbytes), "", grid, grid.rounds[0].result, name, kernel.name,
                      {"workgroups": total, "threads": threads, "workgroups_per_cu": per_cu}, False)
    pred.mfma_utilization = util
    pred.clock_mhz = machine.clock_mhz
    pred.replay = _replayer(slowest, grid, machine, params, miss)
    pred.limiter = limiter(pred)
    return pred


def isagen_gemm(spec: str, M: int, N: int, K: int, machine: Machine, *, params: Params = DEFAULT_PARAMS,
                exact: bool = False, build_params: dict | None = None) -> Prediction:
    """Predict one of isagen's own GEMM specs (``specs/gemm_*.yaml``) at ``M x N x K`` on ``machine``.

    The emulator runs the spec's kernel (checked against its torch reference by ``isagen run``'s
    ``execute``) on one output tile at two small K (4 and 8 K-tiles of ``block_k``), traced; the grid of
    the real shape is predicted at each and extrapolated over K as for AITER's kernels.
    """
    from isagen.objects.codeobject import read_code_object
    from isagen.runtime.backends import get_backend
    from isagen.runtime.backends.emu import EmuBackend
    from isagen.runtime.run import execute, plan_run

    name = machine.name

    def sizes(m: int, n: int, k: int) -> dict:
        # block scaling sizes its scale tensors by K-blocks (kb) and 128-column blocks of N (nb)
        out = {"m": m, "n": n, "k": k}
        if (build_params or {}).get("scaling", loaded_params.get("scaling")) == "block":
            out.update(kb=k // 128, nb=-(-n // 128))
        return out

    from isagen.builders.spec import load_spec as _load
    from isagen.runtime.run import resolve_spec
    loaded_params = _load(resolve_spec(spec)).params
    probe = plan_run(spec, target=machine.target, backend="emu", params=build_params, shapes=sizes(M, N, K))
    total = probe.grid[0] * probe.grid[1] * probe.grid[2]
    kernel = probe.kernel
    from isagen.builders.spec import load_spec
    from isagen.kernels import gemm as gemm_kernels
    from isagen.kernels import gemm_fp8
    from isagen.targets import get_target

    loaded = load_spec(kernel.spec_path) if getattr(kernel, "spec_path", None) else None
    if loaded is None or loaded.kernel not in ("gemm_bf16", "gemm_fp8"):
        raise ModelError(f"{spec}: not one of isagen's GEMM specs (kernel gemm_bf16 or gemm_fp8)")
    sp = {**loaded.params, **(build_params or {})}
    plan_g = (gemm_fp8 if loaded.kernel == "gemm_fp8" else gemm_kernels).make_plan(sp, get_target(machine.target))
    bm, bn, bk = plan_g.block_m, plan_g.block_n, plan_g.block_k
    n_real = max(1, K // bk)
    counts = [n_real] if (n_real <= N2 or exact) else [N1, N2]
    co_kernel = read_code_object(kernel.code_object).kernels[kernel.symbol]
    be = get_backend("emu")
    assert isinstance(be, EmuBackend)
    traces = []
    for n in counts:
        key = (kernel.code_object, n, bm, bn)
        hit = _TRACES.get(key)
        if hit is None:
            plan = plan_run(spec, target=machine.target, backend="emu", params=build_params,
                            shapes=sizes(bm, bn, n * bk))
            _, mod = be._module(plan.kernel)
            rec = Recorder()
            mod.trace = rec
            try:
                report = execute(plan, iters=0)
            finally:
                mod.trace = None
            if not report.ok:
                raise ModelError(f"{spec}: the emulated run at {bm}x{bn}x{n * bk} does not match its reference")
            wgs = workgroups(rec.ops(machine.target))
            hit = _TRACES[key] = (max(wgs.values(), key=lambda ws_: sum(len(s_) for s_ in ws_)), co_kernel)
        traces.append(hit)
    esize = plan_g.elem_bytes
    unique = (M * K + N * K) * esize
    requested = total * (bm + bn) * K * esize
    miss = min(1.0, unique / requested) if requested else 1.0
    shape = {"M": M, "N": N, "K": K, "grid": probe.grid, "iterations": n_real}
    threads = int(probe.block[0] * probe.block[1] * probe.block[2])
    return _predict_gemm_threads(kernel.name, name, machine, params, traces, counts, n_real, total, miss,
                                 2.0 * M * N * K, unique + M * N * 2, shape, threads)


def isagen_attention(B: int, H: int, H_kv: int, N_q: int, N_kv: int, D: int, machine: Machine, *,
                     dtype: str = "bf16", params: Params = DEFAULT_PARAMS, exact: bool = False) -> Prediction:
    """Predict isagen's attention forward (``specs/attention_bf16.yaml``, non-causal, dense) on ``machine``.

    The emulator runs one query block (128 rows) of one head through ``isagen.runtime.attention.attention``
    at 4 and 8 KV tiles of 64, traced; the grid ``(ceil(N_q / 128), H, B)`` is predicted at each and
    extrapolated over the KV tiles as the GEMMs are over K.
    """
    import torch

    from isagen.objects.codeobject import read_code_object
    from isagen.runtime import attention as att
    from isagen.runtime.backends import get_backend
    from isagen.runtime.backends.emu import EmuBackend

    kv_tile = 64
    n_real = max(1, -(-N_kv // kv_tile))
    counts = [n_real] if (n_real <= N2 or exact) else [N1, N2]
    kernel = att.attention_kernel(machine.target, dtype, D, False, False)
    co_kernel = read_code_object(kernel.code_object).kernels[kernel.symbol]
    be = get_backend("emu")
    assert isinstance(be, EmuBackend)
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    traces = []
    for n in counts:
        key = (kernel.code_object, n, "attention")
        hit = _TRACES.get(key)
        if hit is None:
            g = torch.Generator().manual_seed(0)
            q = torch.randn(1, 1, att.BLOCK_Q, D, generator=g).to(tdt)
            k = torch.randn(1, 1, n * kv_tile, D, generator=g).to(tdt)
            v = torch.randn(1, 1, n * kv_tile, D, generator=g).to(tdt)
            _, mod = be._module(kernel)
            rec = Recorder()
            mod.trace = rec
            try:
                att.attention(q, k, v, target=machine.target, backend="emu")
            finally:
                mod.trace = None
            wgs = workgroups(rec.ops(machine.target))
            hit = _TRACES[key] = (max(wgs.values(), key=lambda ws_: sum(len(s_) for s_ in ws_)), co_kernel)
        traces.append(hit)
    total = -(-N_q // att.BLOCK_Q) * H * B
    esize = 2
    unique = (B * H * N_q * D * 2 + B * H_kv * N_kv * D * 2) * esize
    requested = total * 2 * N_kv * D * esize + B * H * N_q * D * esize * 2
    miss = min(1.0, unique / requested) if requested else 1.0
    shape = {"B": B, "H": H, "H_kv": H_kv, "N_q": N_q, "N_kv": N_kv, "D": D, "kv_tiles": n_real}
    threads = int(kernel.launch.block[0] * kernel.launch.block[1] * kernel.launch.block[2])
    return _predict_gemm_threads(kernel.name, machine.name, machine, params, traces, counts, n_real, total, miss,
                                 4.0 * B * H * N_q * N_kv * D, unique, shape, threads)
