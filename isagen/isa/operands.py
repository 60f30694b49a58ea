"""Operand values: registers (as slices), special registers, constants, labels, source modifiers.

A register operand is a ``Reg``: a class (``v`` VGPR, ``a`` AGPR, ``s`` SGPR), a first physical
index and a dword count.  Slicing is relative to the range, inclusive-exclusive like Python::

    acc = Reg("a", 0, 16)      # a[0:15]
    acc[4:8]                   # a[4:7]
    acc[3]                     # a3

A register that came from a named allocation carries the allocation's ``.set`` symbol, so it
renders as ``v[vgpr_x+4:vgpr_x+7]`` and the emitted assembly names what it holds.  The physical
index is always known as well; analyses (hazards, waits, liveness) work on ``keys()``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from ..errors import ISAError

REG_CLASSES = ("v", "a", "s")


@dataclass(frozen=True)
class Reg:
    cls: str                 # "v" | "a" | "s"
    index: int               # first physical register
    count: int = 1
    sym: str | None = None   # .set symbol of the allocation this range belongs to
    sym_base: int = 0        # physical index the symbol stands for

    def __post_init__(self):
        if self.cls not in REG_CLASSES:
            raise ISAError(f"unknown register class '{self.cls}'")
        if self.count < 1 or self.index < 0:
            raise ISAError(f"bad register range {self.cls}[{self.index}:{self.index + self.count - 1}]")

    # ---------------------------------------------------------------- slicing
    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key) -> "Reg":
        if isinstance(key, slice):
            if key.step not in (None, 1):
                raise ISAError(f"register slices take no step: {self}[{key}]")
            lo, hi, _ = key.indices(self.count)
            if hi <= lo:
                raise ISAError(f"empty register slice [{key.start}:{key.stop}] of {self}")
            return Reg(self.cls, self.index + lo, hi - lo, self.sym, self.sym_base)
        if isinstance(key, int):
            if key < 0:
                key += self.count
            if not 0 <= key < self.count:
                raise ISAError(f"register index {key} outside {self} ({self.count} registers)")
            return Reg(self.cls, self.index + key, 1, self.sym, self.sym_base)
        raise ISAError(f"registers are indexed by int or slice, not {type(key).__name__}")

    def split(self, width: int) -> list["Reg"]:
        """Consecutive pieces of ``width`` registers: ``acc.split(4)`` gives the 4-register tiles."""
        if self.count % width:
            raise ISAError(f"{self} ({self.count} registers) does not split into pieces of {width}")
        return [self[i:i + width] for i in range(0, self.count, width)]

    @property
    def last(self) -> int:
        return self.index + self.count - 1

    def keys(self) -> list[tuple[str, int]]:
        """One (class, index) key per dword, for dataflow analyses."""
        return [(self.cls, i) for i in range(self.index, self.index + self.count)]

    # ---------------------------------------------------------------- rendering
    def physical(self) -> str:
        if self.count == 1:
            return f"{self.cls}{self.index}"
        return f"{self.cls}[{self.index}:{self.last}]"

    def __str__(self) -> str:
        if self.sym is None:
            return self.physical()
        lo = self.index - self.sym_base
        first = self.sym if lo == 0 else f"{self.sym}+{lo}"
        if self.count == 1:
            return f"{self.cls}[{first}]"
        return f"{self.cls}[{first}:{self.sym}+{lo + self.count - 1}]"

    def __repr__(self) -> str:
        return f"Reg({self.physical()}{', ' + self.sym if self.sym else ''})"


def v(index: int, count: int = 1) -> Reg:
    return Reg("v", index, count)


def a(index: int, count: int = 1) -> Reg:
    return Reg("a", index, count)


def s(index: int, count: int = 1) -> Reg:
    return Reg("s", index, count)


class _RegFactory:
    """``V[4:7]``-style physical register literals: ``V[4:8]`` is v[4:7] (Python slice end)."""

    def __init__(self, cls: str):
        self.cls = cls

    def __getitem__(self, key) -> Reg:
        if isinstance(key, slice):
            return Reg(self.cls, key.start, key.stop - key.start)
        return Reg(self.cls, key, 1)


V, A, S = _RegFactory("v"), _RegFactory("a"), _RegFactory("s")


@dataclass(frozen=True)
class Special:
    """A named hardware register: vcc, exec, m0, scc and their halves."""

    name: str

    _PARTS = {
        "vcc": ("vcc_lo", "vcc_hi"), "exec": ("exec_lo", "exec_hi"),
        "vcc_lo": ("vcc_lo",), "vcc_hi": ("vcc_hi",), "exec_lo": ("exec_lo",), "exec_hi": ("exec_hi",),
        "m0": ("m0",), "scc": ("scc",),
    }

    def __post_init__(self):
        if self.name not in self._PARTS:
            raise ISAError(f"unknown special register '{self.name}'")

    @property
    def count(self) -> int:
        return len(self._PARTS[self.name]) if self.name != "scc" else 1

    def keys(self) -> list[tuple[str, int]]:
        return [(part, 0) for part in self._PARTS[self.name]]

    def __str__(self) -> str:
        return self.name


VCC, EXEC, M0, SCC = Special("vcc"), Special("exec"), Special("m0"), Special("scc")
VCC_LO, VCC_HI, EXEC_LO, EXEC_HI = Special("vcc_lo"), Special("vcc_hi"), Special("exec_lo"), Special("exec_hi")


@dataclass(frozen=True)
class Label:
    """A branch target.  Local labels (``.L`` prefix) keep the symbol table clean."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Mod:
    """Source modifiers for VOP3 operands: ``neg(v1)`` renders ``-v1``, ``abs_(v1)`` ``|v1|``."""

    reg: Reg | Special
    neg: bool = False
    abs: bool = False

    def keys(self):
        return self.reg.keys()

    @property
    def count(self):
        return self.reg.count

    def __str__(self) -> str:
        body = f"|{self.reg}|" if self.abs else str(self.reg)
        return f"-{body}" if self.neg else body


