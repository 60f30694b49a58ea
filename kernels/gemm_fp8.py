"""FP8 GEMM with dequantisation scales: C = scale_a · scale_b · (A·Bᵀ), A M×K and B N×K in fp8 (e4m3:
FNUZ on gfx942, OCP on gfx950), fp32 accumulation, bf16 / f16 / fp32 output.  docs/gemm.md describes
it; it is the BF16 GEMM's kernel (``kernels/gemm.py``: plan, schedules, tiles) with 1-byte elements
and a different epilogue:

* the plan takes ``in_dtype fp8``: the MFMA is the target's fastest fp8 one (gfx950
  ``v_mfma_f32_16x16x128_f8f6f4`` / ``32x32x64``, cbsz = blgp = 0: fp8 A and B; gfx942
  ``v_mfma_f32_16x16x32_fp8_fp8`` / ``32x32x16``), the default K-tile holds the same bytes as the BF16
  GEMM's (128 on gfx950, 64 on gfx942), so the LDS tiles, their swizzles, the DMAs and the fragment
  reads are the BF16 GEMM's byte for byte (an f8f6f4 operand of 32 bytes per lane is two
  ``ds_read_b128`` parts);
* scaling ``tensor``: scale_a and scale_b are one fp32 each (``torch._scaled_mm``'s per-tensor
  scales); ``row``: scale_a[M] per row (per token) and scale_b[N] per column (per channel), the
  row-wise form of ``torch._scaled_mm``.  The epilogue multiplies each accumulator by its row's and
  its column's scale (a lane's 4 accumulators of a quad are 4 consecutive columns of one row: one
  ``buffer_load_dword`` of scale_a per row fragment, one ``buffer_load_dwordx4`` of scale_b per quad).

* scaling ``block`` (DeepSeek-V3 style, vLLM's / AITER's w8a8 block-scaled GEMM): scale_a[M, K/128]
  per 1x128 of A, scale_b[cdiv(N,128), K/128] per 128x128 of B, applied per 128-wide K-block inside
  the loop.  A K-block's MFMAs write a second accumulator set P in VGPRs (its first MFMA adds to the
  inline 0, so P is never zeroed); after its last MFMA, ``acc += (scale_a * scale_b) * P`` by
  ``v_pk_fma_f32`` (two accumulators an instruction; acc in VGPRs: a VALU cannot write AGPRs; one
  ``v_pk_mul_f32`` makes the factors of two row fragments).  Chosen over rescaling the running sum
  (acc *= s_kb / s_kb+1, MFMAs straight into it: a division, and wrong for a zero scale) because the
  MFMA chain stays the unscaled GEMM's and the VALU work is the minimum, one instruction per two
  accumulators per K-block, issued after the K-tile's MFMAs (the next K-block's scale loads sit
  between, covering the MFMA -> VALU wait states: no ``s_nop``).  K-tiles never straddle K-blocks
  (``block_k`` 64 or 128; K a multiple of 128, so there is no partial K-tile and a K-tile's place in its
  K-block is its LDS stage, known when the code is written).  scale_b is wave-uniform (a wave's columns
  lie in one 128-column block: ``128 % wave_tile_n == 0``): ``s_buffer_load_dword``.  The two
  accumulator sets limit the tile to 128x256 at two waves per SIMD.

Shapes: any M; N a multiple of 4 (a lane stores 4 consecutive columns); K a multiple of 16 (the
leading partial K-tile is zeroed in runs of 16 bytes, gfx950's DMA width); block scaling: K a multiple
of 128.
"""

from __future__ import annotations

from isagen.builders.contract import LaunchInfo, TensorParam
from isagen.builders.program import KernelBuilder
from isagen.builders.registry import Param, generator
from isagen.kernels import gemm
from isagen.kernels.gemm import GemmKernel, Plan
from isagen.targets import TARGETS, get_target
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import MAX_RECORDS, BufferResource
from isagen.tiles.mma import mma_ops
from isagen.tiles.registers import Accumulators

