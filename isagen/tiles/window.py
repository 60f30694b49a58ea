"""Buffer windows onto row-major matrices: where a workgroup's tiles start, and how far it may read.

A matrix kernel aims one buffer resource (``tiles.buffer.BufferResource``) per operand at the part of
the matrix its workgroup touches: the base moves to the first element of the workgroup's tile and
``num_records`` becomes the bytes from there to the end of the matrix, so the hardware range check
zeroes every read past the last row and drops every store there, and the per-lane offsets
(``tiles.global_to_lds``) stay small and fixed while the base walks the loop (``advance``).

Three shapes cover the GEMM, and the kernels after it:

* ``row_window``: rows ``first_row..`` of an R x W matrix, whole rows (A and B of C = A·Bᵀ; attention's
  Q, K and V, whose loops walk rows; FP8 GEMM's A and B with 1-byte elements).
* ``column_window``: columns ``first_col..`` of a matrix whose rows the loop walks (B of C = A·B, K x N).
* ``tile_window``: the element ``(first_row, first_col)`` onwards (C).
* ``strided_window``: a tensor of any strides (attention's Q, K, V, O and LSE of one (batch, head)):
  the base moves by a sum of index x stride products in 64 bits, the records cover the rows left.

A window of a loop over the reduction dimension may start ``pad`` elements (``row_window``) or rows
(``column_window``) early: the leading partial K-tile, whose lanes before the matrix load zeros
(``GlobalToLds.first_tile``), so that every later tile is whole and the hot loop has no checks.
``LeadingPad`` is that shift in bytes, computed where first needed and shared by the windows that
shift by the same amount.

All arithmetic is 32-bit SALU (every operand below 2 GiB); ``tmp`` is two scratch SGPRs.
"""

from __future__ import annotations

from isagen.isa.operands import Reg
from isagen.tiles.buffer import BufferResource


def _log2(elem_bytes: int) -> int:
    if elem_bytes not in (1, 2, 4, 8):
        raise ValueError(f"element size {elem_bytes}: windows know 1, 2, 4 and 8 bytes")
    return elem_bytes.bit_length() - 1


class LeadingPad:
    """``pad`` elements along a row (an SGPR) as bytes, in ``reg``: emitted by the first window that
    shifts by it, reused by the others (A and B of C = A·Bᵀ share one K)."""

    def __init__(self, k, pad: Reg, elem_bytes: int, reg: Reg):
        self.k, self.pad, self.elem_bytes, self.reg = k, pad, elem_bytes, reg
        self.ready = False

    def bytes(self) -> Reg:
        if not self.ready:
            self.k.s_lshl_b32(self.reg, self.pad, _log2(self.elem_bytes),
                              comment=f"pad * {self.elem_bytes} bytes")
            self.ready = True
        return self.reg


def row_window(k, rsrc: BufferResource, tmp: Reg, *, first_row: Reg, rows: Reg, row_elems: Reg,
               elem_bytes: int, pad: LeadingPad | None = None, explain: tuple[str, str] | None = None) -> None:
    """Aim ``rsrc`` at rows ``first_row..`` of a ``rows x row_elems`` matrix (back by ``pad`` along the
    row when given) and ``finish`` it.  ``explain``: how the listing names the first row and the row
    length, to comment each step with (None: a second window of the same shape, whose steps the
    first one's comments already explain)."""
    t, shift = tmp, _log2(elem_bytes)
    k.s_mul_i32(t[0], first_row, row_elems)
    k.s_lshl_b32(t[0], t[0], shift, comment=f"{explain[0]} * {explain[1]} * {elem_bytes}: bytes to this tile's "
                                            f"first row of {rsrc.name}" if explain else None)
    rsrc.add_base(t[0], f"{rsrc.name}: this tile's rows")
    if pad is not None:
        rsrc.sub_base(pad.bytes(), f"{rsrc.name}: back by the leading pad")
    k.s_sub_u32(t[0], rows, first_row)
    k.s_mul_i32(t[0], t[0], row_elems)
    k.s_lshl_b32(t[0], t[0], shift, comment=f"bytes of {rsrc.name} from this tile's first row" if explain else None)
    if pad is not None:
        k.s_add_u32(t[0], t[0], pad.bytes(), comment="+ the pad: bytes from the shifted base" if explain else None)
    rsrc.finish(t[0])


