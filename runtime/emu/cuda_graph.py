"""CUDA graphs for the cuda emulator engine: a basic block's handlers captured once per batch and replayed.

On the cuda engine every handler is a few CuPy calls, and each costs ~10-25 us of host time (Python, argument
checks, the launch) against a few microseconds of GPU work at GEMM batch sizes: the host is the bottleneck.
A CUDA graph replays a captured sequence of kernels with one launch, so a block that a batch's waves run
many times (a GEMM's main loop) costs its host time once.

How.  The first time all the waves of a batch run a block (``ws`` is ALL), its handlers run as usual (kernels
are compiled, caches filled).  The second time, they run inside a stream capture, greedily: consecutive
handlers are captured into one graph, which is then launched (so the block still executes exactly once,
in order); a handler that cannot be captured -- it reads a result back to the host (a branch condition,
an out-of-range count, a statistic of active lanes), copies host data to the device, or is one of the
kinds listed in ``_UNSAFE`` -- makes the capture fail (CuPy and CUDA refuse reads back and copies on a capturing
stream), and it is then run as a plain handler between two graphs.  Later executions replay the
segments: a graph launch per captured run, the plain handlers as before.  The block's terminator (it moves
the host-side PCs) always runs plainly.

What a replay relies on (and why it gives the same results as running the handlers):

* a handler's device work depends only on device data and on host values fixed for the batch (compiled
  operands, the batch's shapes and arrays): anything read from the device makes the capture fail, and
  handlers that read host-side state that changes per execution (``s_memtime`` reads the instruction counts)
  are never captured (``_UNSAFE``);
* host-side effects of a captured handler are its statistics (bytes moved): constants per execution, since
  reading a count from the device would have failed the capture; the difference of the launch's counters
  over the capture is added again at each replay;
* every array a capture allocates comes from a memory pool of that graph alone, kept as long as the graph:
  no other array ever shares that memory, so a replay overwrites nothing else;
* no copy between host and device is captured (a copy from host memory would be replayed from a buffer
  that may hold other data by then): CuPy itself refuses both directions on a capturing stream ("the
  current stream is capturing, so H2D transfers are disallowed"), ``np.asarray`` of a host array raises
  while capturing (``xp.capture_guard``), and a capture during which CuPy took pinned host memory (its
  staging buffer for such copies) is discarded; host scalars become device arrays through a fill kernel
  instead of a copy (xp.py), so handlers with constant operands can be captured.

Only groups of all the batch's waves are captured (the common case: a Triton GEMM's waves run in
lockstep); a group of waves that branched apart runs plainly, as before.  Memory: each graph keeps its
own pool of the temporaries its handlers allocate (``STATS['graph_pool_bytes']``).

``ISAGEN_EMU_CUDA_GRAPHS=0`` turns graphs off (every handler plain, as before).
"""

from __future__ import annotations

import os

from isagen.runtime.emu import xp as X

ENV = "ISAGEN_EMU_CUDA_GRAPHS"
# never captured: they read host-side state that changes from one execution to the next
_UNSAFE = frozenset({"s_memtime", "s_memrealtime", "s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32",
                     "s_sethalt", "s_trap", "s_rfe_b64", "s_icache_inv", "s_dcache_inv", "s_dcache_wb"})
_SAFE_CATS = frozenset({"salu", "valu", "trans", "mfma", "ds", "vmem", "flat", "lds_dma", "nop", "waitcnt", "smem"})
MIN_RUN = 2        # fewer handlers than this in a captured run: not worth a graph launch
WHY: dict = {}          # instruction name -> the first reason a capture failed at it
FAILED: dict = {}       # instruction name -> captures it made fail (what to make capturable next)
# process-wide counts (tests, benchmarks): graphs captured and launched, handlers inside graphs, handler calls
# run plainly in planned blocks, failed captures, bytes of the graphs' own memory pools
STATS = {"captured": 0, "launched": 0, "handlers_in_graphs": 0, "plain": 0, "capture_failures": 0,
         "graph_pool_bytes": 0}


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


