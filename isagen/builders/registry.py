"""The generator registry: each kernel generator declares its parameters once, here.

A generator is a pure function ``build(p, target) -> KernelBuilder`` (or a finished ``Program``),
registered under the name a spec's ``kernel:`` field uses::

    @generator("elementwise",
               doc="y = f(x, ...) over n elements, any n",
               params={"block": Param("int", 256, "work-items per workgroup", pow2=True, min=64, max=1024),
                       "dtype": Param("str", "f32", "element type", choices=("f32", "bf16", "f16"))},
               shapes={"n": "number of elements"},
               launch=elementwise_launch)
    def elementwise(p, target):
        k = KernelBuilder(p.name, target, workgroup_size=p.block)
        ...
        return k                      # the pipeline finishes it (checks, hazard nops, --force)

From the declared schema the spec loader (``isagen.builders.spec``) validates every spec generically — types,
allowed values, ranges, powers of two — and ``isagen list`` prints it.  What a schema cannot say is
left to two optional hooks, each returning ``[(field, message), ...]``:

* ``validate(p, target)`` runs before building: combinations that cannot be built at all
  (``vec=1`` with a 2-byte dtype).  Always an error, ``--force`` or not.
* ``check(p, target, program)`` runs on the built program: kernels that can be built but should
  not be used (occupancy below the spec's floor, a tile that wastes the machine).  An error, except
  that ``--force`` emits the kernel with the reasons in its header (``Program.rejected``).

``launch(p, target) -> isagen.builders.contract.LaunchInfo`` is the launch contract a runtime uses: the tensors
(element type, shape in size symbols such as ``n``, read/written), the scalars, which kernel argument
each feeds, the grid (workgroups per dimension, as HIP's ``hipModuleLaunchKernel`` counts them) as
integer expressions over the size symbols, the workgroup size, and the requirements the sizes must
meet.  ``shapes`` documents the size symbols (a spec's ``shapes:`` gives default values for them).
See docs/specs.md, "Launch contract".
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, ClassVar, cast

from isagen.errors import LaunchError, SpecError
from isagen.records import make_record, record, value_methods
from isagen.targets import TARGETS

PARAM_TYPES = ("int", "float", "bool", "str")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


@value_methods
@record(frozen=True, repr=False, eq=False)
class Param:
    """One generator parameter: its type, default, allowed values and what it means."""

    type: str                       # int | float | bool | str
    default: Any
    doc: str = ""
    choices: tuple | None = None    # allowed values (any type)
    min: float | None = None        # inclusive range (int, float)
    max: float | None = None
    pow2: bool = False              # int: must be a power of two
    multiple_of: int | None = None  # int: must be a multiple of this

    def __post_init__(self):
        if self.type not in PARAM_TYPES:
            raise ValueError(f"parameter type must be one of {PARAM_TYPES}, not {self.type!r}")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))
        problem = self.problem(self.default)
        if problem:
            raise ValueError(f"default {self.default!r} is invalid: {problem}")

    # ------------------------------------------------------------------ checking
    def type_problem(self, value) -> str | None:
        """Why ``value`` (from YAML) is not of this parameter's type, or None."""
        t = self.type
        if t == "int" and (isinstance(value, bool) or not isinstance(value, int)):
            return f"expected an integer, got {_show(value)}"
        if t == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"expected a number, got {_show(value)}"
        if t == "bool" and not isinstance(value, bool):
            return f"expected true or false, got {_show(value)}"
        if t == "str" and not isinstance(value, str):
            return f"expected a string, got {_show(value)}"
        return None

    def problem(self, value) -> str | None:
        """Why ``value`` is not allowed (type, choices, range, power of two), or None."""
        bad_type = self.type_problem(value)
        if bad_type:
            return bad_type
        if self.type == "float":
            value = float(value)
        if self.choices is not None and value not in self.choices:
            return f"{_show(value)} is not one of {', '.join(_show(c) for c in self.choices)}"
        if self.min is not None and value < self.min:
            return f"{_show(value)} is below the minimum {_show(self.min)}"
        if self.max is not None and value > self.max:
            return f"{_show(value)} is above the maximum {_show(self.max)}"
        if self.pow2 and (value < 1 or value & (value - 1)):
            return f"{value} is not a power of two"
        if self.multiple_of and value % self.multiple_of:
            return f"{value} is not a multiple of {self.multiple_of}"
        return None

    def coerce(self, value):
        """The value as the generator sees it (ints accepted for floats become floats)."""
        return float(value) if self.type == "float" else value

    def parse(self, text: str):
        """Parse a ``-D name=value`` override per the declared type; raises ValueError with a reason."""
        text = text.strip()
        if self.type == "int":
            try:
                return int(text, 0)
            except ValueError:
                raise ValueError(f"expected an integer, got '{text}'") from None
        if self.type == "float":
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"expected a number, got '{text}'") from None
        if self.type == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError(f"expected true or false, got '{text}'")
        return text

    # ------------------------------------------------------------------ description
    def allowed(self) -> str:
        """The allowed values in words, for ``isagen list`` and error messages."""
        parts = []
        if self.choices is not None:
            parts.append(" | ".join(_show(c) for c in self.choices))
        if self.pow2:
            parts.append("power of two")
        if self.multiple_of:
            parts.append(f"multiple of {self.multiple_of}")
        if self.min is not None or self.max is not None:
            lo = _show(self.min) if self.min is not None else ""
            hi = _show(self.max) if self.max is not None else ""
            parts.append(f"{lo}..{hi}")
        return ", ".join(parts) or "any"