def column_window(k, rsrc: BufferResource, tmp: Reg, *, first_col: Reg, rows: Reg, row_bytes: Reg,
                  elem_bytes: int, pad_rows: Reg | None = None) -> None:
    """Aim ``rsrc`` at columns ``first_col..`` of a ``rows``-row matrix with ``row_bytes`` per row (back
    by ``pad_rows`` rows when given) and ``finish`` it: the loop walks its rows, a tile's columns are
    fixed."""
    t, shift = tmp, _log2(elem_bytes)
    k.s_lshl_b32(t[0], first_col, shift)
    rsrc.add_base(t[0], f"{rsrc.name}: this tile's first column")
    if pad_rows is not None:
        k.s_mul_i32(t[1], pad_rows, row_bytes, comment=f"pad rows of {rsrc.name} in bytes")
        rsrc.sub_base(t[1], f"{rsrc.name}: back by the leading pad")
    k.s_mul_i32(t[0], rows, row_bytes, comment=f"bytes of {rsrc.name}")
    if pad_rows is not None:
        k.s_add_u32(t[0], t[0], t[1])
    k.s_lshl_b32(t[1], first_col, shift)
    k.s_sub_u32(t[0], t[0], t[1], comment=f"bytes from the shifted base to the end of {rsrc.name}")
    rsrc.finish(t[0])


def tile_window(k, rsrc: BufferResource, tmp: Reg, *, first_row: Reg, first_col: Reg, rows: Reg,
                row_elems: Reg, elem_bytes: int) -> None:
    """Aim ``rsrc`` at element ``(first_row, first_col)`` of a ``rows x row_elems`` matrix and ``finish``
    it: the window of an output tile (rows past the end are dropped by the range check; columns past
    the end would wrap into the next row, so stores mask them per lane)."""
    t, shift = tmp, _log2(elem_bytes)
    k.s_mul_i32(t[0], first_row, row_elems)
    k.s_add_u32(t[0], t[0], first_col)
    k.s_lshl_b32(t[0], t[0], shift)
    rsrc.add_base(t[0], f"{rsrc.name}: this tile's first element")
    k.s_sub_u32(t[0], rows, first_row)
    k.s_mul_i32(t[0], t[0], row_elems)
    k.s_sub_u32(t[0], t[0], first_col)
    k.s_lshl_b32(t[0], t[0], shift, comment=f"bytes of {rsrc.name} from this tile's first element")
    rsrc.finish(t[0])


def strided_window(k, rsrc: BufferResource, terms, *, rows_left: Reg, row_stride: Reg, elem_bytes: int,
                   why: str) -> None:
    """Aim ``rsrc`` at element ``sum(index * stride for index, stride in terms)`` of its tensor (SGPR
    pairs; the sum in 64 bits, so a tensor may pass 4 GiB) and ``finish`` it with ``rows_left *
    row_stride`` elements of records (below 2 GiB: the caller's contract checks it).  ``why`` names the
    window in the comments."""
    shift = _log2(elem_bytes)
    acc = k.sgpr(2, "offset64", align=2)
    t = k.sgpr(2, "product64", align=2)
    k.s_mov_b64(acc, 0)
    for index, stride in terms:
        k.s_mul_i32(t[0], index, stride)
        k.s_mul_hi_u32(t[1], index, stride)
        k.s_add_u32(acc[0], acc[0], t[0])
        k.s_addc_u32(acc[1], acc[1], t[1])
    k.s_lshl_b64(acc, acc, shift, comment=f"{why}: elements -> bytes")
    k.s_add_u32(rsrc.regs[0], rsrc.regs[0], acc[0], comment=f"{why}: base")
    k.s_addc_u32(rsrc.regs[1], rsrc.regs[1], acc[1])
    k.s_mul_i32(t[0], rows_left, row_stride)
    k.s_lshl_b32(t[0], t[0], shift, comment=f"{why}: bytes of the rows from here")
    rsrc.finish(t[0])
    k.free(acc, t)
