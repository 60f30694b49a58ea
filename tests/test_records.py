"""``isagen.records.value_methods`` against the methods ``dataclasses.dataclass`` generates.

Two kinds of check: small classes written twice (once under ``@dataclass``, once under
``@value_methods``) must behave alike, the edge cases included (a method the body defines, a field left
out of repr/compare/hash, mutable classes, recursion, other types); and every class of isagen
that uses ``value_methods`` must give what ``dataclass`` would generate for its fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from isagen.records import DECORATED, RECORDS, make_record, record, value_methods


def _bodies():
    """Pairs of class bodies (as functions of a decorator): (name, make(decorate))."""

    def plain(dec):
        @dec
        class P:
            a: int
            b: str = "x"
            c: tuple = ()
        return P

    def flags(dec):
        @dec
        class F:
            a: int
            hidden: int = field(default=0, repr=False)
            loose: int = field(default=0, compare=False)
            unhashed: int = field(default=0, hash=False)
            hashed_only: int = field(default=0, compare=False, hash=True)
        return F

    def one(dec):
        @dec
        class O:
            x: float
        return O

    def empty(dec):
        @dec
        class E:
            pass
        return E

    def own_methods(dec):
        @dec
        class M:
            a: int

            def __repr__(self):
                return f"M<{self.a}>"

            def __eq__(self, other):
                return isinstance(other, M) and self.a % 10 == other.a % 10
        return M

    def own_hash(dec):
        @dec
        class H:
            a: int

            def __hash__(self):
                return 7
        return H

    def child(dec):
        @dec
        class Base:
            a: int

        @dec
        class Child(Base):
            b: int = 1
        return Child

    return [plain, flags, one, empty, own_methods, own_hash, child]


NAN = float("nan")      # one object: a NaN's hash is its identity's
NAN2 = float("nan")     # another NaN object (equal to no NaN, itself included)


def _values(cls, seed):
    names = [f.name for f in dataclasses.fields(cls)]
    return {n: (seed, i) if seed != "nan" else NAN for i, n in enumerate(names)}


def _make(cls, values):
    obj = object.__new__(cls)
    for k, v in values.items():
        object.__setattr__(obj, k, v)
    return obj


def _same(x, y):
    if isinstance(x, BaseException) or isinstance(y, BaseException):
        return type(x) is type(y)
    return x == y or (x is NotImplemented and y is NotImplemented)


def _call(fn, *args):
    try:
        return fn(*args)
    except Exception as e:       # noqa: BLE001 -- the same exception type is what is compared
        return e


def _behaviour(cls):
    """What one class does: reprs, equalities and hashes over a fixed set of instances."""
    fields = [f.name for f in dataclasses.fields(cls)]
    base = _values(cls, 1)
    objs = [_make(cls, base), _make(cls, dict(base)), _make(cls, _values(cls, 2)), _make(cls, _values(cls, "nan"))]
    for name in fields:                      # one field changed at a time
        objs.append(_make(cls, {**base, name: (9, name)}))
    same_nan = _make(cls, {n: NAN for n in fields})
    objs += [same_nan, _make(cls, {n: NAN2 for n in fields})]
    if fields:                               # recursion: an instance inside itself
        rec = _make(cls, dict(base))
        object.__setattr__(rec, fields[0], [rec])
        objs.append(rec)
    out = [repr(o) for o in objs]
    for x in objs + [same_nan]:
        for y in objs + [object(), (1, 0)]:
            out.append(_call(lambda a, b: a == b, x, y))
            out.append(_call(lambda a, b: a != b, x, y))
    out.append(cls.__hash__ is None)
    if cls.__hash__ is not None:
        out += [_call(hash, o) for o in objs[:-1]]
    return out


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("body", _bodies(), ids=lambda b: b.__name__)
def test_same_as_dataclass(body, frozen):
    ref = body(dataclass(frozen=frozen))
    ours = body(lambda c: value_methods(dataclass(frozen=frozen, repr=False, eq=False)(c)))
    got, want = _behaviour(ours), _behaviour(ref)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert _same(g, w), (i, g, w)
    assert ours.__dataclass_params__.frozen == frozen
    if frozen:
        obj = ours(*[1] * len([f for f in dataclasses.fields(ours) if f.init and f.default is dataclasses.MISSING]))
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.a = 2


def test_refuses_generated_methods():
    with pytest.raises(TypeError, match="repr=False, eq=False"):
        @value_methods
        @dataclass(frozen=True)
        class C:
            a: int


def test_isagen_classes_as_dataclass_makes_them():
    """Every isagen class on the command line's path that uses value_methods (and the parameter
    classes it makes at run time) against the methods dataclass generates for the same fields."""
    import isagen.cli  # noqa: F401
    import isagen.kernels.gemm  # noqa: F401
    from isagen.builders.registry import params_from
    from isagen.builders.spec import load_spec
    from isagen.objects.emit import render_assembly
    spec = load_spec(str(Path(isagen.cli.__file__).parents[1] / "specs" / "gemm_bf16.yaml"), {})
    render_assembly(spec.build("gfx942"))
    params_from({"a": 1, "b": "x"}, "t")
    classes = list(DECORATED)
    assert len(classes) >= 30
    for cls in classes:
        params = cls.__dataclass_params__
        fields = dataclasses.fields(cls)
        ref = dataclasses.make_dataclass(
            cls.__name__, [(f.name, object, field(repr=f.repr, compare=f.compare, hash=f.hash)) for f in fields],
            frozen=params.frozen)
        for name in ("__repr__", "__eq__", "__hash__"):
            fn = cls.__dict__.get(name)
            ours = fn is not None and getattr(fn, "__module__", None) == "isagen.records"
            if not ours:        # the class body's own method (or an inherited/None hash): not replaced
                if fn is not None:
                    assert fn.__qualname__.startswith(cls.__qualname__ + "."), (cls, name)
                continue
            a = _make(cls, _values(cls, 1))
            b = _make(cls, _values(cls, 1))
            c = _make(cls, _values(cls, 2))
            if name == "__repr__":
                assert repr(a) == ref.__repr__(a)
            elif name == "__eq__":
                for x, y in ((a, b), (a, c), (a, 1)):
                    assert cls.__eq__(x, y) is ref.__eq__(x, y) or cls.__eq__(x, y) == ref.__eq__(x, y)
            else:
                assert hash(a) == ref.__hash__(a) and hash(c) == ref.__hash__(c)
        if not params.frozen and "__hash__" not in cls.__dict__:
            pytest.fail(f"{cls}: a mutable dataclass with eq gets __hash__ = None")


# ---- record / make_record against dataclass / make_dataclass

def _record_bodies():
    """Class bodies (functions of a decorator) covering what ``record`` makes itself and what it
    leaves to ``dataclass``."""

    def plain(dec):
        @dec
        class P:
            a: int
            b: str = "x"
            c: tuple = ()
        return P

    def factories(dec):
        @dec
        class F:
            a: int
            items: list = field(default_factory=list)
            made: dict = field(default_factory=dict, init=False)
            fixed: int = field(default=5, init=False)
            later: int = field(init=False)
            d: int = 4
        return F

    def posted(dec):
        @dec
        class Post:
            a: int
            b: int = 2

            def __post_init__(self):
                if self.a < 0:
                    raise ValueError("a < 0")
                object.__setattr__(self, "seen", self.a + self.b)
        return Post

    def empty(dec):
        @dec
        class E:
            """Nothing in it."""
        return E

    def described(dec):
        @dec
        class D:
            a: int = field(default=1, metadata={"unit": "bytes"}, repr=False)
            b: str = field(default="b", compare=False, hash=True)
            c: list = field(default_factory=list, metadata={"why": "test"})
        return D

    def global_classvar(dec):   # ClassVar as the module names it: not a field
        @dec
        class G:
            shared: ClassVar[int] = 3
            a: int = 1
        return G

    def classvar(dec):
        from typing import ClassVar as CV  # a name the module does not have: dataclass makes it a field

        @dec
        class C:
            shared: CV[int] = 3
            a: int = 1
        return C

    def kw(dec):               # left to dataclass
        @dec
        class K:
            a: int
            b: int = field(default=0, kw_only=True)
        return K

    def child(dec):            # a dataclass base: left to dataclass
        @dec
        class Base:
            a: int

        @dec
        class Child(Base):
            b: int = 1
        return Child

    return [plain, factories, posted, empty, described, global_classvar, classvar, kw, child]


def _init_behaviour(cls, frozen):
    """What constructing (and, frozen, changing) instances of ``cls`` does."""
    import inspect
    params = inspect.signature(cls).parameters
    out: list = [str(inspect.signature(cls)), cls.__doc__, getattr(cls, "__match_args__", None),
                 getattr(cls, "__abstractmethods__", None)]
    for name, f in cls.__dataclass_fields__.items():      # every field, ClassVar pseudo-fields included
        out.append((name, [getattr(f, a) for a in ("name", "type", "default", "default_factory", "init", "repr",
                                                    "hash", "compare", "metadata", "kw_only", "_field_type")],
                    getattr(cls, name, "(no class attribute)")))
    params_obj = cls.__dataclass_params__
    out.append([getattr(params_obj, s) for s in type(params_obj).__slots__])
    required = [n for n, p in params.items() if p.default is p.empty]
    calls = [(), tuple(range(len(required))), tuple(range(len(params))), tuple(range(len(params) + 1)),
             tuple(-1 for _ in required)]
    for args in calls:
        obj = _call(cls, *args)
        out.append(type(obj).__name__ if isinstance(obj, BaseException) else list(vars(obj).items()))
        out.append(str(obj) if isinstance(obj, BaseException) else None)
    kwargs = {n: 7 for n in params}
    obj = _call(lambda: cls(**kwargs))
    out.append(list(vars(obj).items()) if not isinstance(obj, BaseException) else type(obj).__name__)
    if not isinstance(obj, BaseException):
        for action in (lambda o: setattr(o, "a", 9), lambda o: setattr(o, "other", 1),
                       lambda o: delattr(o, "a")):
            r = _call(action, obj)
            out.append((type(r).__name__, str(r)) if isinstance(r, BaseException) else None)
        if params:
            first = next(iter(params))
            new = _call(lambda: dataclasses.replace(obj, **{first: 8}))
            out.append(type(new).__name__ if isinstance(new, BaseException) else list(vars(new).items()))
    return out


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("body", _record_bodies(), ids=lambda b: b.__name__)
def test_record_same_as_dataclass(body, frozen):
    ref = body(dataclass(frozen=frozen, repr=False, eq=False))
    ours = body(record(frozen=frozen, repr=False, eq=False))
    assert _init_behaviour(ours, frozen) == _init_behaviour(ref, frozen)
    # and with value_methods on top, the whole value behaviour
    ref_v = body(lambda c: value_methods(dataclass(frozen=frozen, repr=False, eq=False)(c)))
    ours_v = body(lambda c: value_methods(record(frozen=frozen, repr=False, eq=False)(c)))
    got, want = _behaviour(ours_v), _behaviour(ref_v)
    assert all(_same(g, w) for g, w in zip(got, want)) and len(got) == len(want)


def test_record_makes_init_without_dataclass_exec(monkeypatch):
    """The classes it covers get their __init__ (and frozen __setattr__/__delattr__) from record: the
    point of it (issue 17).  ``dataclass``'s generator of source is never called for them."""
    if not hasattr(dataclasses, "_create_fn"):
        pytest.skip("this Python's dataclasses has no _create_fn to watch")
    made = []
    real = dataclasses._create_fn
    monkeypatch.setattr(dataclasses, "_create_fn", lambda name, *a, **k: made.append(name) or real(name, *a, **k))
    for body in _record_bodies()[:5]:
        for frozen in (True, False):
            cls = body(record(frozen=frozen, repr=False, eq=False))
            assert cls in RECORDS
    assert made == []
    assert body(record(frozen=True)).__hash__ is not None     # eq=True frozen: left to dataclass, hashable


