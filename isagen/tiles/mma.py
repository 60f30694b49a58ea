"""MFMA tile products: C[fm][fn] += A[fm] · B[fn] over the k-slices a schedule gives.

The MFMA computes ``D[i][j] = sum_k src0[i][k] * src1[k][j]`` with D lane-distributed by the
calculator's C/D layout: for 16x16, lane ``L`` register ``r`` holds ``D[4*(L//16) + r][L % 16]``; for
32x32, ``D[8*(r//4) + 4*(L//32) + r%4][L % 32]``.  Fed with ``src0 = B`` (rows = n) and ``src1 = A``
(columns = m) it computes Cᵀ, so a lane's accumulator holds *four consecutive n* of one row m per
group of four registers: the epilogue stores 16 (fp32) or 8 (bf16) contiguous bytes per lane without
any shuffle.  ``acc_coords`` gives that mapping.

MFMAs are ordered k-slice outermost, so consecutive MFMAs write different accumulators and an
accumulator chain (same opcode, same registers) needs no wait states between its links.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from isagen.errors import SpecError
from isagen.targets import MfmaInfo
from isagen.tiles.lds_to_reg import Fragment
from isagen.tiles.schedule import Op

if TYPE_CHECKING:
    import numpy as np


def bf16_mfma(target, size: int) -> MfmaInfo:
    """The bf16 MFMA of ``size`` x ``size`` output with the largest K on ``target``."""
    found = target.find_mfma("bf16", size, size)
    if not found:
        raise SpecError(f"{target.name} has no {size}x{size} bf16 MFMA")
    return found[0]


# cbsz (src0) / blgp (src1) codes of the f8f6f4 MFMAs (CDNA4 ISA): fp8 = e4m3, bf8 = e5m2, fp6 = e2m3,
# bf6 = e3m2, fp4 = e2m1; and the VGPRs each format's operand takes (32 elements per lane)
F8F6F4_FORMAT = {"fp8": 0, "bf8": 1, "fp6": 2, "bf6": 3, "fp4": 4}
F8F6F4_REGS = {"fp8": 8, "bf8": 8, "fp6": 6, "bf6": 6, "fp4": 4}


def operand_regs(info: MfmaInfo, dtype: str) -> int:
    """VGPRs per lane of an A/B operand of ``info`` holding ``dtype`` (f8f6f4: by format; else the table's)."""
    return F8F6F4_REGS[dtype] if info.in_type == "f8f6f4" else info.a_regs


def fp8_mfma(target, size: int, a: str = "fp8", b: str = "fp8", scaled: bool = False) -> tuple[MfmaInfo, dict]:
    """The MFMA of ``size`` x ``size`` output with the most FLOPs per cycle on ``target`` for A of type
    ``a`` and B of type ``b`` (fp8 = e4m3, bf8 = e5m2; fp4 = e2m1 and fp6/bf6 only in the f8f6f4 forms),
    fed as ``mma_ops`` feeds them (B as src0, A as src1), and its modifiers: the f8f6f4 form where the
    target has one (cbsz = B's format, blgp = A's; twice the rate of the K=32/K=16 forms on gfx950), else
    the ``<src0>_<src1>`` form (``bf8_fp8``: B e5m2, A e4m3).  ``scaled``: the block-scaled
    ``v_mfma_scale_*`` form (E8M0 scales of A and B per 32 k)."""
    f8f6f4 = [i for i in target.find_mfma("f8f6f4", size, size) if i.mnemonic.startswith("v_mfma_scale_") == scaled]
    narrow = a not in ("fp8", "bf8") or b not in ("fp8", "bf8")
    legacy = [] if scaled or narrow else target.find_mfma(a if a == b else f"{b}_{a}", size, size)
    found = f8f6f4 + legacy
    if not found:
        raise SpecError(f"{target.name} has no {size}x{size} MFMA for {a} A and {b} B"
                        + (" with E8M0 block scales" if scaled else ""))
    best = max(found, key=lambda i: i.m * i.n * i.k / i.passes)
    if best in f8f6f4:
        mods = {k: v for k, v in (("cbsz", F8F6F4_FORMAT[b]), ("blgp", F8F6F4_FORMAT[a])) if v}
        return best, mods
    return best, {}


def fragment_for(info: MfmaInfo, read_k: int, elem_bytes: int = 2) -> Fragment:
    return Fragment(rows=info.m, k_per_mfma=4 * info.a_regs // elem_bytes, k_per_read=read_k, elem_bytes=elem_bytes)


def mma_ops(k, info: MfmaInfo, frag: Fragment, acc, a_regs, b_regs, fms, fns, slices, *, zero_first: bool = False,
            names: tuple[str, str, str] = ("C", "A", "B"), mods: dict | None = None) -> list[Op]:
    """MFMA ops for ``C[fm][fn] += A[fm] · B[fn]`` over ``slices``.

    ``acc(fm, fn)``, ``a_regs(fm, s)``, ``b_regs(fn, s)`` give the registers (a fragment slice is
    ``frag.regs`` VGPRs or AGPRs; MFMA ``h`` of a slice uses its registers ``[h*k_per_mfma/2,
    (h+1)*k_per_mfma/2)``).  ``zero_first``: the first MFMA of each accumulator adds to 0 instead (C =
    A·B: no zeroing before a product that starts over, as attention's S = Q·Kᵀ does every tile).
    ``names`` name C, A and B in the comments; ``mods`` are the MFMA's modifiers (the f8f6f4 formats:
    cbsz for B, blgp for A)."""
    mfma = getattr(k, info.mnemonic)
    r = info.a_regs
    cn, an, bn = names
    ops = []
    slices = list(slices)
    for s in slices:
        for h in range(frag.mfmas_per_slice):
            for fm in fms:
                for fn in fns:
                    c, a, b = acc(fm, fn), a_regs(fm, s), b_regs(fn, s)
                    first = zero_first and s == slices[0] and h == 0

                    def f(c=c, a=a, b=b, fm=fm, fn=fn, s=s, h=h, first=first):
                        mfma(c, b[h * r:(h + 1) * r], a[h * r:(h + 1) * r], 0 if first else c, **(mods or {}),
                             comment=f"{cn}[{fm}][{fn}] {'=' if first else '+='} {an}[{fm}]·{bn}[{fn}] "
                                     f"(k-slice {s}, part {h})")
                    ops.append(Op("mfma", f, f"mfma {cn}[{fm}][{fn}] s{s}h{h}"))
    return ops


def acc_coords(info: MfmaInfo) -> tuple[np.ndarray, np.ndarray]:
    """``(m, n)`` arrays of shape (c_regs, 64): the C element (within the MFMA tile) that register
    ``r`` of lane ``L`` accumulates, with A fed as src1 and B as src0 (see the module docstring)."""
    import numpy as np

    lanes = np.arange(64)
    g = 64 // info.m
    m = np.tile(lanes % info.m, (info.c_regs, 1))
    n = np.stack([4 * ((r // 4) * g + lanes // info.m) + r % 4 for r in range(info.c_regs)])
    return m, n
