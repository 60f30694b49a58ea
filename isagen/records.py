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

``record`` is ``dataclass`` without the other three: ``@record(frozen=True, repr=False, eq=False)``
makes the same class as ``@dataclass(...)`` (its fields, ``__dataclass_fields__`` and
``__dataclass_params__``, ``__match_args__``, the docstring it writes), but its ``__init__`` is not
compiled from source for each class: the ``__init__`` of the class's shape (frozen or not, how many
fields and which have a ``default_factory`` or ``init=False``, whether ``__post_init__`` is called) is
compiled once with placeholder names and copied with the field names put in (``CodeType.replace``): the
same statements ``dataclass`` writes, as fast to call; a frozen class's ``__setattr__``/``__delattr__``
are closures that do what ``dataclass``'s do.  A class this does not cover (``InitVar``, ``kw_only``,
``slots``, a dataclass base, a frozen class with ``eq=True``, ...: see ``_simple``) is made by
``dataclass`` itself.  ``make_record`` is ``make_dataclass`` with ``record``.  Type checkers see
``dataclasses.dataclass``; tests/test_records.py checks that ``record`` and ``dataclass`` make classes
that behave alike, isagen's own included.
"""

from __future__ import annotations

import _thread
import abc
import dataclasses
import sys
import weakref
from operator import attrgetter
from types import CellType, CodeType, FunctionType, MemberDescriptorType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

T = TypeVar("T")

#: every class decorated (the test compares each with what ``dataclass`` would make)
DECORATED: weakref.WeakSet[type] = weakref.WeakSet()
#: every class whose ``__init__`` ``record`` made (the same check)
RECORDS: weakref.WeakSet[type] = weakref.WeakSet()


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


# ---- record: dataclass with __init__ (and a frozen class's __setattr__/__delattr__) made without exec

#: the sentinel default of a parameter with a ``default_factory`` (shown as ``<factory>``)
_HAS_DEFAULT_FACTORY = dataclasses._HAS_DEFAULT_FACTORY         # type: ignore[attr-defined]
#: the globals of every ``__init__`` made here (what the template's code reads)
_INIT_GLOBALS: dict[str, Any] = {"__name__": __name__, "__builtins__": __builtins__, "_set": object.__setattr__,
                                 "_SENT": _HAS_DEFAULT_FACTORY}
#: (frozen, the fields' kinds, calls __post_init__) -> the template's code (see ``_kind``)
_TEMPLATES: dict[tuple[bool, str, bool], CodeType] = {}


def _kind(f: dataclasses.Field) -> str:
    """How ``dataclass``'s ``__init__`` treats a field: "v" a parameter it stores, "f" a parameter whose
    default is ``default_factory()``, "x" not a parameter, stored from ``default_factory()``, "-" not a
    parameter and not stored (``init=False`` without a factory: the class attribute is the default)."""
    factory = f.default_factory is not dataclasses.MISSING
    if f.init:
        return "f" if factory else "v"
    return "x" if factory else "-"


def _shape_name(frozen: bool, kinds: str, post: bool) -> str:
    """The name of a shape's template in ``isagen.record_inits``: ``frozen_vvf_post``, ``plain_vx``."""
    return f"{'frozen' if frozen else 'plain'}_{kinds.replace('-', 'n')}{'_post' if post else ''}"


def _template_source(frozen: bool, kinds: str, post: bool) -> str:
    """``def <shape>(_F<i>, ...)`` returning ``def __init__(_self, _a0, ...)`` that stores the fields
    ``_n0, ...`` as ``dataclass``'s does (``object.__setattr__`` for a frozen class, else
    ``self.x = x``; ``_F<i>()`` for a default factory, from the closure)."""
    lines, args, factories = [], [], []
    for i, k in enumerate(kinds):
        if k in "vf":
            args.append(f"_a{i}")
        if k in "fx":
            factories.append(f"_F{i}")
        value = {"v": f"_a{i}", "f": f"_F{i}() if _a{i} is _SENT else _a{i}", "x": f"_F{i}()"}.get(k)
        if value is not None:
            lines.append(f"_set(_self, '_n{i}', {value})" if frozen else f"_self._n{i} = {value}")
    if post:
        lines.append("_self.__post_init__()")
    return (f"def {_shape_name(frozen, kinds, post)}({', '.join(factories)}):\n"
            f"    def __init__({', '.join(['_self'] + args)}):\n"
            + "".join(f"        {line}\n" for line in lines or ["pass"]) + "    return __init__\n")


