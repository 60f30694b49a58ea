"""Register views of a wave's matrix tiles: one allocation, named slices.

A wave of a matrix kernel holds two kinds of register tiles (HipKittens' ``rt``):

* ``Accumulators``: a ``frags_m x frags_n`` grid of MFMA output tiles, ``c_regs`` registers each
  (``tile(fm, fn)``), in AGPRs for the GEMM (the MFMA reads and writes them in place; no VALU touches
  them until the epilogue).  Attention keeps two grids: S = Q·Kᵀ, which the softmax rescales, and the
  output O = P·V.
* ``FragmentRegs``: MFMA operand fragments, ``frags`` fragments times ``slices`` k-slices of
  ``regs_per_slice`` VGPRs (``slice(f, s)``; ``tiles.lds_to_reg.Fragment.regs`` gives the size; VGPRs or AGPRs), as
  the LDS reads fill them and ``tiles.mma.mma_ops`` consumes them.

Both are one allocation each, so a view is a register range the assembler prints as ``v[name+i:...]``
and the views of one tile never overlap.
"""

from __future__ import annotations

from isagen.isa.operands import Reg


class Accumulators:
    """``frags_m x frags_n`` MFMA output tiles of ``c_regs`` registers, row-major in one allocation."""

    def __init__(self, k, name: str, frags_m: int, frags_n: int, c_regs: int, *, agpr: bool = True):
        self.k = k
        self.frags_m, self.frags_n, self.c_regs = frags_m, frags_n, c_regs
        self.agpr = agpr
        alloc = k.agpr if agpr else k.vgpr
        self.regs: Reg = alloc(frags_m * frags_n * c_regs, name, kernel=True)

    @property
    def count(self) -> int:
        return self.frags_m * self.frags_n * self.c_regs

    def tile(self, fm: int, fn: int) -> Reg:
        """The registers of output tile ``(fm, fn)``."""
        i = (fm * self.frags_n + fn) * self.c_regs
        return self.regs[i:i + self.c_regs]

    def zero(self) -> None:
        """Every accumulator = 0 (before the first MFMA of the loop accumulates into it)."""
        k = self.k
        kind = "AGPRs" if self.agpr else "VGPRs"
        k.comment(f"accumulators: {self.frags_m}x{self.frags_n} MFMA tiles x {self.c_regs} {kind} = 0")
        for i in range(self.count):
            if self.agpr:
                k.v_accvgpr_write_b32(self.regs[i], 0)
            else:
                k.v_mov_b32(self.regs[i], 0)


class FragmentRegs:
    """``frags`` operand fragments x ``slices`` k-slices, ``regs_per_slice`` VGPRs each, in one allocation
    (fragment-major: a fragment's slices are adjacent)."""

    def __init__(self, k, name: str, frags: int, slices: int, regs_per_slice: int, *, agpr: bool = False,
                 over: Reg | None = None):
        self.k = k
        self.frags, self.slices, self.regs_per_slice = frags, slices, regs_per_slice
        size = frags * slices * regs_per_slice
        if over is not None:
            # a view over registers another tile owns (two tiles whose live ranges do not overlap)
            if len(over) < size:
                raise ValueError(f"{name}: {size} registers do not fit in {over} ({len(over)})")
            self.regs: Reg = over[0:size]
            self.owned = False
            return
        # AGPRs serve as MFMA operands and LDS/global load destinations too (gfx90a on): attention keeps
        # its Q, K and V fragments there and its VGPRs for the softmax
        alloc = k.agpr if agpr else k.vgpr
        self.regs = alloc(size, name, kernel=True)
        self.owned = True

    def slice(self, f: int, s: int) -> Reg:
        """The VGPRs of fragment ``f``'s k-slice ``s``."""
        i = (f * self.slices + s) * self.regs_per_slice
        return self.regs[i:i + self.regs_per_slice]

    def free(self) -> None:
        if self.owned:
            self.k.free(self.regs)
