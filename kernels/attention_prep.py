"""Attention backward, the preparation pass: per query row ``DELTA = sum_d dO·O`` and ``LSE2 = LSE·log2 e``.

The backward kernels (``attention_bwd``: dK/dV per KV block, dQ per query block) recompute the
probabilities as ``P = exp2(S·c − LSE2)`` (``c = softmax_scale·log2 e``) and need, per query row,
``dS = P ∘ (dP − DELTA)``.  This memory-bound kernel computes both row vectors once, in fp32:

* ``DELTA[b, h, i] = sum_d dO[b, h, i, d] · O[b, h, i, d]`` from the 16-bit tensors (every product
  of two bf16 or f16 values is exact in fp32; a lane sums its 8 with fused multiply-adds, then the
  lane group adds its lanes' sums in a fixed tree);
* ``LSE2[b, h, i] = LSE[b, h, i] · log2 e`` (one fp32 rounding), except ``+inf`` where LSE is ``-inf``:
  a row that saw no key then gets ``P = exp2(S·c − inf) = 0`` instead of ``exp2(inf − inf) = NaN``.

**Layout.**  A row of D 16-bit elements is ``D/8`` lanes of 16 bytes (``buffer_load_dwordx4``); a
wave holds ``64 / (D/8)`` rows at a time and a workgroup of 4 waves takes ``ROWS = 128`` consecutive
rows of one (batch, head) in ``D/16`` passes (all loads issued before the first use; at least 4 passes
so that the DPP steps of one pass's sum fill the wait states of the others').  The lane
group's sums meet by DPP within the wave (``isagen.prims.reduce.group_reduce``); the group's first
lane stores the row's two results.

**Addressing** is the forward's (kernels/attention.py): element (b, h, i, d) of O at ``b·o_sb + h·o_sh
+ (start(b) + i)·o_sn + d``, of LSE, DELTA and LSE2 at ``b·lse_sb + h·lse_sh + start(b) + i``, with
``start(b) = cu_seqlens_q[b]`` (varlen) or 0.  Each tensor is read through a buffer window aimed at the
workgroup's first row whose records end at the sequence's last row: rows past it load zeros and store
nothing.  Grid ``(cdiv(n_q, ROWS), H_q, B)``; a block past its sequence exits at once.
"""

from __future__ import annotations

from isagen.builders.contract import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.isa.operands import VCC
from isagen.prims.convert import Converter
from isagen.prims.math import LOG2E
from isagen.prims.reduce import group_reduce
from isagen.tiles.buffer import OOB_INLINE, BufferResource
from isagen.tiles.window import strided_window

WAVES = 4
LANES = 64
ROWS = 128                        # query rows per workgroup (the launch grid's block)
LANE_BYTES = 16                   # one buffer_load_dwordx4 per lane per row and tensor
MAX_SEQ = 1 << 24
NEG_INF_CLASS = 1 << 2            # v_cmp_class_f32 mask bit of -inf
POS_INF = 0x7F800000

PARAMS = {
    "dtype": Param("str", "bf16", "element type of O and dO (DELTA, LSE and LSE2 are fp32)", choices=("bf16", "f16")),
    "head_dim": Param("int", 128, "head dimension D of O and dO", choices=(64, 128)),
    "varlen": Param("bool", False, "variable-length batch packed as flash-attn's THD layout: sequence starts and "
                                   "lengths from cu_seqlens_q"),
}

STRIDES = ("o_sb", "o_sh", "o_sn", "do_sb", "do_sh", "do_sn", "lse_sb", "lse_sh")


def lanes_per_row(head_dim: int) -> int:
    return head_dim * 2 // LANE_BYTES


def validate(p, target):
    return []


