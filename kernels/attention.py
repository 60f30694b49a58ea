"""Attention forward, flash-attention style, as raw assembly for gfx950 and gfx942:
``O = softmax(scale · Q·Kᵀ + mask) · V`` and ``LSE = logsumexp(scale · Q·Kᵀ + mask)`` (natural log, fp32).

One workgroup of 4 waves takes ``BLOCK_Q = 128`` query rows of one (batch, head); each wave owns 32 of
them (two 16-row MFMA fragments) for the whole key loop.  Keys and values stream through LDS in tiles of
``BLOCK_KV = 64`` rows, double-buffered.  docs/attention.md has the design; this file reads as tile
operations over named tiles:

    load(reg.Q, gQ)          Q straight from memory into AGPRs, in MFMA operand layout (once)
    load(lds.KV[s], gK, gV)  GlobalToLds / interleaved_copies: buffer_load ... lds (K and V key-major)
    load(reg.K, lds.K)       ds_read_b128, MFMA operand layout
    mma(S, reg.Q, reg.K)     S = Q·Kᵀ in VGPRs: a lane holds 4 consecutive keys of one query row
    softmax(S) -> P          online softmax in exp2, lazy rescale, P packed to 16 bits in place
    load(reg.V, lds.V)       ds_read_b64_tr_b16 (gfx950) / ds_read_u16 pairs joined by v_lshl_or_b32
                             (gfx942, no transposing read), keys in the order the lane's P holds them
    mma(O, P, reg.V)         O += P·V in AGPRs
    store(gO, O / l), store(gLSE, m + log l)

The schedule, per KV tile (4 waves, one per SIMD; one barrier per tile):

    wait(own copies of tile t); barrier                 tile t in LDS; everyone is done with tile t-1
    K reads (all k-slices)  ->  S MFMAs, slice by slice as the reads land, with the copies of
                                tile t+1 (the other stage) spread between them
    [masked tiles only: keys past the end / above the causal diagonal -> -inf]
    row max: local, then two lane exchanges (ds_bpermute), V reads issued between them
    lazy rescale (branch taken only when a row's max grew by more than 2^8)
    P = exp2((S - m) · scale·log2 e), row sums, pack     ->  PV MFMAs

Tiles that need a mask (the ragged last tile, the causal diagonal band) run in a second copy of the
loop body; the hot loop (``kvloop``) has no checks.
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
from isagen.prims.convert import Converter
from isagen.prims.rows import lane_and_wave
from isagen.targets import MfmaInfo, Target, get_target
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import OOB_OFFSET, BufferResource
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
from isagen.tiles.online_softmax import RowSoftmax, mask_columns
from isagen.tiles.order import udiv
from isagen.tiles.registers import Accumulators, FragmentRegs
from isagen.tiles.schedule import Op, emit, merge
from isagen.tiles.window import strided_window

WAVES = 4
ROWS_PER_WAVE = 32          # two 16-row MFMA fragments
BLOCK_Q = WAVES * ROWS_PER_WAVE
BLOCK_KV = 64
LAZY_RESCALE_LOG2 = 8.0     # rescale O only when a row's max grew by more than this (log2 units: x256)
MAX_SEQ = 1 << 24           # sequence lengths (and their starts) stay below this

PARAMS = {
    "dtype": Param("str", "bf16", "element type of Q, K, V and O (fp32 accumulation; LSE is fp32)",
                   choices=("bf16", "f16")),
    "head_dim": Param("int", 128, "head dimension D of Q, K and V (64 or 128: what the register budget holds)",
                      choices=(64, 128)),
    "causal": Param("bool", False, "causal mask, aligned bottom-right as flash-attn: query i sees key j iff "
                                   "j <= i + n_kv - n_q"),
    "varlen": Param("bool", False, "variable-length batch packed as flash-attn's THD layout: sequence starts and "
                                   "lengths from cu_seqlens_q / cu_seqlens_k"),
}

STRIDES = ("q_sb", "q_sh", "q_sn", "k_sb", "k_sh", "k_sn", "v_sb", "v_sh", "v_sn", "o_sb", "o_sh", "o_sn",
           "lse_sb", "lse_sh")


# ================================================================================== the plan
@dataclass(frozen=True)
class Plan:
    """What the kernel is, independent of run-time sizes (pure; the bench model and the tests read it)."""

    target: Target
    dtype: str
    head_dim: int
    causal: bool
    varlen: bool
    mfma: MfmaInfo            # 16x16 MFMA of the element type (S = Q·Kᵀ and O += P·V)
    qk: Fragment              # Q and K operand fragments: 8 d per lane per read (ds_read_b128)
    pv: Fragment              # P and V operand fragments: one MFMA's keys per lane
    v_read: str               # how V leaves LDS: tr16 (transposing reads) | u16 (one element per read)
    dma_width: int            # bytes per lane of the K and V LDS-DMAs
    layout_k: LdsLayout
    layout_v: LdsLayout

    @property
    def d_frags(self) -> int:
        return self.head_dim // 16

    @property
    def qk_slices(self) -> int:
        return self.head_dim // self.qk.slice_k

    @property
    def key_frags(self) -> int:
        return BLOCK_KV // 16

    @property
    def pv_slices(self) -> int:
        return BLOCK_KV // self.pv.slice_k

    @property
    def lds_bytes(self) -> int:
        return 2 * (self.layout_k.size + self.layout_v.size)

    @property
    def mfmas_per_tile(self) -> int:
        """MFMAs per wave per KV tile: S (2 x 4 key fragments x D/k) and PV (2 x D/16 x 64/k)."""
        k = self.mfma.k
        return 2 * self.key_frags * (self.head_dim // k) + 2 * self.d_frags * (BLOCK_KV // k)

    def k_reads(self, stages) -> list[ReadInst]:
        return kmajor_reads("K", self.layout_k, stages, self.qk, [16 * f for f in range(self.key_frags)],
                            range(self.qk_slices), lx.const(0))

    def v_reads(self, stages) -> list[ReadInst]:
        d0 = [16 * f for f in range(self.d_frags)]
        if self.v_read == "u16":
            return u16_reads("V", self.layout_v, stages, self.pv, d0, range(self.pv_slices), lx.const(0))
        return key_order_tr16_reads("V", self.layout_v, stages, d0, range(self.pv_slices))


def _mfma(target: Target, dtype: str) -> MfmaInfo:
    found = target.find_mfma(dtype, 16, 16)
    if not found:
        raise SpecError(f"params.dtype: {target.name} has no 16x16 {dtype} MFMA")
    return found[0]


def make_plan(p, target) -> Plan:
    target = get_target(target)
    return _make_plan(tuple(sorted(p.items())), target.name)


@functools.lru_cache(maxsize=32)
def _make_plan(items: tuple, target_name: str) -> Plan:
    p = params_from(dict(items), "plan")
    target = get_target(target_name)
    mfma = _mfma(target, p.dtype)
    kpm = 2 * mfma.a_regs
    qk = Fragment(rows=16, k_per_mfma=kpm, k_per_read=8)
    pv = Fragment(rows=16, k_per_mfma=kpm, k_per_read=kpm)
    d = p.head_dim
    tr16 = target.has_tr16_read
    wide = 16 if 16 in target.lds_dma_widths else 4
    plain = Plan(target=target, dtype=p.dtype, head_dim=d, causal=p.causal, varlen=p.varlen, mfma=mfma, qk=qk,
                 pv=pv, v_read="tr16" if tr16 else "u16", dma_width=wide,
                 layout_k=LdsLayout(BLOCK_KV, d * 2, 16), layout_v=LdsLayout(BLOCK_KV, d * 2, 16))
    if plain.lds_bytes > target.lds_bytes:
        raise SpecError(f"params.head_dim: two LDS stages of K and V ({plain.lds_bytes} bytes) exceed "
                        f"{target.name}'s {target.lds_bytes}")
    stage = [LdsRegion("tile", 0, 0)]
    bank = target.lds_banks * 4

    def coords(reads):
        return [Coords(lx.lane_values(r.row, {}), lx.lane_values(r.byte, {}), 0, r.width, "read") for r in reads]

    layout_k, bad_k = choose_swizzle(plain.layout_k, coords(plain.k_reads(stage)), target.name, bank)
    layout_v, bad_v = choose_swizzle(plain.layout_v, coords(plain.v_reads(stage)), target.name, bank)
    for what, bad in (("K", bad_k), ("V", bad_v)):
        if bad:
            raise SpecError(f"params.head_dim: no swizzle of the {what} tile makes its reads free of LDS bank "
                            f"conflicts ({len(bad)} reads conflict)")
    return Plan(**{**plain.__dict__, "layout_k": layout_k, "layout_v": layout_v})


# ================================================================================== registry hooks
def validate(p, target):
    return []


def check(p, target, program):
    if program.occupancy()["waves_per_simd"] < 1:
        return [("head_dim", "the kernel does not fit one wave per SIMD")]
    return []


def launch(p, target) -> LaunchInfo:
    """The contract of ``isagen run`` and ``isagen.build``: contiguous tensors, torch SDPA's (B, H, N, D)
    layout, or with ``varlen`` flash-attn's packed THD layout (Q (total_q, H, D), LSE (H, total_q)) with
    ``cu_seqlens_q/_k`` (the kernel reads each sequence's bounds from them; ``n_q``/``n_kv`` are unused).
    ``isagen.attention`` (runtime/attention.py) launches the same kernels on any strides and on
    flash-attn's (B, N, H, D) layout with its own argument values."""
    d = p.head_dim
    lim = (1 << 31) - 1
    scale = ScalarParam("softmax_scale", "f32", 1.0 / math.sqrt(d), (1e-30, 1e30))
    heads = ("h_kv >= 1 and h % h_kv == 0", "the query heads must be a multiple of the key/value heads")
    tensors: tuple[TensorParam, ...]
    if p.varlen:
        tensors = (TensorParam("Q", p.dtype, ("total_q", "h", d), "in"),
                   TensorParam("K", p.dtype, ("total_kv", "h_kv", d), "in"),
                   TensorParam("V", p.dtype, ("total_kv", "h_kv", d), "in"),
                   TensorParam("O", p.dtype, ("total_q", "h", d), "out"),
                   TensorParam("LSE", "f32", ("h", "total_q"), "out"),
                   TensorParam("cu_seqlens_q", "i32", ("b1",), "in", "offsets:total_q"),
                   TensorParam("cu_seqlens_k", "i32", ("b1",), "in", "offsets:total_kv"))
        q = {"sb": "0", "sh": str(d), "sn": f"h * {d}"}
        kv = {"sb": "0", "sh": str(d), "sn": f"h_kv * {d}"}
        lse = {"lse_sb": "0", "lse_sh": "total_q"}
        scalars = (scale,)
        # no sequence is longer than the whole batch: blocks past their own sequence exit at once
        # (isagen.attention launches cdiv(longest, 128) blocks instead)
        grid = (f"cdiv(total_q, {BLOCK_Q})", "h", "max(b1 - 1, 0)")
        sizes = {"n_q": "total_q", "n_kv": "total_kv"}
        requires = (heads, ("b1 >= 1", "cu_seqlens has one entry more than the batch"),
                    (f"total_q * h * {2 * d} <= {lim} and total_kv * h_kv * {2 * d} <= {lim}",
                     "Q, K, V and O must stay below 2 GiB (32-bit buffer offsets)"))
    else:
        tensors = (TensorParam("Q", p.dtype, ("b", "h", "n_q", d), "in"),
                   TensorParam("K", p.dtype, ("b", "h_kv", "n_kv", d), "in"),
                   TensorParam("V", p.dtype, ("b", "h_kv", "n_kv", d), "in"),
                   TensorParam("O", p.dtype, ("b", "h", "n_q", d), "out"),
                   TensorParam("LSE", "f32", ("b", "h", "n_q"), "out"))
        q = {"sb": f"h * n_q * {d}", "sh": f"n_q * {d}", "sn": str(d)}
        kv = {"sb": f"h_kv * n_kv * {d}", "sh": f"n_kv * {d}", "sn": str(d)}
        lse = {"lse_sb": "h * n_q", "lse_sh": "n_q"}
        scalars = (scale,)
        grid = (f"cdiv(n_q, {BLOCK_Q})", "h", "b")
        sizes = {}
        requires = (heads, (f"n_q < {MAX_SEQ} and n_kv < {MAX_SEQ}", f"sequence lengths must stay below {MAX_SEQ}"),
                    (f"n_q * {2 * d} <= {lim} and n_kv * {2 * d} <= {lim}",
                     "one head's sequence must stay below 2 GiB (32-bit buffer offsets)"))
    kernargs = {"group": "h // max(h_kv, 1)", **sizes,
                **{f"q_{k}": v for k, v in q.items()}, **{f"o_{k}": v for k, v in q.items()},
                **{f"k_{k}": v for k, v in kv.items()}, **{f"v_{k}": v for k, v in kv.items()}, **lse}
    return LaunchInfo(tensors=tensors, scalars=scalars, grid=grid, block=(64 * WAVES, 1, 1), kernargs=kernargs,
                      requires=requires)


# ================================================================================== shared pieces
def load_values(k, names) -> dict[str, Reg]:
    """An SGPR per value argument of ``names``, loaded from the kernel arguments (waited for later)."""
    out = {}
    for n in names:
        out[n] = k.sgpr(1, n, kernel=True)
        k.s_load_dword(out[n], k.kernarg_ptr, k.args[n].offset, comment=n)
    return out


def sequence_bounds(k, varlen: bool, b: Reg, s: dict) -> tuple[Reg, Reg, Reg, Reg]:
    """SGPRs ``(start_q, len_q, start_k, len_k)`` of batch ``b``'s sequence: from ``cu_seqlens_q/_k``
    (varlen) or 0 and the ``n_q``/``n_kv`` arguments (``s``: their SGPRs).  Shared with the backward
    kernels (kernels/attention_bwd.py)."""
    start_q, len_q = k.sgpr(1, "start_q", kernel=True), k.sgpr(1, "len_q", kernel=True)
    start_k, len_k = k.sgpr(1, "start_k", kernel=True), k.sgpr(1, "len_k", kernel=True)
    if varlen:
        ptr = k.sgpr(2, "cu_ptr", align=2)
        pair = k.sgpr(2, "cu_pair", align=2)
        off = k.sgpr(1, "cu_off")
        k.s_lshl_b32(off, b, 2, comment="batch * 4: this sequence's entry of cu_seqlens")
        for which, start, length in (("q", start_q, len_q), ("k", start_k, len_k)):
            k.s_load_dwordx2(ptr, k.kernarg_ptr, k.args[f"cu_seqlens_{which}"].offset, comment=f"cu_seqlens_{which}")
            k.wait(lgkmcnt=0, why=f"cu_seqlens_{which} pointer")
            k.s_add_u32(ptr[0], ptr[0], off)
            k.s_addc_u32(ptr[1], ptr[1], 0)
            k.s_load_dwordx2(pair, ptr, 0, comment=f"cu_seqlens_{which}[b], [b + 1]")
            k.wait(lgkmcnt=0, why=f"this sequence's bounds ({which})")
            k.s_mov_b32(start, pair[0], comment=f"first {which} token of this sequence")
            k.s_sub_u32(length, pair[1], pair[0], comment=f"{which} length of this sequence")
        k.free(ptr, pair, off)
    else:
        k.s_mov_b32(start_q, 0)
        k.s_mov_b32(start_k, 0)
        k.s_mov_b32(len_q, s["n_q"], comment="query length")
        k.s_mov_b32(len_k, s["n_kv"], comment="key/value length")
    return start_q, len_q, start_k, len_k


# ================================================================================== the kernel
@generator("attention", params=PARAMS,
           shapes={"b": "batch", "h": "query heads", "h_kv": "key/value heads", "n_q": "query length",
                   "n_kv": "key/value length", "total_q": "query tokens of a packed batch (varlen)",
                   "total_kv": "key/value tokens of a packed batch (varlen)", "b1": "batch + 1 (varlen)"},
           validate=validate, check=check, launch=launch,
           doc="attention forward (flash-attention): O and LSE; bf16/f16, D 64/128, causal, GQA/MQA, varlen")
def attention(p, target) -> KernelBuilder:
    return AttentionKernel(make_plan(p, target), p.name).build()


class AttentionKernel:
    """Writes one attention forward kernel from a plan."""

    def __init__(self, plan: Plan, name: str):
        self.plan = plan
        self.name = name

    def build(self) -> KernelBuilder:
        pl = self.plan
        k = self.k = KernelBuilder(self.name, pl.target, workgroup_size=64 * WAVES, workgroup_ids="xyz")
        k.header += self.describe()
        self.done = k.label("done")
        self.arguments()
        self.sequence()
        self.windows()
        self.tiles()
        self.registers()
        self.load_q()
        self.kv_loops()
        self.epilogue()
        k.place(self.done)
        k.s_endpgm()
        return k

    def describe(self) -> list[str]:
        pl = self.plan
        return [f"attention forward: {pl.dtype} Q/K/V/O, fp32 LSE, D={pl.head_dim}, "
                f"{'causal (bottom-right)' if pl.causal else 'non-causal'}{', varlen' if pl.varlen else ''}",
                f"{WAVES} waves x {ROWS_PER_WAVE} query rows, KV tiles of {BLOCK_KV}, {pl.mfma.mnemonic}",
                f"LDS: 2 stages x (K {pl.layout_k.size} + V {pl.layout_v.size}) = {pl.lds_bytes} bytes; K swizzle "
                f"{pl.layout_k.swizzle.describe()}, V ({pl.v_read}) swizzle {pl.layout_v.swizzle.describe()}"]

    # ------------------------------------------------------------------ arguments
    def arguments(self):
        k, pl = self.k, self.plan
        for n in ("Q", "K", "V"):
            k.args.pointer(n, pl.dtype, "read_only")
        k.args.pointer("O", pl.dtype, "write_only")
        k.args.pointer("LSE", "f32", "write_only")
        if pl.varlen:
            k.args.pointer("cu_seqlens_q", "i32", "read_only")
            k.args.pointer("cu_seqlens_k", "i32", "read_only")
        values = ("n_q", "n_kv", "group") + STRIDES
        for n in values:
            k.args.value(n, "u32")
        k.args.value("softmax_scale", "f32")
        self.rQ = BufferResource(k, "Q")
        self.rK = BufferResource(k, "K", tracked=True)
        self.rV = BufferResource(k, "V", tracked=True)
        self.rO = BufferResource(k, "O")
        self.rL = BufferResource(k, "LSE")
        for r in (self.rQ, self.rK, self.rV, self.rO, self.rL):
            r.load_pointer(k.args[r.name].offset)
        self.s = load_values(k, values + ("softmax_scale",))
        self.lane, self.wave = lane_and_wave(k)
        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")

    def sequence(self):
        """This workgroup's (batch, head, query block): sequence starts and lengths, the KV tiles it visits
        (``tiles``) and how many of them need no mask (``full``).  A block past its sequence exits."""
        k, pl, s = self.k, self.plan, self.s
        b, h, qblk = k.workgroup_id["z"], k.workgroup_id["y"], k.workgroup_id["x"]
        self.h_kv = k.sgpr(1, "h_kv", kernel=True)
        rem = k.sgpr(1, "rem")
        udiv(k, self.h_kv, rem, h, s["group"], why="key/value head = head / group")
        k.free(rem)
        self.start_q, self.len_q, self.start_k, self.len_k = sequence_bounds(k, pl.varlen, b, s)
        self.q0 = k.sgpr(1, "q0", kernel=True)
        k.s_mul_i32(self.q0, qblk, BLOCK_Q, comment="first query row of this workgroup")
        k.s_cmp_ge_u32(self.q0, self.len_q, comment="a block past its sequence (varlen: shorter sequences)")
        k.s_cbranch_scc1(self.done)
        # keys visible to every row of the block (no mask) and to any row (the tiles visited)
        self.tiles_all = k.sgpr(1, "kv_tiles", kernel=True)
        self.tiles_full = k.sgpr(1, "kv_tiles_unmasked", kernel=True)
        t = k.sgpr(2, "seq_tmp")
        if pl.causal:
            k.s_sub_i32(t[0], self.len_k, self.len_q, comment="causal offset n_kv - n_q (bottom-right)")
            k.s_add_i32(t[1], t[0], self.q0)
            k.s_add_i32(t[1], t[1], 1, comment="keys every row of the block sees: q0 + off + 1")
            k.s_min_i32(t[1], t[1], self.len_k)
            k.s_max_i32(t[1], t[1], 0)
            k.s_lshr_b32(self.tiles_full, t[1], 6, comment="whole KV tiles every row sees")
            k.s_add_i32(t[1], t[0], self.q0)
            k.s_add_i32(t[1], t[1], BLOCK_Q, comment="keys the block's last row sees: q0 + 127 + off + 1")
            k.s_min_i32(t[1], t[1], self.len_k)
            k.s_max_i32(t[1], t[1], 0)
        else:
            k.s_lshr_b32(self.tiles_full, self.len_k, 6, comment="whole KV tiles")
            k.s_mov_b32(t[1], self.len_k)
        k.s_add_u32(t[1], t[1], BLOCK_KV - 1)
        k.s_lshr_b32(self.tiles_all, t[1], 6, comment="KV tiles this block visits")
        k.free(t)
        self.wave_row0 = k.sgpr(1, "wave_row0", kernel=True)
        k.s_mul_i32(self.wave_row0, self.wave, ROWS_PER_WAVE, comment="this wave's first row within the block")

    # ------------------------------------------------------------------ buffer windows
    def windows(self):
        k, s = self.k, self.s
        b, h = self.k.workgroup_id["z"], self.k.workgroup_id["y"]
        t = k.sgpr(2, "win_tmp")
        k.s_add_u32(t[0], self.start_q, self.q0, comment="first query row (token) of the block")
        k.s_sub_u32(t[1], self.len_q, self.q0, comment="query rows left from there")
        for r, x in ((self.rQ, "q"), (self.rO, "o")):
            strided_window(k, r, ((b, s[f"{x}_sb"]), (h, s[f"{x}_sh"]), (t[0], s[f"{x}_sn"])), rows_left=t[1],
                           row_stride=s[f"{x}_sn"], elem_bytes=2, why=f"{x.upper()} window")
        one = k.sgpr(1, "one")
        k.s_mov_b32(one, 1)
        strided_window(k, self.rL, ((b, s["lse_sb"]), (h, s["lse_sh"]), (t[0], one)), rows_left=t[1],
                       row_stride=one, elem_bytes=4, why="LSE window")
        k.free(one)
        for r, x in ((self.rK, "k"), (self.rV, "v")):
            strided_window(k, r, ((b, s[f"{x}_sb"]), (self.h_kv, s[f"{x}_sh"]), (self.start_k, s[f"{x}_sn"])),
                           rows_left=self.len_k, row_stride=s[f"{x}_sn"], elem_bytes=2, why=f"{x.upper()} window")
        k.free(t)
        self.row_bytes = {}
        for x in ("q", "k", "v", "o"):
            self.row_bytes[x] = k.sgpr(1, f"{x}_row_bytes", kernel=True)
            k.s_lshl_b32(self.row_bytes[x], s[f"{x}_sn"], 1, comment=f"{x.upper()}: bytes between tokens")
        self.kv_step = {}
        for x in ("k", "v"):
            self.kv_step[x] = k.sgpr(1, f"{x}_tile_bytes", kernel=True)
            k.s_lshl_b32(self.kv_step[x], self.row_bytes[x], 6, comment=f"{x.upper()}: one KV tile in bytes")

    # ------------------------------------------------------------------ tiles
    def tiles(self):
        k, pl = self.k, self.plan
        self.lds_k = [k.lds(pl.layout_k.size, f"K{st}") for st in range(2)]
        self.lds_v = [k.lds(pl.layout_v.size, f"V{st}") for st in range(2)]
        wave = lx.uniform("wave", WAVES - 1, self.wave)
        krow = lx.uniform("k_row_bytes", 1 << 31, self.row_bytes["k"])
        vrow = lx.uniform("v_row_bytes", 1 << 31, self.row_bytes["v"])
        self.gK = GlobalToLds(k, "K", pl.layout_k, self.lds_k, self.rK, pl.dma_width, WAVES, wave,
                              global_offset=lambda row, byte: row * krow + byte)
        self.gV = GlobalToLds(k, "V", pl.layout_v, self.lds_v, self.rV, pl.dma_width, WAVES, wave,
                              global_offset=lambda row, byte: row * vrow + byte)
        self.rdK = DsReads(k, "K", pl.k_reads(self.lds_k), [{}])
        self.rdV = DsReads(k, "V", pl.v_reads(self.lds_v), [{}])
        k.comment("per-lane addresses: global offsets of the K/V copies (the swizzles live here), LDS read addresses")
        for prim in (self.gK, self.gV, self.rdK, self.rdV):
            em = lx.Emitter(k, self.lane)
            prim.setup(em)
            em.free()

    def registers(self):
        k, pl = self.k, self.plan
        self.O = Accumulators(k, "O_acc", 2, pl.d_frags, 4)                       # AGPRs
        self.O.zero()
        self.S = Accumulators(k, "S", 2, pl.key_frags, 4, agpr=False)             # VGPRs: the softmax works on it
        self.Q = FragmentRegs(k, "Q_frag", 2, pl.qk_slices, pl.qk.regs, agpr=True)
        self.Kf = FragmentRegs(k, "KV_frag", pl.key_frags, pl.qk_slices, pl.qk.regs, agpr=True)
        # u16 reads are joined by VALU: their fragments live in VGPRs (the odd keys land in V_hi16 first)
        u16 = pl.v_read == "u16"
        # with transposing reads V lands in AGPRs too, in K's registers: K's fragments are dead once the
        # S MFMAs have read them, before the first V read (that keeps gfx950's D=128 at 2 waves per SIMD)
        self.Vf = FragmentRegs(k, "V_frag", pl.d_frags, pl.pv_slices, pl.pv.regs, agpr=not u16,
                               over=None if u16 else self.Kf.regs)
        self.Vhi = FragmentRegs(k, "V_hi16", pl.d_frags, pl.pv_slices, pl.pv.regs) if u16 else None
        self.P = FragmentRegs(k, "P", 2, pl.pv_slices, pl.pv.regs)
        self.rows = RowSoftmax(k, self.lane, 2, self.s["softmax_scale"], LAZY_RESCALE_LOG2)   # m, l of 32 rows
        self.packer = Converter(k, pl.dtype)          # P and O to 16 bits (round to nearest even)
        self.kv_index = k.sgpr(1, "kv_index", kernel=True)
        k.s_mov_b32(self.kv_index, 0, comment="index of the KV tile in hand (the masks need it)")

    # ------------------------------------------------------------------ Q
    def load_q(self):
        """Q (this wave's 32 rows, every d) straight into AGPRs in MFMA operand layout: lane ``L`` holds row
        ``L % 16`` and d ``32 s + 8 (L / 16) ..`` of slice ``s``; rows past the sequence load zeros."""
        k, pl = self.k, self.plan
        L = lx.lane()
        row0 = lx.uniform("wave_row0", BLOCK_Q, self.wave_row0)
        pitch = lx.uniform("q_row_bytes", 1 << 31, self.row_bytes["q"])
        voff = k.vgpr(2, "q_off")
        em = lx.Emitter(k, self.lane)
        for fm in range(2):
            em.emit((row0 + 16 * fm + L % 16) * pitch + (L // 16) * 16, dst=voff[fm],
                    comment=f"Q fragment {fm}: this lane's row, its 8 d of slice 0")
        em.free()
        for fm in range(2):
            for s in range(pl.qk_slices):
                k.buffer_load_dwordx4(self.Q.slice(fm, s), voff[fm], self.rQ.regs, 0, offen=True,
                                      offset=s * pl.qk.slice_k * 2, comment=f"Q[{fm}] slice {s}")
        k.wait(vmcnt=0, why="Q is in registers (before the copies start counting)")
        k.free(voff)

    # ------------------------------------------------------------------ the KV loops
    def copies(self, stage: int) -> list[Op]:
        return interleaved_copies(stage, [(self.gK, self.kv_step["k"]), (self.gV, self.kv_step["v"])],
                                  unit="KV tile")

    def kv_loops(self):
        """Unmasked tiles in ``kvloop`` (the hot loop), then the masked ones (the ragged end, the causal
        band) in ``kvmask``, continuing on the LDS stage the first loop stopped at."""
        k = self.k
        k.comment("KV tile 0 -> LDS stage 0")
        emit(merge([], self.copies(0)))
        left = k.sgpr(1, "masked_left", kernel=True)
        k.s_sub_u32(left, self.tiles_all, self.tiles_full, comment="tiles that need a mask")
        two_phase_loop(k, self.tiles_full, left, lambda st, phase: self.body(st, masked=phase == 1),
                       labels=("kvloop", "kvmask"), counter="kv_left", unit="KV tile")
        k.free(left)

    def body(self, stage: int, masked: bool):
        k, pl = self.k, self.plan
        k.wait(vmcnt=0, why="this wave's copies of KV tile t have landed")
        k.barrier(why="KV tile t is in LDS for every wave; every wave is done with tile t-1 (the other stage)")
        # ---- S = Q·Kᵀ: every K read issued, MFMAs slice by slice as the reads land; copies of tile t+1
        reads = []
        for s in range(pl.qk_slices):
            for fn in range(pl.key_frags):
                reads += self.rdK.fragment_ops(stage, fn, s, self.Kf.slice(fn, s))
        k.comment("S = Q·Kᵀ (K fragments of tile t -> registers; the copies of tile t+1 between the MFMAs)")
        emit(reads)
        main: list[Op] = []
        per_slice = pl.key_frags
        for s in range(pl.qk_slices):
            left = (pl.qk_slices - 1 - s) * per_slice
            main.append(Op("wait", functools.partial(k.wait, lgkmcnt=left, why=f"K slice {s} is in registers")))
            main += self.s_mfmas(s)
        emit(merge(main, self.copies(1 - stage)))
        if masked:
            self.mask()
        self.softmax(stage)
        k.comment("O += P·V")
        k.wait(lgkmcnt=0, why="V fragments are in registers")
        if self.Vhi is not None:
            for s in range(pl.pv_slices):
                for fd in range(pl.d_frags):
                    join_u16_pairs(k, self.Vf.slice(fd, s), self.Vhi.slice(fd, s), pl.pv.regs, f"V[{fd}] slice {s}")
        emit(self.pv_mfmas())
        k.s_add_u32(self.kv_index, self.kv_index, 1, comment="next KV tile")

    def s_mfmas(self, s: int) -> list[Op]:
        pl = self.plan
        return mma_ops(self.k, pl.mfma, pl.qk, self.S.tile, self.Q.slice, self.Kf.slice, range(2),
                       range(pl.key_frags), [s], zero_first=s == 0, names=("S", "Q", "Kᵀ"))

    def pv_mfmas(self) -> list[Op]:
        pl = self.plan
        return mma_ops(self.k, pl.mfma, pl.pv, self.O.tile, self.P.slice, self.Vf.slice, range(2),
                       range(pl.d_frags), range(pl.pv_slices), names=("O", "P", "V"))

    # ------------------------------------------------------------------ mask
    def mask(self):
        """Logits of keys the row may not see -> -inf: past the sequence's end, and (causal) above the
        diagonal.  Lane ``L`` holds keys ``kv0 + 16 fn + 4 (L / 16) + r`` of row ``q0 + wave_row0 + 16 fm +
        L % 16``; it compares ``16 fn + r`` with its limit minus ``kv0 + 4 (L / 16)``."""
        k, pl = self.k, self.plan
        k.comment("mask: keys past the end" + (" or above the causal diagonal" if pl.causal else "") + " -> -inf")
        kv0 = k.sgpr(1, "kv0")
        lim_s = k.sgpr(1, "key_limit")
        k.s_lshl_b32(kv0, self.kv_index, 6, comment="first key of this tile")
        k.s_sub_u32(lim_s, self.len_k, kv0, comment="keys of the sequence from this tile on")
        lim = k.vgpr(2, "key_limit_lane")
        em = lx.Emitter(k, self.lane)
        L = lx.lane()
        g4 = em.emit((L // 16) * 4, comment="this lane's first key within a 16-key fragment")
        if pl.causal:
            # row i sees keys j < i + 1 + n_kv - n_q: relative to kv0 and this wave's first row
            diag = k.sgpr(1, "diag")
            k.s_add_u32(diag, self.q0, self.wave_row0)
            k.s_add_u32(diag, diag, 1)
            k.s_add_u32(diag, diag, lim_s)
            k.s_sub_u32(diag, diag, self.len_q, comment="q0 + wave_row0 + 1 + (n_kv - kv0) - n_q")
        for fm in range(2):
            k.v_sub_u32(lim[fm], lim_s, g4, comment=f"row fragment {fm}: keys left minus this lane's first key")
            if pl.causal:
                t = em.emit((L % 16) + 16 * fm, comment=f"row within the wave (fragment {fm})")
                k.v_add_u32(t, diag, t, comment="causal: the row's limit")
                k.v_sub_u32(t, t, g4, comment="causal: the row's limit minus this lane's first key")
                k.v_min_i32(lim[fm], lim[fm], t)
        em.free()
        mask_columns(k, self.S, lim)
        k.free(lim, kv0, lim_s)
        if pl.causal:
            k.free(diag)

    # ------------------------------------------------------------------ softmax
    def softmax(self, stage: int):
        """Online softmax of S into P (16-bit, as the PV MFMA's operand); this tile's V reads go out
        between the row-max exchanges."""
        k, pl = self.k, self.plan
        k.comment("online softmax: row max (two lane exchanges; this tile's V reads go out between them)")
        vreads = []
        for s in range(pl.pv_slices):
            for fd in range(pl.d_frags):
                hi = self.Vhi.slice(fd, s) if self.Vhi is not None else None
                vreads += self.rdV.fragment_ops(stage, fd, s, self.Vf.slice(fd, s), hi)
        mx = self.rows.row_max(self.S, vreads)
        self.rows.lazy_rescale(mx, self.O)
        k.free(mx)
        self.rows.exponentiate(self.S)
        k.comment("P packed to 16 bits as the PV MFMA operand")
        for fm in range(2):
            for fn in range(pl.key_frags):
                tile = self.S.tile(fm, fn)
                dst = self._p_regs(fm, fn)
                self.packer.pack(dst[0], tile[0], tile[1])
                self.packer.pack(dst[1], tile[2], tile[3])

    def _p_regs(self, fm: int, fn: int) -> Reg:
        """The two P registers that hold S tile ``(fm, fn)``'s 4 keys packed (the key order of
        ``tiles.lds_to_reg.key_order_tr16_reads``)."""
        per = self.plan.pv.slice_k // 16            # S tiles per P slice: 2 on gfx950, 1 on gfx942
        sl = self.P.slice(fm, fn // per)
        j = (fn % per) * 2
        return sl[j:j + 2]

    # ------------------------------------------------------------------ epilogue
    def epilogue(self):
        k, pl = self.k, self.plan
        k.wait(vmcnt=0, lgkmcnt=0, why="copies past the last tile (zeros) are done before the stores")
        self.gK.release()
        self.gV.release()
        self.rdK.release()
        self.rdV.release()
        for tile in (self.Kf, self.Vf, self.Q, self.P) + ((self.Vhi,) if self.Vhi is not None else ()):
            tile.free()
        k.free(self.S.regs)
        inv, lse = self.rows.finish()
        self.rows.release()
        self.store_lse(lse)
        k.free(lse)
        row0 = lx.uniform("wave_row0", BLOCK_Q, self.wave_row0)
        store_accumulators(k, self.O, self.rO, self.lane, frag_rows=16, row0=row0, col0=lx.const(0),
                           row_elems=self.s["o_sn"], cols_left=lx.const(pl.head_dim), out_dtype=pl.dtype,
                           packer=self.packer, row_scale=[inv[0], inv[1]])
        k.free(inv)
        self.packer.release()

    def store_lse(self, lse: Reg):
        k = self.k
        L = lx.lane()
        row0 = lx.uniform("wave_row0", BLOCK_Q, self.wave_row0)
        off = k.vgpr(1, "lse_off")
        em = lx.Emitter(k, self.lane)
        for fm in range(2):
            em.emit(lx.where_lt(L // 16, 1, (row0 + 16 * fm + L % 16) * 4, OOB_OFFSET), dst=off,
                    comment=f"LSE of row fragment {fm}: lanes 0-15 store (the other three hold the same)")
            k.buffer_store_dword(lse[fm], off, self.rL.regs, 0, offen=True, comment="LSE (fp32)")
        em.free()
        k.free(off)


def hot_loops(program) -> list[list]:
    """The instructions of the unmasked KV loop (``kvloop``): two KV tiles per trip."""
    return loop_bodies(program, "kvloop")
