"""Reductions (sum, max) of fp32 values over the lanes of a wave and over the waves that share a row.

**Within a wave** (``wave_reduce``): six DPP steps, each combining every lane with a partner lane, then
``v_readlane_b32`` of lane 63 into an SGPR (wave-uniform, usable as a VALU operand).  No LDS is touched:

====  ======================  =========  =====================================================
step  DPP control             row_mask   after the step
====  ======================  =========  =====================================================
1     quad_perm:[1,0,3,2]     0xf        each lane holds the sum of its pair
2     quad_perm:[2,3,0,1]     0xf        ... of its quad (4 lanes)
3     row_half_mirror         0xf        ... of its half-row (8 lanes)
4     row_mirror              0xf        ... of its row (16 lanes)
5     row_bcast:15            0xa        rows 1 and 3 add lane 15 of the row before: rows 0+1, 2+3
6     row_bcast:31            0xc        rows 2 and 3 add lane 31: lane 63 holds all 64 lanes
====  ======================  =========  =====================================================

Every instruction combines two registers with the same operation the whole way, so a max is exactly
the max and a sum is a fixed tree of fp32 additions.  A DPP instruction may not read a VGPR written by
the instruction just before it (2 wait states); ``wave_reduce`` of several values interleaves them so
those slots are filled with the other values' steps instead of ``s_nop``s.

**Across waves** (``CrossWave``): when ``waves_per_row`` waves share a row, each wave writes its wave
total into an LDS slot, waits for the write, passes one ``s_barrier``, and reads the totals of its row's
waves back in wave order, so every wave of the row combines the same numbers in the same order and
gets bit-identical results.  The slots are double-buffered (an SGPR toggles between the halves after
each reduction): a wave that races ahead into the next reduction writes the other half, and it cannot
come back to this half before every wave has passed the next reduction's barrier, which they reach
only after using (so having read) this one.
"""

from __future__ import annotations

from isagen.builders.program import LdsRegion
from isagen.isa.operands import Reg

OPS = ("add", "max", "umax")      # umax: unsigned max of the bits (|x| as fp32 bits: NaN above +inf)
_DPP_STEPS = (
    ({"quad_perm": [1, 0, 3, 2]}, 0xF, "pairs of lanes"),
    ({"quad_perm": [2, 3, 0, 1]}, 0xF, "quads"),
    ({"row_half_mirror": True}, 0xF, "half-rows (8 lanes)"),
    ({"row_mirror": True}, 0xF, "rows (16 lanes)"),
    ({"row_bcast": 15}, 0xA, "rows 0+1 and 2+3 (into rows 1 and 3)"),
    ({"row_bcast": 31}, 0xC, "all 64 lanes (into row 3: lane 63 holds the total)"),
)
LAST_LANE = 63


def _combine(k, op: str):
    if op not in OPS:
        raise ValueError(f"reduction must be one of {OPS}, not {op!r}")
    return {"add": k.v_add_f32, "max": k.v_max_f32, "umax": k.v_max_u32}[op]


def wave_reduce(k, values: list[Reg], op: str, out: list[Reg], what: list[str] | None = None) -> None:
    """``out[i]`` (SGPR) = the ``op`` (add, max, umax) of VGPR ``values[i]`` over the 64 lanes.

    ``values`` are clobbered (lane 63 ends with the total).  All lanes must be active."""
    if len(values) != len(out):
        raise ValueError("one output SGPR per value")
    combine = _combine(k, op)
    what = what or [f"value {i}" for i in range(len(values))]
    for mods, row_mask, reach in _DPP_STEPS:
        for v, name in zip(values, what):
            combine(v, v, v, row_mask=row_mask, bank_mask=0xF, **mods, comment=f"{name}: {op} over {reach}")
    for v, s, name in zip(values, out, what):
        k.v_readlane_b32(s, v, LAST_LANE, comment=f"{name}: the wave's {op} (lane {LAST_LANE})")