# the fp8 flavours a spec may name explicitly, by torch's names: format -> (element type, format)
FLAVOURS = {"e4m3fnuz": ("fp8", "fnuz"), "e4m3fn": ("fp8", "ocp"), "e5m2fnuz": ("bf8", "fnuz"),
            "e5m2": ("bf8", "ocp")}
_FORMATS = ", ".join(f"{t.fp8_format.upper()} on {t.name}" for t in TARGETS.values())
_MFMA_HELP = {size: ", ".join(f"{i.mnemonic} on {t.name}" for t in TARGETS.values()
                              for i in [gemm.fp8_mfma(t, size)[0]]) for size in (16, 32)}
_BLOCK_K_HELP = "; ".join(f"{2 * t.gemm_defaults.block_k} on {t.name}" for t in TARGETS.values())
BLOCK = 128             # block scaling: K-block (and B's N-block) of one scale, DeepSeek-V3 / vLLM / AITER

PARAMS = {
    "in_dtype": Param("str", "fp8", f"element type of A (and of B unless b_dtype says): fp8 = e4m3, bf8 = e5m2, "
                                    f"in the target's format ({_FORMATS}); e4m3fnuz, e4m3fn, e5m2fnuz, e5m2 name "
                                    "the format (refused on the target without it)",
                      choices=("fp8", "bf8") + tuple(FLAVOURS)),
    "b_dtype": Param("str", "same", "element type of B: same (as A), or fp8 / bf8 / a named format (e5m2 for a "
                                    "gradient operand)",
                     choices=("same", "fp8", "bf8") + tuple(FLAVOURS)),
    "scaling": Param("str", "tensor", "tensor: one fp32 scale_a and one scale_b; row: scale_a[M] per row "
                                      "(token) and scale_b[N] per column (channel), as torch._scaled_mm's row-wise; "
                                      f"block: DeepSeek-style, scale_a[M, K/{BLOCK}] per 1x{BLOCK} of A and "
                                      f"scale_b[N/{BLOCK}, K/{BLOCK}] per {BLOCK}x{BLOCK} of B, applied per "
                                      "K-block inside the loop",
                     choices=("tensor", "row", "block")),
    "bias": Param("bool", False, "add bias[N] (fp32) to each row after the scales: C = scale_a·scale_b·(A·Bᵀ) + bias"),
    "out_dtype": Param("str", "bf16", "element type of C (accumulation is fp32; bf16/f16 round to nearest even)",
                       choices=("bf16", "f16", "f32")),
    "schedule": Param("str", "pingpong8", "pingpong8: 8 waves in two groups a barrier apart; "
                                          "interleave4: 4 waves, single MFMAs interleaved with single loads",
                      choices=tuple(gemm.SCHEDULES)),
    "block_m": Param("int", 256, "macro tile rows (M) per workgroup", multiple_of=32, min=32, max=256),
    "block_n": Param("int", 256, "macro tile columns (N) per workgroup", multiple_of=32, min=32, max=256),
    "block_k": Param("int", 0, f"K per pipeline stage; 0: the target's default ({_BLOCK_K_HELP})",
                     choices=(0, 64, 128, 256)),
    "mfma": Param("int", 16, f"MFMA tile: 16 ({_MFMA_HELP[16]}) or 32 ({_MFMA_HELP[32]})", choices=(16, 32)),
    "group_m": gemm.PARAMS["group_m"],
    "chunk": gemm.PARAMS["chunk"],
}


def _plan_params(p) -> dict:
    """The BF16 GEMM plan's parameters for these FP8 ones (A·Bᵀ; the scaling is the epilogue's)."""
    out = {k: v for k, v in p.items() if k not in ("scaling", "bias")}
    a = FLAVOURS.get(p["in_dtype"], (p["in_dtype"],))[0]
    b = a if p["b_dtype"] == "same" else FLAVOURS.get(p["b_dtype"], (p["b_dtype"],))[0]
    return {**out, "in_dtype": a, "b_dtype": b, "layout": "abt", "b_read": "auto"}


