"""FP8 (e4m3) quantization of rows: dynamic per-token, static per-tensor, and per-token quantization
fused after RMSNorm, add + RMSNorm and SiLU-and-mul.

Over ``x [rows, hidden]`` (bf16, f16 or fp32), every row on its own, vLLM's convention (fp32 math, each
operation rounded once; the numpy model ``isagen.prims.fp8_model`` gives the same bits):

* ``per_token``: ``amax = max |x|`` over the row, ``scale = max(amax / FP8_MAX, 1 / (FP8_MAX * 512))``,
  ``q = fp8(x * (1 / scale))``; writes ``q [rows, hidden]`` and ``scales [rows]`` (fp32).
* ``static``:    ``q = fp8(clamp(x * (1 / scale), -FP8_MAX, FP8_MAX))`` with the caller's ``scale [1]`` (fp32).
* ``rms_norm_per_token``: ``y = x * rstd * weight`` (RMSNorm in fp32, not rounded to the element type),
  then ``per_token`` of ``y``; ``add_rms_norm_per_token``: ``h = x + residual`` rounded to the element type
  (written: ``residual_out``), then the same on ``h``.  ``rstd = rsqrt(mean(h^2) + eps)``
  (``isagen.prims.reduce.rms_rstd``, the norms' own).
* ``silu_and_mul_per_token``: ``x [rows, 2, d]`` (gate | up), ``y = silu(gate) * up`` in fp32
  (``isagen.prims.math``, as the gated activations), then ``per_token`` of ``y``: ``q [rows, d]``, ``scales [rows]``.

``mxfp8`` / ``mxfp4`` (gfx950, OCP Microscaling): an E8M0 scale per block of 32 and e4m3fn codes, or fp4
e2m1 codes packed two a byte (element 2i in the low nibble; ``fp4_code`` rounds on the fp4 grid); see
``pass_mx`` and docs/gemm.md.

The fp8 format is the target's: e4m3fnuz on gfx942 (FP8_MAX 240), OCP e4m3fn on gfx950 (FP8_MAX 448);
the conversion is ``v_cvt_pk_fp8_f32`` (round to nearest even).  The two divisions are IEEE divisions
(``isagen.prims.math.div_f32``: correctly rounded on the hardware too, once per row), so the scale is
exactly torch's ``amax.float() / FP8_MAX``.

**amax** is taken on the bits: ``|x|`` of a float orders as an unsigned integer, NaN above +inf, so an
integer max (``v_pk_max_u16`` on two 16-bit elements at once, ``v_max_u32`` for fp32 and across lanes)
is exact and makes a row with a NaN give a NaN scale (and NaN codes), as ``torch.amax`` does; a row
with +-inf (and no NaN) gets scale inf: its finite elements become 0 and its infinities NaN.  A row of
zeros gets the floor ``1 / (FP8_MAX * 512)`` (vLLM's) and q = 0.  For a finite row ``|y| / scale``
never exceeds ``FP8_MAX (1 + 2^-24)^3``, which rounds to FP8_MAX, so the per-token kernels need no
clamp; the static one clamps (``v_med3_f32``, NaN kept: ``torch.clamp``'s semantics) because the
caller's scale may be too small.  The fused kernels compute ``y`` twice (for the max, then for the
codes) with the same instructions, so both passes see the same bits; SiLU-and-mul keeps ``y`` in the
registers of the gate and up halves instead (16 fp32 values in their 16 dwords).

**Layout** (``isagen.prims.rows`` with 32 or 64 bytes a lane): each lane holds 16 consecutive elements
of a chunk (two 16-byte loads of bf16/f16, four of fp32), so that its 16 fp8 results are one 16-byte
store: every access is ``buffer_load_dwordx4`` / ``buffer_store_dwordx4``.  Chunk ``j`` of wave ``w`` in
its row group, lane ``t``: columns ``(j * waves_per_row + w) * 1024 + 16 t ..``.  The whole row stays
in VGPRs: read once, ``q`` written once, one 4-byte store of the scale per row; the RMSNorm weight is
read once per workgroup (``load_vectors_once``).

**Launch contract**: ``x [rows, hidden]`` (``[rows, 2, d]`` for SiLU-and-mul), (``residual``),
(``weight [hidden]``), (``scale [1]`` f32), ``q [rows, hidden]`` fp8, (``residual_out``), (``scales [rows]``
f32); scalar ``eps`` for the norms; sizes ``rows``, ``hidden`` (``d``); grid ``cdiv(rows,
rows_per_workgroup)``; ``1 <= hidden <= max_hidden`` and ``hidden % 4 == 0`` (the fp8 row is
range-checked per 4-byte dword).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from isagen.builders.contract import LaunchInfo, ScalarParam, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.isa.operands import VCC, neg
from isagen.prims.convert import ELEMENT_BYTES, Converter
from isagen.prims.fp8_formats import E2M1_EMAX, E4M3_EMAX, FP4_MAX, FP8_MAX, fp8_format_of, min_scale_value
from isagen.prims.math import ACTIVATIONS, div_f32
from isagen.prims.occupancy import occupancy_floor
from isagen.prims.reduce import CrossWave, group_reduce, rms_rstd
from isagen.prims.rows import (
    LANE_ACCESS_BYTES,
    LANES,
    Pending,
    RowGeometry,
    RowLanes,
    RowLoop,
    RowWindow,
    lane_and_wave,
    load_vectors_once,
    log2,
    row_group_problems,
    row_length_requires,
)
from isagen.targets import TARGETS
from isagen.tiles.buffer import OOB_INLINE, BufferResource


@dataclass(frozen=True)
class QuantOp:
    kind: str            # plain | rms | gated: what y is (x, RMSNorm of x, act(gate) * up)
    dynamic: bool        # per-token scales (else the caller's static scale)
    residual: bool       # add + RMSNorm
    doc: str
    mx: bool = False     # MXFP8 / MXFP4: an E8M0 scale per block of 32 (OCP microscaling), no row scale
    fp4: bool = False    # MXFP4: fp4 e2m1 elements, two a byte (else 8-bit e4m3)

    @property
    def cols(self) -> str:
        """The size symbol of a row's length (MXFP8: its blocks of 32)."""
        return "d" if self.kind == "gated" else "blocks" if self.mx else "hidden"

    @property
    def static(self) -> bool:
        return not self.dynamic and not self.mx


