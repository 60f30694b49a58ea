"""Kernel arguments: one ordered list that yields both the code object's ``.args`` metadata and the
host-side packing of the kernarg buffer.

    args = KernArgs()
    x = args.pointer("x", "f32", access="read_only")
    n = args.value("n", "i32")
    args.metadata()          # [{'.name': 'x', '.offset': 0, '.size': 8, '.value_kind': 'global_buffer', ...}, ...]
    args.pack(x=0x7f0000, n=1000)   # bytes, laid out exactly as the metadata says

Offsets follow the natural alignment of each argument (as clang lays out a struct), so a kernel built
here can be called from HIP C++ with a plain struct too.
"""

from __future__ import annotations

import struct
import sys

from isagen.errors import LaunchError, SpecError
from isagen.records import record, value_methods

# value dtypes: name -> (struct code, size, metadata .value_type)
VALUE_TYPES = {
    "i32": ("i", 4, "i32"), "u32": ("I", 4, "u32"), "i64": ("q", 8, "i64"), "u64": ("Q", 8, "u64"),
    "f32": ("f", 4, "f32"), "f64": ("d", 8, "f64"), "i16": ("h", 2, "i16"), "u16": ("H", 2, "u16"),
}
# element types a pointer may point to
ELEMENT_TYPES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i32": 4, "u32": 4, "i8": 1, "u8": 1,
                 "fp8": 1, "bf8": 1, "i64": 8, "u64": 8, "i16": 2, "u16": 2}
ACCESS = ("read_only", "write_only", "read_write")
_INT_RANGE = {"i16": (-(1 << 15), (1 << 15) - 1), "u16": (0, (1 << 16) - 1), "i32": (-(1 << 31), (1 << 31) - 1),
              "u32": (0, (1 << 32) - 1), "i64": (-(1 << 63), (1 << 63) - 1), "u64": (0, (1 << 64) - 1)}


@value_methods
@record(frozen=True, repr=False, eq=False)
class KernArg:
    """One explicit kernel argument: a pointer or a value, at ``offset`` in the kernarg segment."""

    name: str
    kind: str          # "pointer" | "value"
    dtype: str         # pointee type for pointers, value type for values
    offset: int
    size: int
    access: str | None = None   # pointers only

    @property
    def align(self) -> int:
        return self.size

    def metadata(self) -> dict:
        md = {".name": self.name, ".offset": self.offset, ".size": self.size}
        if self.kind == "pointer":
            md[".value_kind"] = "global_buffer"
            md[".address_space"] = "global"
            md[".actual_access"] = self.access
        else:
            md[".value_kind"] = "by_value"
        return md


