"""Row softmax over a ``[rows, cols]`` tensor: out = exp(x - max(x)) / sum(exp(x - max(x))) per row.

fp32 math on bf16, f16 or fp32 tensors; the result is rounded to nearest even once.  The row sits in
VGPRs (``isagen.prims.rows``: 16 bytes per lane per access, ``waves_per_row`` waves per row), so it is
read once and written once:

1. the row max (``v_max3_f32``: two elements per instruction), reduced over the row's lanes and waves;
2. e = 2^((x - max) log2 e) with a ``v_pk_add_f32`` and a ``v_pk_fma_f32`` per pair of elements and one
   ``v_exp_f32`` per element, and their sum; fp32 tensors keep e in place of x, 16-bit tensors
   recompute it in step 3 (cheaper than the registers a second copy of the row would take).  A row whose
   |max| is large has the max subtracted before the scaling, so that the max's own exponent stays 0
   (``isagen.prims.math.exp_shifted``): any finite row works, up to +-fp32 max;
3. out = e * (1/sum) (``v_rcp_f32``), rounded and stored.

Every step stops after the last 16-byte chunk that holds columns of the row, so a row narrower than
``max_cols`` costs only its own chunks.  When that last chunk is partial (``cols`` not a multiple of
``64 * vec * waves_per_row``) its lanes past the end have read zeros (buffer range check); those elements
are masked to -inf for the max and to 0 for the sum by a second version of steps 1-2 that one scalar
branch per row selects only then.

A row of -inf gives NaN (0/0), as torch does; NaN anywhere in a row makes the row NaN, and so does +inf
(inf - inf), as in torch; -inf elements of a row with a finite max give 0.

Launch contract: ``x [rows, cols]`` -> ``out [rows, cols]``, grid ``cdiv(rows, rows_per_workgroup)``
of ``64 * waves`` work-items; ``cols <= max_cols``, even for 16-bit types.
"""

from __future__ import annotations

from isagen.builders.contract import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.isa.operands import VCC
from isagen.prims.convert import Converter, PairView
from isagen.prims.math import LOG2E, exp_shifted, shift_constants
from isagen.prims.occupancy import occupancy_floor
from isagen.prims.reduce import CrossWave, combine_totals
from isagen.prims.rows import (
    LANES,
    Pending,
    RowGeometry,
    RowLanes,
    RowLoop,
    RowWindow,
    lane_and_wave,
    log2,
    row_group_problems,
    row_length_requires,
    store_chunk,
)

DTYPES = ("f32", "bf16", "f16")
NEG_INF = 0xFF800000

PARAMS = {
    "dtype": Param("str", "bf16", "element type of x and out (math in fp32, out rounded to nearest even)",
                   choices=DTYPES),
    "max_cols": Param("int", 8192, "the longest row the kernel takes (registers are sized for it); any "
                                   "length up to it runs", min=2, max=65536),
    "waves": Param("int", 4, "waves per workgroup", pow2=True, min=1, max=16),
    "waves_per_row": Param("int", 1, "waves sharing one row (their max and sum meet in LDS)", pow2=True,
                           min=1, max=16),
    "rows_per_workgroup": Param("int", 16, "rows per workgroup (a multiple of waves / waves_per_row)",
                                min=1, max=4096),
    "min_occupancy": Param("int", 1, "reject the kernel when fewer waves than this fit on a SIMD", min=1, max=8),
}


def _geometry(p) -> RowGeometry:
    return RowGeometry(p.dtype, p.max_cols, p.waves_per_row)


def validate(p, target):
    out = row_group_problems(p)
    if p.waves_per_row > p.waves:
        return out
    g = _geometry(p)
    if 5 * g.chunks > target.max_arch_vgprs - 32:
        out.append(("max_cols", f"max_cols={p.max_cols} {p.dtype} with waves_per_row={p.waves_per_row} keeps "
                                f"{5 * g.chunks} VGPRs of row per lane; raise waves_per_row"))
    return out


def check(p, target, program):
    return occupancy_floor(program, p.min_occupancy, "raise waves_per_row or lower max_cols")