def _flavour_problem(p, target) -> list[tuple[str, str]]:
    t = get_target(target)
    for field in ("in_dtype", "b_dtype"):
        name = p[field]
        if name in FLAVOURS and FLAVOURS[name][1] != t.fp8_format:
            theirs = [n for n, (_, f) in FLAVOURS.items() if f == t.fp8_format]
            return [(field, f"{name} is not {t.name}'s 8-bit float: its MFMAs read {t.fp8_format.upper()} formats "
                            f"({', '.join(theirs)}); convert the tensors or build for the other target")]
    return []


def make_plan(p, target) -> Plan:
    return gemm.make_plan(_plan_params(p), target)


def _block_problem(p, target) -> list[tuple[str, str]]:
    """Block scaling needs each K-tile inside one 128-wide K-block and each wave's columns inside one
    128-column block of B (its scale_b is then one value per K-block, wave-uniform)."""
    if p.scaling != "block":
        return []
    pl = make_plan(p, target)
    if BLOCK % pl.block_k:
        return [("block_k", f"block scaling applies one scale per {BLOCK}-wide K-block, and a K-tile of "
                            f"{pl.block_k} spans {pl.block_k // BLOCK}: use block_k 64 or 128")]
    if BLOCK % pl.wave_tile_n:
        return [("block_n", f"block scaling needs each wave's {pl.wave_tile_n} columns inside one {BLOCK}-column "
                            f"block of B's scales ({pl.wave_tile_n} does not divide {BLOCK}): lower block_n")]
    return []


def validate(p, target):
    out = _flavour_problem(p, target) + gemm._problems(gemm.params_from(_plan_params(p), "plan"), get_target(target))
    return out or _block_problem(p, target)


def check(p, target, program):
    return gemm.check(gemm.params_from(_plan_params(p), "plan"), target, program)


def scale_shapes(scaling: str) -> tuple[tuple, tuple]:
    """Shapes of scale_a and scale_b (``torch._scaled_mm``'s: (1,) and (1,) per tensor, (M, 1) and (1, N)
    row-wise; block: (M, KB) and (NB, KB), KB = K/128 and NB = cdiv(N, 128), as vLLM's and AITER's
    w8a8 block-scaled GEMMs)."""
    return {"tensor": ((1,), (1,)), "row": (("m", 1), (1, "n")), "block": (("m", "kb"), ("nb", "kb"))}[scaling]


def launch(p, target) -> LaunchInfo:
    plan = make_plan(p, target)
    esz = plan.out_bytes
    lim = MAX_RECORDS - 256 * 1024          # room for the leading-pad shift and the tile window
    sa, sb = scale_shapes(p.scaling)
    return LaunchInfo(
        tensors=(TensorParam("A", plan.in_dtype, ("m", "k"), "in"), TensorParam("B", plan.b_dtype, ("n", "k"), "in"),
                 TensorParam("C", plan.out_dtype, ("m", "n"), "out"),
                 TensorParam("scale_a", "f32", sa, "in"), TensorParam("scale_b", "f32", sb, "in"))
        + ((TensorParam("bias", "f32", ("n",), "in"),) if p.bias else ()),
        grid=(f"cdiv(m, {plan.block_m}) * cdiv(n, {plan.block_n})", 1, 1),
        block=(64 * plan.waves, 1, 1),
        kernargs={"tiles_m": f"cdiv(m, {plan.block_m})", "tiles_n": f"cdiv(n, {plan.block_n})",
                  "k_tiles": f"cdiv(k, {plan.block_k})",
                  "pad": f"({plan.block_k} - k % {plan.block_k}) % {plan.block_k}"},
        requires=(
            ("k % 16 == 0 and k >= 16", "K must be a positive multiple of 16 (fp8 LDS copies move 16-byte runs "
                                        "along K)"),
        ) + (((f"k % {BLOCK} == 0 and kb * {BLOCK} == k",
               f"block scaling: K must be a positive multiple of {BLOCK} and scale_a / scale_b must have K/{BLOCK} "
               f"columns (one per {BLOCK}-wide K-block)"),
              (f"nb == cdiv(n, {BLOCK})", f"block scaling: scale_b must have cdiv(N, {BLOCK}) rows (one per "
                                          f"{BLOCK} rows of B)"))
             if p.scaling == "block" else ()) + (
            ("n % 4 == 0", "N must be a multiple of 4 (a lane stores 4 consecutive columns of C)"),
            ("m * k <= " + str(lim), "A is too large: buffer offsets are 32-bit (A must stay below 2 GiB)"),
            ("n * k <= " + str(lim), "B is too large: buffer offsets are 32-bit (B must stay below 2 GiB)"),
            (f"m * n * {esz} <= " + str(lim), "C is too large: buffer offsets are 32-bit (C must stay below 2 GiB)"),
            ("cdiv(m, 16) * cdiv(n, 16) < 16777216", "too many tiles for the block order's 24-bit arithmetic"),
        ),
    )


