"""Row normalisations: RMSNorm, fused add + RMSNorm, LayerNorm, fused dropout + residual + LayerNorm.

Over a ``[rows, hidden]`` tensor, every row on its own (fp32 math on bf16, f16 or fp32 tensors, results
rounded to nearest even once):

* ``rms_norm``:                out = x * rsqrt(mean(x^2) + eps) * weight
* ``add_rms_norm``:            h = x + residual (rounded to the element type: ``residual_out``),
                               out = rms_norm(h)
* ``layer_norm``:              out = (x - mean(x)) * rsqrt(var(x) + eps) * weight (+ bias); var is the
                               population variance, by the corrected two-pass algorithm over the row
                               in registers: mean0 = sum(x)/n, then with d = x - mean0 (exact near the
                               mean) mean = mean0 + sum(d)/n, var = sum(d^2)/n - (sum(d)/n)^2
* ``dropout_add_layer_norm``:  h = dropout(x, p) + residual (``residual_out``), out = layer_norm(h);
                               dropout is the counter-based hash of ``isagen.prims.random`` (seed and
                               offset: reproducible), kept elements are scaled by 1/(1-p)

**Layout** (``isagen.prims.rows``): a row belongs to a row group of ``waves_per_row`` waves; lanes hold
16-byte vectors (``buffer_load_dwordx4``), ``cdiv(max_hidden, 64 * vec * waves_per_row)`` per lane, so
the whole row sits in VGPRs: it is read from memory once and written once, whatever the number of
passes over it.  The weight (and bias) are read once per workgroup (staged through LDS) before the row
loop and stay in VGPRs.
A workgroup of ``waves`` waves takes ``rows_per_workgroup`` consecutive rows; its
``waves / waves_per_row`` row groups walk them in a loop.

**Reductions** (``isagen.prims.reduce``): DPP within each wave, then LDS across the row group's waves.

**Tails**: each tensor is read through a buffer resource aimed at the current row with ``num_records``
= the row's bytes, so a hidden size that is not a multiple of the vector width (1000) costs nothing: the
lanes past the end load zeros (neutral for the sums) and store nothing.  Every pass stops after the
last chunk that holds columns (one scalar compare per chunk), so a row narrower than ``max_hidden``
costs only its own chunks' instructions.  LayerNorm's centred sums are masked when the last chunk is
partial (one scalar branch per row picks the masked pass only then), and the mean and variance divide
by the true ``hidden``.

**Launch contract**: tensors ``x [rows, hidden]``, (``residual``), ``weight [hidden]``, (``bias``),
``out [rows, hidden]``, (``residual_out``); scalars ``eps`` (and ``p``, ``seed``, ``offset`` for dropout);
sizes ``rows``, ``hidden``; grid ``cdiv(rows, rows_per_workgroup)`` workgroups of ``64 * waves`` work-items;
``hidden <= max_hidden``, and even for 16-bit types (rows are range-checked per dword).
"""

from __future__ import annotations

from dataclasses import dataclass

from isagen.builders.contract import LaunchInfo, ScalarParam, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.isa.operands import VCC, neg
from isagen.prims.convert import Converter, PairView
from isagen.prims.occupancy import occupancy_floor
from isagen.prims.random import DropoutRng
from isagen.prims.reduce import CrossWave, combine_totals, rms_rstd
from isagen.prims.rows import (
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
    store_chunk,
)
from isagen.tiles.buffer import BufferResource

DTYPES = ("f32", "bf16", "f16")


@dataclass(frozen=True)
class Norm:
    kind: str               # rms | layer
    residual: bool          # adds a residual (and writes residual_out)
    dropout: bool           # dropout on x before the residual add
    formula: str
    eps: float

    def reference(self, bias: bool) -> str:
        """The torch expression ``isagen run`` checks against (float64; see isagen.prims.random for the mask)."""
        h = "x"
        if self.dropout:
            h = "isagen.prims.random.torch_dropout(x, p, seed, offset)"
        if self.residual:
            h = f"({h} + residual)"
        if self.kind == "rms":
            out = f"{h} * torch.rsqrt(({h} * {h}).mean(-1, keepdim=True) + eps) * weight"
        else:
            out = f"F.layer_norm({h}, ({h}).shape[-1:], weight, {'bias' if bias else 'None'}, eps)"
        return f"({out}, {h})" if self.residual else out


