"""The whole grid: rounds of workgroups over the CUs, the tail round, XCD placement, bandwidth shares.

* Occupancy: workgroups per CU from the kernel descriptor (``isagen.checks.occupancy``: VGPRs, AGPRs,
  SGPRs, LDS, waves per workgroup).
* Placement: the dispatcher deals workgroup IDs round-robin over the XCDs (ID i to XCD i mod 8), and each
  XCD fills its CUs; a round is ``cus x workgroups-per-CU`` workgroups, the last one (the tail) what is
  left.  In a round of R workgroups the busiest CU holds ceil(R / cus) of them, min(R, cus) CUs are active
  and the busiest XCD has ceil(active / xcds) of them.
* Each active CU's memory share is the least of its L1 path, its XCD's L2 bandwidth split over the
  active CUs of that XCD, and the achievable HBM bandwidth split over all active CUs and divided by the
  fraction of requested bytes that miss L2 (``miss``: unique bytes / requested bytes when the workload
  knows them, else 1).
* A round lasts as long as the busiest CU's simulation (:func:`isagen.model.cu.simulate` of that CU's
  workgroups); rounds follow one another; the kernel adds ``Params.launch_us``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isagen.checks import occupancy as occ
from isagen.model.cu import CuResult, simulate
from isagen.model.machines import DEFAULT_PARAMS, Machine, Params
from isagen.targets import get_target


def workgroups_per_cu(kernel, machine: Machine, threads: int, dynamic_lds: int = 0) -> tuple[int, str]:
    """How many workgroups of ``threads`` work-items one CU holds, and what limits it (descriptor counts)."""
    kd = kernel.descriptor
    md = kernel.metadata or {}
    t = get_target(machine.target)
    unified = md.get(".vgpr_count", kd.vgpr_count)
    agpr = md.get(".agpr_count", max(0, unified - kd.accum_offset))
    sgpr_count = md.get(".sgpr_count", kd.sgpr_count)
    lds = kd.group_segment_fixed_size + dynamic_lds
    o = occ.occupancy(t, arch_vgprs=max(unified - agpr, 0), agprs=agpr, sgpr_count=sgpr_count, lds_bytes=lds,
                      workgroup_size=threads, unified=unified)
    waves_wg = max(1, -(-threads // t.wave_size))
    per_cu = max(1, o.waves_per_simd * machine.simds_per_cu // waves_wg)
    return per_cu, o.limited_by


@dataclass
class Round:
    workgroups: int
    per_cu: int
    active_cus: int
    cycles: float
    result: CuResult


@dataclass
class GridResult:
    us: float
    cycles: float
    launch_us: float
    rounds: list[Round]
    per_cu: int
    occupancy_limit: str
    miss: float
    notes: list[str] = field(default_factory=list)


def mem_share(machine: Machine, params: Params, active_cus: int, miss: float) -> float:
    """Bytes per clock one active CU gets from the memory system."""
    per_xcd = -(-active_cus // machine.xcds)
    l2 = machine.l2_bytes_per_clk_xcd / per_xcd
    hbm = params.hbm_efficiency * machine.hbm_bytes_per_clk / active_cus / max(miss, 1e-3)
    return min(float(machine.l1_bytes_per_clk_cu), l2, hbm)


def run_grid(wg_streams, total_wgs: int, per_cu: int, machine: Machine, *, params: Params = DEFAULT_PARAMS,
             miss: float = 1.0, occupancy_limit: str = "", cache: dict | None = None) -> GridResult:
    """Predict a launch of ``total_wgs`` workgroups, each running ``wg_streams`` (one workgroup's per-wave
    op streams: the slowest representative workgroup)."""
    cus = machine.cus
    slots = cus * per_cu
    rounds: list[Round] = []
    left = total_wgs
    sims = cache if cache is not None else {}
    while left > 0:
        r = min(left, slots)
        on_cu = -(-r // cus)
        active = min(r, cus)
        key = (on_cu, active)
        res = sims.get(key)
        if res is None:
            res = sims[key] = simulate([wg_streams] * on_cu, machine, params=params,
                                       mem_bytes_per_clk=mem_share(machine, params, active, miss),
                                       hit_rate=1.0 - miss)
        n_same = left // slots if r == slots else 1
        for _ in range(max(1, n_same)):
            rounds.append(Round(r, on_cu, active, res.cycles, res))
        left -= r * max(1, n_same)
    cycles = sum(x.cycles for x in rounds)
    us = params.launch_us + machine.cycles_to_us(cycles)
    return GridResult(us, cycles, params.launch_us, rounds, per_cu, occupancy_limit, miss)