OPS = {
    "per_token": QuantOp("plain", True, False, "dynamic per-token: scales = max(amax / FP8_MAX, 1/(FP8_MAX*512)), "
                                               "q = fp8(x / scale)"),
    "static": QuantOp("plain", False, False, "static per-tensor: q = fp8(clamp(x * (1 / scale))), scale a "
                                             "1-element fp32 tensor"),
    "rms_norm_per_token": QuantOp("rms", True, False, "per-token fp8 of x * rsqrt(mean(x^2) + eps) * weight"),
    "add_rms_norm_per_token": QuantOp("rms", True, True, "residual_out = x + residual; per-token fp8 of "
                                                         "rms_norm(residual_out)"),
    "silu_and_mul_per_token": QuantOp("gated", True, False, "per-token fp8 of silu(gate) * up, x [rows, 2, d]"),
    "mxfp8": QuantOp("plain", False, False, "MXFP8 (OCP microscaling; targets with OCP fp8): x [rows, blocks, 32] "
                                            "-> e4m3fn codes and an E8M0 scale per block of 32", mx=True),
    "mxfp4": QuantOp("plain", False, False, "MXFP4 (OCP microscaling; targets with OCP fp8): x [rows, blocks, 32] "
                                            "-> fp4 e2m1 codes packed two a byte (element 2i in bits 3:0, "
                                            "2i+1 in bits 7:4) q [rows, blocks, 16] and an E8M0 scale per block of 32",
                     mx=True, fp4=True),
}
MX_BLOCK = 32
ELEMENTS_PER_LANE = 16          # one 16-byte store of fp8 results per lane and chunk
ELEMENTS_PER_LANE_FP4 = 32      # MXFP4: one 16-byte store of fp4 results (and one whole block of 32) a lane
SILU = ACTIVATIONS["silu"]

PARAMS = {
    "op": Param("str", "per_token", "; ".join(f"{k}: {v.doc}" for k, v in OPS.items()), choices=tuple(OPS)),
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
                       lane_bytes=(ELEMENTS_PER_LANE_FP4 if OPS[p.op].fp4 else ELEMENTS_PER_LANE)
                       * ELEMENT_BYTES[p.dtype])


def _f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def _data_vgprs(p) -> int:
    op, g = OPS[p.op], geometry(p)
    tensors = {"plain": 1, "rms": 2 + op.residual, "gated": 2}[op.kind]
    return g.chunks * g.lane_bytes // 4 * tensors


def validate(p, target):
    out = row_group_problems(p)
    if p.waves_per_row > p.waves:
        return out
    g, op = geometry(p), OPS[p.op]
    need = _data_vgprs(p)
    if need > target.max_arch_vgprs - 80:
        out.append(("max_hidden", f"max_hidden={p.max_hidden} {p.dtype} with waves_per_row={p.waves_per_row} keeps "
                                  f"{need} VGPRs of row data per lane ({g.chunks} chunks); raise waves_per_row"))
    if op.mx and target.fp8_format != "ocp":
        ocp = ", ".join(t.name for t in TARGETS.values() if t.fp8_format == "ocp")
        elems = "fp4 e2m1" if op.fp4 else "e4m3fn"
        out.append(("op", f"{p.op} is an OCP format ({elems} elements, E8M0 scales): {ocp}, not {target.name} "
                          f"({target.fp8_format.upper()} fp8)"))
    if op.kind == "rms" and g.accesses * p.waves_per_row > p.waves:
        out.append(("waves_per_row", f"the weight is staged through LDS {p.waves} KiB at a time, and a chunk of "
                                     f"{p.dtype} is {g.accesses * p.waves_per_row} KiB with waves_per_row="
                                     f"{p.waves_per_row}: lower waves_per_row or raise waves"))
    return out


def check(p, target, program):
    return occupancy_floor(program, p.min_occupancy, "raise waves_per_row or lower max_hidden")


