"""Element types <-> fp32 for kernels that compute in fp32 on bf16, f16 or f32 tensors.

A dword of a 16-bit tensor holds two elements (low half first in memory).  ``Converter`` unpacks one
dword into two fp32 registers and packs two fp32 results back into one dword, rounded to nearest even:

* bf16 -> fp32 is exact: the low element shifted up 16 bits, the high one masked;
* f16 -> fp32 is ``v_cvt_f32_f16`` (exact), the high half shifted down first;
* fp32 -> f16 is ``v_cvt_f16_f32`` (round to nearest even) and ``v_pack_b32_f16``; gfx950 has
  ``v_cvt_pk_f16_f32`` (both halves in one instruction, also nearest even);
* fp32 -> bf16 on gfx950 is ``v_cvt_pk_bf16_f32`` (RNE, both halves in one instruction).  gfx942 has no
  such instruction, so the high half of ``r + 0x7fff + lsb`` is taken (``lsb`` = the lowest bit the bf16
  keeps: ties go to even; overflow carries into the exponent and gives inf, as it should), except that a
  NaN becomes the quiet NaN ``0x7fc0``, which is what torch produces; ``v_perm_b32`` then packs the two
  high halves.  Two values are rounded interleaved so that no compare result is read by the very next
  instruction (that would cost an ``s_nop``).

For f32 tensors there is nothing to convert: kernels use the loaded registers directly
(``Converter.wide`` is False).
"""

from __future__ import annotations

from isagen.isa.operands import VCC, Reg

ELEMENT_BYTES = {"f32": 4, "bf16": 2, "f16": 2}
QNAN_BF16 = 0x7FC00000      # torch's bf16 NaN, as the high half of an fp32 word
PERM_HIGH_HALVES = 0x07060302   # v_perm_b32 selector: bytes 3:2 of src1 then bytes 3:2 of src0


