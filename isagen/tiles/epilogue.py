"""Accumulators -> memory: fp32 or bf16 (round to nearest even), ``buffer_store`` with range checks.

With the operand order of ``tiles.mma`` each group of four accumulator registers holds four
consecutive columns of one row, so a lane stores 16 bytes (fp32, ``buffer_store_dwordx4``) or 8 bytes
(bf16, ``buffer_store_dwordx2``) per group.  Rows past the end of C are past ``num_records``
(dropped by the hardware); columns past the end would wrap into the next row, so their lanes get
``OOB_OFFSET`` (the caller's ``offset`` expression includes that mask).

bf16 rounding: gfx950 has ``v_cvt_pk_bf16_f32`` (RNE, two values per instruction); gfx942 rounds with
integers: add ``0x7fff`` plus the lowest kept bit (ties to even) and keep the high half, except that a
NaN becomes the quiet NaN ``0x7fc0`` (torch's rule), then ``v_perm_b32`` packs two high halves.  The two
values of a pair are rounded interleaved, each NaN test in its own mask (VCC, an SGPR pair), so every
VALU-writes-mask -> v_cndmask distance is covered by the other value's work: no ``s_nop``.  The
sequence is ``isagen.prims.convert.Converter``'s (shared with the memory-bound kernels).

``store_accumulators`` is the whole store of a wave's ``tiles.registers.Accumulators``: per-lane
offsets from the accumulator layout (``tiles.mma.acc_coords``), column mask, ``store_quad`` per group.
"""

from __future__ import annotations

from isagen.isa.operands import Reg
from isagen.prims.convert import Converter
from isagen.tiles import lanexpr as lx
from isagen.tiles.buffer import OOB_OFFSET


class Bf16Packer(Converter):
    """fp32 pairs -> packed bf16 dwords (RNE): ``isagen.prims.convert.Converter`` for bf16, so the GEMM
    epilogue and the memory-bound kernels share one rounding sequence.  ``pack(dst, lo, hi)`` clobbers
    ``lo``/``hi`` on gfx942; ``release()`` frees the constants and temporaries."""

    def __init__(self, k):
        super().__init__(k, "bf16")
        self.native = not self.soft_bf16


def store_quad(k, rsrc, acc4: Reg, voff: Reg, out_dtype: str, tmp: Reg, packer: Converter | None,
               what: str, scale: Reg | None = None, col_scale: Reg | None = None,
               col_bias: Reg | None = None) -> None:
    """Store four accumulators (consecutive columns) at byte offset ``voff`` of ``rsrc``, each times
    ``scale`` (a VGPR) first when given, value ``i`` times ``col_scale[i]`` (4 VGPRs) when given, then
    plus ``col_bias[i]`` (4 VGPRs) when given.

    ``tmp`` is 4 VGPRs (the values read out of the AGPRs, or copied from VGPR accumulators)."""
    for i in range(4):
        if acc4.cls == "a":
            k.v_accvgpr_read_b32(tmp[i], acc4[i], comment=f"{what}: column +{i}" if i == 0 else None)
        else:                       # accumulators a VALU updates live in VGPRs (the block-scaled FP8 GEMM)
            k.v_mov_b32(tmp[i], acc4[i], comment=f"{what}: column +{i}" if i == 0 else None)
    if scale is not None:
        for i in range(4):
            k.v_mul_f32(tmp[i], tmp[i], scale, comment=f"{what}: times the row's scale" if i == 0 else None)
    if col_scale is not None:
        for i in range(4):
            k.v_mul_f32(tmp[i], tmp[i], col_scale[i], comment=f"{what}: times the columns' scales" if i == 0 else None)
    if col_bias is not None:
        for i in range(4):
            k.v_add_f32(tmp[i], tmp[i], col_bias[i], comment=f"{what}: plus the columns' bias" if i == 0 else None)
    if out_dtype == "f32":
        k.buffer_store_dwordx4(tmp, voff, rsrc.regs, 0, offen=True, comment=f"{what}: 4 x fp32")
    else:
        if packer is None:
            raise ValueError(f"{what}: {out_dtype} output needs a Bf16Packer or another Converter (only f32 is "
                             "stored unconverted)")
        packer.pack(tmp[0], tmp[0], tmp[1])
        packer.pack(tmp[1], tmp[2], tmp[3])
        k.buffer_store_dwordx2(tmp[0:2], voff, rsrc.regs, 0, offen=True, comment=f"{what}: 4 x {out_dtype}")


OUT_BYTES = {"f32": 4, "bf16": 2, "f16": 2}


def store_accumulators(k, acc, rsrc, lane: Reg, *, frag_rows: int, row0: lx.Expr, col0: lx.Expr,
                       row_elems: Reg, cols_left: lx.Expr, out_dtype: str, packer: Converter | None,
                       row_scale: list[Reg] | None = None, col_scale=None, col_bias=None) -> None:
    """Store a wave's accumulator tiles (``tiles.registers.Accumulators`` of ``frag_rows``-row MFMA tiles,
    fed B as src0 as ``tiles.mma.mma_ops`` does) through the window ``rsrc`` of a matrix with
    ``row_elems`` elements per row (an SGPR).  Tile ``(fm, fn)`` covers rows ``row0 + fm*frag_rows``
    and columns ``col0 + fn*frag_rows`` onwards (lane expressions, within the window); lanes whose
    column is not below ``cols_left`` store nothing (a stride past the row would land in the next).
    Two sets of store VGPRs alternate, so a store's data is never overwritten by the next group's.
    ``row_scale[fm]`` (a VGPR per row fragment, e.g. attention's 1/l) multiplies tile row ``fm``'s values
    before they are converted; ``col_scale(fn, q)`` (4 VGPRs: the scales of quad ``q``'s four columns of
    tile column ``fn``, e.g. the FP8 GEMM's per-channel scale_b) multiplies them too, and ``col_bias(fn, q)``
    (4 VGPRs) is added last."""
    out_bytes = OUT_BYTES[out_dtype]
    tmp = k.vgpr(8, "store_data")
    voff = k.vgpr(2, "store_off")
    em = lx.Emitter(k, lane)
    L = lx.lane()
    pitch_reg = k.sgpr(1, "ldc")
    k.s_lshl_b32(pitch_reg, row_elems, out_bytes.bit_length() - 1, comment=f"row pitch of {rsrc.name} in bytes")
    pitch = lx.uniform("ldc", 1 << 31, pitch_reg)
    groups = 64 // frag_rows
    i = 0
    for fm in range(acc.frags_m):
        for fn in range(acc.frags_n):
            regs = acc.tile(fm, fn)
            for q in range(acc.c_regs // 4):
                what = f"{rsrc.name}[{fm}][{fn}] quad {q}"
                m = row0 + fm * frag_rows + L % frag_rows
                n = col0 + fn * frag_rows + (L // frag_rows + q * groups) * 4
                off = lx.where_lt(n, cols_left, m * pitch + n * out_bytes, OOB_OFFSET)
                v = voff[i % 2]
                em.emit(off, dst=v, comment=f"{what}: row m, 4 columns from n (past N: dropped)")
                store_quad(k, rsrc, regs[4 * q:4 * q + 4], v, out_dtype, tmp[4 * (i % 2):4 * (i % 2) + 4],
                           packer, what, row_scale[fm] if row_scale is not None else None,
                           col_scale(fn, q) if col_scale is not None else None,
                           col_bias(fn, q) if col_bias is not None else None)
                i += 1
    em.free()
    k.free(tmp, voff, pitch_reg)