@pytest.mark.parametrize("options", [{"unsafe_hash": True}, {"order": True, "eq": True}, {"repr": True},
                                     {"eq": True}, {}], ids=str)
def test_record_options_as_dataclass(options):
    """Options that leave methods for dataclass to write: the same methods, the same behaviour."""
    def body(dec):
        @dec
        class O:
            a: int
            b: int = 2
        return O
    for frozen in (False, True):
        opts = {"repr": False, "eq": False, **options, "frozen": frozen}
        ref, ours = body(dataclass(**opts)), body(record(**opts))
        assert _init_behaviour(ours, frozen) == _init_behaviour(ref, frozen)
        x, y = ours(1), ours(1)
        rx, ry = ref(1), ref(1)
        assert (ours.__hash__ is None) == (ref.__hash__ is None)
        if ours.__hash__ is not None and ref.__hash__ is not object.__hash__:
            assert hash(x) == hash(rx)
        assert (x == y) == (rx == ry) and repr(x).split("(")[1:] == repr(rx).split("(")[1:]
        if opts.get("order"):
            assert (x < ours(2)) == (rx < ref(2))


def test_record_errors_as_dataclass():
    for dec in (dataclass, record):
        with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
            @dec
            class Bad:
                a: int = 1
                b: int
        with pytest.raises(ValueError, match="mutable default"):
            @dec
            class Mutable:
                a: list = []       # noqa: RUF012


