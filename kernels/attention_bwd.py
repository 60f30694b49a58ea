"""Attention backward, deterministic (no atomics): dK and dV per KV block, dQ per query block, as raw
assembly for gfx950 and gfx942.  With ``S = Q·Kᵀ`` (raw logits), ``c = scale · log2 e``, the forward's
``LSE2 = LSE · log2 e`` (``+inf`` for rows that saw no key) and ``DELTA = rowsum(dO ∘ O)`` from the prep
kernel (kernels/attention_prep.py)::

    P  = exp2(S·c − LSE2)            (the forward's softmax, recomputed)
    dP = dO·Vᵀ
    dS = P ∘ (dP − DELTA)            (the gradient of the scaled logits)
    dV = Pᵀ·dO      dK = scale · dSᵀ·Q      dQ = scale · dS·K

Two kernels of one generator (``part``), each the forward kernel's shape (docs/attention.md): four
waves, each owning 16 *resident rows* for the whole loop, while tiles of 64 *streamed rows* pass through
LDS, double-buffered:

* ``part: dq`` — resident: 16 queries per wave (Q and dO in AGPRs, loaded once; their LSE2 and DELTA in
  VGPRs); streamed: K and V tiles.  ``S = Q·Kᵀ``, ``dP = dO·Vᵀ`` (K and V read as B operands,
  ``ds_read_b128``), then ``dQ += dS·K`` with K read transposed, keys in dS's accumulator order (the
  forward's V read: ``ds_read_b64_tr_b16`` / ``ds_read_u16`` pairs).
* ``part: dkdv`` — resident: 16 keys per wave (K and V in AGPRs); streamed: Q and dO tiles of every
  query head of the key/value head's GQA group, so dK and dV accumulate in registers, no atomics.
  ``Sᵀ = K·Qᵀ``, ``dPᵀ = V·dOᵀ``; the LSE2 and DELTA of the tile's queries (the accumulators' columns)
  come straight from memory per tile; then ``dV += Pᵀ·dO`` and ``dK += dSᵀ·Q`` with dO and Q read
  transposed.

P and dS need no shuffle between their MFMAs: an accumulator of a product fed B as src0 is already the A
operand of the next product when the k index is taken to mean the accumulator's columns in the lane's
order (``tiles.lds_to_reg.key_order_tr16_reads``).  Causal masks (bottom-right) are a second copy of
the loop body; sequence tails need none: rows past a sequence's end load zeros (Q, K, V, dO, DELTA, LSE2),
which makes every term they contribute zero.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from isagen.builders.contract import LaunchInfo, ScalarParam, TensorParam
from isagen.builders.program import KernelBuilder, LdsRegion
from isagen.builders.registry import Param, generator, params_from
from isagen.errors import SpecError
from isagen.isa.operands import Reg
from isagen.kernels.attention import MAX_SEQ, load_values, sequence_bounds
from isagen.prims.convert import Converter
from isagen.prims.rows import lane_and_wave
from isagen.targets import MfmaInfo, Target, get_target
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import BufferResource
from isagen.tiles.epilogue import store_accumulators
from isagen.tiles.global_to_lds import GlobalToLds, interleaved_copies
from isagen.tiles.kloop import loop_bodies, two_phase_loop
from isagen.tiles.lds_layout import Coords, LdsLayout, choose_swizzle
from isagen.tiles.lds_to_reg import (
    DsReads,
    Fragment,
    ReadInst,
    join_u16_pairs,
    key_order_tr16_reads,
    kmajor_reads,
    u16_reads,
)
from isagen.tiles.mma import mma_ops
from isagen.tiles.online_softmax import LOG2E, MAX_LGKM, mask_columns
from isagen.tiles.order import udiv
from isagen.tiles.registers import Accumulators, FragmentRegs
from isagen.tiles.schedule import Op, emit, merge
from isagen.tiles.window import strided_window

WAVES = 4
ROWS = 16                   # resident rows per wave (one 16-row MFMA fragment)
BLOCK = WAVES * ROWS        # resident rows per workgroup
TILE = 64                   # streamed rows per tile
PARTS = ("dkdv", "dq")

PARAMS = {
    "dtype": Param("str", "bf16", "element type of Q, K, V, dO and the gradients (fp32 accumulation)",
                   choices=("bf16", "f16")),
    "head_dim": Param("int", 128, "head dimension D (64 or 128)", choices=(64, 128)),
    "causal": Param("bool", False, "causal mask, bottom-right aligned as the forward's"),
    "varlen": Param("bool", False, "packed variable-length batch (cu_seqlens), as the forward's"),
    "part": Param("str", "dkdv", "dkdv: dK and dV per KV block (loops over the query tiles of every head of "
                                 "the GQA group); dq: dQ per query block (loops over the KV tiles)",
                  choices=PARTS),
    "dq_atomic": Param("bool", False, "part dkdv also adds each tile's dQ into an fp32 buffer with "
                                      "buffer_atomic_add_f32 (no dq pass; the order of the sums varies on a GPU)"),
}

# per part: (resident A operands, streamed B operands, outputs), by kernel argument name
ROLES = {"dq": (("Q", "dO"), ("K", "V"), ("dQ",)), "dkdv": (("K", "V"), ("Q", "dO"), ("dK", "dV"))}


@dataclass(frozen=True)
class Plan:
    target: Target
    dtype: str
    head_dim: int
    causal: bool
    varlen: bool
    part: str
    mfma: MfmaInfo
    kmajor: Fragment          # operands read along d (ds_read_b128): the resident rows' and the tiles'
    acc_op: Fragment          # operands along the streamed rows: P, dS and the transposed tile reads
    t_read: str               # how a tile is read transposed: tr16 | u16
    dma_width: int
    layout: LdsLayout         # a streamed tile: 64 rows x D
    t_chunk: int              # d-fragments per batch of transposed reads (register budget)
    dq_atomic: bool = False   # dkdv: dQ by atomics through an LDS transpose of dS
    layout_ds: LdsLayout | None = None    # dq_atomic: dS of a tile, [key][query] (64 x 64)
    layout_kb: LdsLayout | None = None    # dq_atomic: the block's 64 keys of K, [key][d]

    @property
    def d_frags(self) -> int:
        return self.head_dim // 16

    @property
    def d_slices(self) -> int:
        return self.head_dim // self.kmajor.slice_k

    @property
    def tile_frags(self) -> int:
        return TILE // 16

    @property
    def t_slices(self) -> int:
        return TILE // self.acc_op.slice_k

    @property
    def lds_bytes(self) -> int:
        extra = self.layout_ds.size + self.layout_kb.size if self.layout_ds and self.layout_kb else 0
        return 2 * 2 * self.layout.size + extra

    @property
    def mfmas_per_tile(self) -> int:
        """Per wave per streamed tile: two products along d (S, dP) and one (dq) or two (dkdv) along the
        tile's rows."""
        k = self.mfma.k
        along_d = self.tile_frags * (self.head_dim // k)
        along_t = self.d_frags * (TILE // k)
        return 2 * along_d + (1 if self.part == "dq" else 2 + self.dq_atomic) * along_t

    def dq_reads(self, ds_stage, kb_stage, col0) -> tuple[list[ReadInst], list[ReadInst]]:
        """dq_atomic: the A operand dS (rows = this wave's 16 queries, ``col0``; k = the block's keys) read
        transposed from the [key][query] dS tile, and Kᵀ (rows = d, k = keys) from the K block."""
        assert self.layout_ds is not None and self.layout_kb is not None
        d0 = [16 * f for f in range(self.d_frags)]
        if self.t_read == "u16":
            return (u16_reads("dS", self.layout_ds, ds_stage, self.acc_op, [0], range(self.t_slices), col0),
                    u16_reads("Kb", self.layout_kb, kb_stage, self.acc_op, d0, range(self.t_slices), lx.const(0)))
        return (key_order_tr16_reads("dS", self.layout_ds, ds_stage, [0], range(self.t_slices), col0),
                key_order_tr16_reads("Kb", self.layout_kb, kb_stage, d0, range(self.t_slices)))

    def ds_writes(self, region, wave_row0) -> list:
        """dq_atomic: (fragment, byte address expression) of each ds_write_b64 of a lane's dSᵀ values: key
        row ``wave_row0 + L % 16``, queries ``16 f + 4 (L / 16) ..`` (4 bf16)."""
        assert self.layout_ds is not None
        L = lx.lane()
        return [(f, self.layout_ds.offset(wave_row0 + L % 16, (16 * f + (L // 16) * 4) * 2) + region.offset)
                for f in range(self.tile_frags)]

    def kmajor_reads(self, name, stages) -> list[ReadInst]:
        return kmajor_reads(name, self.layout, stages, self.kmajor, [16 * f for f in range(self.tile_frags)],
                            range(self.d_slices), lx.const(0))

    def t_reads(self, name, stages) -> list[ReadInst]:
        d0 = [16 * f for f in range(self.d_frags)]
        if self.t_read == "u16":
            return u16_reads(name, self.layout, stages, self.acc_op, d0, range(self.t_slices), lx.const(0))
        return key_order_tr16_reads(name, self.layout, stages, d0, range(self.t_slices))


def make_plan(p, target) -> Plan:
    return _make_plan(tuple(sorted(p.items())), get_target(target).name)


@functools.lru_cache(maxsize=32)
def _make_plan(items: tuple, target_name: str) -> Plan:
    p = params_from(dict(items), "plan")
    target = get_target(target_name)
    found = target.find_mfma(p.dtype, 16, 16)
    if not found:
        raise SpecError(f"params.dtype: {target.name} has no 16x16 {p.dtype} MFMA")
    mfma = found[0]
    kpm = 2 * mfma.a_regs
    tr16 = target.has_tr16_read
    plain = Plan(target=target, dtype=p.dtype, head_dim=p.head_dim, causal=p.causal, varlen=p.varlen, part=p.part,
                 mfma=mfma, kmajor=Fragment(16, kpm, 8), acc_op=Fragment(16, kpm, kpm),
                 t_read="tr16" if tr16 else "u16", dma_width=16 if 16 in target.lds_dma_widths else 4,
                 layout=LdsLayout(TILE, p.head_dim * 2, 16),
                 # u16 reads land in VGPRs with their odd halves apart: half the d-fragments at a time
                 t_chunk=p.head_dim // 16 if tr16 else p.head_dim // 32)
    if plain.lds_bytes > target.lds_bytes:
        raise SpecError(f"params.head_dim: two stages of two {TILE}x{p.head_dim} tiles ({plain.lds_bytes} bytes) "
                        f"exceed {target.name}'s LDS ({target.lds_bytes})")
    stage = [LdsRegion("tile", 0, 0)]
    # one layout for both streamed operands: the first is read along d and transposed, the second along d
    # (and transposed too in dkdv): every one of those reads conflict-free
    reads = plain.kmajor_reads("X", stage) + plain.t_reads("X", stage)
    coords = [Coords(lx.lane_values(r.row, {}), lx.lane_values(r.byte, {}), 0, r.width, "read") for r in reads]
    layout, bad = choose_swizzle(plain.layout, coords, target.name, target.lds_banks * 4)
    if bad:
        raise SpecError(f"params.head_dim: no swizzle makes the tile reads free of LDS bank conflicts ({len(bad)})")
    plan = Plan(**{**plain.__dict__, "layout": layout})
    if not p.dq_atomic:
        return plan
    if p.part != "dkdv":
        raise SpecError("params.dq_atomic: only part dkdv adds dQ atomically (part dq computes it on its own)")
    plan = Plan(**{**plan.__dict__, "dq_atomic": True, "layout_ds": LdsLayout(TILE, TILE * 2, 8),
                   "layout_kb": LdsLayout(BLOCK, p.head_dim * 2, 16)})
    if plan.lds_bytes > target.lds_bytes:
        raise SpecError(f"params.dq_atomic: the dS tile and the key block need {plan.lds_bytes} bytes of LDS with "
                        f"the Q/dO stages; {target.name} has {target.lds_bytes} (use the dq pass: dq_atomic false)")
    ds_reads, kb_reads = plan.dq_reads(stage, stage, lx.uniform("wave_row0", BLOCK))
    env = [{"wave_row0": ROWS * w} for w in range(WAVES)]
    wr = [Coords(lx.lane_values(lx.lane() % 16 + ROWS * w, {}),
                 lx.lane_values((16 * f + (lx.lane() // 16) * 4) * 2, {}), 0, 8, "write")
          for w in range(WAVES) for f in range(plan.tile_frags)]
    ds_coords = [Coords(lx.lane_values(r.row, e), lx.lane_values(r.byte, e), 0, r.width, "read") for e in env
                 for r in ds_reads] + wr
    layout_ds, bad = choose_swizzle(LdsLayout(TILE, TILE * 2, 8), ds_coords, target.name, target.lds_banks * 4)
    kb_coords = [Coords(lx.lane_values(r.row, {}), lx.lane_values(r.byte, {}), 0, r.width, "read") for r in kb_reads]
    layout_kb, bad_kb = choose_swizzle(LdsLayout(BLOCK, p.head_dim * 2, 16), kb_coords, target.name,
                                       target.lds_banks * 4)
    if bad or bad_kb:
        raise SpecError("params.dq_atomic: no swizzle makes the dS / key-block accesses free of bank conflicts")
    return Plan(**{**plan.__dict__, "layout_ds": layout_ds, "layout_kb": layout_kb})


# ================================================================================== registry hooks
def launch(p, target) -> LaunchInfo:
    """Contiguous (B, H, N, D) tensors (or THD with ``varlen``), as the forward's contract; DELTA and LSE2
    are (B, H, N_q) fp32 (varlen: (H, total_q)).  ``isagen.attention_backward`` launches on any strides."""
    d = p.head_dim
    lim = (1 << 31) - 1
    dq = p.part == "dq"
    qs: tuple
    ks: tuple
    rs: tuple
    if p.varlen:
        qs, ks, rs = ("total_q", "h", d), ("total_kv", "h_kv", d), ("h", "total_q")
        q = {"sb": "0", "sh": str(d), "sn": f"h * {d}"}
        kv = {"sb": "0", "sh": str(d), "sn": f"h_kv * {d}"}
        lse = {"lse_sb": "0", "lse_sh": "total_q"}
        sizes = {"n_q": "total_q", "n_kv": "total_kv"}
        rows = "total_q" if dq else "total_kv"
        grid = (f"cdiv({rows}, {BLOCK})", "h" if dq else "h_kv", "max(b1 - 1, 0)")
    else:
        qs, ks, rs = ("b", "h", "n_q", d), ("b", "h_kv", "n_kv", d), ("b", "h", "n_q")
        q = {"sb": f"h * n_q * {d}", "sh": f"n_q * {d}", "sn": str(d)}
        kv = {"sb": f"h_kv * n_kv * {d}", "sh": f"n_kv * {d}", "sn": str(d)}
        lse = {"lse_sb": "h * n_q", "lse_sh": "n_q"}
        sizes = {}
        grid = (f"cdiv({'n_q' if dq else 'n_kv'}, {BLOCK})", "h" if dq else "h_kv", "b")
    tensors = [TensorParam("Q", p.dtype, qs), TensorParam("K", p.dtype, ks), TensorParam("V", p.dtype, ks),
               TensorParam("dO", p.dtype, qs), TensorParam("DELTA", "f32", rs), TensorParam("LSE2", "f32", rs)]
    outs = {"dQ": q} if dq else {"dK": kv, "dV": kv}
    tensors += [TensorParam(n, p.dtype, qs if n == "dQ" else ks, "out") for n in outs]
    if p.dq_atomic:
        tensors.append(TensorParam("dQacc", "f32", qs, "inout"))      # zeroed by the caller; += scale dS·K
        outs = {**outs, "dQacc": q}
    if p.varlen:
        tensors += [TensorParam("cu_seqlens_q", "i32", ("b1",), "in", "offsets:total_q"),
                    TensorParam("cu_seqlens_k", "i32", ("b1",), "in", "offsets:total_kv")]
    kernargs = {"group": "h // max(h_kv, 1)", **sizes, **lse}
    for name, strides in (("q", q), ("k", kv), ("v", kv), ("do", q)) + tuple((n.lower(), st) for n, st in outs.items()):
        kernargs.update({f"{name}_{k}": v for k, v in strides.items()})
    requires: tuple = (("h_kv >= 1 and h % h_kv == 0", "the query heads must be a multiple of the key/value heads"),)
    if not p.varlen:
        requires += ((f"n_q < {MAX_SEQ} and n_kv < {MAX_SEQ}", f"sequence lengths must stay below {MAX_SEQ}"),
                     (f"n_q * {2 * d} <= {lim} and n_kv * {2 * d} <= {lim}",
                      "one head's sequence must stay below 2 GiB (32-bit buffer offsets)"))
    return LaunchInfo(tensors=tuple(tensors), scalars=(ScalarParam("softmax_scale", "f32", 1.0 / math.sqrt(d),
                                                                   (1e-30, 1e30)),),
                      grid=grid, block=(64 * WAVES, 1, 1), kernargs=kernargs, requires=requires)


def check(p, target, program):
    return []


@generator("attention_bwd", params=PARAMS,
           shapes={"b": "batch", "h": "query heads", "h_kv": "key/value heads", "n_q": "query length",
                   "n_kv": "key/value length", "total_q": "query tokens (varlen)",
                   "total_kv": "key/value tokens (varlen)", "b1": "batch + 1 (varlen)"},
           check=check, launch=launch,
           doc="attention backward, deterministic: dK/dV per KV block (GQA heads looped) or dQ per query block")
def attention_bwd(p, target) -> KernelBuilder:
    return BackwardKernel(make_plan(p, target), p.name).build()


class BackwardKernel:
    def __init__(self, plan: Plan, name: str):
        self.plan = plan
        self.name = name
        self.dq = plan.part == "dq"

    # ------------------------------------------------------------------ the whole kernel
    def build(self) -> KernelBuilder:
        pl = self.plan
        k = self.k = KernelBuilder(self.name, pl.target, workgroup_size=64 * WAVES, workgroup_ids="xyz")
        res, stream, outs = ROLES[pl.part]
        k.header += [f"attention backward ({pl.part}): {pl.dtype}, D={pl.head_dim}, "
                     f"{'causal (bottom-right)' if pl.causal else 'non-causal'}{', varlen' if pl.varlen else ''}",
                     f"{WAVES} waves x {ROWS} resident rows ({'/'.join(res)}), streamed tiles of {TILE} "
                     f"({'/'.join(stream)}), {pl.mfma.mnemonic}; transposed reads: {pl.t_read}",
                     f"LDS: 2 stages x 2 tiles x {pl.layout.size} = {pl.lds_bytes} bytes, swizzle "
                     f"{pl.layout.swizzle.describe()}"]
        self.done = k.label("done")
        self.arguments()
        self.geometry()
        self.resident()
        self.stream_tiles()
        self.registers()
        if self.dq:
            self.stream_windows(self.h_kv)
            self.loops()
        else:
            self.head_loop()
        self.epilogue()
        k.place(self.done)
        k.s_endpgm()
        return k

    # ------------------------------------------------------------------ arguments and geometry
    def arguments(self):
        k, pl = self.k, self.plan
        for n in ("Q", "K", "V", "dO"):
            k.args.pointer(n, pl.dtype, "read_only")
        for n in ("DELTA", "LSE2"):
            k.args.pointer(n, "f32", "read_only")
        outs = ROLES[pl.part][2]
        for n in outs:
            k.args.pointer(n, pl.dtype, "write_only")
        if pl.dq_atomic:
            k.args.pointer("dQacc", "f32", "read_write")
            outs = outs + ("dQacc",)
        if pl.varlen:
            k.args.pointer("cu_seqlens_q", "i32", "read_only")
            k.args.pointer("cu_seqlens_k", "i32", "read_only")
        strides = ["q_sb", "q_sh", "q_sn", "k_sb", "k_sh", "k_sn", "v_sb", "v_sh", "v_sn", "do_sb", "do_sh",
                   "do_sn", "lse_sb", "lse_sh"] + [f"{n.lower()}_{x}" for n in outs for x in ("sb", "sh", "sn")]
        values = ["n_q", "n_kv", "group"] + strides
        for n in values:
            k.args.value(n, "u32")
        k.args.value("softmax_scale", "f32")
        # the streamed operands' windows walk the tiles (and dkdv's DELTA/LSE2 with them): tracked
        walk = ROLES[pl.part][1] + (() if self.dq else ("DELTA", "LSE2"))
        walk += ("dQacc",) if pl.dq_atomic else ()
        self.rsrc = {n: BufferResource(k, n, tracked=n in walk) for n in ("Q", "K", "V", "dO", "DELTA", "LSE2") + outs}
        for n, r in self.rsrc.items():
            r.load_pointer(k.args[n].offset)
        self.s = load_values(k, values + ["softmax_scale"])
        self.lane, self.wave = lane_and_wave(k)
        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")

    def geometry(self):
        """Sequence bounds, this workgroup's resident block (exit when past its sequence), the head
        mapping, and the streamed tiles it visits: ``t_first`` .. ``t_all`` - 1, of which ``t_masked``
        (causal: the diagonal band) come first in the dkdv kernel and last in the dq kernel."""
        k, pl, s = self.k, self.plan, self.s
        b, h, blk = k.workgroup_id["z"], k.workgroup_id["y"], k.workgroup_id["x"]
        self.start_q, self.len_q, self.start_k, self.len_k = sequence_bounds(k, pl.varlen, b, s)
        res_len = self.len_q if self.dq else self.len_k
        self.r0 = k.sgpr(1, "block_row0", kernel=True)
        k.s_mul_i32(self.r0, blk, BLOCK, comment="first resident row of this workgroup")
        k.s_cmp_ge_u32(self.r0, res_len, comment="a block past its sequence")
        k.s_cbranch_scc1(self.done)
        self.wave_row0 = k.sgpr(1, "wave_row0", kernel=True)
        k.s_mul_i32(self.wave_row0, self.wave, ROWS, comment="this wave's first resident row in the block")
        if self.dq:
            self.h_kv = k.sgpr(1, "h_kv", kernel=True)
            rem = k.sgpr(1, "rem")
            udiv(k, self.h_kv, rem, h, s["group"], why="key/value head = head / group")
            k.free(rem)
        self.t_first = k.sgpr(1, "tile_first", kernel=True)
        self.t_split = k.sgpr(1, "tile_split", kernel=True)      # first unmasked (dkdv) / first masked (dq)
        self.t_all = k.sgpr(1, "tile_end", kernel=True)
        t = k.sgpr(2, "geo_tmp")
        stream_len = self.len_k if self.dq else self.len_q
        k.s_add_u32(t[0], stream_len, TILE - 1)
        k.s_lshr_b32(self.t_all, t[0], 6, comment="streamed tiles of the sequence")
        k.s_mov_b32(self.t_first, 0)
        k.s_mov_b32(self.t_split, self.t_all)
        if pl.causal:
            k.s_sub_i32(t[1], self.len_k, self.len_q, comment="causal offset n_kv - n_q (bottom-right)")
            if self.dq:
                # query i sees keys j < i + off + 1: every row of the block sees keys < r0 + off + 1 (unmasked
                # tiles below that), the last row keys < r0 + BLOCK + off
                k.s_add_i32(t[0], self.r0, t[1])
                k.s_add_i32(t[0], t[0], 1)
                k.s_min_i32(t[0], t[0], self.len_k)
                k.s_max_i32(t[0], t[0], 0)
                k.s_lshr_b32(self.t_split, t[0], 6, comment="whole KV tiles every row of the block sees")
                k.s_add_i32(t[0], self.r0, t[1])
                k.s_add_i32(t[0], t[0], BLOCK)
                k.s_min_i32(t[0], t[0], self.len_k)
                k.s_max_i32(t[0], t[0], 0)
                k.s_add_u32(t[0], t[0], TILE - 1)
                k.s_lshr_b32(self.t_all, t[0], 6, comment="KV tiles any row of the block sees")
            else:
                # key j is seen by queries i >= j - off: the block's first key by queries >= r0 - off (tiles
                # from there), its last key by queries >= r0 + BLOCK - 1 - off (unmasked tiles from there)
                k.s_sub_i32(t[0], self.r0, t[1])
                k.s_max_i32(t[0], t[0], 0)
                k.s_lshr_b32(self.t_first, t[0], 6, comment="first query tile that sees a key of the block")
                k.s_min_u32(self.t_first, self.t_first, self.t_all)
                k.s_sub_i32(t[0], self.r0, t[1])
                k.s_add_i32(t[0], t[0], BLOCK - 1 + TILE - 1)
                k.s_max_i32(t[0], t[0], 0)
                k.s_lshr_b32(self.t_split, t[0], 6, comment="first query tile that sees every key of the block")
                k.s_min_u32(self.t_split, self.t_split, self.t_all)
                k.s_max_u32(self.t_split, self.t_split, self.t_first)
        k.free(t)

    # ------------------------------------------------------------------ resident rows
    def resident(self):
        """This wave's 16 resident rows of the two A operands, straight into AGPRs in MFMA operand layout
        (rows past the sequence load zeros), their windows aimed at the block."""
        k, pl, s = self.k, self.plan, self.s
        b, h = k.workgroup_id["z"], k.workgroup_id["y"]
        names = ROLES[pl.part][0]
        head = h                    # dq: the query head; dkdv: the key/value head (the grid's y)
        start, length = (self.start_q, self.len_q) if self.dq else (self.start_k, self.len_k)
        t = k.sgpr(2, "res_tmp")
        k.s_add_u32(t[0], start, self.r0, comment="first resident row (token) of the block")
        k.s_sub_u32(t[1], length, self.r0, comment="resident rows left from there")
        self.A = {}
        L = lx.lane()
        row0 = lx.uniform("wave_row0", BLOCK, self.wave_row0)
        for n in names:
            x = n.lower()
            strided_window(k, self.rsrc[n], ((b, s[f"{x}_sb"]), (head, s[f"{x}_sh"]), (t[0], s[f"{x}_sn"])),
                           rows_left=t[1], row_stride=s[f"{x}_sn"], elem_bytes=2, why=f"{n} window")
        outs = ROLES[pl.part][2]
        for n in outs:
            x = n.lower()
            strided_window(k, self.rsrc[n], ((b, s[f"{x}_sb"]), (head, s[f"{x}_sh"]), (t[0], s[f"{x}_sn"])),
                           rows_left=t[1], row_stride=s[f"{x}_sn"], elem_bytes=2, why=f"{n} window")
        if self.dq:
            one = k.sgpr(1, "one")
            k.s_mov_b32(one, 1)
            for n in ("DELTA", "LSE2"):
                strided_window(k, self.rsrc[n], ((b, s["lse_sb"]), (h, s["lse_sh"]), (t[0], one)), rows_left=t[1],
                               row_stride=one, elem_bytes=4, why=f"{n} window")
            k.free(one)
        voff = k.vgpr(1, "res_off")
        pitch_reg = k.sgpr(1, "res_pitch")
        for n in names:
            x = n.lower()
            k.s_lshl_b32(pitch_reg, s[f"{x}_sn"], 1)
            em = lx.Emitter(k, self.lane)
            em.emit((row0 + L % 16) * lx.uniform("res_pitch", 1 << 31, pitch_reg) + (L // 16) * 16, dst=voff,
                    comment=f"{n}: this lane's row, its 8 d of slice 0")
            em.free()
            self.A[n] = FragmentRegs(k, f"{n}_frag", 1, pl.d_slices, pl.kmajor.regs, agpr=True)
            for sl in range(pl.d_slices):
                k.buffer_load_dwordx4(self.A[n].slice(0, sl), voff, self.rsrc[n].regs, 0, offen=True,
                                      offset=sl * pl.kmajor.slice_k * 2, comment=f"{n} slice {sl}")
        if self.dq:
            self.row_stats = k.vgpr(2, "neg_lse2_delta", kernel=True)
            em = lx.Emitter(k, self.lane)
            em.emit((row0 + L % 16) * 4, dst=voff, comment="this lane's row of DELTA and LSE2")
            em.free()
            k.buffer_load_dword(self.row_stats[0], voff, self.rsrc["LSE2"].regs, 0, offen=True, comment="LSE2")
            k.buffer_load_dword(self.row_stats[1], voff, self.rsrc["DELTA"].regs, 0, offen=True, comment="DELTA")
        k.wait(vmcnt=0, why="the resident rows are in registers (before the copies start counting)")
        # strides no longer needed: the resident operands' (the atomic dQ's key block still reads k_sn) and
        # the outputs' batch and head strides (their stores need only the token stride)
        done = [f"{n.lower()}_{x}" for n in names for x in ("sb", "sh", "sn")]
        done += [f"{n.lower()}_{x}" for n in outs for x in ("sb", "sh")]
        k.free(*(s[n] for n in done if not (n == "k_sn" and pl.dq_atomic)))
        if self.dq:
            for i in range(2):
                k.v_xor_b32(self.row_stats[i], 0x80000000, self.row_stats[i], comment="negated: -LSE2, -DELTA")
        k.free(voff, pitch_reg, t)

    # ------------------------------------------------------------------ streamed tiles
    def stream_tiles(self):
        k, pl = self.k, self.plan
        first, second = ROLES[pl.part][1]
        self.lds = {n: [k.lds(pl.layout.size, f"{n}{st}") for st in range(2)] for n in (first, second)}
        wave = lx.uniform("wave", WAVES - 1, self.wave)
        self.row_bytes = {}
        self.g, self.rd_k, self.rd_t = {}, {}, {}
        for n in (first, second):
            rb = self.row_bytes[n] = k.sgpr(1, f"{n}_row_bytes", kernel=True)
            k.s_lshl_b32(rb, self.s[f"{n.lower()}_sn"], 1, comment=f"{n}: bytes between tokens")
            pitch = lx.uniform(f"{n}_row_bytes", 1 << 31, rb)
            self.g[n] = GlobalToLds(k, n, pl.layout, self.lds[n], self.rsrc[n], pl.dma_width, WAVES, wave,
                                    global_offset=lambda row, byte, pitch=pitch: row * pitch + byte)
            self.rd_k[n] = DsReads(k, f"{n}_d", pl.kmajor_reads(n, self.lds[n]), [{}])
        # transposed reads: dq reads K so (dQ += dS·K), dkdv reads Q (dK += dSᵀ·Q) and dO (dV += Pᵀ·dO)
        for n in ((first,) if self.dq else (first, second)):
            self.rd_t[n] = DsReads(k, f"{n}_t", pl.t_reads(n, self.lds[n]), [{}])
        self.step = {}
        for n in (first, second):
            self.step[n] = k.sgpr(1, f"{n}_tile_bytes", kernel=True)
            k.s_lshl_b32(self.step[n], self.row_bytes[n], 6, comment=f"{n}: one tile in bytes")
        k.comment("per-lane addresses: the copies' global offsets (swizzled), the LDS read addresses")
        for prim in list(self.g.values()) + list(self.rd_k.values()) + list(self.rd_t.values()):
            em = lx.Emitter(k, self.lane)
            prim.setup(em)
            em.free()
        if pl.dq_atomic:
            self.atomic_setup(wave)

    def atomic_setup(self, wave):
        """dq_atomic: the dS tile and the key block in LDS (the block copied once, now), the per-lane
        addresses of the dS writes, of the dS-row and Kᵀ reads, and of the atomic adds."""
        k, pl, s = self.k, self.plan, self.s
        assert pl.layout_ds is not None and pl.layout_kb is not None
        self.lds_ds = k.lds(pl.layout_ds.size, "dS_tile")
        self.lds_kb = k.lds(pl.layout_kb.size, "K_block")
        kpitch_reg = k.sgpr(1, "K_row_bytes")
        k.s_lshl_b32(kpitch_reg, s["k_sn"], 1)
        kpitch = lx.uniform("K_row_bytes", 1 << 31, kpitch_reg)
        gkb = GlobalToLds(k, "Kblk", pl.layout_kb, [self.lds_kb], self.rsrc["K"], pl.dma_width, WAVES, wave,
                          global_offset=lambda row, byte: row * kpitch + byte)
        em = lx.Emitter(k, self.lane)
        gkb.setup(em)
        em.free()
        k.comment("the block's keys -> LDS once (Kᵀ of dQ += dS·K); waited for by the first tile's barrier")
        emit(merge([], gkb.ops(0)))
        gkb.release()
        k.free(kpitch_reg)
        row0 = lx.uniform("wave_row0", BLOCK, self.wave_row0)
        ds_reads, kb_reads = pl.dq_reads([self.lds_ds], [self.lds_kb], row0)
        envs = [{"wave_row0": ROWS * w} for w in range(WAVES)]
        for r in ds_reads:
            r.bind({"wave_row0": self.wave_row0})
        self.rd_ds = DsReads(k, "dS_rows", ds_reads, envs)
        self.rd_kb = DsReads(k, "K_t", kb_reads, [{}])
        writes = pl.ds_writes(self.lds_ds, row0)
        self.ds_waddr = k.vgpr(len(writes), "dS_write_addr", kernel=True)
        self.ds_wlanes = []
        em = lx.Emitter(k, self.lane)
        for i, (f, addr) in enumerate(writes):
            em.emit(lx.bind(addr, {"wave_row0": self.wave_row0}), dst=self.ds_waddr[i],
                    comment=f"LDS address of this lane's dS values of fragment {f} (4 queries of its key)")
            self.ds_wlanes.append([lx.lane_values(addr, e) for e in envs])
        em.free()
        for prim in (self.rd_ds, self.rd_kb):
            em = lx.Emitter(k, self.lane)
            prim.setup(em)
            em.free()
        # the atomic adds: row wave_row0 + L%16 of the tile, 4 consecutive d from 16 fd + 4 (L / 16)
        self.dq_off = k.vgpr(1, "dQacc_off", kernel=True)
        pitch_reg = k.sgpr(1, "dQacc_row_bytes")
        k.s_lshl_b32(pitch_reg, s["dqacc_sn"], 2)
        em = lx.Emitter(k, self.lane)
        L = lx.lane()
        em.emit((row0 + L % 16) * lx.uniform("dQacc_row_bytes", 1 << 31, pitch_reg) + (L // 16) * 16,
                dst=self.dq_off, comment="dQacc: this lane's row, its first d of a fragment (bytes)")
        em.free()
        self.dq_step = k.sgpr(1, "dQacc_tile_bytes", kernel=True)
        k.s_lshl_b32(self.dq_step, pitch_reg, 6, comment="dQacc: one tile of rows in bytes")
        k.free(pitch_reg)

    def registers(self):
        k, pl = self.k, self.plan
        outs = ROLES[pl.part][2]
        self.acc = {n: Accumulators(k, f"{n}_acc", 1, pl.d_frags, 4) for n in outs}
        for a in self.acc.values():
            a.zero()
        self.S = Accumulators(k, "S", 1, pl.tile_frags, 4, agpr=False)
        self.dP = Accumulators(k, "dP", 1, pl.tile_frags, 4, agpr=False)
        first, second = ROLES[pl.part][1]
        self.B = {n: FragmentRegs(k, f"{n}_frag", pl.tile_frags, pl.d_slices, pl.kmajor.regs, agpr=True)
                  for n in (first, second)}
        # transposed fragments: AGPRs over the first streamed operand's (dead once S is computed) with tr16;
        # VGPRs (and their odd halves) with u16, a chunk of d-fragments at a time
        u16 = pl.t_read == "u16"
        self.T = FragmentRegs(k, "T_frag", pl.t_chunk, pl.t_slices, pl.acc_op.regs, agpr=not u16,
                              over=None if u16 else self.B[first].regs)
        self.Thi = FragmentRegs(k, "T_hi16", pl.t_chunk, pl.t_slices, pl.acc_op.regs) if u16 else None
        self.P = None if self.dq else FragmentRegs(k, "P", 1, pl.t_slices, pl.acc_op.regs)
        self.dS = FragmentRegs(k, "dS", 1, pl.t_slices, pl.acc_op.regs)
        self.c2 = k.vgpr(2, "scale_log2e", align=2, kernel=True)
        k.v_mov_b32(self.c2[0], LOG2E, comment="log2(e)")
        k.v_mul_f32(self.c2[0], self.s["softmax_scale"], self.c2[0], comment="c = softmax_scale * log2(e)")
        k.v_mov_b32(self.c2[1], self.c2[0])
        if not self.dq:
            self.colstats = k.vgpr(2 * 4 * pl.tile_frags, "tile_lse2_delta", align=4, kernel=True)
            self.minus1 = k.vgpr(2, "minus_one", align=2, kernel=True)
            k.v_mov_b32(self.minus1[0], -1.0)
            k.v_mov_b32(self.minus1[1], -1.0)
        self.packer = Converter(k, pl.dtype)
        self.t_index = k.sgpr(1, "tile_index", kernel=True)
        if pl.dq_atomic:
            self.dS_rows = FragmentRegs(k, "dS_rows", 1, pl.t_slices, pl.acc_op.regs)
            self.dS_rows_hi = FragmentRegs(k, "dS_rows_hi16", 1, pl.t_slices, pl.acc_op.regs) if u16 else None
            self.dq_part = Accumulators(k, "dQ_part", 1, pl.d_frags, 4)

    # ------------------------------------------------------------------ windows of the streamed operands
    def stream_windows(self, head: Reg):
        """Aim the streamed operands' windows at tile ``t_first`` of ``head`` (dkdv: a query head of the
        group; dq: the key/value head); dkdv also the tile's DELTA / LSE2 rows."""
        k, pl, s = self.k, self.plan, self.s
        b = k.workgroup_id["z"]
        start, length = (self.start_k, self.len_k) if self.dq else (self.start_q, self.len_q)
        names = ROLES[pl.part][1] + (() if self.dq else ("DELTA", "LSE2")) + (("dQacc",) if pl.dq_atomic else ())
        if not self.dq:
            # each head's pass starts from the tensors' pointers again (the last pass moved the bases)
            for n in names:
                self.rsrc[n].load_pointer(k.args[n].offset)
            k.wait(lgkmcnt=0, why="the pointers, for this head's windows")
        t = k.sgpr(2, "sw_tmp")
        k.s_lshl_b32(t[1], self.t_first, 6, comment="first streamed row visited")
        k.s_add_u32(t[0], start, t[1])
        k.s_sub_u32(t[1], length, t[1], comment="streamed rows left from there")
        for n in ROLES[pl.part][1]:
            x = n.lower()
            strided_window(k, self.rsrc[n], ((b, s[f"{x}_sb"]), (head, s[f"{x}_sh"]), (t[0], s[f"{x}_sn"])),
                           rows_left=t[1], row_stride=s[f"{x}_sn"], elem_bytes=2, why=f"{n} window")
        if not self.dq:
            one = k.sgpr(1, "one")
            k.s_mov_b32(one, 1)
            for n in ("DELTA", "LSE2"):
                strided_window(k, self.rsrc[n], ((b, s["lse_sb"]), (head, s["lse_sh"]), (t[0], one)),
                               rows_left=t[1], row_stride=one, elem_bytes=4, why=f"{n} window")
            k.free(one)
        if pl.dq_atomic:
            strided_window(k, self.rsrc["dQacc"], ((b, s["dqacc_sb"]), (head, s["dqacc_sh"]),
                                                   (t[0], s["dqacc_sn"])),
                           rows_left=t[1], row_stride=s["dqacc_sn"], elem_bytes=4, why="dQacc window")
        k.free(t)
        k.s_mov_b32(self.t_index, self.t_first, comment="index of the streamed tile in hand")

    def head_loop(self):
        """dkdv: every query head of the key/value head's group, each a full pass over its query tiles."""
        k, s = self.k, self.s
        h = k.sgpr(1, "q_head", kernel=True)
        left = k.sgpr(1, "heads_left", kernel=True)
        k.s_mul_i32(h, k.workgroup_id["y"], s["group"], comment="first query head of the group")
        k.s_mov_b32(left, s["group"])
        top = k.label("heads")
        k.place(top)
        self.stream_windows(h)
        self.loops()
        k.s_add_u32(h, h, 1)
        k.s_sub_u32(left, left, 1)
        k.s_cmp_eq_u32(left, 0)
        k.s_cbranch_scc0(top, comment="next query head of the group")
        k.free(h, left)

    def copies(self, stage: int) -> list[Op]:
        first, second = ROLES[self.plan.part][1]
        return interleaved_copies(stage, [(self.g[first], self.step[first]), (self.g[second], self.step[second])],
                                  unit="tile")

    def loops(self):
        """Tiles ``t_first`` .. ``t_all`` - 1 in two double-buffered loops: dkdv runs the masked band first
        (``bwdmask``) then the unmasked rest (``bwdloop``); dq the unmasked tiles first.  The second loop
        exists twice, for starting on LDS stage 0 or 1."""
        k = self.k
        emit(merge([], self.copies(0)))
        n1, n2 = k.sgpr(1, "loop1_trips"), k.sgpr(1, "loop2_trips")
        k.s_sub_u32(n1, self.t_split, self.t_first)
        k.s_sub_u32(n2, self.t_all, self.t_split)
        # dkdv: the causal band (queries before the diagonal) comes first; dq: the band comes last
        first_masked = self.plan.causal and not self.dq
        labels = ("bwdmask", "bwdloop") if first_masked else ("bwdloop", "bwdmask")
        two_phase_loop(k, n1, n2, lambda st, phase: self.body(st, masked=(phase == 0) == first_masked),
                       labels=labels, counter="tiles_left", unit="tile")
        k.wait(vmcnt=0, why="the copies past the last tile (zeros) have landed before the next pass reuses LDS")
        k.barrier(why="every wave is done with both stages")
        k.free(n1, n2)

    # ------------------------------------------------------------------ one tile
    def body(self, stage: int, masked: bool):
        k, pl = self.k, self.plan
        first, second = ROLES[pl.part][1]
        ra, rb = ROLES[pl.part][0]
        if not self.dq:
            self.load_colstats()
        k.wait(vmcnt=0, why="this wave's copies of tile t (and its DELTA/LSE2) have landed")
        k.barrier(why="tile t is in LDS for every wave; every wave is done with tile t-1 (the other stage)")
        reads = []
        for sl in range(pl.d_slices):
            for f in range(pl.tile_frags):
                reads += self.rd_k[first].fragment_ops(stage, f, sl, self.B[first].slice(f, sl))
                reads += self.rd_k[second].fragment_ops(stage, f, sl, self.B[second].slice(f, sl))
        emit(reads)
        k.comment(f"S = {ra}·{first}ᵀ and dP = {rb}·{second}ᵀ as the reads land; the copies of tile t+1 between")
        main: list[Op] = []
        per = 2 * pl.tile_frags
        for sl in range(pl.d_slices):
            left = min((pl.d_slices - 1 - sl) * per, MAX_LGKM)     # lgkmcnt counts to 15: wait more, not less
            main.append(Op("wait", functools.partial(k.wait, lgkmcnt=left, why=f"slice {sl} of both tiles is in")))
            main += mma_ops(k, pl.mfma, pl.kmajor, self.S.tile, self.A[ra].slice, self.B[first].slice, [0],
                            range(pl.tile_frags), [sl], zero_first=sl == 0, names=("S", ra, f"{first}ᵀ"))
            main += mma_ops(k, pl.mfma, pl.kmajor, self.dP.tile, self.A[rb].slice, self.B[second].slice, [0],
                            range(pl.tile_frags), [sl], zero_first=sl == 0, names=("dP", rb, f"{second}ᵀ"))
        emit(merge(main, self.copies(1 - stage)))
        if masked:
            self.mask()
        self.gradients()
        if self.dq:
            self.transposed_product("dQ", first, stage, self.dS, "dS")
        else:
            self.transposed_product("dV", second, stage, self.P, "P")
            self.transposed_product("dK", first, stage, self.dS, "dS")
            if pl.dq_atomic:
                self.atomic_dq()
        k.s_add_u32(self.t_index, self.t_index, 1, comment="next streamed tile")

    def load_colstats(self):
        """dkdv: this tile's DELTA and LSE2 at the accumulators' columns: lane ``L`` holds queries
        ``16 f + 4 (L / 16) + r`` of tile fragment ``f`` -> one 16-byte load each per fragment."""
        k, pl = self.k, self.plan
        voff = k.vgpr(1, "col_off")
        em = lx.Emitter(k, self.lane)
        em.emit((lx.lane() // 16) * 16, dst=voff, comment="this lane's first query of a fragment, bytes")
        em.free()
        for i, n in enumerate(("LSE2", "DELTA")):
            for f in range(pl.tile_frags):
                regs = self.colstats[(i * pl.tile_frags + f) * 4:(i * pl.tile_frags + f) * 4 + 4]
                k.buffer_load_dwordx4(regs, voff, self.rsrc[n].regs, 0, offen=True, offset=f * 64,
                                      comment=f"{n} of fragment {f}'s queries")
        if not pl.dq_atomic:          # dq_atomic: later, where its SALU fills an MFMA -> AGPR-read gap
            self.advance_colstats()
        k.free(voff)

    def advance_colstats(self):
        for n in ("LSE2", "DELTA"):
            self.rsrc[n].advance(TILE * 4, f"{n}: window to the next tile")

    def mask(self):
        """Causal: logits of (query, key) pairs with key > query + n_kv - n_q -> -inf (P = 0 there)."""
        k = self.k
        k.comment("causal mask (bottom-right)")
        t0 = k.sgpr(1, "tile_row0")
        lim_s = k.sgpr(1, "mask_base")
        k.s_lshl_b32(t0, self.t_index, 6, comment="first streamed row of this tile")
        # dq: row q = r0 + wave_row0 + L%16 sees key columns j < q + off + 1 - t0
        # dkdv: row key = r0 + wave_row0 + L%16 is seen by query columns i >= key - off - t0
        k.s_sub_i32(lim_s, self.len_k, self.len_q)
        if self.dq:
            k.s_add_i32(lim_s, lim_s, self.r0)
            k.s_add_i32(lim_s, lim_s, self.wave_row0)
            k.s_add_i32(lim_s, lim_s, 1)
            k.s_sub_i32(lim_s, lim_s, t0, comment="off + 1 + first row of the wave - tile start")
        else:
            k.s_sub_i32(lim_s, self.wave_row0, lim_s)
            k.s_add_i32(lim_s, lim_s, self.r0)
            k.s_sub_i32(lim_s, lim_s, t0, comment="first key of the wave - off - tile start")
        lim = k.vgpr(1, "mask_limit")
        em = lx.Emitter(k, self.lane)
        L = lx.lane()
        rowpart = em.emit(L % 16, comment="the lane's resident row")
        g4 = em.emit((L // 16) * 4, comment="the lane's first column within a fragment")
        k.v_add_u32(lim, lim_s, rowpart, comment="plus the lane's resident row")
        k.v_sub_u32(lim, lim, g4, comment="the row's limit relative to the lane's first column")
        em.free()
        mask_columns(k, self.S, lim, keep="below" if self.dq else "from")
        k.free(lim, t0, lim_s)

    def gradients(self):
        """P = exp2(S c - LSE2); dS = P (dP - DELTA); both packed to 16 bits as MFMA operands."""
        k, pl = self.k, self.plan
        k.comment("P = exp2(S c - LSE2), dS = P (dP - DELTA)")
        if self.dq:
            neg = k.vgpr(4, "neg_stats", align=2)
            for i in range(2):
                k.v_mov_b32(neg[2 * i], self.row_stats[0 if i == 0 else 1])
                k.v_mov_b32(neg[2 * i + 1], self.row_stats[0 if i == 0 else 1])
        else:
            k.wait(vmcnt=self.dma_per_tile(), why="this tile's DELTA and LSE2 (the copies of tile t+1 may fly)")
            for i in range(0, len(self.colstats), 2):
                k.v_pk_mul_f32(self.colstats[i:i + 2], self.colstats[i:i + 2], self.minus1, comment="negate")
        for f in range(pl.tile_frags):
            s_t, dp_t = self.S.tile(0, f), self.dP.tile(0, f)
            for j in (0, 2):
                if self.dq:
                    nl, nd = neg[0:2], neg[2:4]
                else:
                    base = f * 4 + j
                    nl = self.colstats[base:base + 2]
                    nd = self.colstats[4 * pl.tile_frags + base:4 * pl.tile_frags + base + 2]
                k.v_pk_fma_f32(s_t[j:j + 2], s_t[j:j + 2], self.c2, nl, comment=f"S c - LSE2 ({f}.{j})")
                k.v_exp_f32(s_t[j], s_t[j])
                k.v_exp_f32(s_t[j + 1], s_t[j + 1])
                k.v_pk_add_f32(dp_t[j:j + 2], dp_t[j:j + 2], nd, comment="dP - DELTA")
                k.v_pk_mul_f32(dp_t[j:j + 2], dp_t[j:j + 2], s_t[j:j + 2], comment="dS = P (dP - DELTA)")
        if self.dq:
            k.free(neg)
        per = pl.acc_op.slice_k // 16
        for f in range(pl.tile_frags):
            sl, j = f // per, (f % per) * 2
            s_t, dp_t = self.S.tile(0, f), self.dP.tile(0, f)
            if self.P is not None:
                p = self.P.slice(0, sl)[j:j + 2]
                self.packer.pack(p[0], s_t[0], s_t[1])
                self.packer.pack(p[1], s_t[2], s_t[3])
            d = self.dS.slice(0, sl)[j:j + 2]
            self.packer.pack(d[0], dp_t[0], dp_t[1])
            self.packer.pack(d[1], dp_t[2], dp_t[3])

    def atomic_dq(self):
        """dq_atomic: dSᵀ of every wave -> the LDS dS tile; each wave then computes its 16 queries' dQ over
        the block's 64 keys (dS rows and Kᵀ read transposed) and adds scale · dQ into dQacc with
        ``buffer_atomic_add_f32`` (the next tile's barrier keeps the next dS write behind these reads)."""
        k, pl = self.k, self.plan
        per = pl.acc_op.slice_k // 16
        k.comment("dQ += scale dS·K, atomically: dSᵀ -> LDS, transposed back per wave")
        for i in range(pl.tile_frags):
            sl, j = i // per, (i % per) * 2
            inst = k.ds_write_b64(self.ds_waddr[i], self.dS.slice(0, sl)[j:j + 2], lanes=self.ds_wlanes[i],
                                  comment=f"dS of this lane's key, queries of fragment {i}")
            inst.lds = (self.lds_ds.offset, self.lds_ds.offset + self.lds_ds.size)
        k.wait(lgkmcnt=0, why="this wave's dS is in LDS")
        k.barrier(why="every wave's dS of the tile is in LDS")
        ops = []
        for sl in range(pl.t_slices):
            hi = self.dS_rows_hi.slice(0, sl) if self.dS_rows_hi is not None else None
            ops += self.rd_ds.fragment_ops(0, 0, sl, self.dS_rows.slice(0, sl), hi)
        emit(ops)
        for c0 in range(0, pl.d_frags, pl.t_chunk):
            ops = []
            for sl in range(pl.t_slices):
                for j in range(pl.t_chunk):
                    hi = self.Thi.slice(j, sl) if self.Thi is not None else None
                    ops += self.rd_kb.fragment_ops(0, c0 + j, sl, self.T.slice(j, sl), hi)
            emit(ops)
            k.wait(lgkmcnt=0, why=f"dS rows and Kᵀ (d-fragments {c0}..) are in registers")
            if self.Thi is not None:
                for sl in range(pl.t_slices):
                    if c0 == 0 and self.dS_rows_hi is not None:
                        join_u16_pairs(k, self.dS_rows.slice(0, sl), self.dS_rows_hi.slice(0, sl), pl.acc_op.regs,
                                       f"dS rows slice {sl}")
                    for j in range(pl.t_chunk):
                        join_u16_pairs(k, self.T.slice(j, sl), self.Thi.slice(j, sl), pl.acc_op.regs,
                                       f"Kᵀ[{c0 + j}] slice {sl}")
            emit(mma_ops(k, pl.mfma, pl.acc_op, lambda fm, fd, c0=c0: self.dq_part.tile(fm, c0 + fd),
                         self.dS_rows.slice, self.T.slice, [0], range(pl.t_chunk), range(pl.t_slices),
                         zero_first=True, names=("dQ_part", "dS", "K")))
        # the DELTA/LSE2 windows move on here: 8 SALU between the last MFMA and the first AGPR read of its
        # accumulators (a 4-pass MFMA's result needs 8 wait states), instead of an s_nop
        self.advance_colstats()
        tmp = k.vgpr(4, "dq_vals")
        scale = self.s["softmax_scale"]
        for fd in range(pl.d_frags):
            tile = self.dq_part.tile(0, fd)
            for r in range(4):
                k.v_accvgpr_read_b32(tmp[r], tile[r])
            for r in range(4):
                k.v_mul_f32(tmp[r], scale, tmp[r], comment="times softmax_scale" if r == 0 else None)
            for r in range(4):
                k.buffer_atomic_add_f32(tmp[r], self.dq_off, self.rsrc["dQacc"].regs, 0, offen=True,
                                        offset=fd * 64 + r * 4, comment=f"dQacc[row][{16 * fd} + 4g + {r}] +=")
        k.free(tmp)
        self.rsrc["dQacc"].advance(self.dq_step, "dQacc: window to the next tile")

    def dma_per_tile(self) -> int:
        return sum(g.blocks_per_wave for g in self.g.values())

    def transposed_product(self, out: str, src: str, stage: int, a, a_name: str):
        """``out += a · src`` with ``src`` read transposed from LDS (keys/queries in the accumulator order),
        ``t_chunk`` d-fragments at a time."""
        k, pl = self.k, self.plan
        k.comment(f"{out} += {a_name}·{src} ({src} read transposed)")
        for c0 in range(0, pl.d_frags, pl.t_chunk):
            ops = []
            for sl in range(pl.t_slices):
                for j in range(pl.t_chunk):
                    hi = self.Thi.slice(j, sl) if self.Thi is not None else None
                    ops += self.rd_t[src].fragment_ops(stage, c0 + j, sl, self.T.slice(j, sl), hi)
            emit(ops)
            k.wait(lgkmcnt=0, why=f"{src} read transposed (d-fragments {c0}..)")
            if self.Thi is not None:
                for sl in range(pl.t_slices):
                    for j in range(pl.t_chunk):
                        join_u16_pairs(k, self.T.slice(j, sl), self.Thi.slice(j, sl), pl.acc_op.regs,
                                       f"{src}[{c0 + j}] slice {sl}")
            emit(mma_ops(k, pl.mfma, pl.acc_op, lambda fm, fd, c0=c0: self.acc[out].tile(fm, c0 + fd), a.slice,
                         self.T.slice, [0], range(pl.t_chunk), range(pl.t_slices), names=(out, a_name, src)))

    # ------------------------------------------------------------------ epilogue
    def epilogue(self):
        k, pl = self.k, self.plan
        k.wait(vmcnt=0, lgkmcnt=0, why="all copies and reads are done before the stores")
        for prim in list(self.g.values()) + list(self.rd_k.values()) + list(self.rd_t.values()):
            prim.release()
        if pl.dq_atomic:
            self.rd_ds.release()
            self.rd_kb.release()
            k.free(self.ds_waddr, self.dq_off)
        scale = k.vgpr(1, "softmax_scale_v")
        k.v_mov_b32(scale, self.s["softmax_scale"])
        row0 = lx.uniform("wave_row0", BLOCK, self.wave_row0)
        for n, acc in self.acc.items():
            k.comment(f"{n} -> memory" + (" (times softmax_scale)" if n != "dV" else ""))
            store_accumulators(k, acc, self.rsrc[n], self.lane, frag_rows=16, row0=row0, col0=lx.const(0),
                               row_elems=self.s[f"{n.lower()}_sn"], cols_left=lx.const(pl.head_dim),
                               out_dtype=pl.dtype, packer=self.packer, row_scale=None if n == "dV" else [scale])
        k.free(scale)
        self.packer.release()


def hot_loops(program) -> list[list]:
    """The unmasked streamed-tile loop (``bwdloop``) of a finished backward program (two tiles per trip;
    dkdv has the copy that starts on stage 1 too, ``bwdloop_odd``)."""
    return loop_bodies(program, "bwdloop")