def _show(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)
    if isinstance(value, str):
        return f"'{value}'"
    if value is None:
        return "null"
    return repr(value) if not isinstance(value, (list, dict)) else f"a {type(value).__name__}"


class Params(Mapping[str, Any]):
    """A spec's resolved parameters, as the generator sees them: ``p.block``, ``p.dtype``.

    Each generator gets its own frozen dataclass, made from its declared ``params``
    (``Generator.params_type``: one field per parameter, typed ``int``/``float``/``bool``/``str`` as
    declared, default as declared), with ``name`` first: the kernel (spec) name, which becomes the
    kernel symbol.  Type checkers see these classes in ``isagen/builders/params.pyi`` (generated by
    ``python -m isagen.builders.stubgen``), so a generator annotates ``p: ElementwiseParams``.

    It is also a read-only mapping of the parameters without ``name`` (``dict(p)``, ``p.items()``,
    ``p.get(key)``), in declaration order: the cache key, ``-D`` round trips and the ``.s`` header's
    ``params:`` line read it that way.  ``params_from`` makes one from a plain dict."""

    name: str
    #: the parameter fields (every field but ``name``), in declaration order; set per subclass
    param_names: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:
        # what the dataclass made for each generator takes: the name, then the declared parameters
        def __init__(self, name: str, **values: Any) -> None: ...

    def __getitem__(self, key: str) -> Any:
        if key not in self.param_names:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.param_names)

    def __len__(self) -> int:
        return len(self.param_names)

    # Only reached for names that are not fields: the old one-line reason.  Hidden from type
    # checkers, which would read it as "any attribute is Any": they see each generator's fields in
    # isagen/builders/params.pyi (``p: ElementwiseParams``) and flag a misspelt parameter.
    if not TYPE_CHECKING:
        def __getattr__(self, key: str) -> Any:
            raise AttributeError(f"no parameter '{key}'")

    def describe(self) -> str:
        return " ".join(f"{k}={_plain(v)}" for k, v in self.items())


_FIELD_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str}


def make_params_type(class_name: str, params: dict[str, Param]) -> type[Params]:
    """The frozen dataclass (a ``Params``) for a generator declaring ``params``."""
    fields = [("name", str)] + [(k, _FIELD_TYPES[p.type], field(default=p.default)) for k, p in params.items()]
    cls = cast("type[Params]", value_methods(make_record(class_name, fields, bases=(Params,), frozen=True,
                                                            repr=False, eq=False)))
    cls.param_names = tuple(params)
    return cls


def _class_name(generator_name: str) -> str:
    """``gemm_bf16`` -> ``GemmBf16Params`` (the name its parameters' dataclass shows in reprs)."""
    return "".join(part.capitalize() for part in generator_name.split("_")) + "Params"


def params_from(values: dict[str, Any], name: str) -> Any:
    """A ``Params`` for values that no generator declared (tests, a plan rebuilt from a cache key):
    field types are the values' own.  Typed ``Any``: no type checker can know its fields."""
    fields = [("name", str)] + [(k, type(v)) for k, v in values.items()]
    cls = cast("type[Params]", value_methods(make_record("Params_" + name, fields, bases=(Params,), frozen=True,
                                                            repr=False, eq=False)))
    cls.param_names = tuple(values)
    return cls(name, **values)