def test_make_record_as_make_dataclass():
    fields = [("name", str), ("a", int, field(default=3)), ("b", tuple, field(default=()))]
    ref = dataclasses.make_dataclass("Made", fields, frozen=True, repr=False, eq=False)
    ours = make_record("Made", fields, frozen=True, repr=False, eq=False)
    assert ours in RECORDS
    assert ours.__module__ == ref.__module__ and ours.__qualname__ == ref.__qualname__
    assert _init_behaviour(ours, True) == _init_behaviour(ref, True)
    for bad in ([("a", int), ("a", int)], [("class", int)], [("a b", int)], [("a", int, 1, 2)]):
        with pytest.raises(TypeError) as want:
            dataclasses.make_dataclass("M", bad)
        with pytest.raises(TypeError) as got:
            make_record("M", bad)
        assert str(got.value) == str(want.value)


def test_isagen_records_as_dataclass_makes_them():
    """Every isagen class whose __init__ record made (on the command line's path, and the parameter
    classes made at run time) against the same fields under dataclass: the signature, what an
    instance holds, frozen or not."""
    import inspect

    import isagen.cli  # noqa: F401
    import isagen.kernels.gemm  # noqa: F401
    from isagen.builders.registry import params_from
    from isagen.builders.spec import load_spec
    spec = load_spec(str(Path(isagen.cli.__file__).parents[1] / "specs" / "gemm_bf16.yaml"), {})
    spec.build("gfx942")
    params_from({"a": 1, "b": "x"}, "t")
    from isagen.builders.registry import Params
    classes = [c for c in list(RECORDS) if c.__module__.startswith("isagen.") or issubclass(c, Params)]
    assert len(classes) >= 30
    for cls in classes:
        params = cls.__dataclass_params__
        fields = dataclasses.fields(cls)
        specs = []
        for f in fields:
            kw = {"init": f.init, "repr": f.repr, "compare": f.compare, "hash": f.hash}
            if f.default is not dataclasses.MISSING:
                kw["default"] = f.default
            if f.default_factory is not dataclasses.MISSING:
                kw["default_factory"] = f.default_factory
            specs.append((f.name, f.type, field(**kw)))
        ref = dataclasses.make_dataclass(cls.__name__, specs, frozen=params.frozen, repr=False, eq=False)
        assert str(inspect.signature(cls)) == str(inspect.signature(ref)), cls
        args = [object() for p in inspect.signature(cls).parameters.values() if p.default is p.empty]
        if "__post_init__" not in vars(cls):
            a, b = cls(*args), ref(*args)
            assert list(vars(a)) == list(vars(b)), cls
            assert all(x is y or (x == y and type(x) is type(y)) for x, y in zip(vars(a).values(), vars(b).values()))
            if params.frozen and fields:
                with pytest.raises(dataclasses.FrozenInstanceError):
                    a.__setattr__(fields[0].name, 1)
        assert cls.__init__.__code__.co_varnames[:len(args) + 1] == ref.__init__.__code__.co_varnames[:len(args) + 1]


