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
from typing import Any

from isagen.errors import ISAError
from isagen.records import record, value_methods

REG_CLASSES = ("v", "a", "s")


@value_methods
@record(frozen=True, repr=False, eq=False)
class Reg:
    """A register or a range of registers (``count`` from ``index``) of one file: VGPR, AGPR or SGPR."""

    cls: str                 # "v" | "a" | "s"
    index: int               # first physical register
    count: int = 1
    sym: str | None = None   # .set symbol of the allocation this range belongs to
    sym_base: int = 0        # physical index the symbol stands for

    def __post_init__(self) -> None:
        if self.cls not in REG_CLASSES:
            raise ISAError(f"unknown register class '{self.cls}'")
        if self.count < 1 or self.index < 0:
            raise ISAError(f"bad register range {self.cls}[{self.index}:{self.index + self.count - 1}]")

    # ---------------------------------------------------------------- slicing
    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: int | slice) -> Reg:
        if isinstance(key, slice):
            if key.step not in (None, 1):
                raise ISAError(f"register slices take no step: {self}[{key}]")
            lo, hi, _ = key.indices(self.count)
            if hi <= lo:
                raise ISAError(f"empty register slice [{key.start}:{key.stop}] of {self}")
            return checked_reg(self.cls, self.index + lo, hi - lo, self.sym, self.sym_base)
        if isinstance(key, int):
            if key < 0:
                key += self.count
            if not 0 <= key < self.count:
                raise ISAError(f"register index {key} outside {self} ({self.count} registers)")
            return checked_reg(self.cls, self.index + key, 1, self.sym, self.sym_base)
        raise ISAError(f"registers are indexed by int or slice, not {type(key).__name__}")

    def split(self, width: int) -> list[Reg]:
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


_new = object.__new__
_set = object.__setattr__


def checked_reg(cls: str, index: int, count: int, sym: str | None, sym_base: int) -> Reg:
    """``Reg(cls, index, count, sym, sym_base)`` for fields already known to be valid (a slice of a
    valid range, a range an allocator found free): the same value, made without ``__post_init__``'s
    checks (a kernel slices registers thousands of times).  The fields are set one by one as
    ``__init__`` sets them (touching ``__dict__`` would make every later attribute read slower)."""
    r = _new(Reg)
    _set(r, "cls", cls)
    _set(r, "index", index)
    _set(r, "count", count)
    _set(r, "sym", sym)
    _set(r, "sym_base", sym_base)
    return r


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

    def __getitem__(self, key: int | slice) -> Reg:
        if isinstance(key, slice):
            return Reg(self.cls, key.start, key.stop - key.start)
        return Reg(self.cls, key, 1)


V, A, S = _RegFactory("v"), _RegFactory("a"), _RegFactory("s")


@value_methods
@record(frozen=True, repr=False, eq=False)
class Special:
    """A named hardware register: vcc, exec, m0, scc and their halves."""

    name: str

    _PARTS = {
        "vcc": ("vcc_lo", "vcc_hi"), "exec": ("exec_lo", "exec_hi"),
        "vcc_lo": ("vcc_lo",), "vcc_hi": ("vcc_hi",), "exec_lo": ("exec_lo",), "exec_hi": ("exec_hi",),
        "m0": ("m0",), "scc": ("scc",),
    }

    def __post_init__(self) -> None:
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


@value_methods
@record(frozen=True, repr=False, eq=False)
class Label:
    """A branch target.  Local labels (``.L`` prefix) keep the symbol table clean."""

    name: str

    def __str__(self) -> str:
        return self.name


@value_methods
@record(frozen=True, repr=False, eq=False)
class Mod:
    """Source modifiers for VOP3 operands: ``neg(v1)`` renders ``-v1``, ``abs_(v1)`` ``|v1|``."""

    reg: Reg | Special
    neg: bool = False
    abs: bool = False

    def keys(self) -> list[tuple[str, int]]:
        return self.reg.keys()

    @property
    def count(self) -> int:
        return self.reg.count

    def __str__(self) -> str:
        body = f"|{self.reg}|" if self.abs else str(self.reg)
        return f"-{body}" if self.neg else body


def neg(x: Reg | Special | Mod) -> Mod:
    return Mod(x.reg, not x.neg, x.abs) if isinstance(x, Mod) else Mod(x, neg=True)


def abs_(x: Reg | Special | Mod) -> Mod:
    return Mod(x.reg, x.neg, True) if isinstance(x, Mod) else Mod(x, abs=True)


# ------------------------------------------------------------------------- "off"
class _Off:
    """The ``off`` operand: no VGPR address (MUBUF ``vaddr`` without offen/idxen) or no SGPR base
    (global ``saddr``).  Touches no register.  Use ``OFF`` (or the string ``"off"``)."""

    _instance: _Off | None = None

    def __new__(cls) -> _Off:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def keys(self) -> list[tuple[str, int]]:
        return []

    count = 0

    def __str__(self) -> str:
        return "off"

    def __repr__(self) -> str:
        return "OFF"