def group_reduce(k, values: list[Reg], op: str, lanes: int, what: list[str] | None = None) -> None:
    """Every lane of each aligned group of ``lanes`` lanes (2, 4, 8 or 16: the first DPP steps of
    ``wave_reduce``) ends with the ``op`` (add, max) of ``values[i]`` over its group, in place.

    A row of data spread over a lane group (a 256-byte row of 16-bit elements: 16 lanes of 16 bytes)
    gets its sum without leaving VGPRs; the same fixed tree in every group.  All lanes must be active."""
    steps = {2: 1, 4: 2, 8: 3, 16: 4}.get(lanes)
    if steps is None:
        raise ValueError(f"a lane group has 2, 4, 8 or 16 lanes, not {lanes}")
    combine = _combine(k, op)
    what = what or [f"value {i}" for i in range(len(values))]
    for mods, row_mask, reach in _DPP_STEPS[:steps]:
        for v, name in zip(values, what):
            combine(v, v, v, row_mask=row_mask, bank_mask=0xF, **mods, comment=f"{name}: {op} over {reach}")


class CrossWave:
    """Combine per-wave values of the ``waves_per_row`` waves that share a row, through LDS.

    ``group`` / ``wave_in_group`` are SGPRs (which row group this wave belongs to, and its place in it);
    ``groups`` row groups share the workgroup.  Up to ``values`` values (default 1) are reduced together
    by one call (one barrier for all of them).  With ``waves_per_row == 1`` nothing is allocated and
    ``reduce`` only does the wave part.
    """

    def __init__(self, k, *, groups: int, waves_per_row: int, group: Reg | None, wave_in_group: Reg | None,
                 values: int = 1, name: str = "reduce"):
        self.k = k
        self.wpr = waves_per_row
        self.values = values
        self.groups = groups
        self.region: LdsRegion | None = None     # the LDS slots, allocated only with several waves per row
        if waves_per_row == 1:
            return
        self.half = groups * waves_per_row * values * 4          # bytes of one buffer half
        self.region = k.lds(2 * self.half, name, align=16)
        self.parity = k.sgpr(1, f"{name}_half", kernel=True)
        self.write_at = k.vgpr(1, f"{name}_slot", kernel=True)   # this wave's slot in half 0
        self.read_at = k.vgpr(1, f"{name}_row", kernel=True)     # its row group's first slot in half 0
        stride = waves_per_row * values * 4
        with k.temps(s="s1") as t:
            if group is not None and groups > 1:
                k.s_mul_i32(t.s, group, stride, comment=f"{name}: row group x {stride} bytes")
                k.s_add_u32(t.s, t.s, self.region.offset, comment=f"{name}: + the slots' LDS offset")
                k.v_mov_b32(self.read_at, t.s, comment=f"{name}: this row's slots (half 0)")
            else:
                k.v_mov_b32(self.read_at, self.region.offset, comment=f"{name}: the row's slots (half 0)")
            k.s_mul_i32(t.s, wave_in_group, values * 4, comment=f"{name}: wave in the row x {values * 4} bytes")
            k.v_add_u32(self.write_at, t.s, self.read_at, comment=f"{name}: this wave's slot (half 0)")
        k.s_mov_b32(self.parity, 0, comment=f"{name}: LDS half of the next reduction (toggles)")

    def reduce(self, values: list[Reg], op: str, out: list[Reg], what: list[str] | None = None, *,
               vgpr_ok: bool = False) -> list[Reg]:
        """``out[i]`` (SGPR) = ``op`` of VGPR ``values[i]`` over every lane of every wave of the row
        (``values`` are clobbered).  Returns the registers that hold the results: ``out``, or with
        ``vgpr_ok`` and more than one wave per row ``values`` themselves (every lane holds the same
        result after the LDS exchange), which saves the ``v_readfirstlane`` and the 2 wait states a VALU
        read of the SGPR it writes would need."""
        k = self.k
        n = len(values)
        if not 1 <= n <= self.values:
            raise ValueError(f"this reduction combines 1 to {self.values} value(s) at a time, not {n}")
        what = what or [f"value {i}" for i in range(len(values))]
        wave_reduce(k, values, op, out, what)
        if self.region is None:          # one wave per row (``__init__`` allocated nothing): no exchange
            return out
        combine = _combine(k, op)
        lds = (self.region.offset, self.region.offset + self.region.size)
        with k.temps(addr="v1") as t:
            k.v_add_u32(t.addr, self.parity, self.write_at, comment="this wave's slot in the current half")
            for i, (s, name) in enumerate(zip(out, what)):
                k.v_mov_b32(values[i], s, comment=f"{name}: the wave's total")
                k.ds_write_b32(t.addr, values[i], offset=4 * i, lds=lds, comment=f"{name}: to LDS for the other waves")
            k.wait(lgkmcnt=0, why="this wave's totals are in LDS before the barrier")
            k.barrier(why=f"every wave of the row has written its {op}")
            k.v_add_u32(t.addr, self.parity, self.read_at, comment="the row's slots in the current half")
            parts = [[k.vgpr(1, f"part_{i}_{w}") for w in range(self.wpr)] for i in range(n)]
            for w in range(self.wpr):
                for i in range(n):
                    k.ds_read_b32(parts[i][w], t.addr, offset=4 * (w * self.values + i), lds=lds,
                                  comment=f"{what[i]}: total of wave {w} of the row")
        k.s_xor_b32(self.parity, self.parity, self.half, comment="the next reduction uses the other half")
        k.wait(lgkmcnt=0, why="the row's totals have arrived")
        for w in range(1, self.wpr):             # the values' chains interleaved: no read right after a write
            for i in range(n):
                if w == 1:
                    combine(values[i], parts[i][0], parts[i][1],
                            comment=f"{what[i]}: waves 0 and 1 (same order in every wave)")
                else:
                    combine(values[i], values[i], parts[i][w], comment=f"{what[i]}: + wave {w}")
        for i in range(n):
            if not vgpr_ok:
                k.v_readfirstlane_b32(out[i], values[i], comment=f"{what[i]}: the row's {op} (uniform)")
            k.free(*parts[i])
        return list(values) if vgpr_ok else out


