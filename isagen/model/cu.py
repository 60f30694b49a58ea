"""The cycle model of one CU: its four SIMDs issuing the instruction streams of the waves resident on it.

Rules (each a simplification, stated so it can be checked):

* A wave issues at most one instruction every ``Params.issue_cycles`` (4) cycles -- one wait state per
  instruction, the unit of the ISA's hazard tables; ``s_nop N`` holds the wave for N+1 wait states.
* Per SIMD, the MFMA pipe is held ``passes x 4`` cycles by each MFMA (passes from the ISA table) and the
  VALU pipe 4 cycles by each VALU instruction (wave64 on 16 lanes); a wave whose next instruction needs
  a busy pipe waits for it ("mfma_pipe" / "valu_pipe" stalls).  MFMA and VALU of different waves overlap.
  Register dependencies are not tracked: on CDNA the software's own ``s_nop`` and ``s_waitcnt`` carry
  them (the MFMA result hazards have no interlock), and those are modelled.
* DS instructions go through the CU's LDS pipe at ``banks x 4`` bytes per clock (no bank conflicts
  counted) and complete ``lds_latency_cycles`` later; SMEM completes ``smem_latency_ns`` after issue.
* Vector memory (loads, stores, LDS DMA) goes through the CU's L1 path (``l1_bytes_per_clk_cu``) and a
  per-CU share of the memory system's bandwidth (``mem_bytes_per_clk``, set by the grid model from the
  L2 and HBM bandwidth and the CUs sharing them); a load completes after its transfer plus the latency
  (L2 hit or miss, weighted by ``hit_rate``); a store after ``store_latency_ns``.
* Counters: vmcnt retires in order; lgkmcnt is kept in order too (SMEM's out-of-order return only matters
  for ``lgkmcnt(0)``, which waits for everything anyway).  ``s_waitcnt`` holds the wave until at most N
  operations of each counter are outstanding ("vmcnt" / "lgkmcnt" stalls).
* ``s_barrier`` holds a wave until every live wave of its workgroup has arrived ("barrier" stalls).

Scheduling is event-driven: the wave with the earliest ready time tries to issue; if its instruction
cannot start then, the wave is put back at the earliest time it can, and the gap is charged to the cause.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from isagen.model.machines import DEFAULT_PARAMS, Machine, Params
from isagen.model.trace import (
    BARRIER,
    DS,
    END,
    KIND_NAMES,
    LDS_DMA,
    MFMA,
    NOP,
    SMEM,
    TRANS,
    VALU,
    VLOAD,
    VSTORE,
    WAIT,
    Op,
)

STALLS = ("vmcnt", "lgkmcnt", "barrier", "nop", "mfma_pipe", "valu_pipe")


@dataclass
class SimdStats:
    mfma_busy: float = 0.0
    valu_busy: float = 0.0
    instructions: int = 0
    stalls: dict = field(default_factory=lambda: {s: 0.0 for s in STALLS})


@dataclass
class CuResult:
    cycles: float                          # the last wave's end
    simds: list[SimdStats]
    wave_end: list[float]                  # per wave (flattened over workgroups)
    workgroup_end: list[float]
    bytes_loaded: int = 0
    bytes_stored: int = 0
    lds_bytes: int = 0
    mem_busy: float = 0.0                  # cycles the CU's memory share was transferring
    lds_busy: float = 0.0
    timeline: list = field(default_factory=list)   # (wave, simd, start, end, kind name)


def simulate(workgroups: list[list[list[Op]]], machine: Machine, *, params: Params = DEFAULT_PARAMS,
             mem_bytes_per_clk: float | None = None, hit_rate: float = 0.0,
             timeline_until: float = 0.0) -> CuResult:
    """Run the waves of ``workgroups`` (each a list of per-wave op streams) together on one CU.

    ``mem_bytes_per_clk``: this CU's share of the memory system's bandwidth (default: the L1 path);
    ``hit_rate``: the fraction of loaded bytes that hit L2.  ``timeline_until``: record every issued
    instruction that starts before this cycle (for the timeline picture).
    """
    clk = machine.clock_mhz / 1000.0                      # cycles per ns
    p = params
    issue = p.issue_cycles
    lat_load = (hit_rate * p.l2_latency_ns + (1.0 - hit_rate) * p.mem_latency_ns) * clk
    lat_store = p.store_latency_ns * clk
    lat_smem = p.smem_latency_ns * clk
    lat_lds = p.lds_latency_cycles
    l1_bw = float(machine.l1_bytes_per_clk_cu)
    mem_bw = min(l1_bw, mem_bytes_per_clk) if mem_bytes_per_clk else l1_bw
    lds_bw = float(machine.lds_bytes_per_clk)
    nsimd = machine.simds_per_cu

    waves: list[list[Op]] = []
    wave_wg: list[int] = []
    for g, wg in enumerate(workgroups):
        for seq in wg:
            waves.append(seq)
            wave_wg.append(g)
    n = len(waves)
    simd_of = [w % nsimd for w in range(n)]
    simds = [SimdStats() for _ in range(nsimd)]
    mfma_free = [0.0] * nsimd
    valu_free = [0.0] * nsimd
    pc = [0] * n
    vmq: list[list[float]] = [[] for _ in range(n)]
    lgq: list[list[float]] = [[] for _ in range(n)]
    done = [False] * n
    end = [0.0] * n
    at_barrier: dict[int, list[tuple[int, float]]] = {}
    live_in_wg = [0] * len(workgroups)
    for g in wave_wg:
        live_in_wg[g] += 1
    lds_free = 0.0
    vm_free = 0.0
    res = CuResult(0.0, simds, end, [0.0] * len(workgroups))
    tl = res.timeline
    heap = [(0.0, w) for w in range(n)]
    heapq.heapify(heap)

    def release(g: int) -> None:
        arrived = at_barrier.get(g, [])
        if arrived and len(arrived) >= live_in_wg[g]:
            t_rel = max(t for _, t in arrived)
            for w2, t2 in arrived:
                simds[simd_of[w2]].stalls["barrier"] += t_rel - t2
                heapq.heappush(heap, (t_rel + issue, w2))
            at_barrier[g] = []

    while heap:
        t, w = heapq.heappop(heap)
        seq = waves[w]
        if pc[w] >= len(seq):                      # ran off the end of its trace: done
            done[w] = True
            end[w] = t
            g = wave_wg[w]
            live_in_wg[g] -= 1
            release(g)
            continue
        op = seq[pc[w]]
        k = op.kind
        s = simd_of[w]
        st = simds[s]
        if k == WAIT:
            q = vmq[w]
            t_need = t
            why = None
            while q and q[0] <= t:
                q.pop(0)
            if len(q) > op.vm:
                t_need = q[len(q) - op.vm - 1]
                why = "vmcnt"
            q2 = lgq[w]
            while q2 and q2[0] <= t:
                q2.pop(0)
            if len(q2) > op.lgkm:
                t2 = q2[len(q2) - op.lgkm - 1]
                if t2 > t_need:
                    t_need, why = t2, "lgkmcnt"
            if why is not None:
                st.stalls[why] += t_need - t
                heapq.heappush(heap, (t_need, w))
                continue
            pc[w] += 1
            st.instructions += 1
            heapq.heappush(heap, (t + issue, w))
            continue
        if k == MFMA and mfma_free[s] > t:
            st.stalls["mfma_pipe"] += mfma_free[s] - t
            heapq.heappush(heap, (mfma_free[s], w))
            continue
        if (k == VALU or k == TRANS) and valu_free[s] > t:
            st.stalls["valu_pipe"] += valu_free[s] - t
            heapq.heappush(heap, (valu_free[s], w))
            continue
        # the instruction issues at t
        pc[w] += 1
        st.instructions += 1
        nxt = t + issue
        dur = issue
        if k == MFMA:
            mfma_free[s] = t + op.busy
            st.mfma_busy += op.busy
            dur = op.busy
        elif k == VALU or k == TRANS:
            valu_free[s] = t + op.busy
            st.valu_busy += op.busy
        elif k == NOP:
            nxt = t + op.busy * issue
            st.stalls["nop"] += (op.busy - 1) * issue
            dur = op.busy * issue
        elif k == DS:
            start = max(t, lds_free)
            xfer = op.nbytes / lds_bw
            lds_free = start + xfer
            res.lds_busy += xfer
            res.lds_bytes += op.nbytes
            _push(lgq[w], start + xfer + lat_lds)
        elif k == SMEM:
            _push(lgq[w], t + lat_smem)
        elif k == VLOAD or k == LDS_DMA or k == VSTORE:
            start = max(t, vm_free)
            xfer = op.nbytes / mem_bw
            vm_free = start + xfer
            res.mem_busy += xfer
            if k == VSTORE:
                res.bytes_stored += op.nbytes
                done_t = start + xfer + lat_store
            else:
                res.bytes_loaded += op.nbytes
                done_t = start + xfer + lat_load
            _push(vmq[w], done_t)
            if op.lgkm_too:
                _push(lgq[w], done_t)
        elif k == BARRIER:
            g = wave_wg[w]
            at_barrier.setdefault(g, []).append((w, t))
            if t < timeline_until:
                tl.append((w, s, t, t + issue, KIND_NAMES[k]))
            release(g)
            continue
        elif k == END:
            done[w] = True
            end[w] = max(t + issue, mfma_free[s])      # the matrix core drains its last MFMA
            g = wave_wg[w]
            live_in_wg[g] -= 1
            if t < timeline_until:
                tl.append((w, s, t, t + issue, KIND_NAMES[k]))
            release(g)
            continue
        if t < timeline_until:
            tl.append((w, s, t, t + dur, KIND_NAMES[k]))
        heapq.heappush(heap, (nxt, w))

    # outstanding stores/loads at the end still have to drain before the kernel is done
    for w in range(n):
        tail = max(vmq[w][-1] if vmq[w] else 0.0, lgq[w][-1] if lgq[w] else 0.0)
        end[w] = max(end[w], tail)
    for w in range(n):
        g = wave_wg[w]
        res.workgroup_end[g] = max(res.workgroup_end[g], end[w])
    res.cycles = max(end) if end else 0.0
    return res


def _push(q: list[float], t: float) -> None:
    """Append a completion to an in-order counter queue (an operation retires no earlier than the one
    before it)."""
    q.append(max(t, q[-1]) if q else t)