def _file_shapes():
    import isagen.record_inits as inits
    shapes = []
    for name in vars(inits):
        if name.startswith(("frozen_", "plain_")):
            kind, _, rest = name.partition("_")
            kinds, _, post = rest.partition("_")
            shapes.append((kind == "frozen", kinds.replace("n", "-"), post == "post"))
    return shapes


def test_record_inits_file_is_generated():
    """isagen/record_inits.py is what ``python -m isagen.records`` writes for the shapes it holds, and
    each template's code is the code ``record`` would compile for its shape."""
    import isagen.record_inits as inits
    from isagen import records
    shapes = _file_shapes()
    assert shapes
    assert Path(inits.__file__).read_text() == records.render_inits(shapes)
    for s in shapes:
        compiled = compile(records._template_source(*s), "<test>", "exec")
        outer = next(c for c in compiled.co_consts if isinstance(c, type(compiled)))
        want = next(c for c in outer.co_consts if isinstance(c, type(compiled)))
        got = records._template(*s)
        for attr in ("co_code", "co_consts", "co_names", "co_varnames", "co_freevars", "co_argcount"):
            assert getattr(got, attr) == getattr(want, attr), (s, attr)


def test_record_inits_has_the_gen_paths_shapes():
    """Every class ``record`` makes on the way of ``isagen gen`` finds its template in
    isagen/record_inits.py, byte-compiled (none compiled at start-up: issue 17).  After adding a
    record class of a new shape, run ``python -m isagen.records``."""
    import isagen.cli  # noqa: F401
    import isagen.kernels.gemm  # noqa: F401
    from isagen import records
    from isagen.builders.registry import load_generators
    load_generators()
    # isagen's own records and the bundled generators' parameter classes; not the Params classes that
    # tests declare (their generators) or params_from makes: their shapes are the caller's, and one
    # without a template only costs its compile
    bundled = {g.params_type for g in load_generators().values() if g.fn.__module__.startswith("isagen.kernels.")}
    ours = [c for c in list(RECORDS) if c.__module__.startswith("isagen.") or c in bundled]
    assert len(ours) >= 30 and len(bundled) >= 10
    missing = {records.shape(c) for c in ours} - set(_file_shapes())
    assert not missing, f"shapes without a template (run python -m isagen.records): {missing}"
