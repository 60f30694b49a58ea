"""``value_methods``: the ``__repr__``, ``__eq__`` and ``__hash__`` of a frozen dataclass, without
the start-up cost of generating them.

``@dataclass`` writes each method it adds as source text and compiles it when the class is made
(Python 3.11: one ``exec`` per method, ~0.15 ms each); a frozen dataclass gets six.  The command line
makes ~40 dataclasses on every start, so this is ~25 ms of an ``isagen gen`` process (issue 17).
Three of the six do the same thing for every class and need only the field names, so they are
written here once, as closures over the names:

    @value_methods
    @dataclass(frozen=True, repr=False, eq=False)
    class Reg: ...

gives the class what ``@dataclass(frozen=True)`` gives it (``__init__``, the frozen ``__setattr__``
and ``__delattr__`` still come from ``dataclass``; ``fields``, ``replace`` and ``asdict`` work as
before), with the same behaviour: the repr (``Name(field=value!r, ...)`` over the fields with
``repr=True``, ``...`` on recursion), equality (same class and equal tuples of the fields with
``compare=True``, else ``NotImplemented``), and hash (the hash of the tuple of the fields
``dataclass`` hashes).  A method the class body defines is kept, as ``dataclass`` keeps it.
tests/test_records.py checks each decorated class against the methods ``dataclass`` generates.
"""

from __future__ import annotations

import _thread
import dataclasses
import weakref
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")

#: every class decorated (the test compares each with what ``dataclass`` would make)
DECORATED: weakref.WeakSet[type] = weakref.WeakSet()


def _tuple_getter(names: list[str]):
    """``obj -> (obj.a, obj.b, ...)``, always a tuple (``attrgetter`` of one name gives the value)."""
    if not names:
        return lambda obj: ()
    get = attrgetter(*names)
    if len(names) == 1:
        return lambda obj: (get(obj),)
    return get


def value_methods(cls: type[T]) -> type[T]:
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or params.repr or params.eq or params.order or params.unsafe_hash:
        raise TypeError(f"value_methods: {cls.__qualname__} must be @dataclass(repr=False, eq=False)")
    fields = dataclasses.fields(cls)     # type: ignore[arg-type]
    body = cls.__dict__
    # whether the class body defined __hash__ (decided before __eq__ is added, as dataclass does)
    class_hash = body.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in body))

    if "__repr__" not in body:
        shown = [f.name for f in fields if f.repr]
        running: set[tuple[int, int]] = set()

        def __repr__(self: Any) -> str:
            key = id(self), _thread.get_ident()
            if key in running:
                return "..."
            running.add(key)
            try:
                return (self.__class__.__qualname__ + "("
                        + ", ".join(f"{name}={getattr(self, name)!r}" for name in shown) + ")")
            finally:
                running.discard(key)
        _set(cls, __repr__)

    if "__eq__" not in body:
        compared = _tuple_getter([f.name for f in fields if f.compare])

        def __eq__(self: Any, other: object) -> Any:
            if other.__class__ is self.__class__:
                return compared(self) == compared(other)
            return NotImplemented
        _set(cls, __eq__)

    if not explicit_hash and not params.frozen:
        cls.__hash__ = None         # type: ignore[assignment]   # equal but mutable: unhashable
    elif not explicit_hash:
        hashed = _tuple_getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)])

        def __hash__(self: Any) -> int:
            return hash(hashed(self))
        _set(cls, __hash__)

    DECORATED.add(cls)
    return cls


def _set(cls: type, fn: Any) -> None:
    fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
    setattr(cls, fn.__name__, fn)
