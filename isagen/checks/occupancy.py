"""Occupancy: how many waves of a kernel fit on one SIMD, what limits them, and what to free for one more.

One implementation, used by ``Program.occupancy()`` (isagen's own kernels, at build time) and by the
register report (``isagen report``, for any code object: counts taken from its descriptor/metadata).
The rules are LLVM's for gfx9 with the unified register file (gfx90a, gfx942, gfx950), as in
AMDGPUBaseInfo.cpp / GCNSubtarget.cpp:

* **unified VGPR file** -- each SIMD has ``unified_regs_per_lane`` (512) registers per lane.  A wave's
  arch VGPRs come first; its AGPRs start at ``accum_offset`` (arch count rounded up to 4).  The
  wave is given ``accum_offset + agprs`` registers (just the arch count without AGPRs), rounded up to
  the allocation granule (8).  Waves per SIMD = 512 // allocated (getNumWavesPerEUWithNumVGPRs).
* **SGPRs** -- the wave's SGPR count includes the 6 reserved ones (VCC, FLAT_SCRATCH, XNACK_MASK);
  the gfx9 file of 800 SGPRs gives 10 waves up to 80, 9 up to 88, 8 up to 100, else 7
  (getOccupancyWithNumSGPRs).
* **LDS** -- a workgroup's LDS is rounded up to ``lds_alloc_granule``; ``lds_bytes // that``
  workgroups fit on a CU, whose waves spread over its ``simds_per_cu`` SIMDs.
* **workgroup size** -- a workgroup of more than one wave holds one of the CU's 16 barriers
  (getMaxWorkGroupsPerCU), so at most ``min(16, max waves per CU // waves per group)`` groups fit.
* **hardware** -- at most ``max_waves_per_simd`` (8) waves per SIMD.

Each factor gives a limit on its own; the occupancy is the smallest (the first listed wins a tie,
so a kernel bound by nothing reads ``limited_by: hardware``).  Counting the waves of a CU spread over
its SIMDs uses the average (``waves per CU // SIMDs``), as LLVM's per-factor estimates do.
"""

from __future__ import annotations

from dataclasses import field

from isagen.records import record, value_methods

#: SGPRs LLVM reserves on top of the allocated ones on gfx940+: VCC, FLAT_SCRATCH and XNACK_MASK
#: (getNumExtraSGPRs with architected flat scratch), whether or not the kernel touches them and
#: whatever the xnack setting.  clang-19 (gfx942) and clang-22 (gfx950) both report ``.sgpr_count`` =
#: next_free_sgpr + 6; tests/objects/test_codeobject_fields.py checks ours against them.
EXTRA_SGPRS = 6
#: barriers per CU: a multi-wave workgroup holds one while it runs (getMaxWorkGroupsPerCU)
MAX_BARRIER_GROUPS_PER_CU = 16
#: SGPR count thresholds of the gfx9 800-entry file: (highest count, waves per SIMD)
SGPR_WAVE_STEPS = ((80, 10), (88, 9), (100, 8))


def _round_up(n: int, granule: int) -> int:
    return (n + granule - 1) // granule * granule


def accum_offset(target, arch_vgprs: int) -> int:
    """``.amdhsa_accum_offset``: the first AGPR's index in the unified file (a multiple of 4, >= 4)."""
    g = target.accum_offset_granule
    return max(g, _round_up(arch_vgprs, g))


def unified_vgprs(target, arch_vgprs: int, agprs: int) -> int:
    """Registers of the unified file the wave needs (LLVM's getTotalNumVGPRs): ``accum_offset +
    agprs`` with AGPRs, else the arch count (at least 1).  This is the metadata's ``.vgpr_count``."""
    return accum_offset(target, arch_vgprs) + agprs if agprs else max(arch_vgprs, 1)


def allocated_vgprs(target, unified: int) -> int:
    """Per-lane registers the hardware hands the wave: ``unified`` rounded up to the granule (8)."""
    return _round_up(max(unified, 1), target.vgpr_alloc_granule)


def allocated_sgprs(target, sgpr_count: int) -> int:
    """SGPRs the hardware hands the wave: ``sgpr_count`` (reserved included) rounded up to the granule
    (16 on gfx9: the descriptor's GRANULATED_WAVEFRONT_SGPR_COUNT)."""
    return _round_up(max(sgpr_count, 1), target.sgpr_alloc_granule)