def combine_totals(k, op: str, dst: Reg, a: Reg, b: Reg, what: str = "") -> None:
    """``dst`` (VGPR) = ``op`` (add, max) of two reduction results as ``CrossWave.reduce`` returns them:
    VGPRs directly; SGPRs (one wave per row: ``v_readlane``) through a move, since gfx9's VALU reads one
    SGPR per instruction.  ``a`` is read first (written first: the fewer wait states left).  Addition
    and max are commutative, so the order changes no bit."""
    combine = _combine(k, op)
    if a.cls == "v":
        combine(dst, a, b, comment=what or None)
    else:
        k.v_mov_b32(dst, a)
        combine(dst, b, dst, comment=what or None)


def rms_rstd(k, xw: CrossWave, sums: list[Reg], totals: list[Reg], rstd: Reg, inv_n: Reg, eps: Reg) -> None:
    """RMSNorm's ``rstd`` (a VGPR) = rsqrt(sum of squares / n + eps) from the per-lane partial sums ``sums``
    (two VGPRs, even and odd elements, clobbered) over the row: one reduction of both, then
    ``v_fma_f32(total, 1/n, eps)`` and ``v_rsq_f32``.  ``totals``: two SGPRs; ``inv_n``, ``eps``: VGPRs."""
    a, b = xw.reduce(sums, "add", totals, ["sum of squares (even elements)", "sum of squares (odd elements)"],
                     vgpr_ok=True)
    combine_totals(k, "add", rstd, a, b, "sum of squares")
    k.v_fma_f32(rstd, rstd, inv_n, eps, comment="mean square + eps")
    k.v_rsq_f32(rstd, rstd, comment="rstd")