class KernArgs:
    """The ordered explicit kernel arguments of one kernel."""

    def __init__(self) -> None:
        self.args: list[KernArg] = []
        self.size = 0

    def _add(self, name: str, kind: str, dtype: str, size: int, access: str | None) -> KernArg:
        if any(a.name == name for a in self.args):
            raise SpecError(f"kernel argument '{name}' declared twice")
        offset = (self.size + size - 1) // size * size
        arg = KernArg(name, kind, dtype, offset, size, access)
        self.args.append(arg)
        self.size = offset + size
        return arg

    def pointer(self, name: str, dtype: str, access: str = "read_write") -> KernArg:
        if dtype not in ELEMENT_TYPES:
            raise SpecError(f"argument '{name}': unknown element type '{dtype}' (known: {', '.join(ELEMENT_TYPES)})")
        if access not in ACCESS:
            raise SpecError(f"argument '{name}': access must be one of {', '.join(ACCESS)}")
        return self._add(name, "pointer", dtype, 8, access)

    def value(self, name: str, dtype: str) -> KernArg:
        if dtype not in VALUE_TYPES:
            raise SpecError(f"argument '{name}': unknown value type '{dtype}' (known: {', '.join(VALUE_TYPES)})")
        return self._add(name, "value", dtype, VALUE_TYPES[dtype][1], None)

    def __iter__(self):
        return iter(self.args)

    def __len__(self):
        return len(self.args)

    def __getitem__(self, name: str) -> KernArg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def segment_size(self) -> int:
        """Bytes of the kernarg segment: the explicit arguments rounded up to 8 (no hidden arguments)."""
        return max((self.size + 7) // 8 * 8, 8) if self.args else 0

    @property
    def segment_align(self) -> int:
        return 8

    def metadata(self) -> list[dict]:
        return [a.metadata() for a in self.args]

    def pack(self, *values, **named) -> bytes:
        """The kernarg buffer for these argument values (positional in order, or by name).

        Pointers take an int address (or anything with ``data_ptr()``/``__int__``); values take a
        Python or numpy scalar, converted exactly as the declared type says, with range checks.
        """
        if values and named:
            raise LaunchError("pass kernel arguments either positionally or by name, not both")
        if values:
            if len(values) != len(self.args):
                names = ", ".join(a.name for a in self.args)
                raise LaunchError(f"kernel takes {len(self.args)} arguments ({names}), got {len(values)}")
            named = {a.name: v for a, v in zip(self.args, values)}
        missing = [a.name for a in self.args if a.name not in named]
        if missing:
            raise LaunchError(f"missing kernel argument(s): {', '.join(missing)}")
        extra = set(named) - {a.name for a in self.args}
        if extra:
            raise LaunchError(f"unknown kernel argument(s): {', '.join(sorted(extra))}")
        buf = bytearray(self.segment_size)
        for arg in self.args:
            struct.pack_into("<" + self._code(arg), buf, arg.offset, _convert(arg, named[arg.name]))
        return bytes(buf)

    @staticmethod
    def _code(arg: KernArg) -> str:
        return "Q" if arg.kind == "pointer" else VALUE_TYPES[arg.dtype][0]


def _convert(arg: KernArg, value):
    if arg.kind == "pointer":
        if hasattr(value, "data_ptr"):
            value = value.data_ptr()
        try:
            addr = int(value)
        except (TypeError, ValueError):
            raise LaunchError(f"argument '{arg.name}' is a pointer; got {type(value).__name__}") from None
        if not 0 <= addr < (1 << 64):
            raise LaunchError(f"argument '{arg.name}': address {addr:#x} out of range")
        return addr
    code = VALUE_TYPES[arg.dtype][0]
    if code in "fd":
        if isinstance(value, (bool, str)) or not isinstance(value, (int, float, *_numpy_scalars())):
            raise LaunchError(f"argument '{arg.name}' is {arg.dtype}; got {value!r}")
        try:
            fvalue = float(value)                    # type: ignore[arg-type]  # a number (checked above)
            struct.pack("<" + code, fvalue)          # a finite value beyond the type's range: OverflowError
        except OverflowError:
            raise LaunchError(f"argument '{arg.name}' = {value!r} does not fit in {arg.dtype}") from None
        return fvalue
    if isinstance(value, (float, *_numpy_scalars()[:1])) or isinstance(value, bool):
        raise LaunchError(f"argument '{arg.name}' is {arg.dtype}; got {value!r}")
    try:
        ivalue = int(value)
    except (TypeError, ValueError):
        raise LaunchError(f"argument '{arg.name}' is {arg.dtype}; got {value!r}") from None
    lo, hi = _INT_RANGE[arg.dtype]
    if not lo <= ivalue <= hi:
        raise LaunchError(f"argument '{arg.name}' = {ivalue} does not fit in {arg.dtype}")
    return ivalue


def _numpy_scalars() -> tuple[type, ...]:
    """``(np.floating, np.integer)`` when numpy is loaded; nothing else can hand a numpy scalar, so
    numpy is not imported for this (``isagen gen`` does not need it)."""
    np = sys.modules.get("numpy")
    return (np.floating, np.integer) if np is not None else ()