def launch(p, target) -> LaunchInfo:
    """The contract of ``isagen run`` and ``isagen.build``: contiguous tensors, torch SDPA's (B, H, N, D)
    layout with LSE (B, H, N), or with ``varlen`` flash-attn's THD packing (O (total_q, H, D), LSE
    (H, total_q)).  ``isagen.runtime.attention.attention_backward`` launches the kernel on any strides."""
    d = p.head_dim
    lim = (1 << 31) - 1
    row: tuple
    vec: tuple
    tensors: tuple[TensorParam, ...]
    if p.varlen:
        row = ("total_q", "h", d)
        vec = ("h", "total_q")
        tensors = (TensorParam("O", p.dtype, row, "in"), TensorParam("dO", p.dtype, row, "in"),
                   TensorParam("LSE", "f32", vec, "in"), TensorParam("DELTA", "f32", vec, "out"),
                   TensorParam("LSE2", "f32", vec, "out"),
                   TensorParam("cu_seqlens_q", "i32", ("b1",), "in", "offsets:total_q"))
        strides = {"sb": "0", "sh": str(d), "sn": f"h * {d}"}
        kernargs = {"n_q": "total_q", "lse_sb": "0", "lse_sh": "total_q"}
        grid = (f"cdiv(total_q, {ROWS})", "h", "max(b1 - 1, 0)")
        requires = (("b1 >= 1", "cu_seqlens_q has one entry more than the batch"),
                    (f"total_q * h * {2 * d} <= {lim}", "O and dO must stay below 2 GiB (32-bit buffer offsets)"))
    else:
        row = ("b", "h", "n_q", d)
        vec = ("b", "h", "n_q")
        tensors = (TensorParam("O", p.dtype, row, "in"), TensorParam("dO", p.dtype, row, "in"),
                   TensorParam("LSE", "f32", vec, "in"), TensorParam("DELTA", "f32", vec, "out"),
                   TensorParam("LSE2", "f32", vec, "out"))
        strides = {"sb": f"h * n_q * {d}", "sh": f"n_q * {d}", "sn": str(d)}
        kernargs = {"lse_sb": "h * n_q", "lse_sh": "n_q"}
        grid = (f"cdiv(n_q, {ROWS})", "h", "b")
        requires = ((f"n_q < {MAX_SEQ}", f"sequence lengths must stay below {MAX_SEQ}"),
                    (f"n_q * {2 * d} <= {lim}", "one head's sequence must stay below 2 GiB (32-bit buffer offsets)"))
    kernargs.update({f"{x}_{k}": v for x in ("o", "do") for k, v in strides.items()})
    return LaunchInfo(tensors=tensors, scalars=(), grid=grid, block=(LANES * WAVES, 1, 1), kernargs=kernargs,
                      requires=requires)


@generator("attention_bwd_prep", params=PARAMS,
           shapes={"b": "batch", "h": "query heads", "n_q": "query length",
                   "total_q": "query tokens of a packed batch (varlen)", "b1": "batch + 1 (varlen)"},
           validate=validate, launch=launch,
           doc="attention backward preparation: DELTA = rowsum(dO * O), LSE2 = LSE * log2(e) (+inf for -inf)")
def attention_bwd_prep(p, target) -> KernelBuilder:
    return _PrepKernel(p, target).build()