NORMS = {
    "rms_norm": Norm("rms", False, False, "out = x * rsqrt(mean(x^2) + eps) * weight", 1e-6),
    "add_rms_norm": Norm("rms", True, False, "residual_out = x + residual; out = rms_norm(residual_out)", 1e-6),
    "layer_norm": Norm("layer", False, False, "out = (x - mean) * rsqrt(var + eps) * weight (+ bias)", 1e-5),
    "dropout_add_layer_norm": Norm("layer", True, True, "residual_out = dropout(x, p) + residual; "
                                   "out = layer_norm(residual_out)", 1e-5),
}

PARAMS = {
    "op": Param("str", "rms_norm", "; ".join(f"{k}: {v.formula}" for k, v in NORMS.items()), choices=tuple(NORMS)),
    "dtype": Param("str", "bf16", "element type of every tensor (math in fp32, results rounded to nearest even)",
                   choices=DTYPES),
    "max_hidden": Param("int", 8192, "the widest row the kernel takes (registers are sized for it); any hidden "
                                     "size up to it runs", min=2, max=65536),
    "waves": Param("int", 4, "waves per workgroup", pow2=True, min=1, max=16),
    "waves_per_row": Param("int", 1, "waves sharing one row (their partial sums meet in LDS)", pow2=True,
                           min=1, max=16),
    "rows_per_workgroup": Param("int", 16, "rows per workgroup (a multiple of waves / waves_per_row)",
                                min=1, max=4096),
    "bias": Param("bool", False, "layer norms: add a bias after the weight"),
    "min_occupancy": Param("int", 1, "reject the kernel when fewer waves than this fit on a SIMD", min=1, max=8),
}


def _geometry(p) -> RowGeometry:
    return RowGeometry(p.dtype, p.max_hidden, p.waves_per_row)


def _data_vgprs(p) -> int:
    """VGPRs of row-length data one wave holds: the row (and residual) and the weight (and bias)."""
    op = NORMS[p.op]
    g = _geometry(p)
    tensors = 2 + op.residual + (p.bias and op.kind == "layer")
    return 4 * g.chunks * tensors + g.chunks


def validate(p, target):
    op = NORMS[p.op]
    out = row_group_problems(p)
    if p.waves_per_row > p.waves:
        return out
    if p.bias and op.kind != "layer":
        out.append(("bias", f"{p.op} has no bias (layer norms only)"))
    need = _data_vgprs(p)
    if need > target.max_arch_vgprs - 40:
        g = _geometry(p)
        out.append(("max_hidden", f"max_hidden={p.max_hidden} {p.dtype} with waves_per_row={p.waves_per_row} keeps "
                                  f"{need} VGPRs of row data per lane ({g.chunks} chunks); raise waves_per_row "
                                  f"(at most {target.max_arch_vgprs - 40} fit with the temporaries)"))
    return out


def check(p, target, program):
    return occupancy_floor(program, p.min_occupancy, "raise waves_per_row or lower max_hidden")


def _tensors(p) -> list[tuple[str, tuple[str, ...], str]]:
    op = NORMS[p.op]
    out: list[tuple[str, tuple[str, ...], str]] = [("x", ("rows", "hidden"), "in")]   # (name, dims, direction)
    if op.residual:
        out.append(("residual", ("rows", "hidden"), "in"))
    out.append(("weight", ("hidden",), "in"))
    if p.bias:
        out.append(("bias", ("hidden",), "in"))
    out.append(("out", ("rows", "hidden"), "out"))
    if op.residual:
        out.append(("residual_out", ("rows", "hidden"), "out"))
    return out


def _scalars(p) -> list[ScalarParam]:
    op = NORMS[p.op]
    out = [ScalarParam("eps", "f32", op.eps)]
    if op.dropout:
        # p is a probability: torch's dropout refuses one outside [0, 1], and so does a launch
        out += [ScalarParam("p", "f32", 0.0, (0.0, 1.0)), ScalarParam("seed", "u32", 0),
                ScalarParam("offset", "u32", 0)]
    return out


def launch(p, target) -> LaunchInfo:
    requires = row_length_requires("hidden", p.dtype, "max_hidden", p.max_hidden)
    return LaunchInfo(
        tensors=tuple(TensorParam(n, p.dtype, shape, role) for n, shape, role in _tensors(p)),
        scalars=tuple(_scalars(p)),
        grid=(f"cdiv(rows, {p.rows_per_workgroup})", 1, 1),
        block=(LANES * p.waves, 1, 1),
        requires=tuple(requires),
    )


