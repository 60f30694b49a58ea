"""LDS tile layouts: rows of contiguous elements, with an XOR swizzle of fixed-size units.

A tile of ``rows`` rows of ``row_bytes`` bytes is stored row after row; inside a row, the
``unit``-byte pieces (16 bytes: one ``ds_read_b128``; 8 bytes: one ``ds_read_b64``) are permuted by
XOR with a key that depends on the row only::

    physical(row, unit) = row * row_bytes + (unit ^ key(row)) * unit_bytes

``key(row)`` is a GF(2)-linear function of the row's bits (``Swizzle``: a few "take bits, shift them"
terms), so it is cheap to compute in VALU and XOR is its own inverse (the same formula maps a
physical position back to its logical one).

LDS-DMA (``buffer_load ... lds``) writes lane ``l`` at ``M0 + l*width``: the LDS position of every lane
is fixed, so the swizzle is realised on the *global* side: the lane writing physical position ``p``
loads the global element that ``logical(p)`` names (``dma_coords``).

Which key?  The reads a kernel issues decide it: ``choose_swizzle`` tries candidate keys, simplest
first, and keeps the first one under which every given access is free of bank conflicts (analysed by
``isagen.checks.lds_banks`` with the target's phase rules).  Tile layouts thus carry their own proof.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from isagen.checks import lds_banks
from isagen.errors import SpecError
from isagen.records import record, value_methods
from isagen.targets import get_target
from isagen.tiles import lanexpr as lx

if TYPE_CHECKING:
    import numpy as np


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise SpecError(f"{n} is not a power of two")
    return n.bit_length() - 1


@value_methods
@record(frozen=True, repr=False, eq=False)
class Swizzle:
    """``key(row) = XOR of ((row >> shift) & (2**bits - 1)) << to`` over the terms."""

    terms: tuple[tuple[int, int, int], ...] = ()

    def key(self, row):
        """The key of ``row`` (an int, a numpy array or a lane expression)."""
        out = 0
        for shift, bits, to in self.terms:
            part = ((row >> shift) & ((1 << bits) - 1)) << to
            out = part if isinstance(out, int) and out == 0 else out ^ part
        return out

    @property
    def max_key(self) -> int:
        return functools.reduce(lambda x, y: x | y, ((((1 << b) - 1) << t) for _, b, t in self.terms), 0)

    def describe(self) -> str:
        if not self.terms:
            return "none"
        parts = []
        for shift, bits, to in self.terms:
            p = f"(row >> {shift})" if shift else "row"
            p = f"({p} & {(1 << bits) - 1})"
            if to:
                p = f"({p} << {to})"
            parts.append(p)
        return " ^ ".join(parts)


NO_SWIZZLE = Swizzle()


@value_methods
@record(frozen=True, repr=False, eq=False)
class LdsLayout:
    """Where element ``(row, col)`` of a tile lives in LDS (byte offset from the tile's start)."""

    rows: int
    row_bytes: int           # a power of two
    unit: int                # bytes per swizzled unit (4, 8 or 16)
    swizzle: Swizzle = NO_SWIZZLE
    elem_bytes: int = 2

    def __post_init__(self):
        _log2(self.row_bytes)
        _log2(self.unit)
        if self.unit > self.row_bytes:
            raise SpecError(f"LDS layout: unit {self.unit} B is wider than a row ({self.row_bytes} B)")
        if self.swizzle.max_key >= self.units_per_row:
            raise SpecError(f"LDS layout: swizzle {self.swizzle.describe()} reaches unit {self.swizzle.max_key} "
                            f"but a row has {self.units_per_row}")

    @property
    def size(self) -> int:
        return self.rows * self.row_bytes

    @property
    def cols(self) -> int:
        return self.row_bytes // self.elem_bytes

    @property
    def units_per_row(self) -> int:
        return self.row_bytes // self.unit

    def with_swizzle(self, swizzle: Swizzle) -> LdsLayout:
        return replace(self, swizzle=swizzle)

    # ------------------------------------------------------------------ the mapping (ints, numpy, lane expressions)
    def offset(self, row, byte):
        """Physical byte offset of logical ``(row, byte-within-row)``."""
        lu, lr = _log2(self.unit), _log2(self.row_bytes)
        unit = byte >> lu
        within = byte & (self.unit - 1)
        key = self.swizzle.key(row)
        punit = unit if isinstance(key, int) and key == 0 else unit ^ key
        return (row << lr) + (punit << lu) + within

    def logical(self, p):
        """``(row, byte-within-row)`` stored at physical offset ``p`` (the inverse of ``offset``)."""
        lu, lr = _log2(self.unit), _log2(self.row_bytes)
        row = p >> lr
        punit = (p & (self.row_bytes - 1)) >> lu
        within = p & (self.unit - 1)
        key = self.swizzle.key(row)
        unit = punit if isinstance(key, int) and key == 0 else punit ^ key
        return row, (unit << lu) + within

    def element_offset(self, row, col):
        return self.offset(row, col * self.elem_bytes)


# ----------------------------------------------------------------------------------- accesses
@value_methods
@record(frozen=True, repr=False, eq=False)
class LdsAccess:
    """One DS (or LDS-DMA) instruction's lane addresses, for the bank analysis."""

    name: str                # what the instruction does ("A frag 0 slice 1", "B DMA block 3", ...)
    addresses: tuple         # 64 byte addresses
    width: int               # bytes per lane
    op: str                  # "read" | "write"
    instruction: str = ""    # the mnemonic

    def report(self, target: str) -> lds_banks.BankReport:
        return lds_banks.analyse(self.addresses, self.width, target, self.op)


def access(name: str, expr, width: int, op: str, env: dict | None = None, instruction: str = "") -> LdsAccess:
    return LdsAccess(name, lx.lane_values(expr, env or {}), width, op, instruction)


def conflicts(accesses, target: str) -> list[tuple[LdsAccess, lds_banks.BankReport]]:
    """The accesses that are not conflict-free, with their reports."""
    out = []
    for a in accesses:
        rep = a.report(target)
        if not rep.conflict_free:
            out.append((a, rep))
    return out


def swizzle_candidates(layout: LdsLayout, bank_bytes: int) -> list[Swizzle]:
    """Keys to try, simplest first: the classic ``row / rows-per-bank-window`` key, the row's low bits,
    scaled keys that move whole multi-unit segments, then every one- and two-term GF(2) key."""
    return list(_candidates(layout, bank_bytes))


def _candidates(layout: LdsLayout, bank_bytes: int) -> Iterator[Swizzle]:
    """``swizzle_candidates`` one at a time (a search that stops early makes only the keys it tries)."""
    upr = layout.units_per_row
    if upr == 1:
        yield NO_SWIZZLE
        return
    lu = _log2(upr)
    rw = max(1, bank_bytes // layout.row_bytes)
    lrw = _log2(rw)
    seen = set()

    def new(terms) -> bool:
        if terms in seen:
            return False
        seen.add(terms)
        return Swizzle(terms).max_key < upr

    first = [(), ((lrw, lu, 0),), ((0, lu, 0),)]
    if lu >= 2:
        first.append(((lrw, lu - 1, 0), (4, 1, lu - 1)))
        first.append(((0, lu - 1, 0), (4, 1, lu - 1)))
    for seg in (1, 2, 3):                      # keys that move groups of 2**seg units together
        for shift in (3, 0, 1, 2, 4):
            for bits in (1, 2, 3):
                if seg + bits <= lu:
                    first.append(((shift, bits, seg),))
        if seg + 3 <= lu:
            first.append(((0, 2, seg), (3, 1, seg + 2)))
            first.append(((0, 2, seg), (4, 1, seg + 2)))
    for terms in first:
        if new(terms):
            yield Swizzle(terms)
    singles = [(s, b, t) for b in range(1, lu + 1) for t in range(0, lu - b + 1) for s in range(0, 6)]
    for one in singles:
        if new((one,)):
            yield Swizzle((one,))
    for one in singles:
        for s2 in range(0, 6):
            for b2 in range(1, lu + 1):
                for t2 in range(0, lu - b2 + 1):
                    if (s2, b2, t2) != one and new((one, (s2, b2, t2))):
                        yield Swizzle((one, (s2, b2, t2)))


def conflict_free(addrs: np.ndarray, width: int, op: str, target: str) -> np.ndarray:
    """Vectorised ``lds_banks.analyse(...).conflict_free`` for many accesses: ``addrs`` is (R, 64);
    returns a bool per access (same phase rules; no two distinct dwords of a phase share a bank)."""
    import numpy as np

    addrs = np.asarray(addrs, np.int64).reshape(-1, 64)
    banks = get_target(target).lds_banks
    nw = (width + 3) // 4
    ok = np.ones(addrs.shape[0], bool)
    for group in lds_banks.phases(target, width, op):
        d = ((addrs[:, list(group)] >> 2)[:, :, None] + np.arange(nw)).reshape(addrs.shape[0], -1)
        key = np.sort((d % banks) << 32 | d, axis=1)
        clash = ((key[:, 1:] >> 32) == (key[:, :-1] >> 32)) & (key[:, 1:] != key[:, :-1])
        ok &= ~clash.any(axis=1)
    return ok


@value_methods
@record(frozen=True, repr=False, eq=False)
class Coords:
    """Logical coordinates of one access's 64 lanes (independent of the swizzle): ``rows`` and
    ``bytes`` are 64 ints each (tuples, as ``lanexpr.lane_values`` gives them, or int arrays)."""

    rows: tuple
    bytes: tuple
    base: int
    width: int
    op: str


def _lane_ints(v) -> tuple[int, ...]:
    if type(v) is tuple:
        return v
    return tuple(map(int, v.tolist() if hasattr(v, "tolist") else v))


def choose_swizzle(layout: LdsLayout, coords: list, target: str, bank_bytes: int) -> tuple[LdsLayout, list]:
    """The first candidate swizzle under which every access (``Coords``) is conflict-free.

    Returns ``(layout, [])``, or ``(best layout, [(index, BankReport), ...])`` naming the accesses that
    still conflict when no candidate is conflict-free (the caller decides whether that is an error).
    Pure Python (the generators call it; building does not load numpy): the swizzled offset of each
    lane, then the phases' banks, as ``LdsLayout.offset`` and ``conflict_free`` compute them."""
    kinds: dict = {}
    for i, c in enumerate(coords):
        kinds.setdefault((c.width, c.op), []).append(i)
    lanes = [(_lane_ints(c.rows), _lane_ints(c.bytes), int(c.base)) for c in coords]
    banks = get_target(target).lds_banks
    all_rows = sorted({r for rows, _, _ in lanes for r in rows})
    checks = [(width, tuple(lds_banks.phases(target, width, op)), idx) for (width, op), idx in kinds.items()]
    lu, lr = _log2(layout.unit), _log2(layout.row_bytes)
    um = layout.unit - 1

    def bad_accesses(cand: Swizzle, first_only: bool) -> list[int]:
        """The accesses (indices, in ``kinds`` order) that conflict under ``cand`` (only the first one
        with ``first_only``)."""
        key = {r: cand.key(r) for r in all_rows}
        bad = []
        for width, groups, idx in checks:
            for j in idx:
                rows, byts, base = lanes[j]
                addrs = [(r << lr) + ((((b >> lu) ^ key[r]) << lu) + (b & um)) + base for r, b in zip(rows, byts)]
                if not lds_banks.conflict_free_lanes(addrs, groups, width, banks):
                    bad.append(j)
                    if first_only:
                        return bad
        return bad

    for cand in _candidates(layout, bank_bytes):
        if not bad_accesses(cand, True):
            return layout.with_swizzle(cand), []
    best: tuple[LdsLayout, list[int]] | None = None       # the candidate with the fewest conflicting accesses
    for cand in _candidates(layout, bank_bytes):
        bad = bad_accesses(cand, False)
        if best is None or len(bad) < len(best[1]):
            best = (layout.with_swizzle(cand), bad)
    assert best is not None, "swizzle_candidates always offers NO_SWIZZLE, so the loop ran at least once"
    lay, bad = best
    reports = []
    for i in bad:
        rows, byts, base = lanes[i]
        offsets = tuple(lay.offset(r, b) + base for r, b in zip(rows, byts))
        reports.append((i, lds_banks.analyse(offsets, coords[i].width, target, coords[i].op)))
    return lay, reports