def _template(frozen: bool, kinds: str, post: bool) -> CodeType:
    """The code of the shape's ``__init__`` (see ``_template_source``): from ``isagen.record_inits``
    (byte-compiled with the package: ~3 µs) when it has the shape, else compiled here (~150 µs)."""
    key = (frozen, kinds, post)
    code = _TEMPLATES.get(key)
    if code is None:
        from isagen import record_inits
        outer = getattr(record_inits, _shape_name(*key), None)
        if outer is not None:
            outer_code = outer.__code__
        else:
            module = compile(_template_source(*key), "<isagen.records>", "exec")
            outer_code = next(c for c in module.co_consts if isinstance(c, CodeType))
        code = next(c for c in outer_code.co_consts if isinstance(c, CodeType))
        _TEMPLATES[key] = code
    return code


def shape(cls: type) -> tuple[bool, str, bool]:
    """The shape of a class ``record`` made: (frozen, the fields' kinds, calls ``__post_init__``)."""
    fields = [f for f in cls.__dataclass_fields__.values()            # type: ignore[attr-defined]
              if f._field_type is dataclasses._FIELD]                  # type: ignore[attr-defined]
    return (cls.__dataclass_params__.frozen, "".join(_kind(f) for f in fields),   # type: ignore[attr-defined]
            hasattr(cls, "__post_init__"))


def render_inits(shapes) -> str:
    """The text of ``isagen/record_inits.py``: the templates of ``shapes``, sorted."""
    head = ("# ruff: noqa: E501\n"
            '"""The ``__init__`` templates of the shapes of isagen\'s ``record`` classes, byte-compiled with the\n'
            "package so that making a class does not compile one (``isagen.records``).  Generated by\n"
            "``python -m isagen.records``; a shape missing here is compiled when a class needs it.\n"
            '"""\n\n'
            "# the names the templates read (record gives each __init__ its own globals with these)\n"
            "_set = object.__setattr__\n_SENT = object()\n")
    return head + "".join("\n\n" + _template_source(*s) for s in sorted(set(shapes)))


def _make_init(cls: type, fields: list[dataclasses.Field], frozen: bool, post: bool) -> FunctionType:
    kinds = "".join(_kind(f) for f in fields)
    code = _template(frozen, kinds, post)
    names = {f"_n{i}": f.name for i, f in enumerate(fields)}
    params = {f"_a{i}": f.name for i, f in enumerate(fields)}
    params["_self"] = "self"
    if frozen:      # the attribute names are the constants passed to object.__setattr__
        code = code.replace(co_consts=tuple(names.get(c, c) if isinstance(c, str) else c for c in code.co_consts))
    else:           # ... or the names of STORE_ATTR
        code = code.replace(co_names=tuple(names.get(c, c) for c in code.co_names))
    code = code.replace(co_varnames=tuple(params.get(v, v) for v in code.co_varnames),
                        co_name="__init__", **_qualname(f"{cls.__qualname__}.__init__"))
    cells = {f"_F{i}": f.default_factory for i, f in enumerate(fields)}
    closure = tuple(CellType(cells[name]) for name in code.co_freevars) or None
    fn = FunctionType(code, _INIT_GLOBALS, "__init__", None, closure)
    defaults = tuple(_HAS_DEFAULT_FACTORY if k == "f" else f.default
                     for f, k in zip(fields, kinds) if k == "f" or (k == "v" and f.default is not dataclasses.MISSING))
    fn.__defaults__ = defaults or None
    fn.__annotations__ = {**{f.name: f.type for f in fields if f.init}, "return": None}
    fn.__qualname__ = f"{cls.__qualname__}.__init__"
    return fn


def _qualname(name: str) -> dict[str, Any]:
    return {"co_qualname": name} if hasattr(CodeType, "co_qualname") else {}