class _PrepKernel:
    def __init__(self, p, target):
        self.p = p
        self.group = lanes_per_row(p.head_dim)            # lanes per row: 8 (D=64) or 16 (D=128)
        self.rows_per_pass = WAVES * LANES // self.group   # rows of the workgroup per pass
        self.passes = ROWS // self.rows_per_pass
        self.k = KernelBuilder(p.name, target, workgroup_size=LANES * WAVES, workgroup_ids="xyz")

    def build(self) -> KernelBuilder:
        k, p = self.k, self.p
        k.header += [f"attention backward prep: {p.dtype} O/dO, fp32 LSE -> DELTA, LSE2; D={p.head_dim}"
                     f"{', varlen' if p.varlen else ''}",
                     f"{WAVES} waves x {ROWS // WAVES} rows, {self.group} lanes x {LANE_BYTES} bytes per row, "
                     f"{self.passes} passes"]
        self.done = k.label("done")
        self.arguments()
        self.sequence()
        self.windows()
        self.lane_offsets()
        self.compute()
        k.place(self.done)
        k.s_endpgm()
        return k

    def arguments(self):
        k, p = self.k, self.p
        k.args.pointer("O", p.dtype, "read_only")
        k.args.pointer("dO", p.dtype, "read_only")
        k.args.pointer("LSE", "f32", "read_only")
        k.args.pointer("DELTA", "f32", "write_only")
        k.args.pointer("LSE2", "f32", "write_only")
        if p.varlen:
            k.args.pointer("cu_seqlens_q", "i32", "read_only")
        values = ("n_q",) + STRIDES
        for n in values:
            k.args.value(n, "u32")
        self.r = {n: BufferResource(k, n) for n in ("O", "dO", "LSE", "DELTA", "LSE2")}
        for n, r in self.r.items():
            r.load_pointer(k.args[n].offset)
        self.s = {}
        for n in values:
            self.s[n] = k.sgpr(1, n, kernel=True)
            k.s_load_dword(self.s[n], k.kernarg_ptr, k.args[n].offset, comment=n)
        self.lane = k.vgpr(1, "lane", kernel=True)
        self.wave = k.sgpr(1, "wave", kernel=True)
        t = k.vgpr(1, "wave_tmp")
        k.v_lshrrev_b32(t, 6, k.tid, comment="wave within the workgroup")
        k.v_and_b32(self.lane, LANES - 1, k.tid, comment="lane within the wave (fills the wait state before the read)")
        k.v_readfirstlane_b32(self.wave, t)
        k.free(t, k.tid)
        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")

    def sequence(self):
        """This block's first row (``q0``), the sequence's first token (``start``) and length (``length``);
        a block past its sequence exits."""
        k, p, s = self.k, self.p, self.s
        b, blk = k.workgroup_id["z"], k.workgroup_id["x"]
        self.start = k.sgpr(1, "start_q", kernel=True)
        self.length = k.sgpr(1, "len_q", kernel=True)
        if p.varlen:
            ptr = k.sgpr(2, "cu_ptr", align=2)
            pair = k.sgpr(2, "cu_pair", align=2)
            off = k.sgpr(1, "cu_off")
            k.s_lshl_b32(off, b, 2, comment="batch * 4: this sequence's entry of cu_seqlens_q")
            k.s_load_dwordx2(ptr, k.kernarg_ptr, k.args["cu_seqlens_q"].offset, comment="cu_seqlens_q")
            k.wait(lgkmcnt=0, why="cu_seqlens_q pointer")
            k.s_add_u32(ptr[0], ptr[0], off)
            k.s_addc_u32(ptr[1], ptr[1], 0)
            k.s_load_dwordx2(pair, ptr, 0, comment="cu_seqlens_q[b], [b + 1]")
            k.wait(lgkmcnt=0, why="this sequence's bounds")
            k.s_mov_b32(self.start, pair[0], comment="first token of this sequence")
            k.s_sub_u32(self.length, pair[1], pair[0], comment="length of this sequence")
            k.free(ptr, pair, off)
        else:
            k.s_mov_b32(self.start, 0)
            k.s_mov_b32(self.length, s["n_q"], comment="query length")
        self.q0 = k.sgpr(1, "q0", kernel=True)
        k.s_mul_i32(self.q0, blk, ROWS, comment="first row of this workgroup")
        k.s_cmp_ge_u32(self.q0, self.length, comment="a block past its sequence (varlen: shorter sequences)")
        k.s_cbranch_scc1(self.done)
        self.rows_left = k.sgpr(1, "rows_left", kernel=True)
        k.s_sub_u32(self.rows_left, self.length, self.q0, comment="rows of the sequence from q0 on")

    def windows(self):
        k, s = self.k, self.s
        b, h = k.workgroup_id["z"], k.workgroup_id["y"]
        first = k.sgpr(1, "first_token")
        k.s_add_u32(first, self.start, self.q0, comment="first token of the block")
        for name, x in (("O", "o"), ("dO", "do")):
            strided_window(k, self.r[name], ((b, s[f"{x}_sb"]), (h, s[f"{x}_sh"]), (first, s[f"{x}_sn"])),
                           rows_left=self.rows_left, row_stride=s[f"{x}_sn"], elem_bytes=2, why=f"{name} window")
        one = k.sgpr(1, "one")
        k.s_mov_b32(one, 1)
        for name in ("LSE", "DELTA", "LSE2"):
            strided_window(k, self.r[name], ((b, s["lse_sb"]), (h, s["lse_sh"]), (first, one)),
                           rows_left=self.rows_left, row_stride=one, elem_bytes=4, why=f"{name} window")
        k.free(one, first)
        self.row_bytes = {}
        for x in ("o", "do"):
            self.row_bytes[x] = k.sgpr(1, f"{x}_row_bytes", kernel=True)
            k.s_lshl_b32(self.row_bytes[x], s[f"{x}_sn"], 1, comment=f"{x}: bytes between tokens")

    def lane_offsets(self):
        """Per pass: the lane's row, its 16 bytes of O and dO (out of range past the sequence), and the
        row's LSE offset (every lane loads it; only the group's first lane stores)."""
        k, g = self.k, self.group
        shift = g.bit_length() - 1
        sub = k.vgpr(1, "lane_in_row")
        row = k.vgpr(1, "row")
        k.v_and_b32(sub, g - 1, self.lane, comment=f"lane within its row's group of {g}")
        k.v_lshrrev_b32(row, shift, self.lane, comment="row within the wave's rows of a pass")
        with k.temps(s="s1") as t:
            k.s_mul_i32(t.s, self.wave, ROWS // WAVES, comment=f"the wave's first row ({ROWS // WAVES} per wave)")
            k.v_add_u32(row, t.s, row, comment="row within the block (pass 0)")
        k.v_lshlrev_b32(sub, 4, sub, comment=f"byte offset of the lane's {LANE_BYTES} bytes within the row")
        self.off = {x: [k.vgpr(1, f"{x}_off{i}", kernel=True) for i in range(self.passes)] for x in ("o", "do")}
        self.lse_off = [k.vgpr(1, f"lse_off{i}", kernel=True) for i in range(self.passes)]
        self.store_off = [k.vgpr(1, f"store_off{i}", kernel=True) for i in range(self.passes)]
        k.v_cmp_eq_u32(VCC, 0, sub, comment="vcc: the first lane of each row group (it stores the row's results)")
        first = k.sgpr(2, "first_lane", align=2)
        k.s_mov_b64(first, VCC)
        rows_per_wave_pass = LANES // g
        for i in range(self.passes):
            if i:
                k.v_add_u32(row, rows_per_wave_pass, row,
                            comment=f"row of pass {i} ({rows_per_wave_pass} rows further)")
            k.v_cmp_gt_u32(VCC, self.rows_left, row, comment=f"vcc: pass {i}'s row is in the sequence")
            for x in ("o", "do"):
                k.v_mul_lo_u32(self.off[x][i], row, self.row_bytes[x], comment=f"{x}: the row's first byte")
                k.v_add_u32(self.off[x][i], sub, self.off[x][i], comment=f"{x}: + the lane's bytes")
                k.v_cndmask_b32(self.off[x][i], OOB_INLINE, self.off[x][i], VCC,
                                comment=f"{x}: nothing past the sequence (its rows may be far apart)")
            k.v_lshlrev_b32(self.lse_off[i], 2, row, comment="row x 4 bytes: LSE, DELTA, LSE2")
            k.v_cndmask_b32(self.store_off[i], OOB_INLINE, self.lse_off[i], first,
                            comment="stores by the group's first lane only (rows past the end: dropped)")
        k.free(sub, row, first)

    def compute(self):
        k, p, n = self.k, self.p, self.passes
        o = [k.vgpr(4, f"O{i}") for i in range(n)]
        do = [k.vgpr(4, f"dO{i}") for i in range(n)]
        lse = [k.vgpr(1, f"LSE{i}") for i in range(n)]
        for i in range(n):
            k.buffer_load_dwordx4(o[i], self.off["o"][i], self.r["O"].regs, 0, offen=True, comment=f"O, pass {i}")
            k.buffer_load_dwordx4(do[i], self.off["do"][i], self.r["dO"].regs, 0, offen=True,
                                  comment=f"dO, pass {i}")
            k.buffer_load_dword(lse[i], self.lse_off[i], self.r["LSE"].regs, 0, offen=True, comment=f"LSE, pass {i}")
        k.free(*self.off["o"], *self.off["do"], *self.lse_off)
        conv = Converter(k, p.dtype)
        acc = [k.vgpr(1, f"delta{i}") for i in range(n)]
        a_lo, a_hi, b_lo, b_hi = (k.vgpr(1, w) for w in ("o_lo", "o_hi", "do_lo", "do_hi"))
        for i in range(n):
            # the loads complete in order: pass i's three are done once 3 (n - 1 - i) younger ones may remain
            k.wait(vmcnt=min(3 * (n - 1 - i), k.target.max_vmcnt), why=f"O, dO and LSE of pass {i} have landed")
            for w in range(4):
                conv.unpack(a_lo, a_hi, o[i][w], what=f"O dword {w}")
                conv.unpack(b_lo, b_hi, do[i][w], what=f"dO dword {w}")
                if w == 0:
                    k.v_mul_f32(acc[i], a_lo, b_lo, comment=f"pass {i}: the lane's sum of dO*O (products exact)")
                else:
                    k.v_fmac_f32(acc[i], a_lo, b_lo)
                k.v_fmac_f32(acc[i], a_hi, b_hi)
        k.free(a_lo, a_hi, b_lo, b_hi, *o, *do)
        conv.release()
        group_reduce(k, acc, "add", self.group, [f"DELTA {i}" for i in range(n)])
        inf = k.vgpr(1, "plus_inf")
        keyless = [k.sgpr(2, f"keyless{i}", align=2) for i in range(n)]
        for i in range(n):      # all compares first: no mask is read right after it is written
            k.v_cmp_class_f32(keyless[i], lse[i], NEG_INF_CLASS, comment=f"pass {i}: rows whose LSE is -inf (no key)")
        k.v_mov_b32(inf, POS_INF, comment="+inf: LSE2 of a row that saw no key")
        for i in range(n):
            k.v_mul_f32(lse[i], LOG2E, lse[i], comment="LSE2 = LSE * log2(e)")
        for i in range(n):
            k.v_cndmask_b32(lse[i], lse[i], inf, keyless[i],
                            comment=f"pass {i}: +inf where LSE is -inf, so that P = exp2(S c - inf) = 0")
        k.free(inf, *keyless)
        for i in range(n):
            k.buffer_store_dword(acc[i], self.store_off[i], self.r["DELTA"].regs, 0, offen=True,
                                 comment=f"DELTA, pass {i}")
            k.buffer_store_dword(lse[i], self.store_off[i], self.r["LSE2"].regs, 0, offen=True,
                                 comment=f"LSE2, pass {i}")
        k.free(*acc, *lse, *self.store_off)