@generator("gemm_fp8", params=PARAMS, shapes={"m": "rows of A and C", "n": "columns of C (rows of B)",
                                              "k": "the reduction dimension",
                                              "kb": f"scaling block: K/{BLOCK} (columns of scale_a and scale_b)",
                                              "nb": f"scaling block: cdiv(N, {BLOCK}) (rows of scale_b)"},
           validate=validate, check=check, launch=launch,
           doc="FP8 GEMM C = scale_a·scale_b·(A·Bᵀ), e4m3 in, fp32 accumulation, per-tensor, row-wise or "
               "128-block scales")
def gemm_fp8(p, target) -> KernelBuilder:
    return Fp8GemmKernel(make_plan(p, target), p.name, p.scaling, p.bias).build()


class Fp8GemmKernel(GemmKernel):
    """The BF16 GEMM's kernel on fp8 tiles, with the scales applied in the epilogue."""

    def __init__(self, plan: Plan, name: str, scaling: str, bias: bool):
        super().__init__(plan, name)
        self.scaling = scaling
        self.bias = bias
        self.block = scaling == "block"
        if self.block:
            # the running sum is updated by VALU (v_pk_fma_f32), which cannot write AGPRs: VGPRs
            self.ACC_AGPR = False
            self.group0_copies = "the next K-block's scale_a has landed (group 0 issues no copies)"
            self.tpb = BLOCK // plan.block_k            # K-tiles per K-block: 1 (block_k 128) or 2 (64)

    def describe(self) -> list[str]:
        what = {"tensor": "per-tensor scales: C = scale_a * scale_b * acc",
                "row": "row-wise scales: C[m][n] = scale_a[m] * scale_b[n] * acc[m][n]",
                "block": f"block scales: C[m][n] = sum over {BLOCK}-wide K-blocks kb of scale_a[m][kb] * "
                         f"scale_b[n/{BLOCK}][kb] * P_kb[m][n]; P_kb = MFMAs of one K-block into VGPRs (the first "
                         "one adds to 0), then acc += factor * P_kb (v_pk_fma_f32)"}[self.scaling]
        return super().describe() + [f"fp8 = e4m3, bf8 = e5m2 ({self.plan.target.fp8_format.upper()}); {what}"
                                     + ("; + bias[n] (fp32)" if self.bias else "")]

    def extra_pointers(self) -> None:
        k = self.k
        k.args.pointer("scale_a", "f32", "read_only")
        k.args.pointer("scale_b", "f32", "read_only")
        names = ["scale_a", "scale_b"] + (["bias"] if self.bias else [])
        if self.bias:
            k.args.pointer("bias", "f32", "read_only")
        # block scaling: scale_b's window clamps num_records at 0 (a wave past N): tracked
        self.rS = {n: BufferResource(k, n, tracked=self.block and n == "scale_b") for n in names}
        for n, r in self.rS.items():
            r.load_pointer(k.args[n].offset)

    def _window(self, name: str, first, size, what: str) -> None:
        """``name``'s resource on this tile's ``first..size`` fp32 elements (past the end: zeros)."""
        k = self.k
        rsrc, t = self.rS[name], k.sgpr(1, "vec_tmp")
        k.s_lshl_b32(t, first, 2)
        rsrc.add_base(t, f"{name}: this tile's first {what}")
        k.s_sub_u32(t, size, first)
        k.s_lshl_b32(t, t, 2, comment=f"{name}: bytes from this tile's first {what} to the end")
        rsrc.finish(t)
        k.free(t)

    def _columns(self, name: str, em: lx.Emitter, off):
        """Per quad of 4 accumulator columns, ``name``'s 4 fp32 values for them (``buffer_load_dwordx4``;
        a lane's quad ``q`` of tile column ``fn`` is columns ``col0 + fn*rows + (L/rows + q*groups)*4``
        onwards).  Returns the VGPRs and a ``(fn, q) -> 4 VGPRs`` view."""
        k, pl = self.k, self.plan
        fr, groups, quads = pl.frag_rows, 64 // pl.frag_rows, pl.mfma.c_regs // 4
        self._window(name, self.tile_n0, self.s["n"], "column")
        regs = k.vgpr(4 * pl.frags_n * quads, f"{name}_cols")
        L = lx.lane()
        col0 = lx.uniform("b_row0", pl.block_n, self.col0)
        for fn in range(pl.frags_n):
            for q in range(quads):
                em.emit((col0 + fn * fr + (L // fr + q * groups) * 4) * 4, dst=off,
                        comment=f"{name} of column fragment {fn} quad {q}: this lane's 4 columns")
                i = 4 * (fn * quads + q)
                k.buffer_load_dwordx4(regs[i:i + 4], off, self.rS[name].regs, 0, offen=True,
                                      comment=f"{name}[n..n+3] (fragment {fn} quad {q})")
        return regs, lambda fn, q: regs[4 * (fn * quads + q):4 * (fn * quads + q) + 4]

    # ------------------------------------------------------------------ block scaling (in the K loop)
    def registers(self):
        super().registers()
        if not self.block:
            return
        pl, k = self.plan, self.k
        # one K-block's MFMA partial sums: the first MFMA of a block adds to the inline constant 0, so
        # this set is never zeroed
        self.part = Accumulators(k, "acc_kblock", pl.frags_m, pl.frags_n, pl.mfma.c_regs, agpr=False)

    def prologue_copies(self):
        if self.block:
            self._block_windows()
            if self.tpb == 1:
                self._load_block_scales(0, "K-block 0 (the first K-tile's)")
        super().prologue_copies()

    def _block_windows(self) -> None:
        """scale_a's window on this tile's rows (a lane's row per row fragment: one offset VGPR each), which
        walks one K-block (4 bytes) per load: base += 4 and num_records -= 4 (no clamp needed: it starts at
        (M - tile_m0) * K/128 * 4 >= 4 * K/128 and K/128 + 1 loads at most see it, the last one a prefetch
        nobody uses); scale_b's on the row of B's scales this wave's columns fall in (wave-uniform:
        ``s_buffer_load`` with an SGPR offset that grows by 4 per K-block; SMEM range-checks the whole
        offset).  Rows past M and blocks past the end read zeros."""
        k, pl, s = self.k, self.plan, self.s
        fr = pl.frag_rows
        self.kb_bytes = k.sgpr(1, "kb_bytes", kernel=True)
        k.s_lshr_b32(self.kb_bytes, s["k"], 5, comment=f"K/{BLOCK} * 4: bytes per row of scale_a and scale_b")
        t, u = k.sgpr(1, "blk_t"), k.sgpr(1, "blk_u")
        ra, rb = self.rS["scale_a"], self.rS["scale_b"]
        k.s_mul_i32(t, self.tile_m0, self.kb_bytes, comment="scale_a: offset of this tile's first row")
        ra.add_base(t, "scale_a: window on this tile's rows")
        k.s_sub_u32(u, s["m"], self.tile_m0, comment="scale_a: rows from tile_m0 to the end")
        k.s_mul_i32(u, u, self.kb_bytes)
        ra.finish(u)
        k.s_add_u32(t, self.tile_n0, self.col0, comment="this wave's first column")
        k.s_lshr_b32(t, t, 7, comment=f"its row of scale_b: column / {BLOCK} (the wave's columns share it)")
        k.s_add_u32(u, s["n"], BLOCK - 1)
        k.s_lshr_b32(u, u, 7, comment=f"cdiv(N, {BLOCK}): rows of scale_b")
        k.s_sub_u32(u, u, t, comment="scale_b rows from this wave's to the end (negative: past N, reads 0)")
        k.s_mul_i32(u, u, self.kb_bytes)
        k.s_mul_i32(t, t, self.kb_bytes, comment="scale_b: offset of this wave's row")
        rb.add_base(t, "scale_b: window on this wave's row")
        rb.finish(u)
        k.free(t, u)
        self.sa_off = k.vgpr(pl.frags_m, "scale_a_off", kernel=True)
        em = lx.Emitter(k, self.lane)
        L = lx.lane()
        row0 = lx.uniform("a_row0", pl.block_m, self.row0)
        pitch = lx.uniform("kb_bytes", 1 << 24, self.kb_bytes)
        for fm in range(pl.frags_m):
            em.emit((row0 + fm * fr + L % fr) * pitch, dst=self.sa_off[fm],
                    comment=f"scale_a of row fragment {fm}: this lane's row * K/{BLOCK} * 4")
        em.free()
        nsets = 2 if self.tpb == 1 else 1
        # scale_a of row fragments 2p and 2p+1 side by side: one v_pk_mul_f32 makes two factors, and
        # v_pk_fma_f32 picks its half with op_sel (a 64-bit source, even-aligned)
        pairs = (pl.frags_m + 1) // 2
        self.sa_sets = [k.vgpr(2 * pairs, f"scale_a_blk{i}", align=2, kernel=True) for i in range(nsets)]
        # scale_b in an SGPR pair: packed fp32 reads a scalar operand as a pair (both halves its first SGPR)
        self.sb_sets = [k.sgpr(2, f"scale_b_blk{i}", align=2, kernel=True) for i in range(nsets)]
        self.sb_off = k.sgpr(1, "scale_b_off", kernel=True)
        k.s_mov_b32(self.sb_off, 0, comment="scale_b: byte offset of the next K-block in this wave's row")
        for i in range(nsets):
            k.s_mov_b32(self.sb_sets[i][1], 0, comment="second SGPR of the scale_b pair (not used)")
            if pl.frags_m % 2:
                k.v_mov_b32(self.sa_sets[i][pl.frags_m], 0, comment="the odd row fragment's unused partner")

    def _load_block_scales(self, i: int, what: str) -> None:
        """scale_a[row][kb] per row fragment and scale_b[nb][kb] into set ``i``; both windows -> kb + 1."""
        k, pl = self.k, self.plan
        sa, sb = self.sa_sets[i], self.sb_sets[i]
        for fm in range(pl.frags_m):
            k.buffer_load_dword(sa[fm], self.sa_off[fm], self.rS["scale_a"].regs, 0, offen=True,
                                comment=f"scale_a[row][kb] of row fragment {fm}: {what}" if fm == 0 else None)
        k.s_buffer_load_dword(sb[0], self.rS["scale_b"].regs, self.sb_off, comment=f"scale_b[nb][kb]: {what}")
        ra = self.rS["scale_a"]
        ra.add_base(4, "scale_a: window to the next K-block")
        k.s_sub_u32(ra.regs[2], ra.regs[2], 4, comment="scale_a: num_records -= 4")
        k.s_add_u32(self.sb_off, self.sb_off, 4, comment="scale_b: the next K-block")

    def mma(self, slices, stage: int = 0) -> list:
        if not self.block:
            return super().mma(slices, stage)
        pl = self.plan
        slices = list(slices)
        first = stage % self.tpb == 0 and slices[0] == 0      # the K-block's first k-slice: P = A·B
        return mma_ops(self.k, pl.mfma, pl.fragment, self.part.tile, self.regA.slice, self.regB.slice,
                       range(pl.frags_m), range(pl.frags_n), slices, zero_first=first, names=("P", "A", "B"),
                       mods=dict(pl.mfma_mods))

    def after_mma(self, stage: int) -> None:
        """After a K-tile's MFMAs: the next K-block's scale loads (they land by the next memory cluster's
        wait), then, at the end of a K-block, acc += factor * P.  The loads come first so that they, too,
        stand between the last MFMAs and the first VALU reads of their results (the XDL -> VALU wait
        states): no ``s_nop`` even with 8 MFMAs a K-tile."""
        if not self.block:
            return
        if self.tpb == 1:
            self._load_block_scales(1 - stage, "the next K-tile's K-block (lands by its memory cluster)")
        elif stage == 0:
            self._load_block_scales(0, "this K-block's (used after the next K-tile's MFMAs)")
        if stage % self.tpb != self.tpb - 1:
            return
        k, pl = self.k, self.plan
        i = stage if self.tpb == 1 else 0
        sa, sb = self.sa_sets[i], self.sb_sets[i]
        k.comment("end of a K-block: acc += scale_a[row][kb] * scale_b[nb][kb] * P (one rounding per value)")
        for p in range(len(sa) // 2):
            k.v_pk_mul_f32(sa[2 * p:2 * p + 2], sa[2 * p:2 * p + 2], sb, op_sel=[0, 0], op_sel_hi=[1, 0],
                           comment="factors of two row fragments: scale_a * scale_b" if p == 0 else None)
        for fm in range(pl.frags_m):
            h = fm % 2
            for fn in range(pl.frags_n):
                acc, part = self.acc.tile(fm, fn), self.part.tile(fm, fn)
                for j in range(0, pl.mfma.c_regs, 2):
                    # src1's op_sel / op_sel_hi both pick this row fragment's half of the factor pair
                    k.v_pk_fma_f32(acc[j:j + 2], part[j:j + 2], sa[2 * (fm // 2):2 * (fm // 2) + 2], acc[j:j + 2],
                                   op_sel=[0, h, 0], op_sel_hi=[1, h, 1],
                                   comment=f"acc[{fm}][{fn}] += factor * P[{fm}][{fn}]" if j == 0 else None)

    # ------------------------------------------------------------------ epilogue scales
    def scales(self):
        k, pl = self.k, self.plan
        held: list = []
        if self.block:
            k.free(self.part.regs, self.sa_off, self.kb_bytes, self.sb_off, *self.sa_sets, *self.sb_sets)
        off = k.vgpr(1, "vec_off")
        em = lx.Emitter(k, self.lane)
        col_scale = col_bias = None
        if self.scaling == "tensor":
            sa, sb = k.sgpr(1, "scale_a_value"), k.sgpr(1, "scale_b_value")
            k.s_load_dword(sa, self.rS["scale_a"].base, 0, comment="scale_a (one fp32)")
            k.s_load_dword(sb, self.rS["scale_b"].base, 0, comment="scale_b (one fp32)")
            k.wait(lgkmcnt=0, why="the scales are in SGPRs")
            v = k.vgpr(1, "scale_ab")
            held.append(v)
            k.v_mov_b32(v, sb, comment="scale_b")
            k.v_mul_f32(v, sa, v, comment="scale_a * scale_b: every accumulator's factor")
            k.free(sa, sb)
            row_scale = [v] * pl.frags_m
        elif self.block:
            row_scale = None          # applied per K-block in the loop
        else:
            # row-wise: scale_a of this lane's row per row fragment, scale_b of its columns per quad
            self._window("scale_a", self.tile_m0, self.s["m"], "row")
            ra = k.vgpr(pl.frags_m, "scale_a_rows")
            held.append(ra)
            L = lx.lane()
            row0 = lx.uniform("a_row0", pl.block_m, self.row0)
            for fm in range(pl.frags_m):
                em.emit((row0 + fm * pl.frag_rows + L % pl.frag_rows) * 4, dst=off,
                        comment=f"scale_a of row fragment {fm}: this lane's row")
                k.buffer_load_dword(ra[fm], off, self.rS["scale_a"].regs, 0, offen=True,
                                    comment=f"scale_a[row] (fragment {fm})")
            row_scale = [ra[fm] for fm in range(pl.frags_m)]
            regs, col_scale = self._columns("scale_b", em, off)
            held.append(regs)
        if self.bias:
            regs, col_bias = self._columns("bias", em, off)
            held.append(regs)
        em.free()
        k.free(off)
        if self.scaling == "row" or self.bias:
            k.wait(vmcnt=0, why="the row and column vectors are in VGPRs")
        self._held = held
        return row_scale, col_scale, col_bias

    def release_scales(self) -> None:
        self.k.free(*self._held)
