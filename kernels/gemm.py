"""BF16 GEMM, HipKittens-class: C = A·Bᵀ (B is N×K) or C = A·B (B is K×N), fp32 accumulation, bf16 or
fp32 output, for gfx942 and gfx950.  docs/gemm.md describes the design; this file reads as tile
operations over named tiles:

    load(lds.A[s], gA)        GlobalToLds: buffer_load ... lds, swizzled through the global side
    load(reg.A[f][k], lds.A)  DsReads: ds_read_b128 (or transposed reads for B of A·B)
    mma(acc, reg.A, reg.B)    mma_ops: MFMAs, B as src0 so a lane's accumulators are row segments
    store(gC, acc)            store_quad: 16/8-byte stores, rows past M and columns past N masked

Schedules (the loop's shape):

* ``pingpong8``: 8 waves, two groups of 4 (one wave of each per SIMD) a barrier apart: while one group
  runs its MFMA cluster (under ``s_setprio 1``) the other reads LDS and issues the global->LDS copies.
  Group 1 takes one extra barrier at the start, group 0 one at the end.  The LDS is double-buffered;
  a buffer is refilled (tile t+2) in the first window after *both* groups have read it: group 0 issues
  its share at the start of its memory cluster (tile t+1), group 1 at the start of its compute cluster
  (tile t+2), both in the same window.
* ``interleave4``: 4 waves, one per SIMD; the k-slices of a K-tile split in two halves, each half's
  MFMAs interleaved one by one with the reads of the other half (and the copies of tile t+2); one
  barrier per K-tile.

Block order: HipKittens' chiplet-aware remap (``isagen.tiles.order``) with W (``group_m``) and C
(``chunk``).  Shapes: any M; N and K multiples of 8 (16-byte units along K and N); a K that is not a
multiple of the K-tile is handled by a leading partial tile loaded with zeros in front (the partial
tile is the first one, so the hot loop has no checks); buffer range checks zero rows past M/N and drop
stores past M; stores past N are masked per lane.  Everything 32-bit: each of A, B, C below 2 GiB.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from isagen.errors import SpecError
from isagen.builders.registry import Param, generator
from isagen.builders.launch import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder, LdsRegion
from isagen.targets import MfmaInfo, Target, get_target
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import MAX_RECORDS, OOB_OFFSET, BufferResource
from isagen.tiles.epilogue import Bf16Packer, store_quad
from isagen.tiles.global_to_lds import GlobalToLds
from isagen.tiles.lds_layout import Coords, LdsLayout, choose_swizzle
from isagen.tiles.lds_to_reg import DsReads, Fragment, kmajor_reads, tr16_reads, u16_reads
from isagen.tiles.mma import bf16_mfma, mma_ops
from isagen.tiles.order import emit_remap
from isagen.tiles.schedule import Op, emit, merge

SCHEDULES = {"pingpong8": (8, 2, 4), "interleave4": (4, 2, 2)}     # waves, wave grid rows x cols
OUT_BYTES = {"f32": 4, "bf16": 2}
TARGET_DEFAULTS = {"gfx950": {"block_k": 64, "group_m": 8, "chunk": 64},
                   "gfx942": {"block_k": 32, "group_m": 4, "chunk": 16}}

PARAMS = {
    "layout": Param("str", "abt", "abt: C = A·Bᵀ with B stored N×K (HipKittens' convention); "
                                   "ab: C = A·B with B stored K×N (B is transposed on its way out of LDS)",
                    choices=("abt", "ab")),
    "out_dtype": Param("str", "bf16", "element type of C (accumulation is fp32; bf16 rounds to nearest even)",
                       choices=("bf16", "f32")),
    "schedule": Param("str", "pingpong8", "pingpong8: 8 waves in two groups a barrier apart; "
                                          "interleave4: 4 waves, single MFMAs interleaved with single loads",
                      choices=tuple(SCHEDULES)),
    "block_m": Param("int", 256, "macro tile rows (M) per workgroup", multiple_of=32, min=32, max=256),
    "block_n": Param("int", 256, "macro tile columns (N) per workgroup", multiple_of=32, min=32, max=256),
    "block_k": Param("int", 0, "K per pipeline stage; 0: the target's default (64 on gfx950; 32 on gfx942, "
                               "whose 64 KiB of LDS cannot double-buffer 256x256x64)",
                     choices=(0, 16, 32, 64, 128)),
    "mfma": Param("int", 16, "MFMA tile: 16 (16x16x16 on gfx942, 16x16x32 on gfx950) or 32 (32x32x8 / 32x32x16)",
                  choices=(16, 32)),
    "b_read": Param("str", "auto", "how B of layout ab (K×N) is transposed out of LDS: tr16 "
                                   "(ds_read_b64_tr_b16, gfx950), u16 (ds_read_u16 pairs packed with "
                                   "v_lshl_or_b32, any target); auto: tr16 on gfx950, u16 on gfx942",
                    choices=("auto", "tr16", "u16")),
    "group_m": Param("int", 0, "W of the chiplet-aware order: tile-rows walked together; 0: target default "
                               "(gfx950 8, gfx942 4)", min=0, max=64),
    "chunk": Param("int", 0, "C of the chiplet-aware order: consecutive tiles per XCD; 0: target default "
                             "(gfx950 64, gfx942 16)", min=0, max=4096),
}


# ================================================================================== the plan
@dataclass(frozen=True)
class Plan:
    """Everything about the kernel that does not depend on run-time sizes (pure; also used by the
    bench model and the tests)."""

    target: Target
    layout: str
    out_dtype: str
    schedule: str
    bm: int
    bn: int
    bk: int
    info: MfmaInfo
    frag: Fragment
    waves: int
    wgm: int                  # wave grid rows
    wgn: int                  # wave grid columns
    b_read: str               # kmajor | tr16 | u16
    group_m: int
    chunk: int
    dma_width: int
    layout_a: LdsLayout
    layout_b: LdsLayout

    @property
    def tm(self) -> int:
        return self.bm // self.wgm

    @property
    def tn(self) -> int:
        return self.bn // self.wgn

    @property
    def mi(self) -> int:
        return self.info.m

    @property
    def nfm(self) -> int:
        return self.tm // self.mi

    @property
    def nfn(self) -> int:
        return self.tn // self.mi

    @property
    def slices(self) -> int:
        return self.bk // self.frag.ks

    @property
    def halves(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        s = self.slices
        return tuple(range(s // 2)), tuple(range(s // 2, s))

    @property
    def loaders(self) -> int:
        """Waves that issue the global->LDS copies: pingpong8's group 1 (inside its MFMA clusters, where
        MFMAs fill every M0 -> LDS-DMA gap), every wave of interleave4."""
        return 4 if self.schedule == "pingpong8" else self.waves

    @property
    def lds_stage_bytes(self) -> int:
        return self.layout_a.size + self.layout_b.size

    @property
    def lds_bytes(self) -> int:
        return 2 * self.lds_stage_bytes

    @property
    def mfmas_per_ktile(self) -> int:
        return self.nfm * self.nfn * (self.bk // self.info.k)

    @property
    def acc_regs(self) -> int:
        return self.nfm * self.nfn * self.info.c_regs

    @property
    def out_bytes(self) -> int:
        return OUT_BYTES[self.out_dtype]

    def a_read_list(self, layout: LdsLayout, stages) -> list:
        return kmajor_reads("A", layout, stages, self.frag, [f * self.mi for f in range(self.nfm)],
                            range(self.slices), lx.uniform("a_row0", self.bm))

    def b_read_list(self, layout: LdsLayout, stages) -> list:
        rows = [f * self.mi for f in range(self.nfn)]
        col0 = lx.uniform("b_row0", self.bn)
        if self.b_read == "kmajor":
            return kmajor_reads("B", layout, stages, self.frag, rows, range(self.slices), col0)
        fn = tr16_reads if self.b_read == "tr16" else u16_reads
        return fn("B", layout, stages, self.frag, rows, range(self.slices), col0)

    def a_envs(self) -> list[dict]:
        return [{"a_row0": wm * self.tm} for wm in range(self.wgm)]

    def b_envs(self) -> list[dict]:
        return [{"b_row0": wn * self.tn} for wn in range(self.wgn)]


def _problems(p, target: Target) -> list[tuple[str, str]]:
    waves, wgm, wgn = SCHEDULES[p.schedule]
    bk = p.block_k or TARGET_DEFAULTS[target.name]["block_k"]
    out = []
    if p.block_m % (wgm * p.mfma) or p.block_n % (wgn * p.mfma):
        out.append(("block_m", f"a {p.block_m}x{p.block_n} tile does not split into {wgm}x{wgn} waves of "
                               f"{p.mfma}-row MFMA fragments ({p.schedule})"))
    if p.layout == "ab" and p.block_n & (p.block_n - 1):
        out.append(("block_n", f"layout ab keeps B as rows of {p.block_n} bf16 in LDS, which must be a power "
                               "of two"))
    b_read = _b_read(p, target)
    if b_read == "tr16" and "ds_read_b64_tr_b16" not in _isa(target):
        out.append(("b_read", f"{target.name} has no ds_read_b64_tr_b16 (use u16)"))
    stage = (p.block_m + p.block_n) * bk * 2
    if 2 * stage > target.lds_bytes:
        out.append(("block_k", f"two LDS stages of {p.block_m}x{bk} + {p.block_n}x{bk} bf16 need "
                               f"{2 * stage} bytes; {target.name} has {target.lds_bytes}"
                               + (" (gfx942 default: block_k 32 for 256x256)" if target.name == "gfx942" else "")))
    return out


def _b_read(p, target) -> str:
    if p.layout == "abt":
        return "kmajor"
    if p.b_read != "auto":
        return p.b_read
    return "tr16" if "ds_read_b64_tr_b16" in _isa(target) else "u16"


def _isa(target):
    from isagen.isa.table import isa_table
    return isa_table(target)


def make_plan(p, target) -> Plan:
    target = get_target(target)
    return _make_plan(tuple(sorted(p.items())), target.name)


@functools.lru_cache(maxsize=64)
def _make_plan(items: tuple, target_name: str) -> Plan:
    from isagen.builders.registry import params_from
    p = params_from(dict(items), "plan")
    target = get_target(target_name)
    bad = _problems(p, target)
    if bad:
        raise SpecError(f"params.{bad[0][0]}: {bad[0][1]}")
    d = TARGET_DEFAULTS[target.name]
    waves, wgm, wgn = SCHEDULES[p.schedule]
    bk = p.block_k or d["block_k"]
    info = bf16_mfma(target, p.mfma)
    kl = 2 * info.a_regs
    groups = 64 // info.m
    # reads of 8 k per lane (ds_read_b128) unless interleave4 needs two k-slices and only 4 fit
    e = 8
    if p.schedule == "interleave4" and bk // (groups * 8) < 2 and kl <= 4:
        e = 4
    frag = Fragment(info.m, kl, e)
    if bk % frag.ks:
        raise SpecError(f"params.block_k: {bk} is not a multiple of the {frag.ks} k one read covers "
                        f"({info.mnemonic}, {e} k per lane)")
    if p.schedule == "interleave4" and bk // frag.ks < 2:
        raise SpecError(f"params.block_k: interleave4 splits a K-tile into two halves of k-slices, but "
                        f"block_k {bk} is one slice of {frag.ks} for {info.mnemonic}; use block_k "
                        f"{2 * frag.ks} or a 32-row MFMA")
    b_read = _b_read(p, target)
    dma = max(target.lds_dma_widths) if 16 in target.lds_dma_widths else 4
    unit = 2 * e
    lay_a = LdsLayout(p.block_m, bk * 2, unit)
    lay_b = LdsLayout(p.block_n, bk * 2, unit) if b_read == "kmajor" else LdsLayout(bk, p.block_n * 2, 16)
    bank = target.lds_banks * 4
    base = Plan(target, p.layout, p.out_dtype, p.schedule, p.block_m, p.block_n, bk, info, frag, waves, wgm, wgn,
                b_read, p.group_m or d["group_m"], p.chunk or d["chunk"], dma, lay_a, lay_b)
    stage = [LdsRegion("tile", 0, 0)]

    def coords(reads, envs):
        return [Coords(lx.evaluate(r.row, e), lx.evaluate(r.byte, e), 0, r.width, "read")
                for e in envs for r in reads]

    ca = coords(base.a_read_list(lay_a, stage), base.a_envs())
    cb = coords(base.b_read_list(lay_b, stage), base.b_envs())
    lay_a, bad_a = choose_swizzle(lay_a, ca, target.name, bank)
    lay_b, bad_b = choose_swizzle(lay_b, cb, target.name, bank)
    for what, bad in (("A", bad_a), ("B", bad_b)):
        if bad:
            raise SpecError(f"params.block_k: no swizzle of the {what} tile makes its reads free of LDS bank "
                            f"conflicts ({len(bad)} reads conflict, e.g. {bad[0][1]})")
    return Plan(target, p.layout, p.out_dtype, p.schedule, p.block_m, p.block_n, bk, info, frag, waves, wgm, wgn,
                b_read, base.group_m, base.chunk, dma, lay_a, lay_b)


# ================================================================================== registry hooks
def validate(p, target):
    return _problems(p, target)


def check(p, target, program):
    plan = make_plan(p, target)
    occ = program.occupancy()
    need = plan.waves // target.simds_per_cu
    if occ["waves_per_simd"] < need:
        return [("schedule", f"{p.schedule} needs {need} waves per SIMD resident, but the kernel fits "
                             f"{occ['waves_per_simd']} (limited by {occ['limited_by']}: {program.vgprs} VGPRs + "
                             f"{program.agprs} AGPRs)")]
    return []


def launch(p, target) -> LaunchInfo:
    plan = make_plan(p, target)
    bshape = ("n", "k") if plan.layout == "abt" else ("k", "n")
    esz = plan.out_bytes
    lim = MAX_RECORDS - 256 * 1024          # room for the leading-pad shift and the tile window
    return LaunchInfo(
        tensors=(TensorParam("A", "bf16", ("m", "k"), "in"), TensorParam("B", "bf16", bshape, "in"),
                 TensorParam("C", plan.out_dtype, ("m", "n"), "out")),
        grid=(f"cdiv(m, {plan.bm}) * cdiv(n, {plan.bn})", 1, 1),
        block=(64 * plan.waves, 1, 1),
        kernargs={"tiles_m": f"cdiv(m, {plan.bm})", "tiles_n": f"cdiv(n, {plan.bn})",
                  "k_tiles": f"cdiv(k, {plan.bk})", "pad": f"({plan.bk} - k % {plan.bk}) % {plan.bk}"},
        requires=(
            ("k % 8 == 0 and k >= 8", "K must be a positive multiple of 8 (LDS copies move 16-byte runs along K)"),
            ("n % 8 == 0", "N must be a multiple of 8 (stores and copies move 8- and 16-byte runs along N)"),
            ("m * k * 2 <= " + str(lim), "A is too large: buffer offsets are 32-bit (A must stay below 2 GiB)"),
            ("n * k * 2 <= " + str(lim), "B is too large: buffer offsets are 32-bit (B must stay below 2 GiB)"),
            (f"m * n * {esz} <= " + str(lim), "C is too large: buffer offsets are 32-bit (C must stay below 2 GiB)"),
            ("cdiv(m, 16) * cdiv(n, 16) < 16777216", "too many tiles for the block order's 24-bit arithmetic"),
        ),
    )


# ================================================================================== the kernel
@generator("gemm_bf16", params=PARAMS, shapes={"m": "rows of A and C", "n": "columns of C (rows of B for abt)",
                                               "k": "the reduction dimension"},
           validate=validate, check=check, launch=launch,
           doc="BF16 GEMM (C = A·Bᵀ or A·B), fp32 accumulation, pingpong8 / interleave4, chiplet-aware order")
def gemm_bf16(p, target) -> KernelBuilder:
    return GemmKernel(make_plan(p, target), p.name).build()


class GemmKernel:
    """Writes one GEMM kernel from a plan."""

    def __init__(self, plan: Plan, name: str):
        self.plan = plan
        self.name = name

    # ------------------------------------------------------------------ the whole kernel
    def build(self) -> KernelBuilder:
        pl = self.plan
        k = self.k = KernelBuilder(self.name, pl.target, workgroup_size=64 * pl.waves)
        k.header += self.describe()          # (the LDS bank check adds its line: lanes= on every DS/DMA)
        self.arguments()
        self.geometry()
        self.resources()
        self.tiles()
        self.setup_addresses()
        self.prologue_copies()
        self.registers()
        if pl.schedule == "pingpong8":
            self.pingpong8()
        else:
            self.interleave4()
        self.epilogue()
        return k

    def describe(self) -> list[str]:
        pl = self.plan
        form = "C = A·Bᵀ (B is N×K)" if pl.layout == "abt" else "C = A·B (B is K×N)"
        return [f"{form}: bf16 in, fp32 accumulate, {pl.out_dtype} out",
                f"macro tile {pl.bm}x{pl.bn}x{pl.bk}, {pl.schedule}: {pl.waves} waves as {pl.wgm}x{pl.wgn}, "
                f"wave tile {pl.tm}x{pl.tn}, {pl.info.mnemonic}, {pl.slices} k-slice(s) of {pl.frag.ks} per K-tile",
                f"LDS: 2 stages x (A {pl.layout_a.size} + B {pl.layout_b.size}) = {pl.lds_bytes} bytes; "
                f"A swizzle {pl.layout_a.swizzle.describe()}, B swizzle {pl.layout_b.swizzle.describe()} "
                f"({pl.layout_b.unit}-byte units); B read: {pl.b_read}",
                f"block order: chiplet-aware, W={pl.group_m}, C={pl.chunk}"]

    # ------------------------------------------------------------------ arguments and uniforms
    def arguments(self):
        k, pl = self.k, self.plan
        k.args.pointer("A", "bf16", "read_only")
        k.args.pointer("B", "bf16", "read_only")
        k.args.pointer("C", pl.out_dtype, "write_only")
        for n in ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles", "pad"):
            k.args.value(n, "u32")
        self.rA = BufferResource(k, "A", tracked=True)
        self.rB = BufferResource(k, "B", tracked=True)
        self.rC = BufferResource(k, "C")
        for r, n in ((self.rA, "A"), (self.rB, "B"), (self.rC, "C")):
            r.load_pointer(k.args[n].offset)
        self.s = {}
        for n in ("m", "n", "k", "tiles_m", "tiles_n", "k_tiles", "pad"):
            self.s[n] = k.sgpr(1, n, kernel=True)
            k.s_load_dword(self.s[n], k.kernarg_ptr, k.args[n].offset, comment=f"{n} (u32)")
        self.lane = k.vgpr(1, "lane", kernel=True)
        k.v_and_b32(self.lane, 63, k.tid, comment="lane id within the wave")
        self.wave = k.sgpr(1, "wave", kernel=True)
        t = k.vgpr(1, "wave_tmp")
        k.v_lshrrev_b32(t, 6, k.tid, comment="wave id within the workgroup")
        k.v_readfirstlane_b32(self.wave, t)
        k.free(t, k.tid)
        k.wait(lgkmcnt=0, why="kernel arguments are in SGPRs")

    def geometry(self):
        """Tile coordinates (chiplet-aware order) and this wave's place in the wave grid."""
        k, pl, s = self.k, self.plan, self.s
        pid_m, pid_n = k.sgpr(1, "pid_m"), k.sgpr(1, "pid_n")
        emit_remap(k, k.workgroup_id["x"], s["tiles_m"], s["tiles_n"], pid_m, pid_n, group_m=pl.group_m,
                   chunk=pl.chunk, xcds=pl.target.flagship.xcds)
        self.m0 = k.sgpr(1, "tile_m0", kernel=True)
        self.n0 = k.sgpr(1, "tile_n0", kernel=True)
        k.s_mul_i32(self.m0, pid_m, pl.bm, comment="first row of this workgroup's C tile")
        k.s_mul_i32(self.n0, pid_n, pl.bn, comment="first column of this workgroup's C tile")
        k.free(pid_m, pid_n)
        self.wm, self.wn = k.sgpr(1, "wave_m", kernel=True), k.sgpr(1, "wave_n", kernel=True)
        shift = pl.wgn.bit_length() - 1
        k.s_lshr_b32(self.wm, self.wave, shift, comment=f"wave row in the {pl.wgm}x{pl.wgn} wave grid"
                     + (" = ping-pong group" if pl.schedule == "pingpong8" else ""))
        k.s_and_b32(self.wn, self.wave, pl.wgn - 1, comment="wave column")
        self.row0 = k.sgpr(1, "a_row0", kernel=True)
        self.col0 = k.sgpr(1, "b_row0", kernel=True)
        k.s_mul_i32(self.row0, self.wm, pl.tm, comment="wave's first row within the tile")
        k.s_mul_i32(self.col0, self.wn, pl.tn, comment="wave's first column within the tile")

    def resources(self):
        """Buffer windows: A and B start at the first (leading, partial) K-tile of this workgroup's rows."""
        k, pl, s = self.k, self.plan, self.s
        t = k.sgpr(2, "rsrc_tmp", align=1)
        k.comment("A window: rows tile_m0.., K shifted by -pad (the leading partial K-tile reads zeros in front)")
        k.s_mul_i32(t[0], self.m0, s["k"])
        k.s_lshl_b32(t[0], t[0], 1, comment="tile_m0 * K * 2: bytes to this tile's first row of A")
        self.rA.add_base(t[0], "A: this tile's rows")
        k.s_lshl_b32(t[1], s["pad"], 1, comment="pad * 2 bytes")
        self.rA.sub_base(t[1], "A: back by the leading pad")
        k.s_sub_u32(t[0], s["m"], self.m0)
        k.s_mul_i32(t[0], t[0], s["k"])
        k.s_lshl_b32(t[0], t[0], 1, comment="bytes of A from this tile's first row")
        k.s_add_u32(t[0], t[0], t[1], comment="+ the pad: bytes from the shifted base")
        self.rA.finish(t[0])
        self.ldk = k.sgpr(1, "ld_k_bytes", kernel=True)
        k.s_lshl_b32(self.ldk, s["k"], 1, comment="K * 2: row pitch of A (and of B for A·Bᵀ) in bytes")
        if pl.layout == "abt":
            k.comment("B window: rows tile_n0.. of the N×K matrix, K shifted by -pad")
            k.s_mul_i32(t[0], self.n0, s["k"])
            k.s_lshl_b32(t[0], t[0], 1)
            self.rB.add_base(t[0], "B: this tile's rows")
            self.rB.sub_base(t[1], "B: back by the leading pad")
            k.s_sub_u32(t[0], s["n"], self.n0)
            k.s_mul_i32(t[0], t[0], s["k"])
            k.s_lshl_b32(t[0], t[0], 1)
            k.s_add_u32(t[0], t[0], t[1])
            self.rB.finish(t[0])
            self.b_step = pl.bk * 2
        else:
            k.comment("B window: columns tile_n0.. of the K×N matrix, rows shifted by -pad")
            self.ldn = k.sgpr(1, "ld_n_bytes", kernel=True)
            k.s_lshl_b32(self.ldn, s["n"], 1, comment="N * 2: row pitch of B in bytes")
            k.s_lshl_b32(t[0], self.n0, 1)
            self.rB.add_base(t[0], "B: this tile's first column")
            k.s_mul_i32(t[1], s["pad"], self.ldn, comment="pad rows of B in bytes")
            self.rB.sub_base(t[1], "B: back by the leading pad")
            k.s_mul_i32(t[0], s["k"], self.ldn, comment="bytes of B")
            k.s_add_u32(t[0], t[0], t[1])
            k.s_lshl_b32(t[1], self.n0, 1)
            k.s_sub_u32(t[0], t[0], t[1], comment="bytes from the shifted base to the end of B")
            self.rB.finish(t[0])
            self.b_step = k.sgpr(1, "b_step", kernel=True)
            k.s_mul_i32(self.b_step, self.ldn, pl.bk, comment=f"{pl.bk} rows of B: one K-tile in bytes")
        esz = pl.out_bytes
        k.comment("C window: this tile's first element")
        k.s_mul_i32(t[0], self.m0, s["n"])
        k.s_add_u32(t[0], t[0], self.n0)
        k.s_lshl_b32(t[0], t[0], esz.bit_length() - 1)
        self.rC.add_base(t[0], "C: this tile's first element")
        k.s_sub_u32(t[0], s["m"], self.m0)
        k.s_mul_i32(t[0], t[0], s["n"])
        k.s_sub_u32(t[0], t[0], self.n0)
        k.s_lshl_b32(t[0], t[0], esz.bit_length() - 1, comment="bytes of C from this tile's first element")
        self.rC.finish(t[0])
        self.nlim = k.sgpr(1, "n_left", kernel=True)
        k.s_sub_u32(self.nlim, s["n"], self.n0, comment="columns of C left from tile_n0 (masks past N)")
        k.free(t)

    # ------------------------------------------------------------------ tiles
    def tiles(self):
        k, pl = self.k, self.plan
        # A0 A1 B0 B1: a stage's tile is one 16-bit ds_read offset away from the other's (one address VGPR)
        self.lds_a = [k.lds(pl.layout_a.size, f"A{st}") for st in range(2)]
        self.lds_b = [k.lds(pl.layout_b.size, f"B{st}") for st in range(2)]
        # loader index: pingpong8's group-1 waves are loaders 0..3 (wave & 3); interleave4: the wave id
        loader = self.wave
        if pl.schedule == "pingpong8":
            loader = k.sgpr(1, "loader", kernel=True)
            k.s_and_b32(loader, self.wave, pl.loaders - 1, comment="loader index (group 1 issues the copies)")
        regs = {"loader": loader, "ld_k_bytes": self.ldk, "ld_n_bytes": getattr(self, "ldn", None),
                "n_left": self.nlim, "a_row0": self.row0, "b_row0": self.col0}
        self.gA, self.gB, a_reads, b_reads = primitives(pl, k, (self.lds_a, self.lds_b), (self.rA, self.rB), regs)
        self.rdA = DsReads(k, "A", a_reads, pl.a_envs())
        self.rdB = DsReads(k, "B", b_reads, pl.b_envs())

    def setup_addresses(self):
        k = self.k
        k.comment("per-lane addresses: global offsets of every LDS-DMA block (the swizzle is realised here), "
                  "LDS addresses of every fragment read")
        for prim in (self.gA, self.gB, self.rdA, self.rdB):
            em = lx.Emitter(k, self.lane)
            prim.setup(em)
            em.free()

    def prologue_copies(self):
        """Tiles 0 and 1 -> LDS stages 0 and 1, by the loader waves (pingpong8: group 1 only)."""
        k, pl = self.k, self.plan
        skip = None
        if pl.schedule == "pingpong8":
            skip = k.label("no_copies")
            k.s_cmp_eq_u32(self.wm, 1, comment="group 1 issues the copies")
            k.s_cbranch_scc0(skip)
        self.first_tile()
        emit(merge([], self.load_lds(1)))
        if skip is not None:
            k.place(skip)

    def first_tile(self):
        """Tile 0 -> LDS stage 0: the leading partial K-tile (lanes before K element 0 load zeros)."""
        k = self.k
        k.comment("tile 0 -> LDS stage 0: the leading partial K-tile; lanes before K element 0 load zeros")
        em = lx.Emitter(k, self.lane)
        pad = lx.uniform("pad", 1 << 16, self.s["pad"])
        self.gA.first_tile(0, em, pad)
        self.gB.first_tile(0, em, pad)
        em.free()
        self.advance()

    def advance(self):
        """Move both windows to the next K-tile (now)."""
        self.rA.advance(self.plan.bk * 2, "A: window to the next K-tile")
        self.rB.advance(self.b_step, "B: window to the next K-tile")

    def registers(self):
        k, pl = self.k, self.plan
        c = pl.info.c_regs
        self.acc = k.agpr(pl.acc_regs, "acc", kernel=True)
        r = pl.frag.regs
        self.regA = k.vgpr(pl.nfm * pl.slices * r, "A_frag", kernel=True)
        self.regB = k.vgpr(pl.nfn * pl.slices * r, "B_frag", kernel=True)
        self.hiB = None
        if pl.b_read == "u16":
            self.hiB = k.vgpr(pl.nfn * pl.slices * (pl.frag.e // 2), "B_hi16", kernel=True)
        k.comment(f"accumulators: {pl.nfm}x{pl.nfn} MFMA tiles x {c} AGPRs = 0")
        for i in range(pl.acc_regs):
            k.v_accvgpr_write_b32(self.acc[i], 0)

    # register views
    def acc_tile(self, fm, fn):
        c = self.plan.info.c_regs
        i = (fm * self.plan.nfn + fn) * c
        return self.acc[i:i + c]

    def a_frag(self, fm, s):
        r = self.plan.frag.regs
        i = (fm * self.plan.slices + s) * r
        return self.regA[i:i + r]

    def b_frag(self, fn, s):
        r = self.plan.frag.regs
        i = (fn * self.plan.slices + s) * r
        return self.regB[i:i + r]

    # ------------------------------------------------------------------ tile operations
    def load_lds(self, stage: int) -> list:
        """Ops: tile -> LDS ``stage`` (this wave's share of A and B), each window advancing to the next
        K-tile once its DMAs are issued."""
        a, b = self.gA.ops(stage), self.gB.ops(stage)
        # A and B blocks alternate (then each window's advance can fill the other's last M0 gap); one
        # M0: every M0 update after the previous DMA
        pairs = [a[i:i + 2] for i in range(0, len(a), 2)]
        bpairs = [b[i:i + 2] for i in range(0, len(b), 2)]
        ops, prev = [], None
        for i in range(max(len(pairs), len(bpairs))):
            for pr in (pairs[i:i + 1] + bpairs[i:i + 1]):
                pr[0].after = prev
                ops += pr
                prev = pr[1]
        for gl, last, delta in ((self.rA, a[-1], self.plan.bk * 2), (self.rB, b[-1], self.b_step)):
            prev = last
            for i, step in enumerate(gl.advance_steps(delta, f"{gl.name}: window to the next K-tile")):
                op = Op("salu", step, f"{gl.name} advance {i}", after=prev)
                ops.append(op)
                prev = op
        return ops

    def load_regs(self, stage: int, slices) -> list:
        """Ops: fragments of ``slices`` from LDS ``stage`` into registers."""
        pl = self.plan
        ops = []
        for s in slices:
            for fm in range(pl.nfm):
                ops.append(self.rdA.op((stage, fm, s), self.a_frag(fm, s)))
            for fn in range(pl.nfn):
                dst = self.b_frag(fn, s)
                if pl.b_read == "kmajor":
                    ops.append(self.rdB.op((stage, fn, s), dst))
                elif pl.b_read == "tr16":
                    ops += [self.rdB.op((stage, fn, s, h), dst[2 * h:2 * h + 2]) for h in range(2)]
                else:
                    hi = self._hi(fn, s)
                    for j in range(pl.frag.e):
                        ops.append(self.rdB.op((stage, fn, s, j), dst[j // 2] if j % 2 == 0 else hi[j // 2]))
        return ops

    def _hi(self, fn, s):
        n = self.plan.frag.e // 2
        i = (fn * self.plan.slices + s) * n
        return self.hiB[i:i + n]

    def pack(self, slices) -> None:
        """u16 reads: high halves into place (after the reads are waited for)."""
        pl = self.plan
        if pl.b_read != "u16":
            return
        for s in slices:
            for fn in range(pl.nfn):
                dst, hi = self.b_frag(fn, s), self._hi(fn, s)
                for v in range(pl.frag.e // 2):
                    self.k.v_lshl_or_b32(dst[v], hi[v], 16, dst[v], comment=f"B[{fn}] slice {s}: k pair {v} (high half into place)")

    def mma(self, slices) -> list:
        pl = self.plan
        return mma_ops(self.k, pl.info, pl.frag, self.acc_tile, self.a_frag, self.b_frag,
                       range(pl.nfm), range(pl.nfn), slices)

    def _wait_reads(self, slices, why, copies: str | None = None):
        """Wait for the fragment reads (and, with ``copies``, for this wave's LDS-DMA copies too: one
        ``s_waitcnt`` when no u16 packing sits between the two)."""
        k = self.k
        if copies is not None and self.plan.b_read != "u16":
            k.wait(vmcnt=0, lgkmcnt=0, why=f"{why}; {copies}")
            return
        k.wait(lgkmcnt=0, why=why)
        self.pack(slices)
        if copies is not None:
            k.wait(vmcnt=0, why=copies)

    # ------------------------------------------------------------------ loop scaffolding
    def kloop(self, body) -> None:
        """``body(stage)`` for K-tiles 0..k_tiles-1, unrolled by two (LDS stage 0, 1); the loop may end
        after either half, so an odd number of K-tiles is fine."""
        k = self.k
        it = k.sgpr(1, "k_left")
        k.s_mov_b32(it, self.s["k_tiles"], comment="K-tiles left")
        top, done = k.label("kloop"), k.label("kloop_done")
        k.place(top)
        for stage in (0, 1):
            k.comment(f"---- K-tile on LDS stage {stage}")
            body(stage)
            k.s_sub_u32(it, it, 1, comment="one K-tile done")
            k.s_cmp_eq_u32(it, 0)
            if stage == 0:
                k.s_cbranch_scc1(done, comment="an odd number of K-tiles ends here")
            else:
                k.s_cbranch_scc0(top, comment="next pair of K-tiles")
        k.place(done)
        k.free(it)

    # ------------------------------------------------------------------ pingpong8
    def pingpong8(self):
        k, pl = self.k, self.plan
        all_slices = range(pl.slices)
        j_wave = self.gA.blocks_per_wave + self.gB.blocks_per_wave
        g1, join = k.label("group1"), k.label("groups_join")
        k.s_cmp_eq_u32(self.wm, 1, comment="ping-pong group of this wave")
        k.s_cbranch_scc1(g1)
        # ---------------- group 0: reads and MFMAs
        k.comment("group 0: memory cluster (read tile t) | compute cluster (tile t)")
        k.wait(vmcnt=0, why="group 0 issued no copies: free; the wait checker does not know which group took "
                            "which branch")
        k.barrier(why="P: tile 0 is in LDS (group 1 copied it)")

        def body0(stage):
            k.comment("memory cluster: fragments of tile t -> registers")
            emit(self.load_regs(stage, all_slices))
            self._wait_reads(all_slices, "fragments of tile t are in registers")
            k.barrier(why="ping-pong: group 1 runs its memory cluster next")
            k.comment("compute cluster")
            k.s_setprio(1, comment="MFMA cluster first")
            emit(self.mma(all_slices))
            k.s_setprio(0)
            k.barrier(why="ping-pong: group 1 computes next")
        self.kloop(body0)
        k.barrier(why="group 0's extra barrier: balances group 1's at the start")
        k.s_branch(join)
        # ---------------- group 1: reads, MFMAs and every global->LDS copy
        k.place(g1)
        k.comment("group 1: one barrier behind group 0; copies tile t+2 inside its compute cluster")
        k.wait(vmcnt=j_wave, why="tile 0 has landed (tile 1 may still be in flight)")
        k.barrier(why="P: tile 0 is in LDS for everyone")
        k.barrier(why="group 1's extra barrier: one window behind group 0")

        def body1(stage):
            k.comment("memory cluster: fragments of tile t -> registers")
            emit(self.load_regs(stage, all_slices))
            self._wait_reads(all_slices, "fragments of tile t are in registers",
                             copies="tile t+1 has landed (this wave's copies)")
            k.barrier(why="ping-pong: group 0 runs its memory cluster next; tile t+1 complete")
            k.comment("compute cluster: tile t+2 -> this stage (both groups have read it), between the MFMAs")
            k.s_setprio(1, comment="MFMA cluster first")
            emit(merge(self.mma(all_slices), self.load_lds(stage)))
            k.s_setprio(0)
            k.barrier(why="ping-pong: group 0 computes next")
        self.kloop(body1)
        k.place(join)

    # ------------------------------------------------------------------ interleave4
    def interleave4(self):
        k, pl = self.k, self.plan
        h0, h1 = pl.halves
        j_wave = self.gA.blocks_per_wave + self.gB.blocks_per_wave
        k.wait(vmcnt=j_wave, why="tile 0 has landed (tile 1 may still be in flight)")
        k.barrier(why="tile 0 is in LDS for everyone")
        emit(self.load_regs(0, h0))
        self._wait_reads(h0, "first half of tile 0 in registers")

        def body(stage):
            k.comment("first half: MFMAs on k-slices of half 0, reads of half 1 between them")
            emit(merge(self.mma(h0), self.load_regs(stage, h1)))
            self._wait_reads(h1, "half 1 of tile t is in registers; this wave's reads of the stage are done",
                             copies="this wave's copy of tile t+1 has landed")
            k.barrier(why="everyone is done reading this stage; tile t+1 is complete")
            k.comment("second half: MFMAs on half 1; half 0 of tile t+1 and the copy of tile t+2 between them")
            side = self.load_lds(stage) + self.load_regs(1 - stage, h0)
            emit(merge(self.mma(h1), side))
            self._wait_reads(h0, "half 0 of tile t+1 is in registers")
        self.kloop(body)

    # ------------------------------------------------------------------ epilogue
    def epilogue(self):
        k, pl = self.k, self.plan
        k.wait(vmcnt=0, lgkmcnt=0, why="copies past the last K-tile (zeros) and reads are done before the stores")
        self.gA.release()
        self.gB.release()
        self.rdA.release()
        self.rdB.release()
        k.free(self.regA, self.regB)
        if self.hiB is not None:
            k.free(self.hiB)
        k.comment(f"epilogue: accumulators -> C ({pl.out_dtype}); each 4 AGPRs are 4 consecutive columns of one row")
        packer = Bf16Packer(k) if pl.out_dtype == "bf16" else None
        tmp = k.vgpr(8, "store_data")
        voff = k.vgpr(2, "store_off")
        em = lx.Emitter(k, self.lane)
        L = lx.lane()
        row0 = lx.uniform("a_row0", pl.bm, self.row0)
        col0 = lx.uniform("b_row0", pl.bn, self.col0)
        ldc_reg = k.sgpr(1, "ldc")
        k.s_lshl_b32(ldc_reg, self.s["n"], pl.out_bytes.bit_length() - 1, comment="row pitch of C in bytes")
        ldc = lx.uniform("ldc", 1 << 31, ldc_reg)
        nlim = lx.uniform("n_left", 1 << 31, self.nlim)
        mi, g = pl.mi, 64 // pl.mi
        n_quads = pl.info.c_regs // 4
        i = 0
        for fm in range(pl.nfm):
            for fn in range(pl.nfn):
                acc = self.acc_tile(fm, fn)
                for q in range(n_quads):
                    m = row0 + fm * mi + L % mi
                    n = col0 + fn * mi + (L // mi + q * g) * 4
                    off = lx.where_lt(n, nlim, m * ldc + n * pl.out_bytes, OOB_OFFSET)
                    v = voff[i % 2]
                    em.emit(off, dst=v, comment=f"C[{fm}][{fn}] quad {q}: row m, 4 columns from n (past N: dropped)")
                    store_quad(k, self.rC, acc[4 * q:4 * q + 4], v, pl.out_dtype, tmp[4 * (i % 2):4 * (i % 2) + 4],
                               packer, f"C[{fm}][{fn}] quad {q}")
                    i += 1
        em.free()
        k.free(tmp, voff, ldc_reg)
        if packer:
            packer.release()


def hot_loops(program) -> list[list]:
    """The instructions of each K-loop of a finished GEMM program (``kloop`` .. ``kloop_done``; one loop
    for interleave4, one per ping-pong group for pingpong8).  A loop body holds two K-tiles."""
    from isagen.isa.instruction import Instruction
    from isagen.isa.operands import Label
    out, cur = [], None
    for it in program.items:
        if isinstance(it, Label):
            head, _, tail = it.name.rpartition("_kloop")
            if head and not tail.startswith("_done"):
                cur = []
            elif "_kloop_done" in it.name and cur is not None:
                out.append(cur)
                cur = None
        elif isinstance(it, Instruction) and cur is not None:
            cur.append(it)
    return out


def lds_regions(pl: Plan):
    """The LDS regions the kernel allocates, in order: ([A0, A1], [B0, B1])."""
    sa, sb = pl.layout_a.size, pl.layout_b.size
    return ([LdsRegion("A0", 0, sa), LdsRegion("A1", sa, sa)],
            [LdsRegion("B0", 2 * sa, sb), LdsRegion("B1", 2 * sa + sb, sb)])


def lds_accesses(pl: Plan) -> list:
    """Every DS read and LDS-DMA write of the kernel, per wave (``LdsAccess``, lane addresses from the
    tile primitives' formulas): the input of the static bank analysis."""
    from types import SimpleNamespace
    gA, gB, a_reads, b_reads = primitives(pl, SimpleNamespace(target=pl.target), lds_regions(pl), (None, None))
    out = []
    for e in pl.a_envs():
        out += DsReads.accesses_of(a_reads, e)
    for e in pl.b_envs():
        out += DsReads.accesses_of(b_reads, e)
    for w in range(pl.loaders):
        for g in (gA, gB):
            for st in range(2):
                out += g.accesses(st, {"loader": w})
    return out


def primitives(pl: Plan, k, stages, rsrcs, regs: dict | None = None):
    """The GEMM's copy and read primitives: ``(gA, gB, A reads, B reads)``.

    ``k`` needs only ``.target`` (the numpy model passes a stand-in); ``stages`` are the LDS regions
    ``([A0, A1], [B0, B1])``; ``regs`` gives the SGPRs of the wave-uniform inputs (None: the numpy
    model, which names them in its env: loader, ld_k_bytes, ld_n_bytes, n_left, a_row0, b_row0)."""
    regs = regs or {}

    def u(name, bound):
        return lx.uniform(name, bound, regs.get(name))
    wave = u("loader", pl.loaders - 1)
    ldk = u("ld_k_bytes", 1 << 31)
    lds_a, lds_b = stages
    rA, rB = rsrcs
    gA = GlobalToLds(k, "A", pl.layout_a, lds_a, rA, pl.dma_width, pl.loaders, wave,
                     global_offset=lambda row, byte: row * ldk + byte, k_coord=lambda row, byte: byte >> 1)
    if pl.layout == "abt":
        gB = GlobalToLds(k, "B", pl.layout_b, lds_b, rB, pl.dma_width, pl.loaders, wave,
                         global_offset=lambda row, byte: row * ldk + byte, k_coord=lambda row, byte: byte >> 1)
    else:
        ldn, nlim = u("ld_n_bytes", 1 << 31), u("n_left", 1 << 31)
        gB = GlobalToLds(k, "B", pl.layout_b, lds_b, rB, pl.dma_width, pl.loaders, wave,
                         global_offset=lambda row, byte: lx.where_lt(byte >> 1, nlim, row * ldn + byte, OOB_OFFSET),
                         k_coord=lambda row, byte: row)
    a_reads = pl.a_read_list(pl.layout_a, lds_a)
    b_reads = pl.b_read_list(pl.layout_b, lds_b)
    if regs:
        for r in a_reads + b_reads:
            r.bind(regs)
    return gA, gB, a_reads, b_reads