OFF = _Off()


# ------------------------------------------------------------------------- constants
# The hardware's inline constants (no literal dword): integers -16..64 and these fp values, encoded
# as the bit pattern of the operand's float type.  -0.0 is *not* one of them (it needs a literal).
_INLINE_FLOATS = (0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0)
INV_2PI = 0.15915494309189532
_INV_2PI_F32_BITS = 0x3E22F983


def f32_bits(value: float) -> int:
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    return bits


def f16_bits(value: float) -> int:
    bits: int = struct.unpack("<H", struct.pack("<e", value))[0]
    return bits


_INLINE_F32_BITS = {**{f32_bits(x): repr(x) for x in _INLINE_FLOATS}, _INV_2PI_F32_BITS: "0.15915494"}


def is_inline_int(value: int, bits: int = 32) -> bool:
    """-16..64; for a 32-bit operand also 0xfffffff0..0xffffffff (the bits of -16..-1) and the fp32 bits
    of the inline floats (0x3f800000 is 1.0): the hardware supplies the same 32 bits either way."""
    return -16 <= value <= 64 or (bits == 32 and (0xFFFFFFF0 <= value <= 0xFFFFFFFF
                                                  or value & 0xFFFFFFFF in _INLINE_F32_BITS))


def is_inline_float(value: float) -> bool:
    """True for +0.0, ±0.5, ±1, ±2, ±4 and 1/(2π) (the fp32 value whose bits are 0x3e22f983)."""
    if value == 0.0:
        return math.copysign(1.0, value) > 0
    if value in _INLINE_FLOATS:
        return True
    try:
        return f32_bits(value) == _INV_2PI_F32_BITS
    except (OverflowError, struct.error):
        return False


