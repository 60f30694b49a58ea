"""FP8 (e4m3) quantization of rows: dynamic per-token and static per-tensor.

Over ``x [rows, hidden]`` (bf16, f16 or fp32), every row on its own, vLLM's convention (fp32 math, each
operation rounded once; the numpy model ``isagen.prims.fp8_model`` gives the same bits):

* ``per_token``: ``amax = max |x|`` over the row, ``scale = max(amax / FP8_MAX, 1 / (FP8_MAX * 512))``,
  ``q = fp8(x * (1 / scale))``; writes ``q [rows, hidden]`` and ``scales [rows]`` (fp32).
* ``static``:    ``q = fp8(clamp(x * (1 / scale), -FP8_MAX, FP8_MAX))`` with the caller's ``scale [1]`` (fp32).

The fp8 format is the target's: e4m3fnuz on gfx942 (FP8_MAX 240), OCP e4m3fn on gfx950 (FP8_MAX 448);
the conversion is ``v_cvt_pk_fp8_f32`` (round to nearest even).  The two divisions are IEEE divisions
(``isagen.prims.math.div_f32``: correctly rounded on the hardware too, once per row), so the scale is
exactly torch's ``amax.float() / FP8_MAX``.

**amax** is taken on the bits: ``|x|`` of a float orders as an unsigned integer, NaN above +inf, so an
integer max (``v_pk_max_u16`` on two 16-bit elements at once, ``v_max_u32`` for fp32 and across lanes)
is exact and makes a row with a NaN give a NaN scale (and NaN codes), as ``torch.amax`` does; a row
with +-inf (and no NaN) gets scale inf: its finite elements become 0 and its infinities NaN.  A row of
zeros gets the floor ``1 / (FP8_MAX * 512)`` (vLLM's) and q = 0.  For a finite row ``|x| / scale``
never exceeds ``FP8_MAX (1 + 2^-24)^3``, which rounds to FP8_MAX, so the per-token kernel needs no
clamp; the static one clamps (``v_med3_f32``, NaN kept: ``torch.clamp``'s semantics) because the
caller's scale may be too small.

**Layout** (``isagen.prims.rows`` with 32 or 64 bytes a lane): each lane holds 16 consecutive elements
of a chunk (two 16-byte loads of bf16/f16, four of fp32), so that its 16 fp8 results are one 16-byte
store: every access is ``buffer_load_dwordx4`` / ``buffer_store_dwordx4``.  Chunk ``j`` of wave ``w`` in
its row group, lane ``t``: columns ``(j * waves_per_row + w) * 1024 + 16 t ..``.  The whole row stays
in VGPRs: read once, ``q`` written once, one 4-byte store of the scale per row.

**Launch contract**: ``x [rows, hidden]``, (``scale [1]`` f32), ``q [rows, hidden]`` fp8, (``scales [rows]``
f32); sizes ``rows``, ``hidden``; grid ``cdiv(rows, rows_per_workgroup)``; ``1 <= hidden <= max_hidden``
and ``hidden % 4 == 0`` (the fp8 row is range-checked per 4-byte dword).
"""

from __future__ import annotations

import struct

from isagen.builders.contract import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.isa.operands import VCC, neg
from isagen.prims.convert import ELEMENT_BYTES, Converter
from isagen.prims.fp8_model import FP8_MAX, fp8_format_of, min_scale
from isagen.prims.math import div_f32
from isagen.prims.occupancy import occupancy_floor
from isagen.prims.reduce import CrossWave
from isagen.prims.rows import (
    LANE_ACCESS_BYTES,
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
)
from isagen.tiles.buffer import OOB_INLINE

OPS = {"per_token": "dynamic per-token: scales = max(amax / FP8_MAX, 1/(FP8_MAX*512)), q = fp8(x / scale)",
       "static": "static per-tensor: q = fp8(clamp(x * (1 / scale))), scale a 1-element fp32 tensor"}
ELEMENTS_PER_LANE = 16          # one 16-byte store of fp8 results per lane and chunk