class _Graph:
    """An instantiated CUDA graph (through CuPy's runtime bindings), destroyed with the object."""

    def __init__(self, rt, graph: int):
        self.rt, self.graph = rt, graph
        self.exec = rt.graphInstantiate(graph)

    def launch(self) -> None:
        cp = X.cupy_module()
        self.rt.graphLaunch(self.exec, cp.cuda.get_current_stream().ptr)

    def __del__(self):
        try:
            self.rt.graphExecDestroy(self.exec)
            self.rt.graphDestroy(self.graph)
        except Exception:       # interpreter shutdown
            pass


_pinned_used = [0]


def _pinned_watch(default):
    """The pinned-memory allocator while capturing: CuPy stages every host-to-device copy through pinned
    memory, so an allocation here means a copy from host memory was captured (the graph is discarded)."""
    def alloc(size):
        _pinned_used[0] += 1
        return default(size)
    return alloc


_COUNTERS = ("bytes_read", "bytes_written", "scalar_bytes_read", "scalar_bytes_written", "lds_bytes_read",
             "lds_bytes_written")


def _snapshot(rc) -> tuple:
    return (tuple(getattr(rc, k) for k in _COUNTERS), dict(rc.global_bytes_by_width), len(rc.reports),
            dict(rc._seen))


def _restore(rc, snap) -> None:
    for k, v in zip(_COUNTERS, snap[0]):
        setattr(rc, k, v)
    rc.global_bytes_by_width = snap[1]
    del rc.reports[snap[2]:]
    rc._seen = snap[3]


def _delta(rc, snap) -> tuple:
    d = tuple(getattr(rc, k) - v for k, v in zip(_COUNTERS, snap[0]))
    dw = {w: n - snap[1].get(w, 0) for w, n in rc.global_bytes_by_width.items() if n != snap[1].get(w, 0)}
    return d, dw


def _apply(rc, delta) -> None:
    d, dw = delta
    for k, v in zip(_COUNTERS, d):
        if v:
            setattr(rc, k, getattr(rc, k) + v)
    for w, n in dw.items():
        rc.global_bytes_by_width[w] = rc.global_bytes_by_width.get(w, 0) + n


class _Plan:
    """A block's segments for one batch: ('g', graph, counter delta, pool) or ('p', handler)."""

    __slots__ = ("runs", "segs")

    def __init__(self):
        self.runs = 0
        self.segs: list | None = None


def run_block(st, block, ws) -> None:
    """Run ``block`` for every wave of ``st`` (``ws`` is ALL) on the cuda engine, through graphs from the
    block's second execution in this batch on."""
    plans = st.__dict__.setdefault("_cuda_graphs", {})
    p = plans.get(block.start)
    if p is None:
        p = plans[block.start] = _Plan()
    p.runs += 1
    if p.segs is None:
        if p.runs < 2:
            for fn in block.fns:
                fn(st, ws)
            return
        p.segs = _capture_and_run(st, block, ws)
        return
    rc = st.run
    for seg in p.segs:
        if seg[0] == "g":
            seg[1].launch()
            _apply(rc, seg[2])
            STATS["launched"] += 1
        else:
            seg[1](st, ws)
            STATS["plain"] += 1


def _capturable(step) -> bool:
    return not step.term and step.error is None and step.cat in _SAFE_CATS and step.inst.name not in _UNSAFE