def launch(p, target) -> LaunchInfo:
    requires = row_length_requires("cols", p.dtype, "max_cols", p.max_cols)
    return LaunchInfo(
        tensors=(TensorParam("x", p.dtype, ("rows", "cols"), "in"),
                 TensorParam("out", p.dtype, ("rows", "cols"), "out")),
        grid=(f"cdiv(rows, {p.rows_per_workgroup})", 1, 1),
        block=(LANES * p.waves, 1, 1),
        requires=tuple(requires),
    )


@generator("softmax", params=PARAMS, shapes={"rows": "rows (any number)", "cols": "elements per row"},
           validate=validate, check=check, launch=launch,
           doc="softmax over the last dimension; row in registers, one read and one write")
def softmax(p, target) -> KernelBuilder:
    return _Softmax(p, target).build()


class _Softmax:
    def __init__(self, p, target):
        self.p = p
        self.geom = _geometry(p)
        self.groups = p.waves // p.waves_per_row
        self.k = KernelBuilder(p.name, target, workgroup_size=LANES * p.waves)

    def build(self) -> KernelBuilder:
        k, p, g = self.k, self.p, self.geom
        k.comment(f"softmax over rows of up to {p.max_cols} {p.dtype}: {p.waves} waves, {p.waves_per_row} per "
                  f"row, {p.rows_per_workgroup} rows per workgroup; each lane holds {g.chunks} x {g.vec} "
                  f"elements of a row")
        k.args.pointer("x", p.dtype, "read_only")
        k.args.pointer("out", p.dtype, "write_only")
        k.args.value("rows", "u32")
        k.args.value("cols", "u32")
        self.win = {t: RowWindow(k, t, k.args[t].offset) for t in ("x", "out")}
        self.rows = k.sgpr(1, "rows", kernel=True)
        self.cols = k.sgpr(1, "cols", kernel=True)
        k.s_load_dword(self.rows, k.kernarg_ptr, k.args["rows"].offset, comment="rows")
        k.s_load_dword(self.cols, k.kernarg_ptr, k.args["cols"].offset, comment="cols: elements per row")

        lane, wave = lane_and_wave(k)
        wave_in_row = group = None
        if p.waves_per_row > 1:
            wave_in_row = k.sgpr(1, "wave_in_row", kernel=True)
            k.s_and_b32(wave_in_row, wave, p.waves_per_row - 1, comment="wave within its row group")
        if self.groups > 1:
            group = k.sgpr(1, "row_group", kernel=True)
            k.s_lshr_b32(group, wave, log2(p.waves_per_row), comment="row group within the workgroup")
        k.free(wave)
        self.lanes = RowLanes(k, g, wave_in_row, lane)
        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")
        self.lanes.make_limit(self.cols)
        self.lanes.count_used(self.cols)
        self.row_bytes = k.sgpr(1, "row_bytes", kernel=True)
        self.step = k.sgpr(1, "row_step", kernel=True)
        k.s_lshl_b32(self.row_bytes, self.cols, log2(g.esize), comment=f"cols x {g.esize}: bytes per row")
        k.s_mul_i32(self.step, self.row_bytes, self.groups, comment="bytes between a row group's rows")
        self.loop = RowLoop(k, rows=self.rows, rows_per_wg=p.rows_per_workgroup, groups=self.groups, group=group,
                            wg_id=k.workgroup_id["x"])
        for w in self.win.values():
            w.start(self.loop.row, self.row_bytes, 0)
        self.xw = CrossWave(k, groups=self.groups, waves_per_row=p.waves_per_row, group=group,
                            wave_in_group=wave_in_row, values=2)
        self.conv = Converter(k, p.dtype)
        self.view = PairView(self.conv)
        self.row()
        self.conv.release()
        return k

    def row(self):
        k, g = self.k, self.geom
        self.x = k.vgpr(4 * g.chunks, "x", kernel=True)
        self.t = [k.vgpr(2, f"pair_{i}", kernel=True) for i in range(3)]
        self.neg_inf = k.vgpr(1, "neg_inf", kernel=True)
        self.acc = k.vgpr(1, "acc", kernel=True)
        self.acc2 = k.vgpr(1, "acc2", kernel=True)
        self.total2 = k.sgpr(1, "row_total2", kernel=True)
        self.consts = k.vgpr(2, "exp_consts", kernel=True)     # the row's -m_hi, -c (exp_shifted)
        self.log2e = k.sgpr(2, "log2e", kernel=True)            # log2(e): VOP3P takes no literal
        self.inv = k.vgpr(1, "inv_sum", kernel=True)
        self.total = k.sgpr(1, "row_total", kernel=True)
        self.mask = k.sgpr(2, "mask_lo", kernel=True)
        # two sets of masks, (mask_lo, vcc) and (mask2_lo, mask2_hi): the next pair's compares are issued
        # before this pair's selects, so no select reads a mask written fewer than 2 instructions before
        self.masks = [(self.mask, VCC), (k.sgpr(2, "mask2_lo", kernel=True), k.sgpr(2, "mask2_hi", kernel=True))]
        records = k.sgpr(1, "records", kernel=True)
        k.v_mov_b32(self.neg_inf, NEG_INF, comment="-inf for the elements past a short row's end")
        for i in range(2):
            k.s_mov_b32(self.log2e[i], LOG2E, comment="log2(e), twice" if i == 0 else None)

        self.loop.top()
        k.comment("---- row: aim the windows at it (num_records 0 past the last row), load it")
        self.loop.records(records, self.row_bytes)
        for w in self.win.values():
            w.set_records(records)
        self.pending = Pending(k)
        for j in range(g.chunks):
            k.buffer_load_dwordx4(self.x[4 * j:4 * j + 4], self.lanes.offsets[j], self.win["x"].regs, 0, offen=True,
                                  comment=f"x, chunk {j}")
            self.pending.issue(f"x{j}")
        full, done = k.label("full_row"), k.label("max_done")
        self.lanes.partial_last(self.cols)
        k.s_cbranch_scc0(full, comment="whole chunks: no masks needed")
        issued = list(self.pending.ops)
        self.pass_max(masked=True)
        k.s_branch(done)
        k.place(full)
        self.pending.ops = issued                    # the same loads are in flight on this path
        self.pass_max(masked=False)
        k.place(done)
        k.comment("---- the row's max")
        (mx,) = self.xw.reduce([self.acc], "max", [self.total], ["max"], vgpr_ok=True)
        if mx.cls != "v":
            k.v_mov_b32(self.t[0][1], mx)            # a VOP2 literal leaves src1 to a VGPR
            mx = self.t[0][1]
        shift_constants(k, self.consts, mx, self.t[0][0])
        full, done = k.label("full_row_sum"), k.label("sum_done")
        if self.conv.wide:
            self.lanes.partial_last(self.cols)
            k.s_cbranch_scc0(full, comment="whole chunks: no masks needed")
            self.pass_sum(masked=True)
            k.s_branch(done)
            k.place(full)
        self.pass_sum(masked=False)
        if self.conv.wide:
            k.place(done)
        k.comment("---- the row's sum")
        a, b = self.xw.reduce([self.acc, self.acc2], "add", [self.total, self.total2], ["sum (even)", "sum (odd)"],
                              vgpr_ok=True)
        combine_totals(k, "add", self.inv, a, b, "sum")
        k.v_rcp_f32(self.inv, self.inv, comment="1/sum")
        self.pass_out()
        self.loop.bottom(list(self.win.values()), self.step)
        k.free(records)

    def _compare_pair(self, limit, i):
        """Mask set ``i % 2`` = elements 2i / 2i+1 inside the row (issued a pair ahead of its selects)."""
        lo, hi = self.masks[i % 2]
        self.lanes.valid(limit, 2 * i, lo)
        self.lanes.valid(limit, 2 * i + 1, hi)

    def _compare_ahead(self, limit, i):
        """Before pair ``i``'s selects: the compares of pair 0 (at the chunk's start) and of pair i+1."""
        if i == 0:
            self._compare_pair(limit, 0)
        if i + 1 < self.view.pairs:
            self._compare_pair(limit, i + 1)

    def _mask_pair(self, lo, hi, fill, i):
        """lo/hi = ``fill`` where elements 2i/2i+1 are past the row's end (``_compare_ahead`` first)."""
        k = self.k
        m_lo, m_hi = self.masks[i % 2]
        k.v_cndmask_b32(lo, fill, lo, m_lo, comment="past the row's end")
        k.v_cndmask_b32(hi, fill, hi, m_hi)

    def _pair(self, X, i):
        """The aligned VGPR pair that ``view.load(X, i, ...)`` returned: the unpacked temporaries of a
        16-bit type, fp32 elements 2i and 2i+1 themselves."""
        return self.t[0] if self.view.conv.wide else X[2 * i:2 * i + 2]

    def pass_max(self, masked: bool):
        k, g, view = self.k, self.geom, self.view
        k.comment("---- pass 1: max per lane" + (" (short row: -inf past its end)" if masked else ""))
        k.v_mov_b32(self.acc, self.neg_inf, comment="running max")
        end, rest = k.label("max_end"), k.label("max_rest")
        for j in range(g.chunks):
            self.lanes.past_end(j, rest)
            self.pending.wait_for(f"x{j}", f"chunk {j} has landed")
            X = self.x[4 * j:4 * j + 4]
            limit = self.lanes.chunk_limit(j, self.t[2][0]) if masked else None
            for i in range(view.pairs):
                if masked:
                    self._compare_ahead(limit, i)
                lo, hi = view.load(X, i, self.t[0], f"x[{j}].{i}")
                if masked:
                    self._mask_pair(lo, hi, self.neg_inf, i)
                k.v_max3_f32(self.acc, self.acc, lo, hi, comment="max" if i == 0 else None)
        if g.chunks > 1:
            k.s_branch(end)
            k.place(rest)
            k.wait(vmcnt=0, why="the loads of the chunks past the row's end (they move nothing) are done before "
                                "their registers are written again")
            k.place(end)
        self.pending.reset()

    def pass_sum(self, masked: bool):
        k, g, view = self.k, self.geom, self.view
        k.comment("---- pass 2: e = exp(x - max), sum per lane" + (" (short row: 0 past its end)" if masked else "")
                  + ("; e replaces x" if not view.conv.wide else ""))
        k.v_mov_b32(self.acc, 0, comment="running sums: even elements")
        k.v_mov_b32(self.acc2, 0, comment="... odd elements")
        end = k.label("sum_end")
        for j in range(g.chunks):
            self.lanes.past_end(j, end)
            X = self.x[4 * j:4 * j + 4]
            limit = self.lanes.chunk_limit(j, self.t[2][0]) if masked else None
            for i in range(view.pairs):
                if masked:
                    self._compare_ahead(limit, i)
                lo, hi = view.load(X, i, self.t[0], f"x[{j}].{i}")
                src = self._pair(X, i)
                e = self.t[1] if view.conv.wide else src     # fp32: e replaces x in the row's registers
                el, eh = e[0], e[1]
                exp_shifted(k, e, src, self.consts, self.log2e)
                if masked:
                    self._mask_pair(el, eh, 0, i)
                k.v_add_f32(self.acc, self.acc, el, comment="+= e" if i == 0 else None)
                k.v_add_f32(self.acc2, self.acc2, eh)
        k.place(end)

    def pass_out(self):
        k, g, view = self.k, self.geom, self.view
        k.comment("---- pass 3: out = e / sum" + (" (e recomputed)" if view.conv.wide else ""))
        end = k.label("out_end")
        for j in range(g.chunks):
            self.lanes.past_end(j, end)
            X = self.x[4 * j:4 * j + 4]
            for i in range(view.pairs):
                lo, hi = view.load(X, i, self.t[0], f"x[{j}].{i}")
                if view.conv.wide:
                    exp_shifted(k, self.t[0], self.t[0], self.consts, self.log2e)
                k.v_mul_f32(lo, lo, self.inv, comment="e / sum" if i == 0 else None)
                k.v_mul_f32(hi, hi, self.inv)
                view.store(X, i, lo, hi)
            store_chunk(k, self.x, self.lanes, self.win["out"], j, "out")
        k.place(end)
