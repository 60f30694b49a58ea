"""BF16 GEMM, HipKittens-class: C = A·Bᵀ (B is N×K) or C = A·B (B is K×N), fp32 accumulation, bf16 or
fp32 output, for gfx942 and gfx950.  docs/gemm.md describes the design; this file reads as tile
operations over named tiles:

    load(lds.A[s], gA)        GlobalToLds / interleaved_copies: buffer_load ... lds, swizzled through the
                              global side
    load(reg.A[f][k], lds.A)  DsReads.fragment_ops: ds_read_b128 (or transposed reads for B of A·B)
    mma(acc, reg.A, reg.B)    mma_ops: MFMAs, B as src0 so a lane's accumulators are row segments
    store(gC, acc)            store_accumulators: 16/8-byte stores, rows past M and columns past N masked

The scaffolding around them is in ``isagen.tiles`` too: the buffer windows (``tiles.window``), the
register views (``tiles.registers``), the double-buffered K loop (``tiles.kloop``).

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

import dataclasses
import functools
from types import SimpleNamespace

from isagen.builders.contract import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder, LdsRegion
from isagen.builders.registry import Param, generator, params_from
from isagen.errors import SpecError
from isagen.prims.convert import Converter
from isagen.records import record, value_methods
from isagen.targets import TARGETS, MfmaInfo, Target, get_target
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import MAX_RECORDS, OOB_OFFSET, BufferResource
from isagen.tiles.epilogue import OUT_BYTES, Bf16Packer, store_accumulators
from isagen.tiles.global_to_lds import GlobalToLds, interleaved_copies
from isagen.tiles.kloop import double_buffered_loop, loop_bodies
from isagen.tiles.lds_layout import Coords, LdsLayout, choose_swizzle
from isagen.tiles.lds_to_reg import DsReads, Fragment, join_u16_pairs, kmajor_reads, tr16_reads, u16_reads
from isagen.tiles.mma import bf16_mfma, fp8_mfma, mma_ops, operand_regs
from isagen.tiles.order import emit_remap
from isagen.tiles.registers import Accumulators, FragmentRegs
from isagen.tiles.schedule import emit, merge
from isagen.tiles.window import LeadingPad, column_window, row_window, tile_window

SCHEDULES = {"pingpong8": (8, 2, 4), "interleave4": (4, 2, 2)}     # waves, wave grid rows x cols
ELEM_BYTES = {"bf16": 2, "fp8": 1, "bf8": 1, "fp4": 1}    # fp4: a byte holds two (the plan counts K in bytes)
ARG_DTYPE = {"fp4": "u8"}                                  # kernel-argument type of packed fp4 pairs


def _lds_too_small_for_256x256x64(t: Target) -> bool:
    return 2 * (256 + 256) * 64 * 2 > t.lds_bytes


# the per-target parts of the help texts, from the target table
_BLOCK_K_HELP = "; ".join(
    f"{t.gemm_defaults.block_k} on {t.name}"
    + (f", whose {t.lds_bytes // 1024} KiB of LDS cannot double-buffer 256x256x64"
       if _lds_too_small_for_256x256x64(t) else "")
    for t in TARGETS.values())
_MFMA_HELP = {size: ", ".join(f"{i.m}x{i.n}x{i.k} on {t.name}" for t in TARGETS.values()
                              for i in t.find_mfma("bf16", size, size)[:1]) for size in (16, 32)}
_TR16_TARGETS = ", ".join(t.name for t in TARGETS.values() if t.has_tr16_read)
_U16_TARGETS = ", ".join(t.name for t in TARGETS.values() if not t.has_tr16_read)
_ORDER_HELP = {key: ", ".join(f"{t.name} {getattr(t.gemm_defaults, key)}" for t in TARGETS.values())
               for key in ("group_m", "chunk")}

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
    "block_k": Param("int", 0, f"K per pipeline stage; 0: the target's default ({_BLOCK_K_HELP})",
                     choices=(0, 16, 32, 64, 128)),
    "mfma": Param("int", 16, f"MFMA tile: 16 ({_MFMA_HELP[16]}) or 32 ({_MFMA_HELP[32]})",
                  choices=(16, 32)),
    "b_read": Param("str", "auto", "how B of layout ab (K×N) is transposed out of LDS: tr16 "
                                   f"(ds_read_b64_tr_b16, {_TR16_TARGETS}), u16 (ds_read_u16 pairs packed with "
                                   f"v_lshl_or_b32, any target); auto: tr16 on {_TR16_TARGETS}, u16 on {_U16_TARGETS}",
                    choices=("auto", "tr16", "u16")),
    "group_m": Param("int", 0, "W of the chiplet-aware order: tile-rows walked together; 0: target default "
                               f"({_ORDER_HELP['group_m']})", min=0, max=64),
    "chunk": Param("int", 0, "C of the chiplet-aware order: consecutive tiles per XCD; 0: target default "
                             f"({_ORDER_HELP['chunk']})", min=0, max=4096),
}


# ================================================================================== the plan
@value_methods
@record(frozen=True, repr=False, eq=False)
class Plan:
    """Everything about the kernel that does not depend on run-time sizes (pure; also used by the
    bench model and the tests).  Names follow HipKittens' (``BLOCK_SIZE``, ``K_STEP``, ``WARPS_M``,
    ``REG_BLOCK_M``): a workgroup computes a ``block_m x block_n`` tile of C in steps of ``block_k``; its
    waves form a ``wave_rows x wave_cols`` grid, each owning a ``wave_tile_m x wave_tile_n`` sub-tile of
    ``frags_m x frags_n`` MFMA tiles; a K-tile is ``slices`` k-slices of ``fragment.slice_k``."""

    target: Target
    in_dtype: str             # element type of A (and B): bf16 | fp8 (e4m3) | bf8 (e5m2), in the target's format
    layout: str               # abt: C = A·Bᵀ (B is N×K) | ab: C = A·B (B is K×N)
    out_dtype: str
    schedule: str             # pingpong8 | interleave4
    block_m: int              # rows of C per workgroup
    block_n: int              # columns of C per workgroup
    block_k: int              # K per pipeline stage (a K-tile)
    mfma: MfmaInfo
    fragment: Fragment        # geometry of one operand fragment as the LDS reads fill it
    waves: int
    wave_rows: int            # wave grid rows (pingpong8: the two ping-pong groups)
    wave_cols: int            # wave grid columns
    b_read: str               # how B leaves LDS: kmajor | tr16 | u16
    group_m: int              # the block order's W
    chunk: int                # the block order's C
    dma_width: int            # bytes per lane of one LDS-DMA instruction
    layout_a: LdsLayout
    layout_b: LdsLayout
    b_dtype: str = ""         # element type of B where it differs from A's (fp8 with bf8: a gradient operand)
    mfma_mods: tuple = ()     # the MFMA's modifiers as (name, value) pairs (f8f6f4: cbsz = B's format, blgp = A's)

    @property
    def elem_bytes(self) -> int:
        """Bytes of one A/B element: 2 (bf16), 1 (fp8)."""
        return ELEM_BYTES[self.in_dtype]

    @property
    def block_k_bytes(self) -> int:
        """Bytes of one K-tile row (the LDS tile's row and the windows' step)."""
        return self.block_k * self.elem_bytes

    @property
    def wave_tile_m(self) -> int:
        return self.block_m // self.wave_rows

    @property
    def wave_tile_n(self) -> int:
        return self.block_n // self.wave_cols

    @property
    def frag_rows(self) -> int:
        """Rows (and columns) of one MFMA tile: 16 or 32."""
        return self.mfma.m

    @property
    def frags_m(self) -> int:
        return self.wave_tile_m // self.frag_rows

    @property
    def frags_n(self) -> int:
        return self.wave_tile_n // self.frag_rows

    @property
    def slices(self) -> int:
        """k-slices per K-tile (one fragment read each)."""
        return self.block_k // self.fragment.slice_k

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
        return self.frags_m * self.frags_n * self.slices * self.fragment.mfmas_per_slice

    @property
    def acc_regs(self) -> int:
        return self.frags_m * self.frags_n * self.mfma.c_regs

    @property
    def out_bytes(self) -> int:
        return OUT_BYTES[self.out_dtype]

    def a_read_list(self, layout: LdsLayout, stages) -> list:
        return kmajor_reads("A", layout, stages, self.fragment, [f * self.frag_rows for f in range(self.frags_m)],
                            range(self.slices), lx.uniform("a_row0", self.block_m))

    def b_read_list(self, layout: LdsLayout, stages) -> list:
        rows = [f * self.frag_rows for f in range(self.frags_n)]
        col0 = lx.uniform("b_row0", self.block_n)
        if self.b_read == "kmajor":
            return kmajor_reads("B", layout, stages, self.fragment, rows, range(self.slices), col0)
        fn = tr16_reads if self.b_read == "tr16" else u16_reads
        return fn("B", layout, stages, self.fragment, rows, range(self.slices), col0)

    def a_envs(self) -> list[dict]:
        return [{"a_row0": wm * self.wave_tile_m} for wm in range(self.wave_rows)]

    def b_envs(self) -> list[dict]:
        return [{"b_row0": wn * self.wave_tile_n} for wn in range(self.wave_cols)]


def _in_dtype(p) -> str:
    return getattr(p, "in_dtype", "bf16")


def _default_block_k(p, target: Target) -> int:
    """The target's default K-tile in bytes of the element: bf16's block_k, twice that for fp8 (the same
    LDS bytes per stage); doubled again for interleave4 where one k-slice of the fp8 MFMA would cover the
    whole K-tile (gfx950's 16x16x128: interleave4 needs two slices, and a 32-byte operand has no
    8-byte-read fallback)."""
    eb = ELEM_BYTES[_in_dtype(p)]
    bk = target.gemm_defaults.block_k * 2 // eb
    if eb == 1 and p.schedule == "interleave4":
        dt = _in_dtype(p)
        mfma, _ = fp8_mfma(target, p.mfma, dt, dt, getattr(p, "scaled", False))
        k_per_mfma = 4 * operand_regs(mfma, dt) // eb
        if k_per_mfma * eb > 8 and bk // ((64 // mfma.m) * max(16 // eb, k_per_mfma)) < 2:
            bk *= 2
    return bk


def _problems(p, target: Target) -> list[tuple[str, str]]:
    _, wave_rows, wave_cols = SCHEDULES[p.schedule]
    eb = ELEM_BYTES[_in_dtype(p)]
    bk = p.block_k or _default_block_k(p, target)
    out = []
    if p.block_m % (wave_rows * p.mfma) or p.block_n % (wave_cols * p.mfma):
        out.append(("block_m", f"a {p.block_m}x{p.block_n} tile does not split into {wave_rows}x{wave_cols} waves of "
                               f"{p.mfma}-row MFMA fragments ({p.schedule})"))
    if p.layout == "ab" and p.block_n & (p.block_n - 1):
        out.append(("block_n", f"layout ab keeps B as rows of {p.block_n} bf16 in LDS, which must be a power "
                               "of two"))
    b_read = _b_read(p, target)
    if b_read == "tr16" and not target.has_tr16_read:
        out.append(("b_read", f"{target.name} has no ds_read_b64_tr_b16 (use u16)"))
    stage = (p.block_m + p.block_n) * bk * eb
    if 2 * stage > target.lds_bytes:
        out.append(("block_k", f"two LDS stages of {p.block_m}x{bk} + {p.block_n}x{bk} {_in_dtype(p)} need "
                               f"{2 * stage} bytes; {target.name} has {target.lds_bytes}"
                               + (f" ({target.name} default: block_k {_default_block_k(p, target)} for 256x256)"
                                  if _lds_too_small_for_256x256x64(target) else "")))
    return out


def _b_read(p, target) -> str:
    if p.layout == "abt":
        return "kmajor"
    if p.b_read != "auto":
        return p.b_read
    return "tr16" if get_target(target).has_tr16_read else "u16"


def make_plan(p, target) -> Plan:
    target = get_target(target)
    return _make_plan(tuple(sorted(p.items())), target.name)


@functools.lru_cache(maxsize=64)
def _make_plan(items: tuple, target_name: str) -> Plan:
    """The plan of params ``items`` on a target, cached: the swizzle search is the slow part, and the
    registry hooks, the builder and the bench model each ask for the same plan."""
    p = params_from(dict(items), "plan")
    target = get_target(target_name)
    bad = _problems(p, target)
    if bad:
        raise SpecError(f"params.{bad[0][0]}: {bad[0][1]}")
    d = target.gemm_defaults
    waves, wave_rows, wave_cols = SCHEDULES[p.schedule]
    in_dtype = _in_dtype(p)
    eb = ELEM_BYTES[in_dtype]
    block_k = p.block_k or _default_block_k(p, target)
    b_dtype = getattr(p, "b_dtype", "") or in_dtype
    if ELEM_BYTES[b_dtype] != eb or (in_dtype == "fp4") != (b_dtype == "fp4"):
        raise SpecError(f"params.b_dtype: {b_dtype} B with {in_dtype} A: both operands must be 8-bit, fp4 or bf16")
    mfma, mods = ((bf16_mfma(target, p.mfma), {}) if in_dtype == "bf16"
                  else fp8_mfma(target, p.mfma, in_dtype, b_dtype, getattr(p, "scaled", False)))
    k_per_mfma = 4 * operand_regs(mfma, in_dtype) // eb
    lane_groups = 64 // mfma.m
    # reads of 16 bytes per lane (ds_read_b128) unless interleave4 needs two k-slices and only 8 bytes
    # fit; an MFMA taking 32 bytes per lane (fp8 f8f6f4) reads its slice in two 16-byte parts
    k_per_read = max(16 // eb, k_per_mfma)
    if (p.schedule == "interleave4" and block_k // (lane_groups * k_per_read) < 2 and k_per_mfma * eb <= 8):
        k_per_read = 8 // eb
    fragment = Fragment(rows=mfma.m, k_per_mfma=k_per_mfma, k_per_read=k_per_read, elem_bytes=eb)
    if block_k % fragment.slice_k:
        raise SpecError(f"params.block_k: {block_k} is not a multiple of the {fragment.slice_k} k one read "
                        f"covers ({mfma.mnemonic}, {k_per_read} k per lane)")
    if in_dtype != "bf16" and p.layout != "abt":
        raise SpecError(f"params.layout: the {in_dtype} GEMM is A·Bᵀ only (layout abt)")
    if p.schedule == "interleave4" and block_k // fragment.slice_k < 2:
        raise SpecError(f"params.block_k: interleave4 splits a K-tile into two halves of k-slices, but "
                        f"block_k {block_k} is one slice of {fragment.slice_k} for {mfma.mnemonic}; use block_k "
                        f"{2 * fragment.slice_k} or a 32-row MFMA")
    b_read = _b_read(p, target)
    unit = fragment.part_bytes
    plain = Plan(
        target=target, in_dtype=in_dtype, b_dtype=b_dtype, mfma_mods=tuple(sorted(mods.items())),
        layout=p.layout, out_dtype=p.out_dtype, schedule=p.schedule,
        block_m=p.block_m, block_n=p.block_n, block_k=block_k, mfma=mfma, fragment=fragment,
        waves=waves, wave_rows=wave_rows, wave_cols=wave_cols, b_read=b_read,
        group_m=p.group_m or d.group_m, chunk=p.chunk or d.chunk,
        dma_width=max(target.lds_dma_widths) if 16 in target.lds_dma_widths else 4,
        layout_a=LdsLayout(p.block_m, block_k * eb, unit),
        layout_b=(LdsLayout(p.block_n, block_k * eb, unit) if b_read == "kmajor"
                  else LdsLayout(block_k, p.block_n * 2, 16)))
    # the swizzles: the first keys under which every read of every wave is free of bank conflicts
    stage = [LdsRegion("tile", 0, 0)]

    def coords(reads, envs):
        return [Coords(lx.lane_values(r.row, e), lx.lane_values(r.byte, e), 0, r.width, "read")
                for e in envs for r in reads]

    bank = target.lds_banks * 4
    layout_a, bad_a = choose_swizzle(plain.layout_a, coords(plain.a_read_list(plain.layout_a, stage), plain.a_envs()),
                                     target.name, bank)
    layout_b, bad_b = choose_swizzle(plain.layout_b, coords(plain.b_read_list(plain.layout_b, stage), plain.b_envs()),
                                     target.name, bank)
    for what, bad in (("A", bad_a), ("B", bad_b)):
        if bad:
            raise SpecError(f"params.block_k: no swizzle of the {what} tile makes its reads free of LDS bank "
                            f"conflicts ({len(bad)} reads conflict, e.g. {bad[0][1]})")
    return dataclasses.replace(plain, layout_a=layout_a, layout_b=layout_b)


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
        grid=(f"cdiv(m, {plan.block_m}) * cdiv(n, {plan.block_n})", 1, 1),
        block=(64 * plan.waves, 1, 1),
        kernargs={"tiles_m": f"cdiv(m, {plan.block_m})", "tiles_n": f"cdiv(n, {plan.block_n})",
                  "k_tiles": f"cdiv(k, {plan.block_k})",
                  "pad": f"({plan.block_k} - k % {plan.block_k}) % {plan.block_k}"},
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
    """Writes one GEMM kernel from a plan.

    Hooks for a sibling generator (the FP8 GEMM's block scaling): ``ACC_AGPR`` (where the accumulators
    live), ``mma(slices, stage)``, ``after_mma(stage)`` (after a K-tile's last MFMAs) and
    ``group0_copies`` (group 0's memory-cluster wait also waits for vmcnt when set: its reason)."""

    ACC_AGPR = True
    group0_copies: str | None = None

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
        ins = pl.in_dtype if pl.b_dtype in ("", pl.in_dtype) else f"{pl.in_dtype} A, {pl.b_dtype} B"
        return [f"{form}: {ins} in, fp32 accumulate, {pl.out_dtype} out",
                f"macro tile {pl.block_m}x{pl.block_n}x{pl.block_k}, {pl.schedule}: {pl.waves} waves as "
                f"{pl.wave_rows}x{pl.wave_cols}, wave tile {pl.wave_tile_m}x{pl.wave_tile_n}, {pl.mfma.mnemonic}, "
                f"{pl.slices} k-slice(s) of {pl.fragment.slice_k} per K-tile",
                f"LDS: 2 stages x (A {pl.layout_a.size} + B {pl.layout_b.size}) = {pl.lds_bytes} bytes; "
                f"A swizzle {pl.layout_a.swizzle.describe()}, B swizzle {pl.layout_b.swizzle.describe()} "
                f"({pl.layout_b.unit}-byte units); B read: {pl.b_read}",
                f"block order: chiplet-aware, W={pl.group_m}, C={pl.chunk}"]

    # ------------------------------------------------------------------ arguments and uniforms
    def arguments(self):
        k, pl = self.k, self.plan
        k.args.pointer("A", ARG_DTYPE.get(pl.in_dtype, pl.in_dtype), "read_only")
        k.args.pointer("B", ARG_DTYPE.get(pl.b_dtype or pl.in_dtype, pl.b_dtype or pl.in_dtype), "read_only")
        k.args.pointer("C", pl.out_dtype, "write_only")
        self.extra_pointers()
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

    def extra_pointers(self) -> None:
        """Pointer arguments after C (a sibling generator's: the FP8 GEMM's scales)."""

    def geometry(self):
        """Tile coordinates (chiplet-aware order) and this wave's place in the wave grid."""
        k, pl, s = self.k, self.plan, self.s
        pid_m, pid_n = k.sgpr(1, "pid_m"), k.sgpr(1, "pid_n")
        emit_remap(k, k.workgroup_id["x"], s["tiles_m"], s["tiles_n"], pid_m, pid_n, group_m=pl.group_m,
                   chunk=pl.chunk, xcds=pl.target.flagship.xcds)
        self.tile_m0 = k.sgpr(1, "tile_m0", kernel=True)
        self.tile_n0 = k.sgpr(1, "tile_n0", kernel=True)
        k.s_mul_i32(self.tile_m0, pid_m, pl.block_m, comment="first row of this workgroup's C tile")
        k.s_mul_i32(self.tile_n0, pid_n, pl.block_n, comment="first column of this workgroup's C tile")
        k.free(pid_m, pid_n)
        self.wave_row, self.wave_col = k.sgpr(1, "wave_m", kernel=True), k.sgpr(1, "wave_n", kernel=True)
        shift = pl.wave_cols.bit_length() - 1
        k.s_lshr_b32(self.wave_row, self.wave, shift, comment=f"wave row in the {pl.wave_rows}x{pl.wave_cols} wave grid"
                     + (" = ping-pong group" if pl.schedule == "pingpong8" else ""))
        k.s_and_b32(self.wave_col, self.wave, pl.wave_cols - 1, comment="wave column")
        self.row0 = k.sgpr(1, "a_row0", kernel=True)
        self.col0 = k.sgpr(1, "b_row0", kernel=True)
        k.s_mul_i32(self.row0, self.wave_row, pl.wave_tile_m, comment="wave's first row within the tile")
        k.s_mul_i32(self.col0, self.wave_col, pl.wave_tile_n, comment="wave's first column within the tile")

    def resources(self):
        """Buffer windows: A and B start at the first (leading, partial) K-tile of this workgroup's rows."""
        k, pl, s = self.k, self.plan, self.s
        t = k.sgpr(2, "rsrc_tmp", align=1)
        eb = pl.elem_bytes
        pad = LeadingPad(k, s["pad"], eb, t[1])
        k.comment("A window: rows tile_m0.., K shifted by -pad (the leading partial K-tile reads zeros in front)")
        row_window(k, self.rA, t, first_row=self.tile_m0, rows=s["m"], row_elems=s["k"], elem_bytes=eb, pad=pad,
                   explain=("tile_m0", "K"))
        if eb == 1:
            self.ldk = s["k"]              # 1-byte elements: K is the row pitch in bytes
        else:
            self.ldk = k.sgpr(1, "ld_k_bytes", kernel=True)
            k.s_lshl_b32(self.ldk, s["k"], eb.bit_length() - 1,
                         comment=f"K * {eb}: row pitch of A (and of B for A·Bᵀ) in bytes")
        if pl.layout == "abt":
            k.comment("B window: rows tile_n0.. of the N×K matrix, K shifted by -pad")
            row_window(k, self.rB, t, first_row=self.tile_n0, rows=s["n"], row_elems=s["k"], elem_bytes=eb, pad=pad)
            self.b_step = pl.block_k_bytes
        else:
            k.comment("B window: columns tile_n0.. of the K×N matrix, rows shifted by -pad")
            self.ldn = k.sgpr(1, "ld_n_bytes", kernel=True)
            k.s_lshl_b32(self.ldn, s["n"], 1, comment="N * 2: row pitch of B in bytes")
            column_window(k, self.rB, t, first_col=self.tile_n0, rows=s["k"], row_bytes=self.ldn, elem_bytes=2,
                          pad_rows=s["pad"])
            self.b_step = k.sgpr(1, "b_step", kernel=True)
            k.s_mul_i32(self.b_step, self.ldn, pl.block_k, comment=f"{pl.block_k} rows of B: one K-tile in bytes")
        k.comment("C window: this tile's first element")
        tile_window(k, self.rC, t, first_row=self.tile_m0, first_col=self.tile_n0, rows=s["m"], row_elems=s["n"],
                    elem_bytes=pl.out_bytes)
        self.n_left = k.sgpr(1, "n_left", kernel=True)
        k.s_sub_u32(self.n_left, s["n"], self.tile_n0, comment="columns of C left from tile_n0 (masks past N)")
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
                "n_left": self.n_left, "a_row0": self.row0, "b_row0": self.col0}
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
            k.s_cmp_eq_u32(self.wave_row, 1, comment="group 1 issues the copies")
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
        self.first_tile_extra(em)
        em.free()
        self.advance()

    def first_tile_extra(self, em) -> None:
        """Hook: other copies of the leading partial K-tile (the MX GEMM's scale tiles); none here."""

    def copies_per_tile(self) -> int:
        """LDS-DMA instructions one loader wave issues per K-tile (its ``vmcnt`` per tile)."""
        return self.gA.blocks_per_wave + self.gB.blocks_per_wave

    def advance(self):
        """Move both windows to the next K-tile (now)."""
        self.rA.advance(self.plan.block_k_bytes, "A: window to the next K-tile")
        self.rB.advance(self.b_step, "B: window to the next K-tile")

    def registers(self):
        """Accumulators (zeroed) and the fragment registers every K-tile's reads fill."""
        k, pl = self.k, self.plan
        self.acc = Accumulators(k, "acc", pl.frags_m, pl.frags_n, pl.mfma.c_regs, agpr=self.ACC_AGPR)
        regs = pl.fragment.regs
        self.regA = FragmentRegs(k, "A_frag", pl.frags_m, pl.slices, regs)
        self.regB = FragmentRegs(k, "B_frag", pl.frags_n, pl.slices, regs)
        # u16 reads land the odd k of each pair here; ``join_u16_pairs`` moves them into place
        self.hiB = FragmentRegs(k, "B_hi16", pl.frags_n, pl.slices, regs) if pl.b_read == "u16" else None
        self.acc.zero()

    # ------------------------------------------------------------------ tile operations
    def load_lds(self, stage: int) -> list:
        """Ops: tile -> LDS ``stage`` (this wave's share of A and B), each window advancing to the next
        K-tile once its DMAs are issued."""
        return interleaved_copies(stage, [(self.gA, self.plan.block_k_bytes), (self.gB, self.b_step)])

    def load_regs(self, stage: int, slices) -> list:
        """Ops: fragments of ``slices`` from LDS ``stage`` into registers."""
        pl = self.plan
        ops = []
        for s in slices:
            for fm in range(pl.frags_m):
                ops += self.rdA.fragment_ops(stage, fm, s, self.regA.slice(fm, s))
            for fn in range(pl.frags_n):
                hi = self.hiB.slice(fn, s) if self.hiB else None
                ops += self.rdB.fragment_ops(stage, fn, s, self.regB.slice(fn, s), hi)
        return ops

    def pack(self, slices) -> None:
        """u16 reads: high halves into place (after the reads are waited for)."""
        pl = self.plan
        if pl.b_read != "u16":
            return
        for s in slices:
            for fn in range(pl.frags_n):
                join_u16_pairs(self.k, self.regB.slice(fn, s), self.hiB.slice(fn, s), pl.fragment.regs,
                               f"B[{fn}] slice {s}")

    def mma(self, slices, stage: int = 0) -> list:
        pl = self.plan
        return mma_ops(self.k, pl.mfma, pl.fragment, self.acc.tile, self.regA.slice, self.regB.slice,
                       range(pl.frags_m), range(pl.frags_n), slices, mods=dict(pl.mfma_mods))

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

    def after_mma(self, stage: int) -> None:
        """Emitted after the last MFMAs of each K-tile (in LDS ``stage``)."""

    # ------------------------------------------------------------------ loop scaffolding
    def kloop(self, body) -> None:
        """``body(stage)`` for K-tiles 0..k_tiles-1 (``tiles.kloop.double_buffered_loop``)."""
        double_buffered_loop(self.k, self.s["k_tiles"], body)

    # ------------------------------------------------------------------ pingpong8
    def pingpong8(self):
        k, pl = self.k, self.plan
        all_slices = range(pl.slices)
        j_wave = self.copies_per_tile()
        g1, join = k.label("group1"), k.label("groups_join")
        k.s_cmp_eq_u32(self.wave_row, 1, comment="ping-pong group of this wave")
        k.s_cbranch_scc1(g1)
        # ---------------- group 0: reads and MFMAs
        k.comment("group 0: memory cluster (read tile t) | compute cluster (tile t)")
        k.wait(vmcnt=0, why="group 0 issued no copies: free; the wait checker does not know which group took "
                            "which branch")
        k.barrier(why="P: tile 0 is in LDS (group 1 copied it)")

        def body0(stage):
            k.comment("memory cluster: fragments of tile t -> registers")
            emit(self.load_regs(stage, all_slices))
            self._wait_reads(all_slices, "fragments of tile t are in registers", copies=self.group0_copies)
            k.barrier(why="ping-pong: group 1 runs its memory cluster next")
            k.comment("compute cluster")
            k.s_setprio(1, comment="MFMA cluster first")
            emit(self.mma(all_slices, stage))
            self.after_mma(stage)
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
            emit(merge(self.mma(all_slices, stage), self.load_lds(stage)))
            self.after_mma(stage)
            k.s_setprio(0)
            k.barrier(why="ping-pong: group 0 computes next")
        self.kloop(body1)
        k.place(join)

    # ------------------------------------------------------------------ interleave4
    def interleave4(self):
        k, pl = self.k, self.plan
        h0, h1 = pl.halves
        j_wave = self.copies_per_tile()
        k.wait(vmcnt=j_wave, why="tile 0 has landed (tile 1 may still be in flight)")
        k.barrier(why="tile 0 is in LDS for everyone")
        emit(self.load_regs(0, h0))
        self._wait_reads(h0, "first half of tile 0 in registers")

        def body(stage):
            k.comment("first half: MFMAs on k-slices of half 0, reads of half 1 between them")
            emit(merge(self.mma(h0, stage), self.load_regs(stage, h1)))
            self._wait_reads(h1, "half 1 of tile t is in registers; this wave's reads of the stage are done",
                             copies="this wave's copy of tile t+1 has landed")
            k.barrier(why="everyone is done reading this stage; tile t+1 is complete")
            k.comment("second half: MFMAs on half 1; half 0 of tile t+1 and the copy of tile t+2 between them")
            side = self.load_lds(stage) + self.load_regs(1 - stage, h0)
            emit(merge(self.mma(h1, stage), side))
            self.after_mma(stage)
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
        k.free(self.regA.regs, self.regB.regs)
        if self.hiB is not None:
            self.hiB.free()
        k.comment(f"epilogue: accumulators -> C ({pl.out_dtype}); each 4 AGPRs are 4 consecutive columns of one row")
        packer: Converter | None = None
        if pl.out_dtype != "f32":
            packer = Bf16Packer(k) if pl.out_dtype == "bf16" else Converter(k, pl.out_dtype)
        row_scale, col_scale, col_bias = self.scales()
        store_accumulators(k, self.acc, self.rC, self.lane, frag_rows=pl.frag_rows,
                           row0=lx.uniform("a_row0", pl.block_m, self.row0),
                           col0=lx.uniform("b_row0", pl.block_n, self.col0), row_elems=self.s["n"],
                           cols_left=lx.uniform("n_left", 1 << 31, self.n_left), out_dtype=pl.out_dtype, packer=packer,
                           row_scale=row_scale, col_scale=col_scale, col_bias=col_bias)
        if packer:
            packer.release()
        self.release_scales()

    def scales(self):
        """``(row_scale, col_scale, col_bias)`` for ``store_accumulators`` (all None: the BF16 GEMM stores C
        as accumulated; the FP8 GEMM's dequantisation scales and bias)."""
        return None, None, None

    def release_scales(self) -> None:
        """Free what ``scales`` allocated."""


def hot_loops(program) -> list[list]:
    """The instructions of each K-loop of a finished GEMM program (``kloop`` .. ``kloop_done``; one loop
    for interleave4, one per ping-pong group for pingpong8).  A loop body holds two K-tiles."""
    return loop_bodies(program, "kloop")


def lds_regions(pl: Plan):
    """The LDS regions the kernel allocates, in order: ([A0, A1], [B0, B1])."""
    sa, sb = pl.layout_a.size, pl.layout_b.size
    return ([LdsRegion("A0", 0, sa), LdsRegion("A1", sa, sa)],
            [LdsRegion("B0", 2 * sa, sb), LdsRegion("B1", 2 * sa + sb, sb)])


def lds_accesses(pl: Plan) -> list:
    """Every DS read and LDS-DMA write of the kernel, per wave (``LdsAccess``, lane addresses from the
    tile primitives' formulas): the input of the static bank analysis."""
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
    kshift = pl.elem_bytes.bit_length() - 1
    gA = GlobalToLds(k, "A", pl.layout_a, lds_a, rA, pl.dma_width, pl.loaders, wave,
                     global_offset=lambda row, byte: row * ldk + byte, k_coord=lambda row, byte: byte >> kshift)
    if pl.layout == "abt":
        gB = GlobalToLds(k, "B", pl.layout_b, lds_b, rB, pl.dma_width, pl.loaders, wave,
                         global_offset=lambda row, byte: row * ldk + byte, k_coord=lambda row, byte: byte >> kshift)
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
