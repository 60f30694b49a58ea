"""A counter-based random number generator for dropout: deterministic, stateless, reproducible in numpy.

Element ``(r, c)`` of a ``[rows, cols]`` tensor, in a launch with ``seed``, ``offset`` and probability
``p`` (all mod 2^32, ``p`` as fp32):

    key      = lowbias32(seed)
    u(r, c)  = lowbias32((offset + key + r*cols + c) mod 2^32)
    dropped  iff u(r, c) < threshold,   threshold = min(floor(p * 2^32), 2^32 - 1)

``lowbias32`` is Chris Wellons' 32-bit integer hash (two multiply-xorshift rounds; "hash-prospector"):
``x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16``, a bijection with good
avalanche, 10 VALU instructions per element here.  Kept elements are scaled by ``1/(1 - p)`` computed in
fp32 (``v_rcp_f32``: within 1 ulp; numpy's ``1/(1 - p)`` rounded to fp32 may differ in the last bit), and
``p >= 1`` drops everything (scale 0).  ``p = 0`` keeps every element with scale exactly 1.

Using consecutive ``offset`` ranges (advance it by ``rows*cols`` per call) gives independent masks
from one seed.  The stream is a keyed hash, not a cryptographic generator, and not Philox: it will
not reproduce torch's ``dropout`` masks, only ``keep_mask`` below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from isagen.isa.operands import VCC, Reg

if TYPE_CHECKING:
    import numpy as np

M1 = 0x7FEB352D
M2 = 0x846CA68B
TWO_POW_32 = 4294967296.0


# ----------------------------------------------------------------------------- numpy reference
def lowbias32(x) -> np.ndarray:
    import numpy as np

    x = np.asarray(x, dtype=np.uint64) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * M1) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * M2) & 0xFFFFFFFF
    x ^= x >> 16
    return x.astype(np.uint32)


def threshold(p: float) -> int:
    import numpy as np

    p32 = float(np.float32(p))
    if not p32 > 0:                   # 0, negative, NaN: v_cvt_u32_f32 gives 0
        return 0
    return int(min(np.floor(p32 * TWO_POW_32), TWO_POW_32 - 1))


def keep_mask(seed: int, offset: int, rows: int, cols: int, p: float) -> np.ndarray:
    """bool [rows, cols]: True where the element is kept."""
    import numpy as np

    key = int(lowbias32(seed & 0xFFFFFFFF))
    r = np.arange(rows, dtype=np.uint64)[:, None]
    c = np.arange(cols, dtype=np.uint64)[None, :]
    ctr = ((offset & 0xFFFFFFFF) + key + r * cols + c) & 0xFFFFFFFF
    return lowbias32(ctr) >= threshold(p)


def scale(p: float) -> float:
    import numpy as np

    p32 = np.float32(p)
    return float(np.float32(1.0) / (np.float32(1.0) - p32)) if p32 < 1 else 0.0


def torch_dropout(x, p: float, seed: int, offset: int):
    """``x`` (a torch tensor ``[..., cols]``, rows = the leading dimensions flattened) with the dropped
    elements zeroed and the kept ones scaled: the reference ``isagen run`` checks dropout kernels against."""
    import torch
    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
    keep = torch.from_numpy(keep_mask(int(seed), int(offset), rows, cols, float(p))).reshape(x.shape)
    return torch.where(keep, x * scale(p), torch.zeros((), dtype=x.dtype))


# ----------------------------------------------------------------------------- the kernel side
class DropoutRng:
    """Emits the generator.  ``seed``, ``offset`` (u32) and ``p`` (f32) are SGPRs holding the kernel
    arguments.  Afterwards: ``base`` (SGPR) = offset + key; ``threshold`` (SGPR); ``scale`` (VGPR,
    uniform) = 1/(1-p), 0 for p >= 1; ``m1``/``m2`` the multipliers (VOP3 takes no literal)."""

    def __init__(self, k, seed: Reg, offset: Reg, p: Reg):
        self.k = k
        self.base = k.sgpr(1, "rng_base", kernel=True)
        self.threshold = k.sgpr(1, "rng_threshold", kernel=True)
        self.m1 = k.sgpr(1, "rng_m1", kernel=True)
        self.m2 = k.sgpr(1, "rng_m2", kernel=True)
        self.scale = k.vgpr(1, "dropout_scale", kernel=True)
        k.comment("dropout: u = lowbias32(offset + lowbias32(seed) + row*cols + col); dropped iff u < floor(p*2^32)")
        k.s_mov_b32(self.m1, M1, comment="lowbias32 multiplier 1")
        k.s_mov_b32(self.m2, M2, comment="lowbias32 multiplier 2")
        with k.temps(t="s1") as t:
            key = self.base
            k.s_lshr_b32(t.t, seed, 16, comment="key = lowbias32(seed)")
            k.s_xor_b32(key, seed, t.t)
            k.s_mul_i32(key, key, self.m1)
            k.s_lshr_b32(t.t, key, 15)
            k.s_xor_b32(key, key, t.t)
            k.s_mul_i32(key, key, self.m2)
            k.s_lshr_b32(t.t, key, 16)
            k.s_xor_b32(key, key, t.t)
            k.s_add_u32(self.base, key, offset, comment="offset + key: the counter of element (0, 0)")
        with k.temps(pv="v1") as t:
            # ordered so that each result is read 2+ instructions after it is written (no s_nop)
            k.v_mov_b32(t.pv, p, comment="p")
            k.v_sub_f32(self.scale, 1.0, t.pv, comment="1 - p")
            k.v_cmp_gt_f32(VCC, 1.0, t.pv, comment="vcc: p < 1")
            k.v_rcp_f32(self.scale, self.scale, comment="1/(1 - p): the kept elements' scale")
            k.v_mul_f32(t.pv, TWO_POW_32, t.pv, comment="p * 2^32 (exact)")
            k.v_cvt_u32_f32(t.pv, t.pv, comment="threshold: truncated, saturating at 2^32 - 1")
            k.v_cndmask_b32(self.scale, 0, self.scale, VCC, comment="p >= 1 drops everything: scale 0")
            k.v_readfirstlane_b32(self.threshold, t.pv, comment="threshold (uniform)")

    def keep(self, h: Reg, counter: Reg, add: int, t: Reg, dst=VCC, what: str = "") -> None:
        """``dst`` (vcc or an SGPR pair) = lanes whose element at ``counter + add`` is kept; ``h``/``t``
        are clobbered."""
        k = self.k
        name = f"{what}: " if what else ""
        if add:
            k.v_add_u32(h, add, counter, comment=f"{name}counter")
            src = h
        else:
            src = counter
        k.v_lshrrev_b32(t, 16, src, comment=f"{name}lowbias32")
        k.v_xor_b32(h, src, t)
        k.v_mul_lo_u32(h, h, self.m1)
        k.v_lshrrev_b32(t, 15, h)
        k.v_xor_b32(h, h, t)
        k.v_mul_lo_u32(h, h, self.m2)
        k.v_lshrrev_b32(t, 16, h)
        k.v_xor_b32(h, h, t)
        k.v_cmp_le_u32(dst, self.threshold, h, comment=f"{name}kept? (u >= threshold)")