def _frozen_methods(cls: Any, names: frozenset[str]) -> tuple[Any, Any]:
    """``dataclass``'s frozen ``__setattr__`` and ``__delattr__``, as closures."""
    error = dataclasses.FrozenInstanceError

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise error(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise error(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)
    return __setattr__, __delattr__


_PLAIN = {"init": True, "repr": True, "eq": True, "order": False, "unsafe_hash": False, "frozen": False}


def _simple(cls: type, opts: dict[str, Any]) -> bool:
    """Whether ``record`` makes ``cls``'s ``__init__`` (else ``dataclass`` makes the whole class): no
    ``kw_only`` or ``InitVar`` field, defaults after non-defaults among the parameters, no dataclass
    base, no method of the body that ``dataclass`` would keep or refuse to overwrite, no option but
    ``dataclass``'s first six, and a frozen class without ``eq``/``order``/``unsafe_hash``."""
    frozen = bool(opts["frozen"])
    body = cls.__dict__
    if (not opts["init"] or set(opts) - set(_PLAIN) or "__init__" in body
            or (frozen and (opts["eq"] or opts["order"] or opts["unsafe_hash"]
                            or "__setattr__" in body or "__delattr__" in body))
            or any(hasattr(b, "__dataclass_fields__") for b in cls.__mro__[1:])):
        return False
    seen_default = False
    for name, kind in body.get("__annotations__", {}).items():
        text = kind if isinstance(kind, str) else repr(kind)
        if "ClassVar" in text:
            continue
        if "InitVar" in text or "KW_ONLY" in text or name == "self":
            return False
        value = body.get(name, dataclasses.MISSING)
        if isinstance(value, dataclasses.Field):
            if value.kw_only is True:
                return False
            if not value.init:
                continue
            value = value.default if value.default_factory is dataclasses.MISSING else None
        if value is dataclasses.MISSING and seen_default:      # dataclass's own error, from dataclass
            return False
        seen_default = seen_default or value is not dataclasses.MISSING
    return True


_MODULE_IDENTIFIER = None       # dataclass's pattern for the type named by a string annotation (made on first use)


def _special(annotation: Any, cls: type) -> bool:
    """Whether ``dataclass`` could read ``annotation`` as ``ClassVar``, ``InitVar`` or ``KW_ONLY``: for a
    string, the name it starts with (``ClassVar[...]``, ``dataclasses.InitVar``) looked up in the
    class's module, as ``dataclass`` looks it up (here more widely: any such object means yes)."""
    global _MODULE_IDENTIFIER
    if isinstance(annotation, str):
        if _MODULE_IDENTIFIER is None:
            import re
            _MODULE_IDENTIFIER = re.compile(r"^(?:\s*(\w+)\s*\.)?\s*(\w+)")
        match = _MODULE_IDENTIFIER.match(annotation)
        if not match:
            return False
        module = sys.modules.get(cls.__module__)
        ns = vars(module) if module is not None else {}
        annotation = (ns.get(match.group(2)) if not match.group(1)
                      else getattr(ns.get(match.group(1)), match.group(2), None))
    return (annotation is ClassVar or annotation is dataclasses.InitVar or annotation is dataclasses.KW_ONLY
            or isinstance(annotation, dataclasses.InitVar) or getattr(annotation, "__origin__", None) is ClassVar)


def _lean_fields(cls: type, opts: dict[str, Any]) -> dict[str, dataclasses.Field] | None:
    """What ``dataclass`` puts in ``__dataclass_fields__`` for a ``_simple`` class with ``repr``, ``eq``,
    ``order`` and ``unsafe_hash`` off (nothing else for ``dataclass`` to write), worked out here
    (without ``dataclass``'s checks of every annotation for ``ClassVar``/``InitVar``/``KW_ONLY``,
    three per field); the defaults that were ``field()``s become
    the class attributes, as ``dataclass`` leaves them.  None where ``dataclass`` must do it: an
    annotation that may be one of those three, a ``field()`` without an annotation, a mutable default
    (``dataclass``'s error), or a Python whose ``Field`` has not the attributes set here."""
    if (opts["repr"] or opts["eq"] or opts["order"] or opts["unsafe_hash"]
            or not hasattr(dataclasses.Field, "kw_only")):
        return None
    body = cls.__dict__
    annotations = body.get("__annotations__", {})
    for name, value in body.items():
        if isinstance(value, dataclasses.Field) and name not in annotations:
            return None
    fields: dict[str, dataclasses.Field] = {}
    for name, kind in annotations.items():
        if _special(kind, cls):
            return None
        default = getattr(cls, name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            f = default
        else:
            if isinstance(default, MemberDescriptorType):       # a __slots__ member: no default
                default = dataclasses.MISSING
            f = dataclasses.field(default=default)       # type: ignore[arg-type]
        if f.default.__class__.__hash__ is None:                # dataclass's "mutable default" error
            return None
        fields[name] = f
    for name, f in fields.items():
        f.name, f.type = name, annotations[name]
        f._field_type = dataclasses._FIELD                      # type: ignore[attr-defined]
        if f.kw_only is dataclasses.MISSING:
            f.kw_only = False
        if isinstance(body.get(name), dataclasses.Field):
            if f.default is dataclasses.MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
    return fields


def _record(cls: type, options: dict[str, Any]) -> type:
    opts = {**_PLAIN, **options}
    if not _simple(cls, opts):
        return dataclasses.dataclass(cls, **options)      # type: ignore[call-overload, no-any-return]
    frozen = bool(opts["frozen"])
    had_doc = bool(cls.__doc__)
    fields = _lean_fields(cls, opts)
    if fields is None:
        if not had_doc:     # (a stand-in: dataclass would work out the signature of object's __init__ for it)
            cls.__doc__ = "-"
        cls = dataclasses.dataclass(cls, **{**opts, "init": False, "frozen": False})   # type: ignore[call-overload]
        fields = cls.__dataclass_fields__                   # type: ignore[attr-defined]
    else:
        cls.__dataclass_fields__ = fields                   # type: ignore[attr-defined]
        if "__match_args__" not in cls.__dict__:
            cls.__match_args__ = tuple(name for name, f in fields.items() if f.init)    # type: ignore[attr-defined,misc]
    std = [f for f in fields.values() if f._field_type is dataclasses._FIELD]      # type: ignore[attr-defined,union-attr]
    cls.__init__ = _make_init(cls, std, frozen, hasattr(cls, "__post_init__"))       # type: ignore[misc]
    if frozen:
        for fn in _frozen_methods(cls, frozenset(f.name for f in std)):
            fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
            setattr(cls, fn.__name__, fn)
    cls.__dataclass_params__ = _params({**opts, "init": True})        # type: ignore[attr-defined]
    if not had_doc:      # the docstring dataclass writes: "Name(<the signature of __init__>)"
        import inspect
        try:
            text_sig = str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            text_sig = ""
        cls.__doc__ = cls.__name__ + text_sig
    abc.update_abstractmethods(cls)
    RECORDS.add(cls)
    return cls


#: dataclass's options and their defaults, for ``__dataclass_params__`` (Python 3.10-3.13's)
_PARAM_DEFAULTS = {**_PLAIN, "match_args": True, "kw_only": False, "slots": False, "weakref_slot": False}


def _params(opts: dict[str, Any]) -> Any:
    """The ``__dataclass_params__`` ``dataclass`` gives a class made with these options."""
    kind = dataclasses._DataclassParams                 # type: ignore[attr-defined]
    values = {**_PARAM_DEFAULTS, **opts}
    return kind(**{name: values[name] for name in kind.__slots__})


def make_record(cls_name: str, fields: list, *, bases: tuple[type, ...] = (), **options: Any) -> type:
    """``dataclasses.make_dataclass`` (the class made by ``types.new_class`` from the fields'
    annotations and defaults, in its caller's module from Python 3.12) with ``record`` in place of
    ``dataclass``."""
    import keyword
    import types
    annotations: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for item in fields:
        if isinstance(item, str):
            name, kind = item, "typing.Any"
        elif len(item) == 2:
            name, kind = item
        elif len(item) == 3:
            name, kind, defaults[item[0]] = item
        else:
            raise TypeError(f"Invalid field: {item!r}")
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"Field names must be valid identifiers: {name!r}")
        if keyword.iskeyword(name):
            raise TypeError(f"Field names must not be keywords: {name!r}")
        if name in annotations:
            raise TypeError(f"Field name duplicated: {name!r}")
        annotations[name] = kind

    def body(ns: dict[str, Any]) -> None:
        ns.update(defaults)
        ns["__annotations__"] = annotations
    cls = types.new_class(cls_name, bases, {}, body)
    if sys.version_info >= (3, 12):     # make_dataclass gives the class its caller's module there
        cls.__module__ = sys._getframemodulename(1) or "__main__"       # type: ignore[attr-defined]
    return _record(cls, options)


if TYPE_CHECKING:
    from dataclasses import dataclass as record
else:
    def record(cls=None, /, **options):
        """``dataclasses.dataclass`` (the same arguments, the same class), ``__init__`` made without
        compiling source for each class where it can be (see the module's docstring)."""
        def wrap(c):
            return _record(c, options)
        return wrap if cls is None else wrap(cls)


def _write_inits() -> None:
    """``python -m isagen.records``: every isagen module imported, ``isagen/record_inits.py`` written
    with the shapes of the classes ``record`` made."""
    import importlib
    import pkgutil
    from pathlib import Path

    import isagen
    from isagen import records
    for info in pkgutil.walk_packages(isagen.__path__, "isagen."):
        if info.name != "isagen.__main__":
            try:
                importlib.import_module(info.name)
            except ImportError:         # an optional dependency missing: its classes are not listed
                pass
    path = Path(records.__file__).with_name("record_inits.py")
    path.write_text(records.render_inits(records.shape(c) for c in list(records.RECORDS)))
    print(f"wrote {path} ({len({records.shape(c) for c in list(records.RECORDS)})} shapes)")


if __name__ == "__main__":
    _write_inits()