def _plain(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@value_methods
@record(frozen=True, repr=False, eq=False)
class Launch:
    """How to launch a kernel for given shapes: grid in workgroups (HIP convention), workgroup size."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    lds_dynamic: int = 0

    @property
    def workgroups(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@value_methods
@record(repr=False, eq=False)
class Generator:
    """A registered kernel generator: its function, declared parameters, targets and launch contract."""

    name: str
    fn: Callable
    params: dict[str, Param]
    doc: str = ""
    targets: tuple[str, ...] = tuple(TARGETS)
    shapes: dict[str, str] = field(default_factory=dict)   # run-time shape name -> meaning
    validate: Callable | None = None
    check: Callable | None = None
    launch: Callable | None = None
    source: str = ""
    #: the frozen dataclass its parameters resolve to, made from ``params``
    params_type: type[Params] = field(init=False)

    def __post_init__(self) -> None:
        self.params_type = make_params_type(_class_name(self.name), self.params)

    def make_params(self, values: dict[str, Any], name: str) -> Params:
        """This generator's ``Params`` from resolved values (every declared parameter, validated)."""
        return self.params_type(name, **values)

    def defaults(self) -> dict:
        return {k: p.default for k, p in self.params.items()}

    def unknown_param(self, key: str) -> str:
        """One-line reason for an unknown parameter name, with a suggestion."""
        import difflib
        near = difflib.get_close_matches(key, self.params, n=1)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        known = ", ".join(self.params) or "none"
        return f"unknown parameter '{key}' for generator '{self.name}'{hint}; known: {known}"

    def launch_info(self, params: Params, target):
        """The launch contract (``isagen.builders.contract.LaunchInfo``) of the kernel these parameters build."""
        if self.launch is None:
            raise LaunchError(f"generator '{self.name}' declares no launch contract")
        return self.launch(params, target)

    def launch_dims(self, params: Params, shapes: dict, target) -> Launch:
        """Grid (workgroups) and workgroup size for these sizes, after checking the contract's
        requirements; what ``hipModuleLaunchKernel`` gets."""
        info = self.launch_info(params, target)
        missing = [s for s in info.size_symbols if s not in shapes]
        if missing:
            raise LaunchError(f"{params.name}: missing size(s) {', '.join(missing)} "
                              f"(the kernel takes: {', '.join(info.size_symbols)})")
        grid = info.grid_for(dict(shapes), params.name)      # grid_for refuses a size that is not an int >= 0
        return Launch(grid, tuple(info.block), info.shared_bytes)


GENERATORS: dict[str, Generator] = {}


def generator(name: str, *, params: dict[str, Param], doc: str = "", targets=tuple(TARGETS),
              shapes: dict[str, str] | None = None, validate=None, check=None, launch=None):
    """Register a kernel generator under ``name`` (the spec's ``kernel:`` value)."""
    for pname, p in params.items():
        if not pname.isidentifier() or pname == "name":
            raise ValueError(f"generator '{name}': bad parameter name {pname!r}")
        if not isinstance(p, Param):
            raise TypeError(f"generator '{name}': parameter {pname!r} must be a Param")

    def register(fn):
        source = inspect.getsourcefile(fn) or ""
        old = GENERATORS.get(name)
        if old is not None and old.source != source:
            raise ValueError(f"generator '{name}' registered twice ({old.source} and {source})")
        GENERATORS[name] = Generator(name, fn, dict(params), doc or (inspect.getdoc(fn) or "").split("\n")[0],
                                     tuple(targets), dict(shapes or {}), validate, check, launch, source)
        return fn

    return register


_LOADED = False


def load_generators() -> dict[str, Generator]:
    """Import every generator module of ``isagen.kernels`` (once) and return the registry."""
    global _LOADED
    if not _LOADED:
        # (imported here: a build imports just the generator module it needs, without pkgutil)
        import pkgutil
        package = importlib.import_module("isagen.kernels")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if info.name != "registry" and not info.name.startswith("_"):
                importlib.import_module(f"isagen.kernels.{info.name}")
        _LOADED = True
    return GENERATORS


def _module_declaring(name: str) -> str | None:
    """The one module of ``isagen.kernels`` whose source declares ``@generator("name"``, or None
    (none, or several).  A guess that saves importing every generator for one build: the registry
    decides (get_generator falls back to load_generators when the guess does not register it)."""
    import os
    package = importlib.import_module("isagen.kernels")
    needle = f'@generator("{name}"'
    found = []
    for directory in package.__path__:
        for entry in sorted(os.listdir(directory)):
            if entry.endswith(".py") and not entry.startswith("_"):
                with open(os.path.join(directory, entry), encoding="utf-8") as f:
                    if needle in f.read():
                        found.append(entry[:-3])
    return found[0] if len(found) == 1 else None


def get_generator(name: str) -> Generator:
    """The generator called ``name``; a SpecError (with a suggestion) when there is none.  Only the
    module that declares it is imported when that can be told from the sources (a one-spec build
    then skips importing the other generators); otherwise every generator module is."""
    if name not in GENERATORS and not _LOADED and isinstance(name, str):
        module = _module_declaring(name)
        if module is not None:
            importlib.import_module(f"isagen.kernels.{module}")
    if name in GENERATORS:
        return GENERATORS[name]
    gens = load_generators()
    if name not in gens:
        import difflib
        near = difflib.get_close_matches(str(name), gens, n=1)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        raise SpecError(f"unknown kernel generator '{name}'{hint}; known: {', '.join(sorted(gens)) or 'none'}")
    return gens[name]
