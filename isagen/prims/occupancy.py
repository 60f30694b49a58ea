"""The occupancy floor of the memory-bound kernels: one rule, one message.

A memory-bound kernel hides memory latency with waves in flight, so each declares a ``min_occupancy``
parameter and its ``check`` hook refuses a build that fits fewer waves per SIMD (``--force`` emits it
anyway, with the reason in the header).  The rule and the common part of the message live here; each
kernel adds only its advice (which of its parameters lowers the register use).
"""

from __future__ import annotations


def limiting_resource(program) -> str:
    """What the binding occupancy factor of ``program`` amounts to, in the units a reader can change."""
    factor = program.occupancy()["limited_by"]
    if factor == "vgprs":
        return f"{program.vgprs} VGPRs" + (f" + {program.agprs} AGPRs" if program.agprs else "")
    if factor == "sgprs":
        return f"{program.sgprs} SGPRs"
    if factor == "lds":
        return f"{program.lds_bytes} bytes of LDS"
    if factor == "workgroup":
        return f"{program.waves_per_workgroup} waves per workgroup"
    return f"{program.target.max_waves_per_simd} waves per SIMD at most"


def occupancy_floor(program, min_occupancy: int, advice: str) -> list[tuple[str, str]]:
    """The ``check`` hook's answer for a kernel with a ``min_occupancy`` parameter: ``[]`` when at least
    ``min_occupancy`` waves fit on a SIMD, else one problem naming what limits the kernel and, from
    ``advice``, what to change (e.g. ``"lower unroll"``)."""
    occ = program.occupancy()
    if occ["waves_per_simd"] >= min_occupancy:
        return []
    return [("min_occupancy", f"the kernel fits {occ['waves_per_simd']} waves/SIMD (limited by "
                              f"{occ['limited_by']}: {limiting_resource(program)}), below "
                              f"min_occupancy={min_occupancy}; {advice}")]