def neg(x) -> Mod:
    return Mod(x.reg, not x.neg, x.abs) if isinstance(x, Mod) else Mod(x, neg=True)


def abs_(x) -> Mod:
    return Mod(x.reg, x.neg, True) if isinstance(x, Mod) else Mod(x, abs=True)


# ------------------------------------------------------------------------- constants
_INLINE_FLOATS = (0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0)
INV_2PI = 0.15915494309189532


def is_inline_int(value: int) -> bool:
    return -16 <= value <= 64


def is_inline_float(value: float) -> bool:
    return value in _INLINE_FLOATS or value == 0.0 or math.isclose(value, INV_2PI, rel_tol=0, abs_tol=1e-9)


def is_inline_constant(value) -> bool:
    """True if the hardware encodes ``value`` in the instruction word (no literal dword)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return is_inline_int(value)
    if isinstance(value, float):
        return is_inline_float(value)
    return False


def render_constant(value) -> str:
    """LLVM syntax for an integer or float constant.

    Integers outside the inline range render in hex (LLVM's own style for literals); floats that are
    not inline constants render as the hex of their fp32 bits, so no decimal rounding can creep in.
    """
    if isinstance(value, bool):
        raise ISAError("booleans are not instruction constants")
    if isinstance(value, int):
        if is_inline_int(value):
            return str(value)
        if not -(1 << 31) <= value < (1 << 32):
            raise ISAError(f"constant {value} does not fit in 32 bits")
        return hex(value & 0xFFFFFFFF)
    if isinstance(value, float):
        if value == 0.0:
            return "0"
        if value in _INLINE_FLOATS:
            return repr(value)
        if math.isclose(value, INV_2PI, abs_tol=1e-9):
            return "0.15915494"
        return hex(struct.unpack("<I", struct.pack("<f", value))[0])
    raise ISAError(f"not a constant: {value!r}")


def operand_keys(op) -> list[tuple[str, int]]:
    """Register keys an operand value touches (empty for constants and labels)."""
    keys = getattr(op, "keys", None)
    return keys() if keys else []