def waves_for_vgprs(target, unified: int) -> int:
    return target.unified_regs_per_lane // allocated_vgprs(target, unified)


def waves_for_sgprs(sgpr_count: int) -> int:
    """Waves per SIMD the gfx9 SGPR file allows for a wave of ``sgpr_count`` SGPRs (reserved included)."""
    for limit, waves in SGPR_WAVE_STEPS:
        if sgpr_count <= limit:
            return waves
    return SGPR_WAVE_STEPS[-1][1] - 1


def allocated_lds(target, lds_bytes: int) -> int:
    return _round_up(lds_bytes, target.lds_alloc_granule) if lds_bytes else 0


def waves_for_lds(target, lds_bytes: int, waves_per_group: int) -> int:
    groups_per_cu = target.lds_bytes // allocated_lds(target, lds_bytes)
    return groups_per_cu * waves_per_group // target.simds_per_cu


def waves_for_workgroup(target, waves_per_group: int) -> int:
    per_cu = target.max_waves_per_simd * target.simds_per_cu
    groups = min(MAX_BARRIER_GROUPS_PER_CU, per_cu // waves_per_group)
    return groups * waves_per_group // target.simds_per_cu


@value_methods
@record(repr=False, eq=False)
class Occupancy:
    """The result of :func:`occupancy`.  ``limits`` maps each factor to the waves per SIMD it allows
    (``hardware``, ``vgprs``, ``sgprs``, then ``lds`` when the kernel uses LDS and ``workgroup`` for
    multi-wave workgroups); ``to_next_wave`` says, for every factor that binds, what one more wave
    needs (empty at the hardware maximum)."""

    waves_per_simd: int
    limited_by: str
    limits: dict
    unified_vgprs: int                 # accum_offset + AGPRs (or arch VGPRs): the metadata's .vgpr_count
    allocated_vgprs: int               # rounded to the granule: what a wave takes from the file
    sgpr_count: int                    # reserved SGPRs included
    lds_bytes: int
    allocated_lds: int
    waves_per_workgroup: int
    vgpr_granule_bound: bool = False   # the accum_offset/granule rounding alone costs a wave
    to_next_wave: list = field(default_factory=list)

    def summary(self) -> dict:
        """What ``Program.occupancy()`` returns: waves, the limiting factor, every factor's limit."""
        return {"waves_per_simd": self.waves_per_simd, "limited_by": self.limited_by,
                "limits": dict(self.limits)}

    def as_dict(self) -> dict:
        return {**self.summary(), "unified_vgprs": self.unified_vgprs, "allocated_vgprs": self.allocated_vgprs,
                "sgpr_count": self.sgpr_count, "lds_bytes": self.lds_bytes, "allocated_lds": self.allocated_lds,
                "waves_per_workgroup": self.waves_per_workgroup, "vgpr_granule_bound": self.vgpr_granule_bound,
                "to_next_wave": [dict(x) for x in self.to_next_wave]}


def occupancy(target, *, arch_vgprs: int, agprs: int, sgpr_count: int, lds_bytes: int = 0,
              workgroup_size: int = 64, unified: int | None = None) -> Occupancy:
    """Waves per SIMD of a kernel with these resources on ``target``.

    ``sgpr_count`` includes the reserved SGPRs (``EXTRA_SGPRS``), as the metadata's ``.sgpr_count``
    does.  ``unified`` overrides the unified VGPR count derived from ``arch_vgprs``/``agprs`` (a code
    object's metadata gives it directly).  ``workgroup_size`` is the flat size in work-items.
    """
    t = target
    uni = unified if unified is not None else unified_vgprs(t, arch_vgprs, agprs)
    waves_per_group = max(1, -(-workgroup_size // t.wave_size))
    limits = {"hardware": t.max_waves_per_simd,
              "vgprs": waves_for_vgprs(t, uni),
              "sgprs": waves_for_sgprs(sgpr_count)}
    if lds_bytes:
        limits["lds"] = waves_for_lds(t, lds_bytes, waves_per_group)
    if waves_per_group > 1:
        limits["workgroup"] = waves_for_workgroup(t, waves_per_group)
    waves = min(limits.values())
    occ = Occupancy(waves, min(limits, key=lambda factor: limits[factor]), limits, uni, allocated_vgprs(t, uni),
                    sgpr_count, lds_bytes, allocated_lds(t, lds_bytes), waves_per_group)
    exact = max(arch_vgprs + agprs, 1)
    occ.vgpr_granule_bound = limits["vgprs"] == waves and waves_for_vgprs(t, exact) > waves
    occ.to_next_wave = _next_wave(t, occ, arch_vgprs, agprs) if waves < t.max_waves_per_simd else []
    return occ


def _next_wave(t, occ: Occupancy, arch: int, agprs: int) -> list[dict]:
    """For each factor that binds at the current occupancy: what must shrink for one more wave."""
    want = occ.waves_per_simd + 1
    out = []
    for factor, waves in occ.limits.items():
        if waves != occ.waves_per_simd or factor == "hardware":
            continue
        if factor == "vgprs":
            budget = t.unified_regs_per_lane // want // t.vgpr_alloc_granule * t.vgpr_alloc_granule
            free = occ.unified_vgprs - budget
            item = {"factor": factor, "free": free, "unit": "unified registers", "budget": budget,
                    "free_vgprs": free, "free_agprs": None}
            if agprs:
                # arch VGPRs shrink accum_offset in steps of 4; AGPRs come off the top one by one
                g = t.accum_offset_granule
                arch_room = (budget - agprs) // g * g
                item["free_vgprs"] = arch - arch_room if arch_room >= g else None
                need = accum_offset(t, arch) + agprs - budget
                item["free_agprs"] = need if need <= agprs else None
                detail = (f"the wave needs {occ.unified_vgprs} registers (accum_offset {accum_offset(t, arch)} "
                          f"+ {agprs} AGPRs); {want} waves need <= {budget}: free {free} "
                          f"({_either(item['free_vgprs'], item['free_agprs'])})")
            else:
                detail = (f"{occ.unified_vgprs} VGPRs (allocated {occ.allocated_vgprs}); {want} waves need "
                          f"<= {budget}: free {free} VGPRs")
            item["detail"] = detail
        elif factor == "sgprs":
            # the largest SGPR count that still allows `want` waves
            budget = max(lim for lim, w in SGPR_WAVE_STEPS if w >= want)
            free = occ.sgpr_count - budget
            item = {"factor": factor, "free": free, "unit": "SGPRs", "budget": budget,
                    "detail": f"{occ.sgpr_count} SGPRs (with {EXTRA_SGPRS} reserved); {want} waves need "
                              f"<= {budget}: free {free} SGPRs"}
        elif factor == "lds":
            groups = -(-want * t.simds_per_cu // occ.waves_per_workgroup)
            per_group = t.lds_bytes // groups // t.lds_alloc_granule * t.lds_alloc_granule
            free = occ.lds_bytes - per_group if per_group else None
            item = {"factor": factor, "free": free, "unit": "LDS bytes", "budget": per_group,
                    "detail": (f"{occ.lds_bytes} B of LDS per workgroup (allocated {occ.allocated_lds}); {want} "
                               f"waves need {groups} workgroups per CU, <= {per_group} B each: free {free} B"
                               if per_group else f"{want} waves would need {groups} workgroups per CU: "
                               "more than the LDS can hold at any size")}
        else:  # workgroup
            per_cu = min(MAX_BARRIER_GROUPS_PER_CU, t.max_waves_per_simd * t.simds_per_cu // occ.waves_per_workgroup)
            item = {"factor": factor, "free": None, "unit": "work-items", "budget": None,
                    "detail": (f"{occ.waves_per_workgroup}-wave workgroups: at most "
                               f"{per_cu} per CU ({MAX_BARRIER_GROUPS_PER_CU} barriers, "
                               f"{t.max_waves_per_simd * t.simds_per_cu} wave slots); a wave count per group "
                               f"that divides {t.max_waves_per_simd * t.simds_per_cu} fills the CU")}
        item.setdefault("free_vgprs", None)
        item.setdefault("free_agprs", None)
        out.append(item)
    return out


def _either(vgprs, agprs) -> str:
    parts = []
    if vgprs is not None:
        parts.append(f"{vgprs} arch VGPRs")
    if agprs:
        parts.append(f"{agprs} AGPRs")
    return " or ".join(parts) if parts else "no single class suffices"