def _capture_and_run(st, block, ws) -> list:
    """Execute the block once, capturing what can be captured; return its segments."""
    cp = X.cupy_module()
    steps = block.steps
    # one handler per step (a fused MFMA run of the CPU engine's native kernel runs its steps' handlers one
    # by one on this engine anyway)
    fns = block.fns if len(block.fns) == len(steps) else [s.fn for s in steps]
    n = len(fns)
    bad = [not _capturable(s) for s in steps]
    segs: list = []
    i = 0
    while i < n:
        if bad[i]:
            fns[i](st, ws)
            segs.append(("p", fns[i]))
            i += 1
            continue
        j = i
        while j < n and not bad[j]:
            j += 1
        if j - i < MIN_RUN:
            for k in range(i, j):
                fns[k](st, ws)
                segs.append(("p", fns[k]))
            i = j
            continue
        got = _capture(cp, st, fns, i, j, ws)
        if got[0] == "split":          # the run failed as a whole: capture its handlers one by one
            marked = False
            for k in range(i, j):
                one = _capture(cp, st, fns, k, k + 1, ws)
                if one[0] != "g":
                    bad[k] = True
                    STATS["capture_failures"] += 1
                    name = steps[k].inst.name
                    FAILED[name] = FAILED.get(name, 0) + 1
                    WHY.setdefault(name, f"alone: {one[-1]} (in a run: {got[1]})")
                    marked = True
            if not marked:             # each alone is fine, together they are not: run them plainly
                for k in range(i, j):
                    bad[k] = True
                WHY.setdefault(f"run at {steps[i].inst.name}", got[1])
            continue
        if got[0] == "bad":            # handler got[1] cannot be captured: the run before it is tried again
            bad[got[1]] = True
            STATS["capture_failures"] += 1
            name = steps[got[1]].inst.name
            FAILED[name] = FAILED.get(name, 0) + 1
            WHY.setdefault(name, got[2])
            continue
        _, g, delta, pool = got
        STATS["captured"] += 1
        STATS["graph_pool_bytes"] += pool.total_bytes()
        STATS["launched"] += 1
        STATS["handlers_in_graphs"] += j - i
        g.launch()          # the statistics of this first execution were counted as the capture ran them
        segs.append(("g", g, delta, pool))
        i = j
    return segs


def _capture(cp, st, fns, i: int, j: int, ws):
    rc = st.run
    rt = cp.cuda.runtime
    snap = _snapshot(rc)
    pool = cp.cuda.MemoryPool()        # this graph's alone (see the module's docstring)
    stream = cp.cuda.Stream(non_blocking=True)
    k = i
    failed: BaseException | None = None
    graph = 0
    guard = X.capture_guard()
    default_pinned = cp.get_default_pinned_memory_pool().malloc
    pinned_before = _pinned_used[0]
    cp.cuda.set_pinned_memory_allocator(_pinned_watch(default_pinned))
    with cp.cuda.using_allocator(pool.malloc), stream, guard:
        # relaxed: the graph's pool may cudaMalloc; a read back still fails (it synchronizes the capturing stream)
        rt.streamBeginCapture(stream.ptr, rt.streamCaptureModeRelaxed)
        try:
            while k < j:
                fns[k](st, ws)
                k += 1
        except BaseException as e:      # noqa: BLE001 -- whatever stops the capture, the run is redone
            failed = e
        finally:
            try:
                graph = rt.streamEndCapture(stream.ptr)
            except Exception as e:        # an invalidated capture
                failed = failed or e
            cp.cuda.set_pinned_memory_allocator(default_pinned)
    if failed is None and _pinned_used[0] != pinned_before:
        failed = RuntimeError("a copy from pinned host memory was captured")
        k = i if j - i == 1 else k
    if failed is not None:
        if graph:
            rt.graphDestroy(graph)
        _restore(rc, snap)
        if isinstance(failed, (KeyboardInterrupt, SystemExit, TimeoutError, MemoryError)):
            raise failed
        why = f"{type(failed).__name__}: {str(failed)[:200]}"
        if k >= j and j - i > 1:
            return ("split", why)
        return ("bad", min(k, j - 1), why)
    return ("g", _Graph(rt, graph), _delta(rc, snap), pool)
