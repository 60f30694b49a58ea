"""MX (microscaling) GEMM on gfx950: C = (A · 2^(scale_a-127)) · (B · 2^(scale_b-127))ᵀ with A M×K and B
N×K in an OCP MX element format and E8M0 scales per 32 consecutive k (block 32), fp32 accumulation,
bf16 / f16 / fp32 output.  docs/gemm.md ("MX GEMMs") describes it.

It is the FP8 GEMM's kernel (``kernels/gemm.py``: plan, schedules, tiles; B stored N×K) on the
block-scaled MFMAs ``v_mfma_scale_f32_16x16x128_f8f6f4`` / ``v_mfma_scale_f32_32x32x64_f8f6f4``:

* formats: MXFP8 (e4m3 / e5m2, one byte per element, A and B may differ) and MXFP4 (e2m1, two
  elements per byte along K: byte ``p`` of a row holds k = 2p in its low nibble and k = 2p+1 in its
  high nibble, the layout of ``torch.float4_e2m1fn_x2`` and of Triton's ``dot_scaled``; both A and B).
  For fp4 the plan of the BF16/FP8 GEMM counts K in *bytes* (pairs): its LDS tiles, swizzles, DMAs
  and ``ds_read_b128`` fragment reads move the packed bytes unchanged; an fp4 operand of the 16x16x128
  MFMA is 16 bytes per lane (4 VGPRs), 32 consecutive k of one row, which is one 16-byte read.
* scales: ``scale_a`` [M, K/32] and ``scale_b`` [N, K/32] uint8 (E8M0, 2^(e-127); 255 is NaN), row-major,
  as the MXFP8/MXFP4 quantizers write them: no pre-shuffle.  Lane L of an MFMA with R-row operands
  must hold the scale of row ``L % R`` and K-block ``L // R`` of the MFMA's k range (the scaled MFMA's
  scale layout, runtime/emu/mfma.py); op_sel picks one of the VGPR's 4 bytes.  Each K-tile's scale
  bytes are copied into LDS beside the data tiles by the same loader waves, in the same ``vmcnt`` and
  barrier discipline, with ``buffer_load_ubyte ... lds`` (one byte per lane, so any byte order): the
  LDS scale tile is laid out so that one ``ds_read_b32`` gives a lane the bytes of 4 fragments (byte
  b = fragment 4q+b of the wave's quad q) for one k-slice, and the MFMA of fragment f takes byte
  ``f % 4`` (op_sel).  That costs (frags/4) VGPRs per operand and k-slice instead of one per
  fragment, which is what keeps the 256x256 tile at 2 waves per SIMD (``ScaleTile``).
* shapes: any M (decode M 1..64 on the 32x64 / 64x64 interleave4 tiles of ``isagen.mx_mm``), N a
  multiple of 4, K a positive multiple of 128 (one MFMA's K; then every K-tile holds whole 32-blocks
  and the leading partial K-tile, when K is not a multiple of block_k, starts on a scale byte).
"""

from __future__ import annotations

from isagen.builders.contract import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.errors import SpecError
from isagen.isa.operands import M0, Reg
from isagen.kernels import gemm, gemm_fp8
from isagen.kernels.gemm import GemmKernel, Plan
from isagen.targets import TARGETS, get_target
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import MAX_RECORDS, OOB_OFFSET, BufferResource
from isagen.tiles.global_to_lds import interleaved_copies
from isagen.tiles.schedule import Op
from isagen.tiles.window import LeadingPad, row_window

# MX element formats (OCP MX v1.0 names) -> the GEMM plan's element type
FORMATS = {"e4m3": "fp8", "e5m2": "bf8", "e2m1": "fp4"}
BLOCK = 32                    # elements per E8M0 scale (OCP MX)
K_ALIGN = 128                 # K of one 16x16x128 MFMA (two 32x32x64 ones): K must be a multiple
_SCALED_TARGETS = [t.name for t in TARGETS.values()
                   if any(i.mnemonic.startswith("v_mfma_scale_") for i in t.mfmas)]