def _tensors(p) -> list[tuple[str, str, tuple, str]]:
    op = OPS[p.op]
    if op.kind == "gated":
        return [("x", p.dtype, ("rows", 2, "d"), "in"), ("q", "fp8", ("rows", "d"), "out"),
                ("scales", "f32", ("rows",), "out")]
    if op.mx:
        q = ("q", "u8", ("rows", "blocks", MX_BLOCK // 2), "out") if op.fp4 else \
            ("q", "fp8", ("rows", "blocks", MX_BLOCK), "out")
        return [("x", p.dtype, ("rows", "blocks", MX_BLOCK), "in"), q, ("scales", "u8", ("rows", "blocks"), "out")]
    out: list[tuple[str, str, tuple, str]] = [("x", p.dtype, ("rows", "hidden"), "in")]
    if op.residual:
        out.append(("residual", p.dtype, ("rows", "hidden"), "in"))
    if op.kind == "rms":
        out.append(("weight", p.dtype, ("hidden",), "in"))
    if op.static:
        out.append(("scale", "f32", (1,), "in"))
    out.append(("q", "fp8", ("rows", "hidden"), "out"))
    if op.residual:
        out.append(("residual_out", p.dtype, ("rows", "hidden"), "out"))
    if op.dynamic:
        out.append(("scales", "f32", ("rows",), "out"))
    return out


def _scalars(p) -> list[ScalarParam]:
    return [ScalarParam("eps", "f32", 1e-6)] if OPS[p.op].kind == "rms" else []


def launch(p, target) -> LaunchInfo:
    cols = OPS[p.op].cols
    if OPS[p.op].mx:
        requires = [("blocks >= 1", "blocks must be at least 1"),
                    (f"blocks <= {p.max_hidden // MX_BLOCK}", f"blocks x 32 is above the kernel's max_hidden="
                                                            f"{p.max_hidden} (build one with a larger max_hidden)")]
    else:
        requires = row_length_requires(cols, p.dtype, "max_hidden", p.max_hidden)
        requires.append((f"{cols} % 4 == 0", f"{cols} must be a multiple of 4 (the fp8 row is range-checked per "
                                             f"4-byte dword)"))
    return LaunchInfo(
        tensors=tuple(TensorParam(n, dt, shape, role, "positive" if n == "scale" else "")
                      for n, dt, shape, role in _tensors(p)),
        scalars=tuple(_scalars(p)),
        grid=(f"cdiv(rows, {p.rows_per_workgroup})", 1, 1),
        block=(LANES * p.waves, 1, 1),
        requires=tuple(requires),
    )


@generator("quant_fp8", params=PARAMS, shapes={"rows": "rows of x (any number)", "hidden": "elements per row",
                                               "d": "output columns of silu_and_mul_per_token (x has 2d)",
                                               "blocks": "mxfp8 / mxfp4: blocks of 32 elements per row"},
           validate=validate, check=check, launch=launch,
           doc="FP8 e4m3 quantization of rows (per-token, static, fused after RMSNorm or SiLU-and-mul); "
               "16-byte loads and stores")
def quant_fp8(p, target) -> KernelBuilder:
    return _QuantKernel(p, target).build()


class _QuantKernel:
    def __init__(self, p, target):
        self.p = p
        self.op = OPS[p.op]
        self.target = target
        self.fmt = fp8_format_of(target)
        self.fp8_max = FP8_MAX[self.fmt]
        self.geom = geometry(p)
        self.dw = self.geom.lane_bytes // 4          # dwords of one tensor a lane holds per chunk
        self.groups = p.waves // p.waves_per_row
        self.k = KernelBuilder(p.name, target, workgroup_size=LANES * p.waves)

    def build(self) -> KernelBuilder:
        k, p, g = self.k, self.p, self.geom
        k.comment(f"{p.op} fp8 quantization ({self.fmt}, max {self.fp8_max:g}) of rows of {p.dtype}, up to "
                  f"{p.max_hidden} columns: {p.waves} waves, {p.waves_per_row} per row, {p.rows_per_workgroup} rows "
                  f"per workgroup; each lane holds {g.chunks} x {g.vec} elements of a row")
        self.arguments()
        self.setup()
        self.row_loop()
        self.conv.release()
        return k

    def arguments(self):
        k = self.k
        for name, dt, _, role in _tensors(self.p):
            k.args.pointer(name, dt, "read_only" if role == "in" else "write_only")
        for sc in _scalars(self.p):
            k.args.value(sc.name, sc.dtype)
        k.args.value("rows", "u32")
        k.args.value(self.op.cols, "u32")

    # ------------------------------------------------------------------ setup
    def setup(self):
        k, p, g, op = self.k, self.p, self.geom, self.op
        k.comment("kernel arguments: pointers into buffer resources, sizes")
        x_like = ["gate", "up"] if op.kind == "gated" else ["x"] + ["residual"] * op.residual
        self.win = {n: RowWindow(k, n, k.args["x" if n in ("gate", "up") else n].offset) for n in x_like}
        if op.residual:
            self.win["residual_out"] = RowWindow(k, "residual_out", k.args["residual_out"].offset)
        self.win["q"] = RowWindow(k, "q", k.args["q"].offset)
        if op.dynamic or op.mx:
            self.win["scales"] = RowWindow(k, "scales", k.args["scales"].offset)
        else:
            self.scale_ptr = k.sgpr(2, "scale_ptr", kernel=True)
            k.s_load_dwordx2(self.scale_ptr, k.kernarg_ptr, k.args["scale"].offset, comment="scale: address")
        self.weight = None
        if op.kind == "rms":
            self.weight = BufferResource(k, "weight")
            self.weight.load_pointer(k.args["weight"].offset)
            self.eps_s = k.sgpr(1, "eps", kernel=True)
            k.s_load_dword(self.eps_s, k.kernarg_ptr, k.args["eps"].offset, comment="eps (f32)")
        self.rows = k.sgpr(1, "rows", kernel=True)
        self.cols = k.sgpr(1, "cols", kernel=True)
        k.s_load_dword(self.rows, k.kernarg_ptr, k.args["rows"].offset, comment="rows")
        k.s_load_dword(self.cols, k.kernarg_ptr, k.args[op.cols].offset, comment=f"{op.cols}: a row's length")

        lane, wave = lane_and_wave(k)
        self.wave_in_row = self.group = None
        if p.waves_per_row > 1:
            self.wave_in_row = k.sgpr(1, "wave_in_row", kernel=True)
            k.s_and_b32(self.wave_in_row, wave, p.waves_per_row - 1, comment="wave within its row group")
        if self.groups > 1:
            self.group = k.sgpr(1, "row_group", kernel=True)
            k.s_lshr_b32(self.group, wave, log2(p.waves_per_row), comment="row group within the workgroup")
        self.lanes = RowLanes(k, g, self.wave_in_row, lane, name="x_off")
        self.out_off = k.vgpr(g.chunks, "q_off", align=1, kernel=True)
        q_shift = log2(g.esize) + (1 if op.fp4 else 0)
        for j in range(g.chunks):
            k.v_lshrrev_b32(self.out_off[j], q_shift, self.lanes.offsets[j],
                            comment=f"chunk {j}: its fp4 bytes (two elements a byte)" if op.fp4
                            else f"chunk {j}: its fp8 bytes (one per element)")
        self.fp8_max_v = k.vgpr(1, "fp8_max", kernel=True)
        k.v_mov_b32(self.fp8_max_v, self.fp8_max, comment=f"FP8_MAX of {self.fmt}")
        if op.dynamic:
            self.scale_off = k.vgpr(1, "scale_off", kernel=True)
            k.v_cmp_eq_u32(VCC, 0, lane, comment="vcc: lane 0 writes the row's scale")

        if op.fp4:
            # MXFP4: a lane holds a whole block of 32 (its 16 fp4 bytes: one 16-byte store); every lane
            # writes its block's scale byte
            self.scale_off = k.vgpr(g.chunks, "scale_off", align=1, kernel=True)
            for j in range(g.chunks):
                k.v_lshrrev_b32(self.scale_off[j], log2(MX_BLOCK // 2), self.out_off[j],
                                comment=f"chunk {j}: its block (16 fp4 bytes a block)")
        elif op.mx:
            self.scale_off = k.vgpr(g.chunks, "scale_off", align=1, kernel=True)
            with k.temps(odd="v1") as t:
                k.v_and_b32(t.odd, 1, lane, comment="lanes 2i, 2i+1 hold a block of 32")
                k.v_cmp_eq_u32(VCC, 0, t.odd, comment="vcc: the even lane writes the block's scale byte")
            for j in range(g.chunks):      # the shifts first: vcc is read 2+ instructions after its compare
                k.v_lshrrev_b32(self.scale_off[j], log2(MX_BLOCK), self.out_off[j], comment=f"chunk {j}: its block")
            for j in range(g.chunks):
                k.v_cndmask_b32(self.scale_off[j], OOB_INLINE, self.scale_off[j], VCC, comment="even lanes only")

        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")
        if op.mx:
            self.blocks = k.sgpr(1, "blocks", kernel=True)
            k.s_mov_b32(self.blocks, self.cols, comment="blocks of 32 a row (bytes of a row of scales)")
            k.s_lshl_b32(self.cols, self.cols, log2(MX_BLOCK), comment="x 32: elements a row")
        self.q_bytes = self.cols
        if op.fp4:
            self.q_bytes = k.sgpr(1, "q_row_bytes", kernel=True)
            k.s_lshr_b32(self.q_bytes, self.cols, 1, comment="bytes of a row of q: two fp4 a byte")
        if op.static:
            self.scale = k.sgpr(1, "scale", kernel=True)
            k.s_load_dword(self.scale, self.scale_ptr, 0, comment="the caller's scale (fp32)")
            k.free(self.scale_ptr)
        esize = g.esize
        self.in_bytes = k.sgpr(1, "row_bytes", kernel=True)
        k.s_lshl_b32(self.in_bytes, self.cols, log2(esize), comment=f"{op.cols} x {esize}: bytes of a row's columns")
        self.steps = {n: k.sgpr(1, f"{n}_step", kernel=True) for n in self.win}
        x_row = self.in_bytes
        if op.kind == "gated":
            x_row = k.sgpr(1, "x_row_bytes", kernel=True)
            k.s_lshl_b32(x_row, self.in_bytes, 1, comment="a row of x holds gate and up")
        for n in self.win:
            if n == "q":
                k.s_mul_i32(self.steps[n], self.q_bytes, self.groups, comment="q: bytes between a row group's rows")
            elif n == "scales" and op.mx:
                k.s_mul_i32(self.steps[n], self.blocks, self.groups, comment="scales: a byte a block")
            elif n == "scales":
                k.s_mov_b32(self.steps[n], 4 * self.groups, comment="scales: 4 bytes a row")
            else:
                k.s_mul_i32(self.steps[n], x_row, self.groups, comment=f"{n}: bytes between a row group's rows")
        if op.dynamic:
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
        for n, w in self.win.items():
            if n == "q":
                w.start(self.loop.row, self.q_bytes, 0)
            elif n == "scales":
                w.start(self.loop.row, self.blocks if op.mx else 4, 0)
            else:
                w.start(self.loop.row, x_row, 0, extra=self.in_bytes if n == "up" else None)
        if x_row is not self.in_bytes:
            k.free(x_row)
        self.lanes.count_used(self.cols)
        if op.static:
            self.inv = k.vgpr(1, "inv_scale", kernel=True)
            with k.temps(s="v1", a="v1", b="v1", c="v1", d="v1", m="s2") as t:
                k.wait(lgkmcnt=0, why="the scale has landed")
                k.v_mov_b32(t.s, self.scale, comment="scale")
                div_f32(k, self.inv, 1.0, t.s, [t.a, t.b, t.c, t.d], t.m, "1 / scale")
            k.free(self.scale)
        self.abs_mask = k.sgpr(1, "abs_mask", kernel=True)
        k.s_mov_b32(self.abs_mask, 0x7FFF7FFF if (esize == 2 and op.kind == "plain") else 0x7FFFFFFF,
                    comment="clears the sign bit(s): |value| as unsigned bits")
        # the row data: per chunk, the dwords of each tensor a lane holds, tensors side by side (gate | up:
        # the chunk's 16 fp32 values of y fit their dwords)
        self.tensors = {"plain": ["x"], "rms": ["x"] + ["residual"] * op.residual, "gated": ["gate", "up"]}[op.kind]
        self.block = self.dw * len(self.tensors)
        self.data = k.vgpr(g.chunks * self.block, "row", kernel=True)
        if op.kind == "rms":
            k.comment("weight: read once per workgroup, kept in VGPRs for every row")
            self.weight.finish(self.in_bytes)
            self.w_regs = k.vgpr(g.chunks * self.dw, "weight", kernel=True)
            stage = k.lds(p.waves * LANES * LANE_ACCESS_BYTES, "vector_stage")
            load_vectors_once(k, [("weight", self.weight.regs, self.w_regs)], self.lanes, waves=p.waves, wave=wave,
                              staging=self.data, region=stage)
            self.inv_h = k.vgpr(1, "inv_hidden", kernel=True)
            self.eps = k.vgpr(1, "eps_v", kernel=True)
            k.v_cvt_f32_u32(self.inv_h, self.cols, comment="hidden as f32")
            k.v_rcp_f32(self.inv_h, self.inv_h, comment="1/hidden (as the norms: the mean divides by the true length)")
            k.v_mov_b32(self.eps, self.eps_s, comment="eps (a VGPR: the fma already reads an SGPR)")
            k.free(self.eps_s)
        k.free(wave, lane)
        self.xw = CrossWave(k, groups=self.groups, waves_per_row=p.waves_per_row, group=self.group,
                            wave_in_group=self.wave_in_row, values=2 if op.kind == "rms" else 1)
        self.conv = Converter(k, p.dtype)

    # ------------------------------------------------------------------ register views
    def _regs(self, tensor: str, j: int, first: int, count: int = 1):
        """``count`` dwords of ``tensor``'s part of chunk ``j``, from its dword ``first``."""
        base = j * self.block + self.tensors.index(tensor) * self.dw + first
        return self.data[base:base + count]

    def _y(self, j: int, e: int):
        """SiLU-and-mul: the register holding y of element ``e`` (0..15) of chunk ``j`` (fp32)."""
        return self.data[j * self.block + e]

    def _values(self, tensor: str, j: int, d: int, tmp: list):
        """The four fp32 values of elements 4d..4d+3 of ``tensor``'s chunk ``j``: the registers themselves
        (fp32) or ``tmp`` after unpacking (16-bit)."""
        if self.geom.esize == 4:
            return [self._regs(tensor, j, 4 * d + e) for e in range(4)]
        self.conv.unpack(tmp[0], tmp[1], self._regs(tensor, j, 2 * d), f"{tensor}: elements {4 * d}, {4 * d + 1}")
        self.conv.unpack(tmp[2], tmp[3], self._regs(tensor, j, 2 * d + 1), f"... {4 * d + 2}, {4 * d + 3}")
        return tmp[:4]

    # ------------------------------------------------------------------ one row per iteration
    def row_loop(self):
        k, p, g, op = self.k, self.p, self.geom, self.op
        records = k.sgpr(1, "records", kernel=True)
        self.t = [k.vgpr(1, f"t{i}", kernel=True) for i in range(4)]
        self.u = [k.vgpr(1, f"u{i}", kernel=True) for i in range(4)]
        if not op.dynamic:            # static and MXFP8 saturate
            self.masks = [VCC] + [k.sgpr(2, f"nan{i}", kernel=True) for i in range(1, 4)]
            self.clamped = [k.vgpr(1, f"c{i}", kernel=True) for i in range(4)]
        if op.mx:
            self.amax = k.vgpr(1, "amax", kernel=True)
            self.code = k.vgpr(1, "e8m0", kernel=True)
            self.shift = k.vgpr(1, "minus_x", kernel=True)
            self.nan_code = k.vgpr(1, "e8m0_nan", kernel=True)
            k.v_mov_b32(self.nan_code, 0xFF, comment="E8M0 NaN (a VGPR: v_cndmask already reads vcc)")
            if op.fp4:
                self.q4 = k.vgpr(4, "fp4_codes", kernel=True)
        if op.dynamic:
            self.amax = k.vgpr(1, "amax", kernel=True)
            self.total = k.sgpr(1, "row_amax", kernel=True)
            self.scale_v = k.vgpr(1, "scale", kernel=True)
            self.inv = k.vgpr(1, "inv_scale", kernel=True)
            self.smask = k.sgpr(2, "div_mask", kernel=True)
        if op.kind == "rms":
            self.acc = [k.vgpr(1, "sumsq_even", kernel=True), k.vgpr(1, "sumsq_odd", kernel=True)]
            self.totals = [k.sgpr(1, "row_sumsq_even", kernel=True), k.sgpr(1, "row_sumsq_odd", kernel=True)]
            self.rstd = k.vgpr(1, "rstd", kernel=True)
        if op.kind == "gated":
            n = g.vec if g.esize == 2 else 0
            self.gv = [k.vgpr(1, f"g{i}", kernel=True) for i in range(n)]     # a chunk's gate values (16-bit)
            self.uv = [k.vgpr(1, f"up{i}", kernel=True) for i in range(n)]    # ... and up values
            ntemps = SILU.precise_temps if p.dtype == "f32" else SILU.temps
            self.st = [[k.vgpr(1, f"s{i}_{t}", kernel=True) for t in range(ntemps)] for i in range(g.vec)]

        self.loop.top()
        k.comment("---- row: aim the windows at it (num_records 0 past the last row), load it")
        for what, size in (("row", self.in_bytes), ("q", self.q_bytes), ("scales", self.blocks if op.mx else 4)):
            names = [n for n in self.win if n == what or (what == "row" and n not in ("q", "scales"))]
            if names:
                self.loop.records(records, size)
                for n in names:
                    self.win[n].set_records(records)
        self.pending = Pending(k)
        for j in range(g.chunks):
            for n in self.tensors:
                for a in range(g.accesses):
                    k.buffer_load_dwordx4(self._regs(n, j, 4 * a, 4), self.lanes.offsets[j], self.win[n].regs, 0,
                                          offen=True, offset=LANE_ACCESS_BYTES * a,
                                          comment=f"{n}, chunk {j}, bytes {16 * a}..{16 * a + 15} of the lane's")
            self.pending.issue(f"row{j}")
        if op.kind == "rms":
            self.pass_rms()
        elif op.kind == "gated":
            self.pass_gated()
        if op.mx:
            self.pass_mx()
        else:
            if op.dynamic:
                if op.kind == "plain":
                    self.pass_amax_bits()
                elif op.kind == "rms":
                    self.pass_amax_rms()
                self.row_scale()
            else:
                k.wait(vmcnt=0, why="the row has landed")
            self.pass_quantize()
        k.comment("next row")
        first = next(iter(self.win.values()))
        for n, w in self.win.items():
            if w is not first:
                w.advance(self.steps[n])
        self.loop.bottom([first], self.steps[next(iter(self.win))])
        k.free(records)

    def _chunks(self, label: str):
        """Chunk indices of a pass, each guarded by ``past_end`` (branch to the pass's end label)."""
        end = self.k.label(label)
        for j in range(self.geom.chunks):
            self.lanes.past_end(j, end)
            yield j
        self.k.place(end)

    def _row_landed(self):
        self.k.wait(vmcnt=0, why="every load of the row is done (those past its end move nothing) before its "
                                 "registers are written again")
        self.pending.reset()

    # ------------------------------------------------------------------ RMSNorm: h, sum of squares, rstd
    def pass_rms(self):
        k, op, g = self.k, self.op, self.geom
        k.comment("---- pass 1: h = x" + (" + residual (rounded to the element type; residual_out)" if op.residual
                                          else "") + ", per-lane sums of h^2")
        k.v_mov_b32(self.acc[0], 0, comment="sum of squares: even elements")
        k.v_mov_b32(self.acc[1], 0, comment="... odd elements")
        t, u = self.t, self.u
        for j in self._chunks("rms_end"):
            self.pending.wait_for(f"row{j}", f"chunk {j} of the row has landed")
            for d in range(4):
                h = self._values("x", j, d, t)
                if op.residual:
                    r = self._values("residual", j, d, u)
                    for e in range(4):
                        k.v_add_f32(h[e], h[e], r[e], comment="h = x + residual" if e == 0 else None)
                    if g.esize == 2:           # h rounded to the element type, as add_rms_norm's residual_out
                        self.conv.pack(self._regs("x", j, 2 * d), h[0], h[1])
                        self.conv.pack(self._regs("x", j, 2 * d + 1), h[2], h[3])
                        h = self._values("x", j, d, t)
                for e in range(4):
                    k.v_fmac_f32(self.acc[e % 2], h[e], h[e], comment="+= h^2" if e == 0 else None)
            if op.residual:
                for a in range(g.accesses):
                    k.buffer_store_dwordx4(self._regs("x", j, 4 * a, 4), self.lanes.offsets[j],
                                           self.win["residual_out"].regs, 0, offen=True, offset=LANE_ACCESS_BYTES * a,
                                           comment=f"residual_out, chunk {j}")
        self._row_landed()
        k.comment("---- rstd = rsqrt(sum(h^2)/hidden + eps)")
        rms_rstd(k, self.xw, self.acc, self.totals, self.rstd, self.inv_h, self.eps)

    def _rms_values(self, j: int, d: int) -> list:
        """y = h * rstd * weight for elements 4d..4d+3 of chunk ``j`` in ``self.t`` (the same instructions in
        both passes: the same bits)."""
        k, t = self.k, self.t
        h = self._values("x", j, d, t)
        if self.geom.esize == 4:
            for e in range(4):
                k.v_mul_f32(t[e], h[e], self.rstd, comment="h * rstd" if e == 0 else None)
            w = [self.w_regs[j * self.dw + 4 * d + e] for e in range(4)]
        else:
            for e in range(4):
                k.v_mul_f32(t[e], t[e], self.rstd, comment="h * rstd" if e == 0 else None)
            w = self.u
            self.conv.unpack(w[0], w[1], self.w_regs[j * self.dw + 2 * d], "weight")
            self.conv.unpack(w[2], w[3], self.w_regs[j * self.dw + 2 * d + 1])
        for e in range(4):
            k.v_mul_f32(t[e], t[e], w[e], comment="* weight" if e == 0 else None)
        return t

    def pass_amax_rms(self):
        k = self.k
        k.comment("---- pass 2: per-lane max of |y| as unsigned bits, y = h * rstd * weight")
        k.v_mov_b32(self.amax, 0, comment="running max")
        for j in self._chunks("amax_end"):
            for d in range(4):
                y = self._rms_values(j, d)
                for e in range(4):
                    k.v_and_b32(self.u[e], self.abs_mask, y[e], comment="|y| bits" if e == 0 else None)
                for e in range(4):
                    k.v_max_u32(self.amax, self.amax, self.u[e])

    # ------------------------------------------------------------------ SiLU-and-mul: y in place, its max
    def pass_gated(self):
        k, p, g = self.k, self.p, self.geom
        k.comment("---- pass 1: y = silu(gate) * up in fp32, kept in the chunk's gate | up registers; per-lane "
                  "max of |y| as unsigned bits")
        k.v_mov_b32(self.amax, 0, comment="running max")
        precise = p.dtype == "f32"
        for j in self._chunks("gated_end"):
            self.pending.wait_for(f"row{j}", f"chunk {j} of the row has landed")
            if g.esize == 2:
                for d in range(g.vec // 2):
                    self.conv.unpack(self.gv[2 * d], self.gv[2 * d + 1], self._regs("gate", j, d), f"gate {d}")
                    self.conv.unpack(self.uv[2 * d], self.uv[2 * d + 1], self._regs("up", j, d), f"up {d}")
                gs, us = self.gv, self.uv
            else:
                gs = [self._regs("gate", j, e) for e in range(g.vec)]
                us = [self._regs("up", j, e) for e in range(g.vec)]
            SILU.emit(k, gs, gs, self.st, None, precise=precise)
            ys = [self._y(j, e) for e in range(g.vec)]
            for e in range(g.vec):
                k.v_mul_f32(ys[e], gs[e], us[e], comment="y = silu(gate) * up" if e == 0 else None)
            for e in range(g.vec):
                k.v_and_b32(self.st[e][0], self.abs_mask, ys[e], comment="|y| bits" if e == 0 else None)
            for e in range(g.vec):
                k.v_max_u32(self.amax, self.amax, self.st[e][0])
        self._row_landed()

    # ------------------------------------------------------------------ plain: amax on the bits
    def _lane_max_bits(self, j: int) -> None:
        """``amax`` = max(``amax``, |x| bits of chunk ``j``'s elements): two 16-bit halves at a time (then
        ``_halves_to_f32``) or fp32 bits."""
        k, t = self.k, self.t[0]
        for d in range(self.dw):
            k.v_and_b32(t, self.abs_mask, self._regs("x", j, d), comment="|x| bits" if d == 0 else None)
            if self.geom.esize == 2:
                k.v_pk_max_u16(self.amax, self.amax, t)
            else:
                k.v_max_u32(self.amax, self.amax, t)

    def pass_amax_bits(self):
        k, g = self.k, self.geom
        wide = g.esize == 2
        k.comment("---- pass 1: per-lane max of |x| as unsigned bits (NaN above +inf; zeros past the row's end "
                  "change nothing)" + ("; two 16-bit elements at a time" if wide else ""))
        k.v_mov_b32(self.amax, 0, comment="running max")
        for j in self._chunks("amax_end"):
            self.pending.wait_for(f"row{j}", f"chunk {j} of the row has landed")
            self._lane_max_bits(j)
        self._row_landed()
        self._halves_to_f32()

    def _halves_to_f32(self) -> None:
        """16-bit elements: ``amax`` (the max of each half) -> the larger as fp32 bits."""
        k, acc = self.k, self.amax
        wide = self.geom.esize == 2
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

    # ------------------------------------------------------------------ MXFP8: a scale per block of 32
    def pass_mx(self):
        """Per chunk: the block max (MXFP8: a lane holds 16 elements, a block is lanes 2i, 2i+1, one DPP
        step joins their maxima; MXFP4: a lane holds a whole block of 32), X = floor(log2(amax)) - emax (8
        for e4m3, 2 for fp4 e2m1) from the exponent bits (at least -127; NaN code 0xff for a block with a
        NaN or an infinity), the elements x * 2^-X (``v_ldexp_f32``: exact), then MXFP8: saturated to +-448
        with NaN kept, ``v_cvt_pk_fp8_f32``; MXFP4: ``fp4_code`` (round to nearest even on the fp4 grid,
        saturated to +-6); 16 bytes of codes a lane, and the block's E8M0 byte (the even lane's / every
        lane's)."""
        k, fp4 = self.k, self.op.fp4
        emax = E2M1_EMAX if fp4 else E4M3_EMAX
        who = "one lane" if fp4 else "lanes 2i, 2i+1"
        k.comment(f"---- {'MXFP4' if fp4 else 'MXFP8'}: per block of 32 ({who}) X = floor(log2(max |x|)) "
                  f"- {emax}, codes of x / 2^X saturated, the E8M0 byte X + 127")
        t = self.t
        for j in self._chunks("mx_end"):
            self.pending.wait_for(f"row{j}", f"chunk {j} of the row has landed")
            k.v_mov_b32(self.amax, 0, comment="the lane's max |x|")
            self._lane_max_bits(j)
            self._halves_to_f32()
            if not fp4:
                group_reduce(k, [self.amax], "umax", 2, ["max |x| of the block"])
            k.v_lshrrev_b32(self.code, 23, self.amax, comment="biased exponent of amax (0: zero or subnormal, "
                                                              "255: inf or NaN)")
            k.v_cmp_ne_u32(VCC, 255, self.code, comment="vcc: the block is finite (read 2 instructions later)")
            k.v_add_u32(self.shift, -emax, self.code, comment=f"X + 127 = exponent - {emax} ...")
            k.v_max_i32(self.shift, 0, self.shift, comment="... at least 0 (X >= -127)")
            k.v_cndmask_b32(self.code, self.nan_code, self.shift, VCC, comment="E8M0 code: X + 127, or NaN 0xff")
            k.v_sub_u32(self.shift, 127, self.shift, comment="-X: the elements are x * 2^-X")
            k.buffer_store_byte(self.code, self.scale_off[j], self.win["scales"].regs, 0, offen=True,
                                comment="the block's scale (its lane)" if fp4 else "the block's scale (the even lane)")
            for d in range(self.geom.vec // 4):
                y = self._values("x", j, d, t)
                for e in range(4):
                    k.v_ldexp_f32(t[e], y[e], self.shift, comment="x / 2^X (exact)" if e == 0 else None)
                if fp4:
                    for e in range(4):
                        self.fp4_code(t[e], 4 * d + e)
                    continue
                self.clamp(t)
                out = self._regs("x", j, d)
                k.v_cvt_pk_fp8_f32(out, t[0], t[1], comment=f"elements {4 * d}, {4 * d + 1} -> e4m3fn, low word")
                k.v_cvt_pk_fp8_f32(out, t[2], t[3], op_sel=[0, 0, 1], comment="... high word")
            if fp4:
                k.buffer_store_dwordx4(self.q4, self.out_off[j], self.win["q"].regs, 0, offen=True,
                                       comment=f"q, chunk {j}: 32 fp4 codes in 16 bytes (lanes past the row's "
                                               "end are dropped)")
            else:
                k.buffer_store_dwordx4(self._regs("x", j, 0, 4), self.out_off[j], self.win["q"].regs, 0, offen=True,
                                       comment=f"q, chunk {j}: 16 codes (lanes past the row's end are dropped)")
        self._row_landed()

    def fp4_code(self, y, i: int) -> None:
        """fp4 e2m1 code of ``y`` (fp32, |y| < 8 or not finite) into nibble ``i % 8`` of ``fp4_codes[i // 8]``
        (element 2m in the low nibble of byte m: ``isagen.prims.fp8_model.pack_fp4``'s order).

        Round to nearest even on the fp4 grid by the float trick: the grid spacing of |y|'s binade is
        s = 2^(e-1) for |y| in [2^e, 2^(e+1)), e >= 0, and 0.5 below 1; c = s * 2^23 has ulp s, so
        fl(|y| + c) - c is |y| rounded to a multiple of s, ties to the even multiple (the even fp4 code;
        |y| < 8 <= 2^23 s keeps the sum in c's binade).  ``v_min_f32`` saturates to 6 (inf and NaN too:
        IEEE minNum).  The magnitude code of r in {0, .5, 1, 1.5, 2, 3, 4, 6} is 2r for r <= 2 and
        (bits(r) >> 22) - 252 (exponent and mantissa bit) for r >= 1; both are right at 1 and 2, and
        above 2 the second is the smaller, below 1 the first is the larger, so it is med3(2r, that, 4).
        The sign is y's bit 31 (-0 gives code 8)."""
        k = self.k
        a, c, h = self.u[0], self.u[1], self.u[2]
        first = i == 0
        k.v_and_b32(a, 0x7FFFFFFF, y, comment="|y|" if first else None)
        k.v_and_b32(c, 0x7F800000, y, comment="|y|'s exponent bits" if first else None)
        k.v_add_u32(c, 22 << 23, c, comment="c = 2^23 * 2^(e-1): ulp(c) = the fp4 spacing of |y|'s binade"
                    if first else None)
        k.v_max_i32(c, 149 << 23, c, comment="... at least 2^22 (spacing 0.5 below 1)" if first else None)
        k.v_add_f32(a, a, c, comment="|y| + c: rounds to the spacing, ties to even" if first else None)
        k.v_sub_f32(a, a, c, comment="r = |y| on the fp4 grid (exact)" if first else None)
        k.v_min_f32(a, FP4_MAX, a, comment="saturate to 6 (inf, NaN too)" if first else None)
        k.v_add_f32(h, a, a, comment="2r" if first else None)
        k.v_cvt_u32_f32(h, h, comment="2r: the code for r <= 2" if first else None)
        k.v_lshrrev_b32(a, 22, a, comment="exponent and mantissa bit of r" if first else None)
        k.v_add_u32(a, -252, a, comment="the code for r >= 1" if first else None)
        k.v_med3_i32(a, h, a, 4, comment="the magnitude code" if first else None)
        k.v_lshrrev_b32(h, 28, y, comment="y's sign at bit 3" if first else None)
        k.v_and_or_b32(a, h, 8, a, comment="sign | magnitude" if first else None)
        dw, nib = divmod(i, 8)
        if nib == 0:
            k.v_mov_b32(self.q4[dw], a, comment=f"element {i}: nibble 0 of fp4 dword {dw}")
        else:
            k.v_lshl_or_b32(self.q4[dw], a, 4 * nib, self.q4[dw], comment=f"element {i}: nibble {nib}")

    def row_scale(self):
        k = self.k
        k.comment("---- scale = max(amax / FP8_MAX, 1/(FP8_MAX*512)); inv = 1 / scale (IEEE divisions)")
        (amax,) = self.xw.reduce([self.amax], "umax", [self.total], ["max |y|"], vgpr_ok=True)
        if amax.cls != "v":
            k.v_mov_b32(self.amax, amax, comment="the row's max |y|")
        t = self.t
        div_f32(k, self.scale_v, self.amax, self.fp8_max_v, t, self.smask, "amax / FP8_MAX")
        floor = _f32_bits(min_scale_value(self.fmt))
        k.v_max_u32(self.scale_v, floor, self.scale_v,
                    comment=f"at least 1/(FP8_MAX*512) = {min_scale_value(self.fmt):.6g} (as bits: NaN stays NaN)")
        k.buffer_store_dword(self.scale_v, self.scale_off, self.win["scales"].regs, 0, offen=True,
                             comment="scales[row] (one lane of the row group)")
        div_f32(k, self.inv, 1.0, self.scale_v, t, self.smask, "1 / scale")

    # ------------------------------------------------------------------ y * inv -> fp8, stored
    def pass_quantize(self):
        k, op = self.k, self.op
        k.comment("---- last pass: q = fp8(y * inv)" + (" clamped to +-FP8_MAX, NaN kept" if not op.dynamic else "")
                  + ", four elements a dword, one 16-byte store a chunk")
        t = self.t
        for j in self._chunks("q_end"):
            for d in range(4):
                # the four fp32 values of elements 4d..4d+3; the codes go to dword d of the chunk's first
                # registers, whose old contents the earlier groups have consumed
                if op.kind == "rms":
                    y = self._rms_values(j, d)
                    out = self._regs("x", j, d)
                elif op.kind == "gated":
                    y = [self._y(j, 4 * d + e) for e in range(4)]
                    out = self._y(j, d)
                else:
                    y = self._values("x", j, d, t)
                    out = self._regs("x", j, d)
                for e in range(4):
                    k.v_mul_f32(t[e], y[e], self.inv, comment="y / scale" if e == 0 else None)
                if not op.dynamic:
                    self.clamp(t)
                k.v_cvt_pk_fp8_f32(out, t[0], t[1], comment=f"elements {4 * d}, {4 * d + 1} -> fp8, low word")
                k.v_cvt_pk_fp8_f32(out, t[2], t[3], op_sel=[0, 0, 1], comment="... high word")
            k.buffer_store_dwordx4(self._regs(self.tensors[0], j, 0, 4), self.out_off[j], self.win["q"].regs, 0,
                                   offen=True,
                                   comment=f"q, chunk {j}: 16 fp8 (lanes past the row's end are dropped)")

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