PARAMS = {
    "op": Param("str", "per_token", "; ".join(f"{k}: {v}" for k, v in OPS.items()), choices=tuple(OPS)),
    "dtype": Param("str", "bf16", "element type of x (math in fp32)", choices=("f32", "bf16", "f16")),
    "max_hidden": Param("int", 8192, "the widest row the kernel takes (registers are sized for it)", min=4,
                        max=65536),
    "waves": Param("int", 4, "waves per workgroup", pow2=True, min=1, max=16),
    "waves_per_row": Param("int", 1, "waves sharing one row (their maxima meet in LDS)", pow2=True, min=1, max=16),
    "rows_per_workgroup": Param("int", 16, "rows per workgroup (a multiple of waves / waves_per_row)",
                                min=1, max=4096),
    "min_occupancy": Param("int", 1, "reject the kernel when fewer waves than this fit on a SIMD", min=1, max=8),
}


def geometry(p) -> RowGeometry:
    return RowGeometry(p.dtype, p.max_hidden, p.waves_per_row,
                       lane_bytes=ELEMENTS_PER_LANE * ELEMENT_BYTES[p.dtype])


def _f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def validate(p, target):
    out = row_group_problems(p)
    if p.waves_per_row > p.waves:
        return out
    g = geometry(p)
    need = g.chunks * g.lane_bytes // 4
    if need > target.max_arch_vgprs - 48:
        out.append(("max_hidden", f"max_hidden={p.max_hidden} {p.dtype} with waves_per_row={p.waves_per_row} keeps "
                                  f"{need} VGPRs of row data per lane ({g.chunks} chunks); raise waves_per_row"))
    return out


def check(p, target, program):
    return occupancy_floor(program, p.min_occupancy, "raise waves_per_row or lower max_hidden")


def _tensors(p) -> list[tuple[str, str, tuple, str]]:
    out: list[tuple[str, str, tuple, str]] = [("x", p.dtype, ("rows", "hidden"), "in")]
    if p.op == "static":
        out.append(("scale", "f32", (1,), "in"))
    out.append(("q", "fp8", ("rows", "hidden"), "out"))
    if p.op == "per_token":
        out.append(("scales", "f32", ("rows",), "out"))
    return out


def launch(p, target) -> LaunchInfo:
    requires = row_length_requires("hidden", p.dtype, "max_hidden", p.max_hidden)
    requires.append(("hidden % 4 == 0", "hidden must be a multiple of 4 (the fp8 row is range-checked per 4-byte "
                                        "dword)"))
    return LaunchInfo(
        tensors=tuple(TensorParam(n, dt, shape, role, "positive" if n == "scale" else "")
                      for n, dt, shape, role in _tensors(p)),
        grid=(f"cdiv(rows, {p.rows_per_workgroup})", 1, 1),
        block=(LANES * p.waves, 1, 1),
        requires=tuple(requires),
    )


@generator("quant_fp8", params=PARAMS, shapes={"rows": "rows of x (any number)", "hidden": "elements per row"},
           validate=validate, check=check, launch=launch,
           doc="FP8 e4m3 quantization of rows (dynamic per-token or static); 16-byte loads and stores")
def quant_fp8(p, target) -> KernelBuilder:
    return _QuantKernel(p, target).build()