PARAMS = {
    "a_format": Param("str", "e4m3", "MX element format of A: e4m3 / e5m2 (MXFP8, one byte each) or e2m1 "
                                     "(MXFP4, two per byte along K, the low nibble the even k)",
                      choices=tuple(FORMATS)),
    "b_format": Param("str", "same", "MX element format of B: same (as A), e4m3, e5m2 or e2m1 (fp4 only with "
                                     "fp4 A)", choices=("same",) + tuple(FORMATS)),
    **{name: gemm_fp8.PARAMS[name] for name in ("out_dtype", "schedule", "block_m", "block_n")},
    "block_k": Param("int", 0, "K elements per pipeline stage; 0: 128 bytes of A's rows per stage (128 for "
                               "MXFP8, 256 for MXFP4), twice that for interleave4's decode tiles where one "
                               "k-slice would be the whole stage", choices=(0, 128, 256, 512)),
    "mfma": Param("int", 16, "MFMA tile: 16 (v_mfma_scale_f32_16x16x128_f8f6f4) or 32 "
                             "(v_mfma_scale_f32_32x32x64_f8f6f4)", choices=(16, 32)),
    "group_m": gemm.PARAMS["group_m"],
    "chunk": gemm.PARAMS["chunk"],
}


def formats(p) -> tuple[str, str]:
    """The plan's element types of A and B (fp8 = e4m3, bf8 = e5m2, fp4 = e2m1)."""
    a = FORMATS[p["a_format"]]
    return a, (a if p["b_format"] == "same" else FORMATS[p["b_format"]])


def elems_per_byte(p) -> int:
    return 2 if formats(p)[0] == "fp4" else 1


def _plan_params(p) -> dict:
    """The GEMM plan's parameters (its K counts bytes: pairs of fp4) with the scaled MFMA."""
    a, b = formats(p)
    out = {k: v for k, v in p.items() if k not in ("a_format", "b_format")}
    bk = p["block_k"] // elems_per_byte(p) if p["block_k"] else 0
    return {**out, "in_dtype": a, "b_dtype": b, "layout": "abt", "b_read": "auto", "block_k": bk, "scaled": True}


def _problems(p, target) -> list[tuple[str, str]]:
    t = get_target(target)
    if t.name not in _SCALED_TARGETS:
        return [("a_format", f"{t.name} has no block-scaled MFMA (v_mfma_scale_f32_*_f8f6f4): MX formats with E8M0 "
                             f"scales need {' or '.join(_SCALED_TARGETS)}; on {t.name} use the FP8 GEMM (gemm_fp8) "
                             "with per-tensor or row-wise scales")]
    a, b = formats(p)
    if (a == "fp4") != (b == "fp4"):
        return [("b_format", f"{p['a_format']} A with {p['b_format']} B: the GEMM's tiles give A and B the same "
                             "bytes per k; fp4 pairs only with fp4 (use e4m3/e5m2 for both, or e2m1 for both)")]
    return []


def make_plan(p, target) -> Plan:
    return gemm.make_plan(_plan_params(p), target)


