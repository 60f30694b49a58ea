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
VALU-writes-mask -> v_cndmask distance is covered by the other value's work: no ``s_nop``.
"""

from __future__ import annotations

from ..isa.operands import VCC, Reg


class Bf16Packer:
    """fp32 pairs -> packed bf16 dwords (RNE), with the temporaries the gfx942 sequence needs."""

    def __init__(self, k):
        self.k = k
        self.native = "v_cvt_pk_bf16_f32" in k.isa
        if not self.native:
            self.t = k.vgpr(2, "rne_tmp")
            self.qnan = k.vgpr(1, "qnan")
            self.sel = k.sgpr(1, "perm_hi16")
            self.bias = k.sgpr(1, "rne_bias")
            self.nan_hi = k.sgpr(2, "nan_hi")
            k.s_mov_b32(self.sel, 0x07060302, comment="v_perm selector: the high halves of two dwords")
            k.s_movk_i32(self.bias, 0x7FFF, comment="rounding bias below the kept bits")
            k.v_mov_b32(self.qnan, 0x7FC00000, comment="quiet NaN as a bf16 in the high half")

    def release(self):
        if not self.native:
            self.k.free(self.t, self.qnan, self.sel, self.bias, self.nan_hi)

    def pack(self, dst: Reg, lo: Reg, hi: Reg) -> None:
        """dst = bf16(hi) << 16 | bf16(lo); ``lo``/``hi`` (fp32 bits) are clobbered on gfx942."""
        k = self.k
        if self.native:
            k.v_cvt_pk_bf16_f32(dst, lo, hi, comment="round both to bf16 (nearest even) and pack")
            return
        t_lo, t_hi = self.t[0], self.t[1]
        k.v_bfe_u32(t_lo, lo, 16, 1, comment="lo: lowest bit the bf16 keeps")
        k.v_bfe_u32(t_hi, hi, 16, 1, comment="hi: lowest bit the bf16 keeps")
        k.v_cmp_u_f32(VCC, lo, lo, comment="vcc: lo is NaN")
        k.v_cmp_u_f32(self.nan_hi, hi, hi, comment="hi is NaN")
        k.v_add3_u32(t_lo, lo, self.bias, t_lo, comment="lo + 0x7fff + that bit: ties round to even")
        k.v_add3_u32(t_hi, hi, self.bias, t_hi, comment="hi rounded; each bf16 is the high half")
        k.v_cndmask_b32(lo, t_lo, self.qnan, VCC, comment="lo: NaN -> quiet NaN (as torch)")
        k.v_cndmask_b32(hi, t_hi, self.qnan, self.nan_hi, comment="hi: NaN -> quiet NaN")
        k.v_perm_b32(dst, hi, lo, self.sel, comment="pack the two bf16 (high halves)")


def store_quad(k, rsrc, acc4: Reg, voff: Reg, out_dtype: str, tmp: Reg, packer: Bf16Packer | None,
               what: str) -> None:
    """Store four accumulators (consecutive columns) at byte offset ``voff`` of ``rsrc``.

    ``tmp`` is 4 VGPRs (the values read out of the AGPRs)."""
    for i in range(4):
        k.v_accvgpr_read_b32(tmp[i], acc4[i], comment=f"{what}: column +{i}" if i == 0 else None)
    if out_dtype == "f32":
        k.buffer_store_dwordx4(tmp, voff, rsrc.regs, 0, offen=True, comment=f"{what}: 4 x fp32")
    else:
        packer.pack(tmp[0], tmp[0], tmp[1])
        packer.pack(tmp[1], tmp[2], tmp[3])
        k.buffer_store_dwordx2(tmp[0:2], voff, rsrc.regs, 0, offen=True, comment=f"{what}: 4 x bf16")