class _QuantKernel:
    def __init__(self, p, target):
        self.p = p
        self.target = target
        self.fmt = fp8_format_of(target)
        self.fp8_max = FP8_MAX[self.fmt]
        self.geom = geometry(p)
        self.groups = p.waves // p.waves_per_row
        self.k = KernelBuilder(p.name, target, workgroup_size=LANES * p.waves)

    def build(self) -> KernelBuilder:
        k, p, g = self.k, self.p, self.geom
        k.comment(f"{p.op} fp8 quantization ({self.fmt}, max {self.fp8_max:g}) of [rows, hidden] {p.dtype}, hidden <= "
                  f"{p.max_hidden}: {p.waves} waves, {p.waves_per_row} per row, {p.rows_per_workgroup} rows per "
                  f"workgroup; each lane holds {g.chunks} x {g.vec} elements of a row")
        self.arguments()
        self.setup()
        self.row_loop()
        self.conv.release()
        return k

    def arguments(self):
        k = self.k
        for name, dt, _, role in _tensors(self.p):
            k.args.pointer(name, dt, "read_only" if role == "in" else "write_only")
        k.args.value("rows", "u32")
        k.args.value("hidden", "u32")

    # ------------------------------------------------------------------ setup
    def setup(self):
        k, p, g = self.k, self.p, self.geom
        k.comment("kernel arguments: pointers into buffer resources, sizes")
        self.win = {"x": RowWindow(k, "x", k.args["x"].offset), "q": RowWindow(k, "q", k.args["q"].offset)}
        if p.op == "per_token":
            self.win["scales"] = RowWindow(k, "scales", k.args["scales"].offset)
        else:
            self.scale_ptr = k.sgpr(2, "scale_ptr", kernel=True)
            k.s_load_dwordx2(self.scale_ptr, k.kernarg_ptr, k.args["scale"].offset, comment="scale: address")
        self.rows = k.sgpr(1, "rows", kernel=True)
        self.hidden = k.sgpr(1, "hidden", kernel=True)
        k.s_load_dword(self.rows, k.kernarg_ptr, k.args["rows"].offset, comment="rows")
        k.s_load_dword(self.hidden, k.kernarg_ptr, k.args["hidden"].offset, comment="hidden")

        lane, wave = lane_and_wave(k)
        self.wave_in_row = self.group = None
        if p.waves_per_row > 1:
            self.wave_in_row = k.sgpr(1, "wave_in_row", kernel=True)
            k.s_and_b32(self.wave_in_row, wave, p.waves_per_row - 1, comment="wave within its row group")
        if self.groups > 1:
            self.group = k.sgpr(1, "row_group", kernel=True)
            k.s_lshr_b32(self.group, wave, log2(p.waves_per_row), comment="row group within the workgroup")
        k.free(wave)
        self.lanes = RowLanes(k, g, self.wave_in_row, lane, name="x_off")
        self.out_off = k.vgpr(g.chunks, "q_off", align=1, kernel=True)
        for j in range(g.chunks):
            k.v_lshrrev_b32(self.out_off[j], log2(g.esize), self.lanes.offsets[j],
                            comment=f"chunk {j}: its fp8 bytes (one per element)")
        self.fp8_max_v = k.vgpr(1, "fp8_max", kernel=True)
        k.v_mov_b32(self.fp8_max_v, self.fp8_max, comment=f"FP8_MAX of {self.fmt}")
        if p.op == "per_token":
            self.scale_off = k.vgpr(1, "scale_off", kernel=True)
            k.v_cmp_eq_u32(VCC, 0, lane, comment="vcc: lane 0 writes the row's scale")
        k.free(lane)

        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")
        if p.op == "static":
            self.scale = k.sgpr(1, "scale", kernel=True)
            k.s_load_dword(self.scale, self.scale_ptr, 0, comment="the caller's scale (fp32)")
            k.free(self.scale_ptr)
        self.in_bytes = k.sgpr(1, "row_bytes", kernel=True)
        self.steps = {n: k.sgpr(1, f"{n}_step", kernel=True) for n in self.win}
        k.s_lshl_b32(self.in_bytes, self.hidden, log2(g.esize), comment=f"hidden x {g.esize}: bytes per row of x")
        k.s_mul_i32(self.steps["x"], self.in_bytes, self.groups, comment="x: bytes between a row group's rows")
        k.s_mul_i32(self.steps["q"], self.hidden, self.groups, comment="q: bytes between a row group's rows")
        if "scales" in self.win:
            k.s_mov_b32(self.steps["scales"], 4 * self.groups, comment="scales: 4 bytes a row")
            writer = 0
            if self.wave_in_row is not None:
                writer = k.sgpr(1, "writer", kernel=True)
                k.s_cmp_eq_u32(self.wave_in_row, 0, comment="scc: the row group's first wave writes the scale")
                k.s_cselect_b32(writer, 0, OOB_INLINE)
            k.v_mov_b32(self.scale_off, writer, comment="0 in the row group's first wave, else past every window")
            k.v_cndmask_b32(self.scale_off, OOB_INLINE, self.scale_off, VCC,
                            comment="... and only in its lane 0")
            if self.wave_in_row is not None:
                k.free(writer)
        self.loop = RowLoop(k, rows=self.rows, rows_per_wg=p.rows_per_workgroup, groups=self.groups,
                            group=self.group, wg_id=k.workgroup_id["x"])
        self.win["x"].start(self.loop.row, self.in_bytes, 0)
        self.win["q"].start(self.loop.row, self.hidden, 0)
        if "scales" in self.win:
            self.win["scales"].start(self.loop.row, 4, 0)
        self.lanes.count_used(self.hidden)
        if p.op == "static":
            self.inv = k.vgpr(1, "inv_scale", kernel=True)
            with k.temps(s="v1", a="v1", b="v1", c="v1", d="v1", m="s2") as t:
                k.wait(lgkmcnt=0, why="the scale has landed")
                k.v_mov_b32(t.s, self.scale, comment="scale")
                div_f32(k, self.inv, 1.0, t.s, [t.a, t.b, t.c, t.d], t.m, "1 / scale")
            k.free(self.scale)
        self.abs_mask = k.sgpr(1, "abs_mask", kernel=True)
        k.s_mov_b32(self.abs_mask, 0x7FFF7FFF if g.esize == 2 else 0x7FFFFFFF,
                    comment="clears the sign bit(s): |x| as unsigned bits")
        self.xw = CrossWave(k, groups=self.groups, waves_per_row=p.waves_per_row, group=self.group,
                            wave_in_group=self.wave_in_row, values=1)
        self.conv = Converter(k, p.dtype)

    # ------------------------------------------------------------------ one row per iteration
    def row_loop(self):
        k, p, g = self.k, self.p, self.geom
        self.x = k.vgpr(g.chunks * g.lane_bytes // 4, "x", kernel=True)
        records = k.sgpr(1, "records", kernel=True)
        self.t = [k.vgpr(1, f"t{i}", kernel=True) for i in range(4)]
        if p.op == "static":
            self.masks = [VCC] + [k.sgpr(2, f"nan{i}", kernel=True) for i in range(1, 4)]
            self.clamped = [k.vgpr(1, f"c{i}", kernel=True) for i in range(4)]
        if p.op == "per_token":
            self.amax = k.vgpr(1, "amax", kernel=True)
            self.total = k.sgpr(1, "row_amax", kernel=True)
            self.scale_v = k.vgpr(1, "scale", kernel=True)
            self.inv = k.vgpr(1, "inv_scale", kernel=True)
            self.smask = k.sgpr(2, "div_mask", kernel=True)

        self.loop.top()
        k.comment("---- row: aim the windows at it (num_records 0 past the last row), load it")
        self.loop.records(records, self.in_bytes)
        self.win["x"].set_records(records)
        self.loop.records(records, self.hidden)
        self.win["q"].set_records(records)
        if "scales" in self.win:
            self.loop.records(records, 4)
            self.win["scales"].set_records(records)
        self.pending = Pending(k)
        for j in range(g.chunks):
            for a in range(g.accesses):
                k.buffer_load_dwordx4(self._dwords(j, 4 * a, 4), self.lanes.offsets[j], self.win["x"].regs, 0,
                                      offen=True, offset=LANE_ACCESS_BYTES * a,
                                      comment=f"x, chunk {j}, bytes {16 * a}..{16 * a + 15} of the lane's")
            self.pending.issue(f"x{j}")
        if p.op == "per_token":
            self.pass_amax()
            self.row_scale()
        else:
            k.wait(vmcnt=0, why="the row has landed")
        self.pass_quantize()
        k.comment("next row")
        for n in ("q", "scales"):
            if n in self.win:
                self.win[n].advance(self.steps[n])
        self.loop.bottom([self.win["x"]], self.steps["x"])
        k.free(records)

    def _dwords(self, j, first, count):
        base = j * self.geom.lane_bytes // 4 + first
        return self.x[base:base + count]

    # ------------------------------------------------------------------ amax on the bits
    def pass_amax(self):
        k, g = self.k, self.geom
        wide = g.esize == 2
        k.comment("---- pass 1: per-lane max of |x| as unsigned bits (NaN above +inf; zeros past the row's end "
                  "change nothing)" + ("; two 16-bit elements at a time" if wide else ""))
        acc, t = self.amax, self.t[0]
        k.v_mov_b32(acc, 0, comment="running max")
        end = k.label("amax_end")
        for j in range(g.chunks):
            self.lanes.past_end(j, end)
            self.pending.wait_for(f"x{j}", f"chunk {j} of the row has landed")
            for d in range(g.lane_bytes // 4):
                k.v_and_b32(t, self.abs_mask, self._dwords(j, d, 1), comment="|x| bits" if d == 0 else None)
                if wide:
                    k.v_pk_max_u16(acc, acc, t)
                else:
                    k.v_max_u32(acc, acc, t)
        k.place(end)
        k.wait(vmcnt=0, why="every load of the row is done (those past its end move nothing) before its "
                            "registers are written again")
        self.pending.reset()
        if wide:
            lo, hi = self.t[1], self.t[2]
            if self.p.dtype == "bf16":
                k.v_lshlrev_b32(lo, 16, acc, comment="low half's max -> fp32 bits")
                k.v_and_b32(hi, 0xFFFF0000, acc, comment="high half's max -> fp32 bits")
            else:
                k.v_cvt_f32_f16(lo, acc, comment="low half's max -> fp32 (exact; NaN stays NaN)")
                k.v_lshrrev_b32(hi, 16, acc)
                k.v_cvt_f32_f16(hi, hi, comment="high half's max -> fp32")
            k.v_max_u32(acc, lo, hi, comment="the lane's max |x|")

    def row_scale(self):
        k = self.k
        k.comment("---- scale = max(amax / FP8_MAX, 1/(FP8_MAX*512)); inv = 1 / scale (IEEE divisions)")
        (amax,) = self.xw.reduce([self.amax], "umax", [self.total], ["max |x|"], vgpr_ok=True)
        if amax.cls != "v":
            k.v_mov_b32(self.amax, amax, comment="the row's max |x|")
        t = self.t
        div_f32(k, self.scale_v, self.amax, self.fp8_max_v, t, self.smask, "amax / FP8_MAX")
        floor = _f32_bits(float(min_scale(self.fmt)))
        k.v_max_u32(self.scale_v, floor, self.scale_v,
                    comment=f"at least 1/(FP8_MAX*512) = {float(min_scale(self.fmt)):.6g} (as bits: NaN stays NaN)")
        k.buffer_store_dword(self.scale_v, self.scale_off, self.win["scales"].regs, 0, offen=True,
                             comment="scales[row] (one lane of the row group)")
        div_f32(k, self.inv, 1.0, self.scale_v, t, self.smask, "1 / scale")

    # ------------------------------------------------------------------ x * inv -> fp8, stored
    def pass_quantize(self):
        k, p, g = self.k, self.p, self.geom
        wide = g.esize == 2
        k.comment("---- pass 2: q = fp8(x * inv)" + (" clamped to +-FP8_MAX, NaN kept" if p.op == "static" else "")
                  + ", four elements a dword, one 16-byte store a chunk")
        end = k.label("q_end")
        t = self.t
        for j in range(g.chunks):
            self.lanes.past_end(j, end)
            for d in range(4):
                # the dword's four elements as fp32: from dwords 2d, 2d+1 (16-bit) or 4d..4d+3 (fp32)
                if wide:
                    self.conv.unpack(t[0], t[1], self._dwords(j, 2 * d, 1), f"elements {4 * d}, {4 * d + 1}")
                    self.conv.unpack(t[2], t[3], self._dwords(j, 2 * d + 1, 1), f"elements {4 * d + 2}, {4 * d + 3}")
                    src = t
                else:
                    src = [self._dwords(j, 4 * d + e, 1) for e in range(4)]
                for e in range(4):
                    k.v_mul_f32(t[e], src[e], self.inv, comment="x / scale" if e == 0 else None)
                if p.op == "static":
                    self.clamp(t)
                out = self._dwords(j, d, 1)
                k.v_cvt_pk_fp8_f32(out, t[0], t[1], comment=f"elements {4 * d}, {4 * d + 1} -> fp8, low word")
                k.v_cvt_pk_fp8_f32(out, t[2], t[3], op_sel=[0, 0, 1], comment="... high word")
            k.buffer_store_dwordx4(self._dwords(j, 0, 4), self.out_off[j], self.win["q"].regs, 0, offen=True,
                                   comment=f"q, chunk {j}: 16 fp8 (lanes past the row's end are dropped)")
        k.place(end)

    def clamp(self, t):
        """t[e] = clamp(t[e], -FP8_MAX, FP8_MAX) with NaN kept (``v_med3_f32`` gives a bound for a NaN).  The
        compares come first: their masks are read four instructions later (no wait states)."""
        k, c = self.k, self.clamped
        for e in range(4):
            k.v_cmp_u_f32(self.masks[e], t[e], t[e], comment="NaN?" if e == 0 else None)
        for e in range(4):
            k.v_med3_f32(c[e], t[e], neg(self.fp8_max_v), self.fp8_max_v,
                         comment="saturate to +-FP8_MAX" if e == 0 else None)
        for e in range(4):
            k.v_cndmask_b32(t[e], c[e], t[e], self.masks[e], comment="a NaN stays NaN" if e == 0 else None)