@generator("norm", params=PARAMS, shapes={"rows": "rows of x (any number)", "hidden": "elements per row"},
           validate=validate, check=check, launch=launch,
           doc="RMSNorm / LayerNorm (fused add, dropout) over rows; row in registers, one read and one write")
def norm(p, target) -> KernelBuilder:
    return _NormKernel(p, target).build()


class _NormKernel:
    def __init__(self, p, target):
        self.p = p
        self.op = NORMS[p.op]
        self.geom = _geometry(p)
        self.groups = p.waves // p.waves_per_row
        self.k = KernelBuilder(p.name, target, workgroup_size=LANES * p.waves)

    # ------------------------------------------------------------------ structure
    def build(self) -> KernelBuilder:
        k, p, op, g = self.k, self.p, self.op, self.geom
        k.comment(f"{p.op} ({op.formula}) over [rows, hidden] {p.dtype}, hidden <= {p.max_hidden}: "
                  f"{p.waves} waves, {p.waves_per_row} per row, {p.rows_per_workgroup} rows per workgroup; each lane "
                  f"holds "
                  f"{g.chunks} x {g.vec} elements of a row")
        self.arguments()
        self.setup()
        self.row_loop()
        self.release()
        return k

    def arguments(self):
        k, p = self.k, self.p
        for name, _, role in _tensors(p):
            k.args.pointer(name, p.dtype, "read_only" if role == "in" else "write_only")
        for s in _scalars(p):
            k.args.value(s.name, s.dtype)
        k.args.value("rows", "u32")
        k.args.value("hidden", "u32")

    def setup(self):
        k, p, op, g = self.k, self.p, self.op, self.geom
        k.comment("kernel arguments: pointers into buffer resources, scalars, sizes")
        row_tensors = ["x"] + ["residual"] * op.residual + ["out"] + ["residual_out"] * op.residual
        self.win = {t: RowWindow(k, t, k.args[t].offset) for t in row_tensors}
        self.weight = BufferResource(k, "weight")
        self.weight.load_pointer(k.args["weight"].offset)
        self.bias = None
        if p.bias:
            self.bias = BufferResource(k, "bias")
            self.bias.load_pointer(k.args["bias"].offset)
        self.s = {}
        for s in _scalars(p) + [ScalarParam("rows", "u32"), ScalarParam("hidden", "u32")]:
            self.s[s.name] = k.sgpr(1, s.name, kernel=True)
            k.s_load_dword(self.s[s.name], k.kernarg_ptr, k.args[s.name].offset, comment=f"{s.name} ({s.dtype})")

        lane, wave = lane_and_wave(k)
        self.lane = lane
        self.group = self.wave_in_row = None
        if p.waves_per_row > 1:
            self.wave_in_row = k.sgpr(1, "wave_in_row", kernel=True)
            k.s_and_b32(self.wave_in_row, wave, p.waves_per_row - 1, comment="wave within its row group")
        if self.groups > 1:
            self.group = k.sgpr(1, "row_group", kernel=True)
            k.s_lshr_b32(self.group, wave, log2(p.waves_per_row), comment="row group within the workgroup")
        self.lanes = RowLanes(k, g, self.wave_in_row, lane)

        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")
        self.row_bytes = k.sgpr(1, "row_bytes", kernel=True)
        self.step = k.sgpr(1, "row_step", kernel=True)
        k.s_lshl_b32(self.row_bytes, self.s["hidden"], log2(g.esize), comment=f"hidden x {g.esize}: bytes per row")
        k.s_mul_i32(self.step, self.row_bytes, self.groups,
                    comment=f"bytes between a row group's rows ({self.groups} rows)")
        self.loop = RowLoop(k, rows=self.s["rows"], rows_per_wg=p.rows_per_workgroup, groups=self.groups,
                            group=self.group, wg_id=k.workgroup_id["x"])
        for w in self.win.values():
            w.start(self.loop.row, self.row_bytes, 0)
        self.weight.finish(self.row_bytes)
        if self.bias:
            self.bias.finish(self.row_bytes)

        k.comment("weight (and bias): read once per workgroup, kept in VGPRs for every row")
        self.x = k.vgpr(4 * g.chunks, "x", kernel=True)
        self.w_regs = k.vgpr(4 * g.chunks, "weight", kernel=True)
        vectors = [("weight", self.weight.regs, self.w_regs)]
        self.b_regs = None
        if self.bias:
            self.b_regs = k.vgpr(4 * g.chunks, "bias", kernel=True)
            vectors.append(("bias", self.bias.regs, self.b_regs))
        stage = k.lds(p.waves * LANES * 16, "vector_stage")
        load_vectors_once(k, vectors, self.lanes, waves=p.waves, wave=wave, staging=self.x, region=stage)
        k.free(wave)

        self.inv_h = k.vgpr(1, "inv_hidden", kernel=True)
        self.eps = k.vgpr(1, "eps_v", kernel=True)
        k.v_cvt_f32_u32(self.inv_h, self.s["hidden"], comment="hidden as f32")
        k.v_rcp_f32(self.inv_h, self.inv_h, comment="1/hidden (the mean divides by the true row length)")
        k.v_mov_b32(self.eps, self.s["eps"], comment="eps (a VGPR: the fma already reads an SGPR)")
        self.lanes.count_used(self.s["hidden"])
        if op.kind == "layer":
            self.lanes.make_limit(self.s["hidden"])
        self.rng = None
        if op.dropout:
            self.rng = DropoutRng(k, self.s["seed"], self.s["offset"], self.s["p"])
            self.c0 = k.vgpr(1, "first_col", kernel=True)
            k.v_lshlrev_b32(self.c0, log2(g.vec), lane, comment="this lane's first column (chunk 0)")
            if self.wave_in_row is not None:
                with k.temps(s="s1") as t:
                    k.s_lshl_b32(t.s, self.wave_in_row, log2(LANES * g.vec))
                    k.v_add_u32(self.c0, t.s, self.c0, comment="... of this wave")
            self.counter = k.vgpr(1, "rng_counter", kernel=True)
        if op.kind == "layer":
            self.mask_lo = k.sgpr(2, "mask_lo", kernel=True)     # the low element's mask (vcc: the high one's)
        self.xw = CrossWave(k, groups=self.groups, waves_per_row=p.waves_per_row, group=self.group,
                            wave_in_group=self.wave_in_row, values=2)
        self.conv = Converter(k, p.dtype)
        self.view = PairView(self.conv)

    def release(self):
        self.conv.release()

    # ------------------------------------------------------------------ one row per iteration
    def row_loop(self):
        k, op, g = self.k, self.op, self.geom
        self.r = k.vgpr(4 * g.chunks, "residual", kernel=True) if op.residual else None
        self.t = [k.vgpr(2, f"pair_{i}", kernel=True) for i in range(3)]
        self.acc = k.vgpr(1, "acc", kernel=True)
        self.acc2 = k.vgpr(1, "acc2", kernel=True)       # two accumulators, reduced together (no DPP stalls)
        self.rstd = k.vgpr(1, "rstd", kernel=True)
        self.total = k.sgpr(1, "row_total", kernel=True)
        self.total2 = k.sgpr(1, "row_total2", kernel=True)
        if op.kind == "layer":
            self.mean = k.vgpr(1, "mean0", kernel=True)           # first estimate of the mean
            self.corr = k.vgpr(1, "mean_corr", kernel=True)       # mean - mean0 (tiny)
        records = k.sgpr(1, "records", kernel=True)

        self.loop.top()
        k.comment("---- row: aim every window at it (num_records 0 past the last row), load it")
        self.loop.records(records, self.row_bytes)
        for w in self.win.values():
            w.set_records(records)
        self.pending = Pending(k)
        self.pending.reset()
        for j in range(g.chunks):
            self._load(self.x, "x", j)
            if op.residual:
                self._load(self.r, "residual", j)
        if op.dropout:
            with k.temps(s="s1") as t:
                k.s_mul_i32(t.s, self.loop.row, self.s["hidden"], comment="row x hidden")
                k.s_add_u32(t.s, t.s, self.rng.base, comment="counter of the row's element 0")
                k.v_add_u32(self.counter, t.s, self.c0, comment="counter of this lane's first element")
        self.pass_input()
        if op.kind == "rms":
            k.comment("---- rstd = rsqrt(sum(h^2)/hidden + eps)")
            rms_rstd(k, self.xw, [self.acc, self.acc2], [self.total, self.total2], self.rstd, self.inv_h, self.eps)
        else:
            k.comment("---- mean0 = sum(h)/hidden: a first estimate, corrected by pass 2")
            a, b = self.xw.reduce([self.acc, self.acc2], "add", [self.total, self.total2],
                                  ["sum (even elements)", "sum (odd elements)"], vgpr_ok=True)
            combine_totals(k, "add", self.mean, a, b, "sum")
            k.v_mul_f32(self.mean, self.mean, self.inv_h, comment="mean0")
            self.pass_variance()
            k.comment("---- corrected two-pass statistics: with d = h - mean0, mean = mean0 + sum(d)/hidden and "
                      "var = sum(d^2)/hidden - (sum(d)/hidden)^2 (the correction is tiny: no cancellation)")
            a, b = self.xw.reduce([self.acc, self.acc2], "add", [self.total, self.total2], ["sum of d", "sum of d^2"],
                                  vgpr_ok=True)
            k.v_mul_f32(self.corr, a, self.inv_h, comment="mean - mean0")
            k.v_mul_f32(self.rstd, b, self.inv_h, comment="mean of d^2")
            k.v_fma_f32(self.rstd, neg(self.corr), self.corr, self.rstd, comment="variance")
            k.v_add_f32(self.rstd, self.rstd, self.eps, comment="variance + eps")
            k.v_rsq_f32(self.rstd, self.rstd, comment="rstd")
        self.pass_output()
        self.loop.bottom(list(self.win.values()), self.step)
        k.free(records)

    def _load(self, regs, name, j):
        k = self.k
        k.buffer_load_dwordx4(regs[4 * j:4 * j + 4], self.lanes.offsets[j], self.win[name].regs, 0, offen=True,
                              comment=f"{name}, chunk {j}")
        self.pending.issue(f"{name}{j}")

    def _chunk(self, regs, j):
        return regs[4 * j:4 * j + 4]

    # ------------------------------------------------------------------ pass 1: h, its sum (of squares)
    def pass_input(self):
        k, op, g, view = self.k, self.op, self.geom, self.view
        stat = "h^2" if op.kind == "rms" else "h"
        h = "dropout(x) + residual" if op.dropout else "x + residual" if op.residual else "x"
        k.comment(f"---- pass 1: h = {h}"
                  f", sum of {stat} per lane")
        k.v_mov_b32(self.acc, 0, comment="per-lane partial sums: even elements")
        k.v_mov_b32(self.acc2, 0, comment="... odd elements")
        done = k.label("pass1_done")
        stubs = []
        stores = 0
        for j in range(g.chunks):
            if j:
                stub = k.label(f"pass1_end_{j}")
                stubs.append((stub, stores))
                self.lanes.past_end(j, stub)
            self.pending.wait_for(("residual" if op.residual else "x") + str(j), f"chunk {j} of the row has landed")
            X = self._chunk(self.x, j)
            for i in range(view.pairs):
                lo, hi = view.load(X, i, self.t[0], f"x[{j}].{i}")
                if op.residual:
                    rl, rh = view.load(self._chunk(self.r, j), i, self.t[1], f"residual[{j}].{i}")
                    if op.dropout:
                        self._dropout_add(lo, hi, rl, rh, j, i)
                    else:
                        k.v_add_f32(lo, lo, rl, comment="h = x + residual")
                        k.v_add_f32(hi, hi, rh)
                    if view.conv.wide:
                        view.store(X, i, lo, hi)
                        lo, hi = view.load(X, i, self.t[0], "h as rounded")
                if op.kind == "rms":
                    k.v_fmac_f32(self.acc, lo, lo, comment="+= h^2" if i == 0 else None)
                    k.v_fmac_f32(self.acc2, hi, hi)
                else:
                    k.v_add_f32(self.acc, self.acc, lo, comment="+= h" if i == 0 else None)
                    k.v_add_f32(self.acc2, self.acc2, hi)
            if op.residual:
                store_chunk(k, self.x, self.lanes, self.win["residual_out"], j, "residual_out")
                self.pending.issue(f"residual_out{j}")
                stores += 1
        if stubs:
            k.s_branch(done)
        for stub, younger in stubs:
            k.place(stub)
            k.wait(vmcnt=younger, why="the loads of the chunks past the row's end (they move nothing) are done "
                                      "before their registers are written again")
            if stub is not stubs[-1][0]:
                k.s_branch(done)
        k.place(done)

    def _dropout_add(self, lo, hi, rl, rh, j, i):
        """lo/hi = keep ? x*scale + residual : residual, for elements 2i and 2i+1 of chunk j."""
        k, rng, g = self.k, self.rng, self.geom
        h, t = self.t[2][0], self.t[2][1]
        base = j * g.span + 2 * i
        rng.keep(h, self.counter, base, t, self.mask_lo, f"element {base}")
        rng.keep(h, self.counter, base + 1, t, VCC, f"element {base + 1}")
        k.v_fma_f32(lo, lo, rng.scale, rl, comment="x/(1-p) + residual")
        k.v_fma_f32(hi, hi, rng.scale, rh)
        k.v_cndmask_b32(lo, rl, lo, self.mask_lo, comment="dropped: residual alone")
        k.v_cndmask_b32(hi, rh, hi, VCC)

    # ------------------------------------------------------------------ pass 2 (layer norm): variance
    def pass_variance(self):
        k = self.k
        k.comment("---- pass 2: sums of d = h - mean0 and of d^2; elements past the row's end are masked when "
                  "its last chunk is partial")
        masked = k.label("var_masked")
        done = k.label("var_done")
        self.lanes.partial_last(self.s["hidden"])
        k.s_cbranch_scc1(masked, comment="a partial last chunk needs masks")
        self._variance(masked=False)
        k.s_branch(done)
        k.place(masked)
        self._variance(masked=True)
        k.place(done)

    def _variance(self, masked: bool):
        k, g, view = self.k, self.geom, self.view
        k.v_mov_b32(self.acc, 0, comment="per-lane partial sums of d" + (" (masked)" if masked else ""))
        k.v_mov_b32(self.acc2, 0, comment="... and of d^2")
        end = k.label("var_end")
        for j in range(g.chunks):
            self.lanes.past_end(j, end)
            X = self._chunk(self.x, j)
            limit = self.lanes.chunk_limit(j, self.t[2][0]) if masked else None
            for i in range(view.pairs):
                if masked:                       # compares first: their masks are read 2+ instructions later
                    self.lanes.valid(limit, 2 * i, self.mask_lo)
                    self.lanes.valid(limit, 2 * i + 1, VCC)
                lo, hi = view.load(X, i, self.t[0], f"h[{j}].{i}")
                dl, dh = self.t[1][0], self.t[1][1]
                k.v_sub_f32(dl, lo, self.mean, comment="d = h - mean0" if i == 0 else None)
                k.v_sub_f32(dh, hi, self.mean)
                if masked:
                    k.v_cndmask_b32(dl, 0, dl, self.mask_lo, comment="0 past the row's end")
                    k.v_cndmask_b32(dh, 0, dh, VCC)
                k.v_add_f32(self.acc, self.acc, dl)
                k.v_fmac_f32(self.acc2, dl, dl)
                k.v_add_f32(self.acc, self.acc, dh)
                k.v_fmac_f32(self.acc2, dh, dh)
        k.place(end)

    # ------------------------------------------------------------------ pass 3: normalise and store
    def pass_output(self):
        k, op, g, view = self.k, self.op, self.geom, self.view
        k.comment("---- pass 3: out = " + ("h * rstd * weight" if op.kind == "rms" else
                                          "(h - mean) * rstd * weight" + (" + bias" if self.p.bias else "")))
        end = k.label("out_end")
        for j in range(g.chunks):
            self.lanes.past_end(j, end)
            X = self._chunk(self.x, j)
            W = self._chunk(self.w_regs, j)
            B = self._chunk(self.b_regs, j) if self.b_regs is not None else None
            for i in range(view.pairs):
                lo, hi = view.load(X, i, self.t[0], f"h[{j}].{i}")
                wl, wh = view.load(W, i, self.t[1], "weight")
                if op.kind == "layer":
                    k.v_sub_f32(lo, lo, self.mean, comment="h - mean0 (exact near the mean)" if i == 0 else None)
                    k.v_sub_f32(hi, hi, self.mean)
                    k.v_sub_f32(lo, lo, self.corr, comment="- (mean - mean0): h - mean" if i == 0 else None)
                    k.v_sub_f32(hi, hi, self.corr)
                k.v_mul_f32(lo, lo, self.rstd, comment="* rstd" if i == 0 else None)
                k.v_mul_f32(hi, hi, self.rstd)
                if B is not None:
                    bl, bh = view.load(B, i, self.t[2], "bias")
                    k.v_fma_f32(lo, lo, wl, bl, comment="* weight + bias" if i == 0 else None)
                    k.v_fma_f32(hi, hi, wh, bh)
                else:
                    k.v_mul_f32(lo, lo, wl, comment="* weight" if i == 0 else None)
                    k.v_mul_f32(hi, hi, wh)
                view.store(X, i, lo, hi)
            store_chunk(k, self.x, self.lanes, self.win["out"], j, "out")
        k.place(end)