def scale_lds_bytes(plan: Plan) -> int:
    """LDS of the two stages' scale tiles (``ScaleTile.size`` of A and B)."""
    quads = lambda frags: -(-frags // 4)
    per_stage = (plan.wave_rows * quads(plan.frags_m) + plan.wave_cols * quads(plan.frags_n)) * plan.slices * 256
    return 2 * per_stage


def validate(p, target):
    bad = _problems(p, target)
    if bad:
        return bad
    t = get_target(target)
    bad = gemm._problems(gemm.params_from(_plan_params(p), "plan"), t)
    if bad and elems_per_byte(p) == 2:
        bad = [(f, m + " (MXFP4: the tiles count K in bytes, two e2m1 each)") for f, m in bad]
    if bad:
        return bad
    plan = make_plan(p, target)
    total = plan.lds_bytes + scale_lds_bytes(plan)
    if total > t.lds_bytes:
        return [("block_k", f"two LDS stages of data ({plan.lds_bytes} bytes) and E8M0 scale tiles "
                            f"({scale_lds_bytes(plan)} bytes) need {total} bytes; {t.name} has {t.lds_bytes} "
                            "(use a smaller block_k or tile)")]
    return []


def check(p, target, program):
    return gemm.check(gemm.params_from(_plan_params(p), "plan"), target, program)


def launch(p, target) -> LaunchInfo:
    plan = make_plan(p, target)
    epb = elems_per_byte(p)
    esz = plan.out_bytes
    lim = MAX_RECORDS - 256 * 1024
    # sizes: m, n, kb (= K/32, scale bytes per row) and the row length of A/B in their own units:
    # k elements (MXFP8) or kp = K/2 bytes (MXFP4)
    kk = "k" if epb == 1 else "kp"
    dt = {"fp8": "fp8", "bf8": "bf8", "fp4": "u8"}
    a, b = formats(p)
    ktext = "K" if epb == 1 else "K/2 bytes (kp)"
    return LaunchInfo(
        tensors=(TensorParam("A", dt[a], ("m", kk), "in"), TensorParam("B", dt[b], ("n", kk), "in"),
                 TensorParam("C", plan.out_dtype, ("m", "n"), "out"),
                 TensorParam("scale_a", "u8", ("m", "kb"), "in", fill="e8m0"),
                 TensorParam("scale_b", "u8", ("n", "kb"), "in", fill="e8m0")),
        grid=(f"cdiv(m, {plan.block_m}) * cdiv(n, {plan.block_n})", 1, 1),
        block=(64 * plan.waves, 1, 1),
        kernargs={"k": kk, "tiles_m": f"cdiv(m, {plan.block_m})", "tiles_n": f"cdiv(n, {plan.block_n})",
                  "k_tiles": f"cdiv({kk}, {plan.block_k})",
                  "pad": f"({plan.block_k} - {kk} % {plan.block_k}) % {plan.block_k}"},
        requires=(
            (f"{kk} % {K_ALIGN // epb} == 0 and {kk} >= {K_ALIGN // epb}",
             f"K must be a positive multiple of {K_ALIGN} (the K of one scaled MFMA; {ktext} = "
             f"{kk})"),
            (f"kb * {BLOCK // epb} == {kk}", f"the scales must be [rows, K/{BLOCK}] (one E8M0 byte per {BLOCK} "
                                             "elements of K): kb = K/32"),
            ("n % 4 == 0", "N must be a multiple of 4 (a lane stores 4 consecutive columns of C)"),
            (f"m * {kk} <= " + str(lim), "A is too large: buffer offsets are 32-bit (A must stay below 2 GiB)"),
            (f"n * {kk} <= " + str(lim), "B is too large: buffer offsets are 32-bit (B must stay below 2 GiB)"),
            (f"m * n * {esz} <= " + str(lim), "C is too large: buffer offsets are 32-bit (C must stay below 2 GiB)"),
            ("cdiv(m, 16) * cdiv(n, 16) < 16777216", "too many tiles for the block order's 24-bit arithmetic"),
        ),
    )


@generator("gemm_mx", params=PARAMS, shapes={"m": "rows of A and C", "n": "columns of C (rows of B)",
                                             "k": "the reduction dimension K (MXFP8: A and B are M×K, N×K)",
                                             "kp": "MXFP4: bytes of a packed row of A and B (K/2)",
                                             "kb": "scale bytes per row (K/32)"},
           validate=validate, check=check, launch=launch,
           doc=f"MX GEMM C = (A·2^sa)·(B·2^sb)ᵀ on the scaled MFMAs ({', '.join(_SCALED_TARGETS)}): MXFP8 "
               "(e4m3/e5m2) and MXFP4 (e2m1), E8M0 block-32 scales, fp32 accumulation")
def gemm_mx(p, target) -> KernelBuilder:
    return MxGemmKernel(make_plan(p, target), p.name, elems_per_byte(p)).build()


class ScaleTile:
    """One operand's E8M0 scales for one K-tile, global -> LDS (ubyte LDS-DMA) -> VGPRs (ds_read_b32).

    Geometry: ``groups`` wave groups (wave rows for A, wave columns for B) of ``wave_rows`` rows each,
    ``frags`` fragments of ``fr`` rows per wave, ``quads = ceil(frags/4)``, ``slices`` k-slices of one
    MFMA each covering ``J = 64/fr`` K-blocks; a row has ``slices*J`` scale bytes per K-tile.

    LDS (per stage): byte ``b`` of dword ``((w*quads + q)*slices + s)*64 + L`` holds the scale of row
    ``w*wave_rows + (4q+b)*fr + L % fr``, K-block ``s*J + L // fr`` of the K-tile: a lane's ds_read_b32
    of (q, s) gets the bytes of fragments 4q..4q+3 (bytes past the wave's fragments are never written
    nor used).

    DMA: ``buffer_load_ubyte ... lds`` writes lane l's byte at ``M0 + 4*l`` (the DMA's dword lane
    stride), so one instruction with ``M0 = 4*D + b`` fills byte b of the 64 dwords ``D..D+63``: one
    (wave group w, fragment f = 4q+b, k-slice s) block.  Its lanes load row ``(w*frags + f)*fr + l % fr``
    (= ``(n // slices)*fr + l % fr`` for block ``n = (w*frags + f)*slices + s``), K-block
    ``s*J + l // fr``: a lane part common to every block (one VGPR, shared by A and B), and a block part
    (row * pitch + s*J) in an SGPR per block of this wave, added into one temporary VGPR before each
    DMA; M0 per block likewise.  The loader waves take the ``groups*frags*slices`` blocks in order, a
    contiguous share each."""

    def __init__(self, kernel: MxGemmKernel, name: str, rsrc: BufferResource, groups: int, wave_rows: int,
                 frags: int, stages):
        pl = kernel.plan
        self.kern, self.k, self.name, self.rsrc = kernel, kernel.k, name, rsrc
        self.fr, self.frags, self.groups, self.wave_rows = pl.frag_rows, frags, groups, wave_rows
        self.quads = -(-frags // 4)
        self.slices = pl.slices
        self.J = 64 // self.fr
        self.stages = stages
        self.loaders = pl.loaders
        total = groups * frags * self.slices
        if total % self.loaders:
            raise SpecError(f"params.block_k: {total} scale DMA blocks of {name} do not split over "
                            f"{self.loaders} loader waves")
        self.blocks_per_wave = total // self.loaders
        self.row_off: Reg | None = None       # per block of this wave: row * pitch + s*J (SGPRs)
        self.m0: Reg | None = None            # per block of this wave: 4*D + b (SGPRs)

    @property
    def size(self) -> int:
        return self.groups * self.quads * self.slices * 256

    # ------------------------------------------------------------------ code
    def setup(self, em: lx.Emitter, loader: lx.Expr, kb: lx.Expr) -> None:
        """This wave's per-block SGPRs: the block part of the global offset and the M0 offset."""
        k, S, F = self.k, self.slices, self.frags
        n_blocks = self.blocks_per_wave
        self.row_off = k.sgpr(n_blocks, f"{self.name}_dma_row")
        self.m0 = k.sgpr(n_blocks, f"{self.name}_dma_m0")
        for i in range(n_blocks):
            n = loader * n_blocks + i
            wf, s = n // S, n % S
            w, f = wf // F, wf % F
            off = em.emit_uniform(wf * self.fr * kb + s * self.J,
                                  comment=f"{self.name} block {i}: bytes to its first row and K-block")
            k.s_mov_b32(self.row_off[i], off, comment=f"{self.name} block {i}: row * K/32 + K-block")
            d = ((w * self.quads + f // 4) * S + s) * 64
            m0 = em.emit_uniform(d * 4 + f % 4, comment=f"{self.name} block {i}: its LDS byte (dword*4 + byte)")
            k.s_mov_b32(self.m0[i], m0, comment=f"{self.name} block {i}: LDS byte of lane 0 in the tile")
            em.free()

    def _tables(self) -> tuple[Reg, Reg]:
        """The per-block SGPRs ``setup`` allocated: (row offsets, M0 offsets)."""
        if self.row_off is None or self.m0 is None:
            raise RuntimeError(f"{self.name}: setup() must come before the DMAs and release()")
        return self.row_off, self.m0

    def release(self) -> None:
        self.k.free(*self._tables())

    def ops(self, stage: int, after: Op | None = None) -> list[Op]:
        """(M0 update, DMA) pairs of this wave's blocks into ``stage``; the DMA's offset VGPR is set
        (one VALU) between the two, which also fills the M0 -> LDS-DMA wait state."""
        k = self.k
        region = self.stages[stage]
        lane_off, tmp = self.kern.scale_lane_off, self.kern.scale_tmp
        row_off, m0_off = self._tables()
        out: list[Op] = []
        prev = after
        for i in range(self.blocks_per_wave):
            def m0(i=i):
                k.s_add_u32(M0, m0_off[i], region.offset, comment=f"M0: {self.name} block {i} in lds_{region.name}")

            def dma(i=i):
                k.v_add_u32(tmp, row_off[i], lane_off, comment=f"{self.name} block {i}: this lane's byte "
                                                                    "(row L%fr, K-block L/fr of the block)")
                inst = k.buffer_load_ubyte_lds(tmp, self.rsrc.regs, 0, offen=True,
                                               comment=f"{self.name} -> lds_{region.name}, block {i} (byte of "
                                                       "64 dwords)")
                inst.lds = (region.offset, region.offset + region.size)
            m0op = Op("m0", m0, f"{self.name} m0 {i}", after=prev)
            dmaop = Op("dma", dma, f"{self.name} dma {i}", after=m0op)
            out += [m0op, dmaop]
            prev = dmaop
        return out

    def first_tile(self, stage: int, em: lx.Emitter, pad_kb: lx.Expr, loader: lx.Expr) -> None:
        """The leading partial K-tile: lanes whose K-block is below ``pad_kb`` load zeros."""
        k = self.k
        region = self.stages[stage]
        tmp = self.kern.scale_tmp
        row_off, m0_off = self._tables()
        S = self.slices
        for i in range(self.blocks_per_wave):
            n = loader * self.blocks_per_wave + i
            kblock = (n % S) * self.J + lx.lane() % 64 // self.fr
            k.s_add_u32(M0, m0_off[i], region.offset, comment=f"M0: {self.name} block {i} in lds_{region.name}")
            k.v_add_u32(tmp, row_off[i], self.kern.scale_lane_off,
                        comment=f"{self.name} block {i}: this lane's byte")
            em.emit(lx.where_lt(kblock, pad_kb, OOB_OFFSET, lx.VReg(f"{self.name}_tmp", tmp)), dst=tmp,
                    comment=f"{self.name} block {i}: K-blocks before the first one load 0")
            inst = k.buffer_load_ubyte_lds(tmp, self.rsrc.regs, 0, offen=True,
                                           comment=f"{self.name} -> lds_{region.name}, block {i}")
            inst.lds = (region.offset, region.offset + region.size)

    # ------------------------------------------------------------------ reads
    def read_ops(self, stage: int, s: int, addr: Reg, regs: Reg) -> list[Op]:
        """ds_read_b32 of quad q, k-slice s for q in range(quads) into ``regs[s*quads + q]``."""
        k = self.k
        region = self.stages[stage]
        ops = []
        for q in range(self.quads):
            off = region.offset - self.stages[0].offset + (q * self.slices + s) * 256

            def f(q=q, off=off):
                k.ds_read_b32(regs[s * self.quads + q], addr, offset=off,
                              lds=(region.offset, region.offset + region.size),
                              comment=f"{self.name} of fragments {4 * q}..{4 * q + 3} (one byte each), k-slice {s}")
            ops.append(Op("ds_read", f, f"{self.name} read q{q} s{s}"))
        return ops

    def read_addr(self, em: lx.Emitter, dst: Reg, w: lx.Expr) -> None:
        """The stage-0 LDS address of this lane's dword of quad 0, slice 0 (the wave group ``w``)."""
        em.emit(self.stages[0].offset + (w * (self.quads * self.slices * 64) + lx.lane()) * 4, dst=dst,
                comment=f"{self.name}: LDS address of this lane's scale dword (stage 0, quad 0, k-slice 0)")


class MxGemmKernel(GemmKernel):
    """The BF16/FP8 GEMM's kernel with E8M0 scale tiles beside A and B and the block-scaled MFMAs."""

    def __init__(self, plan: Plan, name: str, elems_per_byte: int):
        super().__init__(plan, name)
        self.epb = elems_per_byte
        ktile = plan.block_k * elems_per_byte             # K elements per K-tile
        self.sb = ktile // BLOCK                          # scale bytes per row per K-tile

    def describe(self) -> list[str]:
        pl = self.plan
        fmt = "MXFP4 (e2m1, two per byte)" if self.epb == 2 else "MXFP8"
        return super().describe() + [
            f"{fmt}: E8M0 scales per {BLOCK} k, scale_a [M, K/32] and scale_b [N, K/32] bytes; each K-tile's "
            f"{pl.block_m}x{self.sb} + {pl.block_n}x{self.sb} scale bytes go to LDS with A and B (ubyte DMA, "
            "4 fragments per dword), one ds_read_b32 per 4 fragments and k-slice, op_sel picks the byte"]

    # ------------------------------------------------------------------ arguments and windows
    def extra_pointers(self) -> None:
        k = self.k
        k.args.pointer("scale_a", "u8", "read_only")
        k.args.pointer("scale_b", "u8", "read_only")
        self.rSA = BufferResource(k, "scale_a", tracked=True)
        self.rSB = BufferResource(k, "scale_b", tracked=True)
        for r in (self.rSA, self.rSB):
            r.load_pointer(k.args[r.name].offset)

    def resources(self):
        super().resources()
        k, s = self.k, self.s
        shift = (BLOCK // self.epb).bit_length() - 1       # row units (elements or fp4 pairs) per scale byte
        self.kb = k.sgpr(1, "kb", kernel=True)
        k.s_lshr_b32(self.kb, s["k"], shift, comment=f"K/{BLOCK}: scale bytes per row (pitch of scale_a, scale_b)")
        self.pad_kb = k.sgpr(1, "pad_kb", kernel=True)
        k.s_lshr_b32(self.pad_kb, s["pad"], shift, comment="the leading pad in scale bytes (K % 128 == 0: whole MFMAs)")
        t = k.sgpr(2, "scale_rsrc_tmp", align=1)
        pad = LeadingPad(k, self.pad_kb, 1, t[1])
        k.comment("scale windows: rows tile_m0.. / tile_n0.. of the [rows, K/32] byte matrices, back by the pad")
        row_window(k, self.rSA, t, first_row=self.tile_m0, rows=s["m"], row_elems=self.kb, elem_bytes=1, pad=pad,
                   explain=("tile_m0", "K/32"))
        row_window(k, self.rSB, t, first_row=self.tile_n0, rows=s["n"], row_elems=self.kb, elem_bytes=1, pad=pad)
        k.free(t)

    def advance(self):
        super().advance()
        self.rSA.advance(self.sb, "scale_a: window to the next K-tile")
        self.rSB.advance(self.sb, "scale_b: window to the next K-tile")

    # ------------------------------------------------------------------ scale tiles
    def tiles(self):
        super().tiles()
        k, pl = self.k, self.plan
        geo = {"A": (pl.wave_rows, pl.wave_tile_m, pl.frags_m, self.rSA),
               "B": (pl.wave_cols, pl.wave_tile_n, pl.frags_n, self.rSB)}
        self.st = {}
        for x, (groups, rows, frags, rsrc) in geo.items():
            size = groups * (-(-frags // 4)) * pl.slices * 256
            stages = [k.lds(size, f"S{x}{st}", align=4) for st in range(2)]
            self.st[x] = ScaleTile(self, f"scale_{x}", rsrc, groups, rows, frags, stages)
        self.scA = k.vgpr(self.st["A"].quads * pl.slices, "scale_a_frag")
        self.scB = k.vgpr(self.st["B"].quads * pl.slices, "scale_b_frag")

    @property
    def loader_expr(self):
        """This wave's index among the loaders, as the data copies use it (tiles() set it up)."""
        return self.gA.wave

    def setup_addresses(self):
        super().setup_addresses()
        k, pl = self.k, self.plan
        kb = lx.uniform("kb", 1 << 26, self.kb)
        fr = pl.frag_rows
        self.scale_lane_off, self.scale_tmp = k.vgpr(1, "scale_lane_off"), k.vgpr(1, "scale_dma_off")
        em = lx.Emitter(k, self.lane)
        L = lx.lane()
        em.emit((L % fr) * kb + L // fr, dst=self.scale_lane_off,
                comment=f"scale DMAs: this lane's row (L%{fr}) * K/32 + K-block (L/{fr}) within a block")
        em.free()
        for x in ("A", "B"):
            em = lx.Emitter(k, self.lane)
            self.st[x].setup(em, self.loader_expr, kb)
            em.free()
        self.sa_addr, self.sb_addr = k.vgpr(1, "scale_a_lds"), k.vgpr(1, "scale_b_lds")
        em = lx.Emitter(k, self.lane)
        self.st["A"].read_addr(em, self.sa_addr, lx.uniform("wave_m", pl.wave_rows - 1, self.wave_row))
        self.st["B"].read_addr(em, self.sb_addr, lx.uniform("wave_n", pl.wave_cols - 1, self.wave_col))
        em.free()

    def first_tile_extra(self, em) -> None:
        """The scale tiles of the leading partial K-tile: K-blocks before the first one load zeros."""
        pad_kb = lx.uniform("pad_kb", 1 << 12, self.pad_kb)
        self.st["A"].first_tile(0, em, pad_kb, self.loader_expr)
        self.st["B"].first_tile(0, em, pad_kb, self.loader_expr)

    def copies_per_tile(self) -> int:
        return super().copies_per_tile() + self.st["A"].blocks_per_wave + self.st["B"].blocks_per_wave

    def load_lds(self, stage: int) -> list:
        return interleaved_copies(stage, [(self.gA, self.plan.block_k_bytes), (self.gB, self.b_step),
                                          (self.st["A"], self.sb), (self.st["B"], self.sb)])

    def load_regs(self, stage: int, slices) -> list:
        ops = super().load_regs(stage, slices)
        for s in slices:
            ops += self.st["A"].read_ops(stage, s, self.sa_addr, self.scA)
            ops += self.st["B"].read_ops(stage, s, self.sb_addr, self.scB)
        return ops

    def mma(self, slices, stage: int = 0) -> list:
        """Block-scaled MFMAs: B as src0 (its scales in scale_src0), A as src1 (scale_src1); fragment f's
        scale is byte f % 4 of its quad's VGPR: op_sel[i] | op_sel_hi[i] << 1 for scale source i."""
        k, pl = self.k, self.plan
        mfma = getattr(k, pl.mfma.mnemonic)
        mods = dict(pl.mfma_mods)
        qa, qb = self.st["A"].quads, self.st["B"].quads
        ops = []
        for s in slices:
            for fm in range(pl.frags_m):
                for fn in range(pl.frags_n):
                    def f(fm=fm, fn=fn, s=s):
                        c = self.acc.tile(fm, fn)
                        ba, bb = fm % 4, fn % 4
                        mfma(c, self.regB.slice(fn, s), self.regA.slice(fm, s), c,
                             self.scB[s * qb + fn // 4], self.scA[s * qa + fm // 4],
                             op_sel=[bb & 1, ba & 1, 0], op_sel_hi=[bb >> 1, ba >> 1, 0], **mods,
                             comment=f"C[{fm}][{fn}] += A[{fm}]·B[{fn}] (k-slice {s}); scales: byte {ba} of A's, "
                                     f"{bb} of B's")
                    ops.append(Op("mfma", f, f"mfma C[{fm}][{fn}] s{s}"))
        return ops

    def epilogue(self):
        # the scale registers are dead after the last MFMA; free them before the epilogue's temporaries
        self.k.wait(vmcnt=0, lgkmcnt=0, why="scale copies past the last K-tile land before their offset "
                                            "registers are reused")
        for x in ("A", "B"):
            self.st[x].release()
        self.k.free(self.scA, self.scB, self.sa_addr, self.sb_addr, self.scale_lane_off, self.scale_tmp)
        super().epilogue()