class Converter:
    """Unpack/pack for one element type, holding the constants and temporaries it needs.

    ``Converter(k, dtype)`` allocates what the sequences need (nothing for f32, f16 and gfx950 bf16; on
    gfx942 bf16 two VGPR temporaries, the quiet NaN, the RNE bias, the ``v_perm`` selector and an SGPR
    pair for a NaN mask); ``release()`` frees them."""

    def __init__(self, k, dtype: str):
        if dtype not in ELEMENT_BYTES:
            raise ValueError(f"unknown element type {dtype!r}")
        self.k = k
        self.dtype = dtype
        self.wide = dtype != "f32"                   # 16-bit elements: two per dword
        self.soft_bf16 = dtype == "bf16" and "v_cvt_pk_bf16_f32" not in k.isa
        self._held: list[Reg] = []
        if self.soft_bf16:
            self.tmp = self._keep(k.vgpr(2, "rne_tmp"))
            self.nan_lo = self._keep(k.sgpr(2, "nan_lo"))     # the low value's NaN mask (vcc: the high one's)
            self.qnan = self._keep(k.vgpr(1, "qnan"))
            self.sel = self._keep(k.sgpr(1, "perm_hi16"))
            self.bias = self._keep(k.sgpr(1, "rne_bias"))
            k.s_mov_b32(self.sel, PERM_HIGH_HALVES, comment="v_perm selector: high halves of two dwords -> one dword")
            k.s_movk_i32(self.bias, 0x7FFF, comment="round-to-nearest-even bias (VOP3 takes no literal on gfx9)")
            k.v_mov_b32(self.qnan, QNAN_BF16, comment="quiet NaN (a VGPR: v_cndmask already reads a mask)")

    def _keep(self, reg: Reg) -> Reg:
        self._held.append(reg)
        return reg

    def release(self) -> None:
        self.k.free(*self._held)
        self._held = []

    # ------------------------------------------------------------------ to fp32
    def unpack(self, lo: Reg, hi: Reg, src: Reg, what: str = "") -> None:
        """``lo``/``hi`` = the two elements of dword ``src`` as fp32 (``src`` may be ``hi``'s register
        only for f16, never ``lo``'s)."""
        k = self.k
        name = f"{what}: " if what else ""
        if self.dtype == "bf16":
            k.v_lshlrev_b32(lo, 16, src, comment=f"{name}low bf16 -> f32")
            k.v_and_b32(hi, 0xFFFF0000, src, comment=f"{name}high bf16 -> f32")
        elif self.dtype == "f16":
            k.v_cvt_f32_f16(lo, src, comment=f"{name}low f16 -> f32")
            k.v_lshrrev_b32(hi, 16, src)
            k.v_cvt_f32_f16(hi, hi, comment=f"{name}high f16 -> f32")
        else:
            raise ValueError("f32 elements need no unpacking")

    def unpack_low(self, dst: Reg, src: Reg, what: str = "") -> None:
        """``dst`` = the element in the low half of ``src`` as fp32 (a lone 16-bit element)."""
        name = f"{what}: " if what else ""
        if self.dtype == "bf16":
            self.k.v_lshlrev_b32(dst, 16, src, comment=f"{name}bf16 -> f32")
        else:
            self.k.v_cvt_f32_f16(dst, src, comment=f"{name}f16 -> f32")

    # ------------------------------------------------------------------ back to the element type
    def pack(self, dst: Reg, lo: Reg, hi: Reg) -> None:
        """``dst`` = (hi, lo) rounded to nearest even and packed.  ``lo``/``hi`` are clobbered."""
        k = self.k
        if self.dtype == "f16" and "v_cvt_pk_f16_f32" in k.isa:
            k.v_cvt_pk_f16_f32(dst, lo, hi, comment="round both to f16 (nearest even) and pack")
        elif self.dtype == "f16":
            k.v_cvt_f16_f32(lo, lo, comment="round to f16 (nearest even)")
            k.v_cvt_f16_f32(hi, hi, comment="round to f16 (nearest even)")
            k.v_pack_b32_f16(dst, lo, hi, comment="two f16 -> one dword")
        elif not self.soft_bf16:
            k.v_cvt_pk_bf16_f32(dst, lo, hi, comment="round both to bf16 (nearest even) and pack")
        else:
            self.round_bf16_pair(lo, hi)
            k.v_perm_b32(dst, hi, lo, self.sel, comment="pack the two bf16 (high halves)")

    def pack_low(self, dst: Reg, x: Reg) -> None:
        """``dst``'s low half = ``x`` rounded to the 16-bit type (a lone element); ``x`` is clobbered."""
        k = self.k
        if self.dtype == "f16":
            k.v_cvt_f16_f32(dst, x, comment="round to f16 (nearest even)")
        elif not self.soft_bf16:
            k.v_cvt_pk_bf16_f32(dst, x, 0, comment="round to bf16 (nearest even), low half")
        else:
            self.round_bf16(x)
            k.v_lshrrev_b32(dst, 16, x, comment="the bf16 into the low half")

    def round_bf16_pair(self, lo: Reg, hi: Reg) -> None:
        """gfx942: ``lo``/``hi`` (fp32 bits) -> their high halves hold the bf16 rounded to nearest even,
        NaN -> 0x7fc0; interleaved so that neither compare result is read by the next instruction."""
        k, t = self.k, self.tmp
        k.v_cmp_u_f32(self.nan_lo, lo, lo, comment="low: NaN?")
        k.v_cmp_u_f32(VCC, hi, hi, comment="high: NaN?")
        k.v_bfe_u32(t[0], lo, 16, 1, comment="low: lsb of the bf16 mantissa")
        k.v_add3_u32(t[0], lo, t[0], self.bias, comment="low + 0x7fff + lsb: ties round to even")
        k.v_bfe_u32(t[1], hi, 16, 1, comment="high: lsb of the bf16 mantissa")
        k.v_add3_u32(t[1], hi, t[1], self.bias, comment="high + 0x7fff + lsb")
        k.v_cndmask_b32(lo, t[0], self.qnan, self.nan_lo, comment="NaN -> quiet NaN 0x7fc0 (as torch)")
        k.v_cndmask_b32(hi, t[1], self.qnan, VCC, comment="NaN -> quiet NaN 0x7fc0")

    def round_bf16(self, r: Reg) -> None:
        """gfx942: ``r`` (fp32 bits) -> its high half is the bf16 rounded to nearest even; NaN -> 0x7fc0."""
        k, t = self.k, self.tmp[0]
        k.v_cmp_u_f32(VCC, r, r, comment="vcc: r is NaN")
        k.v_bfe_u32(t, r, 16, 1, comment="lsb of the bf16 mantissa")
        k.v_add3_u32(t, r, t, self.bias, comment="r + 0x7fff + lsb: ties round to even; bf16 in the high half")
        k.v_cndmask_b32(r, t, self.qnan, VCC, comment="NaN -> quiet NaN 0x7fc0 (as torch)")


class PairView:
    """One lane's 16 bytes (4 dwords) of elements as fp32 pairs: pair ``i`` is elements ``2i`` and
    ``2i+1`` (dword ``i`` of a 16-bit type, dwords ``2i`` and ``2i+1`` of fp32).

    ``load`` gives the pair's two fp32 registers: for fp32 the data registers themselves (no
    instruction), for 16-bit types the temporaries ``tmp`` after unpacking.  ``store`` puts two fp32
    results back: packed and rounded for 16-bit types, a move (if needed) for fp32."""

    def __init__(self, conv: Converter):
        self.conv = conv
        self.pairs = 4 if conv.wide else 2

    def load(self, regs: Reg, i: int, tmp: Reg, what: str = "") -> tuple[Reg, Reg]:
        if self.conv.wide:
            self.conv.unpack(tmp[0], tmp[1], regs[i], what)
            return tmp[0], tmp[1]
        return regs[2 * i], regs[2 * i + 1]

    def store(self, regs: Reg, i: int, lo: Reg, hi: Reg) -> None:
        k = self.conv.k
        if self.conv.wide:
            self.conv.pack(regs[i], lo, hi)
            return
        for dst, src in ((regs[2 * i], lo), (regs[2 * i + 1], hi)):
            if dst.index != src.index:
                k.v_mov_b32(dst, src)
