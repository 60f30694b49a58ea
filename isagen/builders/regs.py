"""Register allocation: one pool per class (VGPR, AGPR, SGPR) with named, aligned check-out.

Every allocation has a name (it becomes the ``.set`` symbol in the emitted assembly and the label in
register reports), an alignment, and a lifetime: either it is freed explicitly (``free``), or it is
a scoped temporary (``with pool.scoped(...)``), or it is declared ``kernel=True`` and lives to the
end.  ``check_leaks()`` at kernel end reports anything else still held.

``scratch=True`` marks an allocation whose name says nothing about the value it holds: the short-lived
intermediates that code generators (lane expressions, divisions) take by the hundred.  It gets no
``.set`` symbol (its registers render physically, next to the comment of the instruction that computes
them); reports still list it under its name.

Overflow fails loudly: the error lists what is live in that class, largest first, so the kernel
author sees where the registers went.  ``peak`` is the high-water mark (one past the highest register
ever handed out), which is what the kernel descriptor must declare.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator

from isagen.errors import AllocationError
from isagen.isa.operands import Reg, checked_reg
from isagen.records import record, value_methods

_SYM_PREFIX = {"v": "vgpr_", "a": "agpr_", "s": "sgpr_"}
_CLASS_NAME = {"v": "VGPR", "a": "AGPR", "s": "SGPR"}


@value_methods
@record(repr=False, eq=False)
class Allocation:
    """One check-out of registers from a pool: where, when and until when."""

    name: str
    reg: Reg
    kernel: bool          # lives to the end of the kernel (exempt from the leak check)
    serial: int           # order of check-out
    allocated_at: int = 0             # program position of the check-out
    freed_at: int | None = None       # program position of the free (None: live to the end)
    scratch: bool = False             # an anonymous intermediate: no .set symbol, rendered physically

    @property
    def cls(self) -> str:
        return self.reg.cls


class RegisterPool:
    """The registers of one class, from 0 to ``limit``-1."""

    def __init__(self, cls: str, limit: int):
        self.cls = cls
        self.limit = limit
        self.live: dict[int, Allocation] = {}          # first index -> allocation
        self.history: list[Allocation] = []
        self.peak = 0
        self._symbols: set[str] = set()
        self._used = 0                                  # bit i set: register i is checked out
        self._full = (1 << limit) - 1
        self._aligned: dict[int, int] = {}              # align -> bits at its multiples below the limit

    # ------------------------------------------------------------------ check-out
    def alloc(self, count: int, name: str, align: int = 1, kernel: bool = False,
              index: int | None = None, position: int = 0, scratch: bool = False) -> Reg:
        """Check out ``count`` consecutive registers aligned to ``align`` (lowest free range first),
        or exactly at ``index`` (for registers the hardware initialises, such as s[0:1]).
        ``position`` is where in the program the allocation happens (for reports); ``scratch``: no
        ``.set`` symbol (see the module docstring)."""
        if count < 1:
            raise AllocationError(f"{name}: cannot allocate {count} {_CLASS_NAME[self.cls]}s")
        if align < 1 or align & (align - 1):
            raise AllocationError(f"{name}: alignment {align} is not a power of two")
        if index is not None:
            start = index
            if start >= 0 and (start + count > self.limit or self._used >> start & ((1 << count) - 1)):
                raise AllocationError(f"{name}: {self._range(start, count)} is not free "
                                      f"({self.describe_live()})")
        else:
            if count == 1 and align == 1:          # _find's first case, inline (most allocations)
                free = ~self._used & self._full
                found = (free & -free).bit_length() - 1 if free else None
            else:
                found = self._find(count, align)
            if found is None:
                raise AllocationError(
                    f"out of {_CLASS_NAME[self.cls]}s allocating '{name}' ({count} aligned to {align}; "
                    f"limit {self.limit}, {self.free_count()} free but fragmented or too few); "
                    f"live: {self.describe_live()}")
            start = found
        sym = None if scratch else self._symbol(name)
        if start >= 0:          # a free range of this pool's class, count >= 1: a valid Reg as it is
            reg = checked_reg(self.cls, start, count, sym, start if sym else 0)
        else:
            reg = Reg(self.cls, start, count, sym, start if sym else 0)      # a negative index fails here
        alloc = Allocation(name, reg, kernel, len(self.history), position, None, scratch)
        self._used |= ((1 << count) - 1) << start
        self.live[start] = alloc
        self.history.append(alloc)
        if start + count > self.peak:
            self.peak = start + count
        return reg

    def free(self, reg: Reg, position: int | None = None) -> None:
        alloc = self.live.get(reg.index)
        if alloc is None or alloc.reg.count != reg.count:
            raise AllocationError(f"freeing {reg.physical()} which is not a live {_CLASS_NAME[self.cls]} allocation")
        self._used &= ~(((1 << reg.count) - 1) << reg.index)
        del self.live[reg.index]
        alloc.freed_at = position

    @contextlib.contextmanager
    def scoped(self, count: int, name: str, align: int = 1,
               position: Callable[[], int] = lambda: 0) -> Iterator[Reg]:
        """A temporary: ``with pool.scoped(2, "addr") as tmp: ...`` frees it on exit."""
        reg = self.alloc(count, name, align, position=position())
        try:
            yield reg
        finally:
            if reg.index in self.live:
                self.free(reg, position())

    # ------------------------------------------------------------------ queries
    def free_count(self) -> int:
        return self.limit - self._used.bit_count()

    def leaks(self) -> list[Allocation]:
        return [a for a in self.live.values() if not a.kernel]

    def describe_live(self) -> str:
        if not self.live:
            return "nothing"
        allocs = sorted(self.live.values(), key=lambda a: (-a.reg.count, a.reg.index))
        return ", ".join(f"{a.name}={a.reg.physical()}" for a in allocs)

    def map(self) -> str:
        """One character per register: '.' free, '#' in use (TensileLite-style picture)."""
        used = self._used
        return "".join("#" if used >> i & 1 else "." for i in range(max(self.peak, 1)))

    # ------------------------------------------------------------------ internals
    def _find(self, count: int, align: int) -> int | None:
        """The lowest ``align``-aligned start of ``count`` free registers, on bit masks: ``ok`` has bit
        ``p`` set where registers ``p .. p+width-1`` are all free (widened by doubling)."""
        free = ~self._used & self._full
        if count == 1 and align == 1:
            return (free & -free).bit_length() - 1 if free else None
        ok, width = free, 1
        while width < count:
            step = min(width, count - width)
            ok &= ok >> step
            width += step
        if align > 1:
            mask = self._aligned.get(align)
            if mask is None:
                mask = self._aligned[align] = sum(1 << i for i in range(0, self.limit, align))
            ok &= mask
        return (ok & -ok).bit_length() - 1 if ok else None

    def _symbol(self, name: str) -> str:
        base = _SYM_PREFIX[self.cls] + _symbol_text(name)
        sym, n = base, 1
        while sym in self._symbols:
            n += 1
            sym = f"{base}_{n}"
        self._symbols.add(sym)
        return sym

    def _range(self, start: int, count: int) -> str:
        return Reg(self.cls, start, count).physical()


@functools.lru_cache(maxsize=4096)
def _symbol_text(name: str) -> str:
    """An allocation's name as symbol characters (kernels reuse a few hundred names)."""
    return re.sub(r"\W", "_", name)


def default_align(cls: str, count: int) -> int:
    """Alignment the ISA requires for a tuple of ``count`` registers of class ``cls`` (gfx90a+)."""
    if cls == "s":
        return 1 if count == 1 else (2 if count == 2 else 4)
    return 2 if count >= 2 else 1