def is_inline_constant(value: object, bits: int = 32) -> bool:
    """True if the hardware encodes ``value`` in the instruction word (no literal dword) for an operand
    of ``bits`` (32, or 64 for a register-pair operand)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return is_inline_int(value, bits)
    if isinstance(value, float):
        return is_inline_float(value)
    return False


def render_constant(value: object, ftype: str = "f32") -> str:
    """LLVM syntax for an integer or float constant.

    Integers outside the inline range render in hex (LLVM's own style for literals).  Floats that
    are not inline constants render as the hex of their bits in the operand's float type
    (``ftype``: f32, or f16 for 16-bit float operands), so no decimal rounding can creep in.  For
    64-bit operands (``ftype`` f64) 1/(2π) is spelled with double precision, as LLVM requires.
    """
    if isinstance(value, bool):
        raise ISAError("booleans are not instruction constants")
    if isinstance(value, int):
        if is_inline_int(value, 64 if ftype == "f64" else 32):
            if value & 0xFFFFFFFF in _INLINE_F32_BITS and not -16 <= value <= 64:
                return _INLINE_F32_BITS[value & 0xFFFFFFFF]            # 0x3f800000 is the inline 1.0
            return str(value if value <= 64 else value - (1 << 32))   # 0xffffffff is the inline -1
        if not -(1 << 31) <= value < (1 << 32):
            raise ISAError(f"constant {value} does not fit in 32 bits")
        return hex(value & 0xFFFFFFFF)
    if isinstance(value, float):
        if is_inline_float(value):
            if value == 0.0:
                return "0"
            if value in _INLINE_FLOATS:
                return repr(value)
            return "0.15915494309189532" if ftype == "f64" else "0.15915494"
        try:
            return hex(f16_bits(value) if ftype == "f16" else f32_bits(value))
        except (OverflowError, struct.error):
            raise ISAError(f"constant {value!r} does not fit in {ftype}") from None
    raise ISAError(f"not a constant: {value!r}")


def operand_keys(op: object) -> list[tuple[str, int]]:
    """Register keys an operand value touches (empty for constants and labels)."""
    keys = getattr(op, "keys", None)
    found: list[tuple[str, int]] = keys() if keys else []
    return found


# ------------------------------------------------------------------------- ds_swizzle offsets
# ds_swizzle_b32's 16-bit offset selects a lane pattern.  Bit 15 set: QUAD_PERM (bits [7:0] give the
# source lane of each lane within a group of 4).  Bit 15 clear: BITMASK mode on the 5-bit lane id
# within a group of 32: src = ((lane & and_mask) | or_mask) ^ xor_mask, masks at [4:0], [9:5],
# [14:10].  LLVM spells the common patterns SWAP, REVERSE, BROADCAST and BITMASK_PERM.
_SWIZZLE_MODES = ("QUAD_PERM", "BITMASK_PERM", "SWAP", "REVERSE", "BROADCAST")


def swizzle(mode: str, *args: Any) -> int:
    """The ds_swizzle_b32 ``offset`` for a named pattern, as LLVM's ``swizzle(...)`` macro defines it:

    ``swizzle("QUAD_PERM", l0, l1, l2, l3)``  each lane of a quad reads lane ``l<i>`` of the quad;
    ``swizzle("SWAP", n)``                    swap groups of n lanes (n = 1, 2, 4, 8, 16);
    ``swizzle("REVERSE", n)``                 reverse lanes within groups of n (2, 4, 8, 16, 32);
    ``swizzle("BROADCAST", n, lane)``         lane ``lane`` of each group of n lanes to the group;
    ``swizzle("BITMASK_PERM", "01pip")``      per bit of the lane id (MSB first): 0 force 0,
                                              1 force 1, p preserve, i invert.
    """
    where = f"swizzle({mode}{''.join(', ' + repr(a) for a in args)})"
    mode = str(mode).upper()
    if mode not in _SWIZZLE_MODES:
        raise ISAError(f"{where}: unknown mode (use one of {', '.join(_SWIZZLE_MODES)})")
    if mode == "QUAD_PERM":
        if len(args) != 4 or any(not isinstance(x, int) or isinstance(x, bool) or not 0 <= x <= 3 for x in args):
            raise ISAError(f"{where}: QUAD_PERM takes 4 lane numbers 0..3")
        quad: int = 0x8000 | sum(x << (2 * i) for i, x in enumerate(args))
        return quad
    if mode == "BITMASK_PERM":
        if len(args) != 1 or not isinstance(args[0], str) or len(args[0]) != 5 or set(args[0]) - set("01pi"):
            raise ISAError(f"{where}: BITMASK_PERM takes a 5-character string of 0, 1, p, i")
        and_mask = or_mask = xor_mask = 0
        for i, c in enumerate(args[0]):
            bit = 1 << (4 - i)
            if c == "1":
                or_mask |= bit
            elif c == "p":
                and_mask |= bit
            elif c == "i":
                and_mask |= bit
                xor_mask |= bit
        return and_mask | or_mask << 5 | xor_mask << 10
    if not args or any(not isinstance(x, int) or isinstance(x, bool) for x in args):
        raise ISAError(f"{where}: {mode} takes integer arguments")
    n: int = args[0]
    if mode == "SWAP":
        if len(args) != 1 or n not in (1, 2, 4, 8, 16):
            raise ISAError(f"{where}: SWAP takes a group size of 1, 2, 4, 8 or 16")
        return 0x1F | n << 10
    if mode == "REVERSE":
        if len(args) != 1 or n not in (2, 4, 8, 16, 32):
            raise ISAError(f"{where}: REVERSE takes a group size of 2, 4, 8, 16 or 32")
        return 0x1F | (n - 1) << 10
    if len(args) != 2 or n not in (2, 4, 8, 16, 32) or not 0 <= args[1] < n:
        raise ISAError(f"{where}: BROADCAST takes a group size of 2..32 (power of two) and a lane below it")
    lane: int = args[1]
    return (0x20 - n) | lane << 5


def canonical_swizzle(offset: int) -> int:
    """The same lane pattern with LLVM's canonical masks (what its ``swizzle(...)`` text parses to).

    In BITMASK mode a lane-id bit that ``and_mask`` clears, or ``or_mask`` forces, is a constant; LLVM's
    printer writes it as ``0``/``1``, which parses back as or_mask only.  Normalising here makes the
    rendered text round-trip to the same 16 bits.  QUAD_PERM offsets are returned unchanged."""
    if offset & 0x8000:
        return offset
    and_mask, or_mask, xor_mask = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    keep = and_mask & ~or_mask & 0x1F                  # bits that follow the lane id
    const = ((or_mask ^ xor_mask) & ~keep) & 0x1F      # bits forced to a constant
    return keep | const << 5 | (xor_mask & keep) << 10


def swizzle_text(offset: int) -> str:
    """LLVM's spelling of a ds_swizzle_b32 offset (what its printer writes after ``offset:``)."""
    if offset & 0xFF00 == 0x8000:
        return "swizzle(QUAD_PERM," + ",".join(str((offset >> (2 * i)) & 3) for i in range(4)) + ")"
    if offset & 0x8000:                  # bit 15 with bits [14:8] set: no named pattern
        return str(offset)
    and_mask, or_mask, xor_mask = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    if and_mask == 0x1F and or_mask == 0 and xor_mask and xor_mask & (xor_mask - 1) == 0:
        return f"swizzle(SWAP,{xor_mask})"
    if and_mask == 0x1F and or_mask == 0 and xor_mask and (xor_mask + 1) & xor_mask == 0:
        return f"swizzle(REVERSE,{xor_mask + 1})"
    group = 0x20 - and_mask
    if group > 1 and group & (group - 1) == 0 and or_mask < group and xor_mask == 0:
        return f"swizzle(BROADCAST,{group},{or_mask})"
    chars = []
    for i in range(4, -1, -1):           # LLVM prints what each lane-id bit becomes, MSB first
        bit = 1 << i
        if and_mask & bit and not or_mask & bit:
            chars.append("i" if xor_mask & bit else "p")
        else:
            chars.append("1" if bool(or_mask & bit) != bool(xor_mask & bit) else "0")
    return f'swizzle(BITMASK_PERM,"{"".join(chars)}")'
