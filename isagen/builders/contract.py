"""The launch contract: what a launch of a built kernel needs, as plain data: its tensors, scalars, argument sources,
grid and workgroup size.

A kernel generator's registry entry describes these (``launch(p, target) -> LaunchInfo``, see
``isagen/builders/registry.py`` and docs/specs.md "Launch contract"); ``isagen.build`` stores the result with
the code object in the cache, so a cached kernel launches without regenerating anything.

Integer expressions (grid dimensions, size-valued kernel arguments, requirements) are small Python
expressions over size symbols and parameters: ``+ - * // % ( )``, comparisons, ``and``/``or``/``not``
and the functions ``cdiv(a, b)``, ``min``, ``max``.  They are parsed once and evaluated without
``eval``.
"""

from __future__ import annotations

import ast
import functools
import operator
from dataclasses import asdict, field

from isagen.errors import LaunchError, SpecError
from isagen.records import record, value_methods

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}
_FUNCS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}
_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Name, ast.Load, ast.Constant,
          ast.Call, ast.USub, ast.Not, ast.And, ast.Or, *_BINOPS, *_CMPOPS)


MAX_GRID_ITEMS = 2 ** 32 - 1        # work-items per grid dimension in an HSA dispatch packet


@functools.lru_cache(maxsize=512)
def _parse(text: str, where: str) -> ast.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise SpecError(f"{where}: cannot parse expression '{text}'") from None
    for node in ast.walk(tree):
        ok = isinstance(node, _NODES)
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, int)):
            ok = False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                                               and not node.keywords):
            ok = False
        if not ok:
            raise SpecError(f"{where}: '{text}' uses something other than integers, names, + - * // %, "
                            f"comparisons and {', '.join(_FUNCS)}")
    return tree


def evaluate(text, env: dict, where: str = "expression"):
    """Value of an integer expression (``text`` may also be an int) with names from ``env``."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    text = str(text)
    tree = _parse(text, where)

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise SpecError(f"{where}: '{text}' names '{node.id}', which is not a size or parameter "
                                f"(known: {', '.join(sorted(env)) or 'none'})")
            return env[node.id]
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
                raise LaunchError(f"{where}: '{text}' divides by zero")
            return _BINOPS[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else (not v)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right in zip(node.ops, node.comparators):
                r = ev(right)
                if not _CMPOPS[type(op)](left, r):
                    return False
                left = r
            return True
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Call):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise AssertionError(node)

    return ev(tree)


def names_in(text) -> set[str]:
    """The size/parameter names an expression uses."""
    if isinstance(text, int):
        return set()
    return {n.id for n in ast.walk(_parse(str(text), "expression")) if isinstance(n, ast.Name)} - set(_FUNCS)


@value_methods
@record(frozen=True, repr=False, eq=False)
class TensorParam:
    """A tensor the kernel takes: element type, shape (size symbols or fixed ints), and whether the
    kernel reads it (``in``), writes it (``out``) or both (``inout``)."""

    name: str
    dtype: str                       # isagen element type: f32, bf16, f16, fp8, ...
    shape: tuple                     # e.g. ("n",) or ("m", 128)
    role: str = "in"                 # in | out | inout
    # what random inputs (isagen run) must look like when not any numbers: "offsets:<size>" = cumulative
    # offsets from 0 to that size, non-decreasing (flash-attn's cu_seqlens); "positive" = uniform in
    # [0.5, 2) (a quantization scale); "e8m0" = E8M0 scale bytes 120..134 (2^-7..2^7, MX block scales);
    # "" = random numbers
    fill: str = ""

    @property
    def written(self) -> bool:
        return self.role in ("out", "inout")


@value_methods
@record(frozen=True, repr=False, eq=False)
class ScalarParam:
    """A scalar the caller passes (by name) at launch."""

    name: str
    dtype: str                       # a kernarg value type: f32, i32, u32, ...
    default: float | int | None = None
    bounds: tuple | None = None      # (low, high), both allowed: the values the kernel's math is defined for

    def problem(self, value) -> str | None:
        """Why ``value`` is outside ``bounds`` (NaN always is), or None."""
        if self.bounds is None:
            return None
        low, high = self.bounds
        try:
            inside = bool(low <= value <= high)
        except TypeError:
            return None                  # not a number at all: the kernel-argument packing says so
        return None if inside else f"must be in [{low}, {high}], got {value!r}"


@value_methods
@record(frozen=True, repr=False, eq=False)
class LaunchInfo:
    """Everything a launch needs besides the code object (resolved: no spec parameters left)."""

    tensors: tuple[TensorParam, ...]
    scalars: tuple[ScalarParam, ...] = ()
    grid: tuple = (1, 1, 1)                       # workgroups per dimension: int expressions over sizes
    block: tuple[int, int, int] = (64, 1, 1)      # the kernel's workgroup size
    kernargs: dict = field(default_factory=dict)  # kernel argument -> tensor / scalar / size expression
    requires: tuple = ()                          # (expression, message) pairs the sizes must satisfy
    constants: dict = field(default_factory=dict)  # resolved parameters the expressions may name
    shared_bytes: int = 0                          # dynamic LDS

    def __post_init__(self):
        object.__setattr__(self, "tensors", tuple(self.tensors))
        object.__setattr__(self, "scalars", tuple(self.scalars))
        object.__setattr__(self, "grid", tuple(self.grid))
        object.__setattr__(self, "block", tuple(int(b) for b in self.block))
        object.__setattr__(self, "requires", tuple(tuple(r) for r in self.requires))
        names = [t.name for t in self.tensors] + [s.name for s in self.scalars]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise SpecError(f"launch contract names {', '.join(sorted(dup))} twice")
        for t in self.tensors:
            if t.role not in ("in", "out", "inout"):
                raise SpecError(f"tensor '{t.name}': role must be in, out or inout, got '{t.role}'")
        if len(self.grid) != 3 or len(self.block) != 3:
            raise SpecError("launch contract: grid and block have three dimensions")
        for i, g in enumerate(self.grid):
            if not isinstance(g, int):
                _parse(str(g), f"grid[{i}]")
        for expr, _ in self.requires:
            _parse(str(expr), "requires")

    @property
    def size_symbols(self) -> list[str]:
        out = []
        for t in self.tensors:
            for d in t.shape:
                if isinstance(d, str) and d not in out:
                    out.append(d)
        return out

    def source_of(self, kernarg: str):
        """What feeds kernel argument ``kernarg``: ``("tensor", name)``, ``("scalar", name)`` or
        ``("size", expression)``.  By default an argument takes the tensor, scalar or size of its own name."""
        src = self.kernargs.get(kernarg, kernarg)
        if isinstance(src, str):
            if any(t.name == src for t in self.tensors):
                return ("tensor", src)
            if any(s.name == src for s in self.scalars):
                return ("scalar", src)
        return ("size", src)

    def grid_for(self, sizes: dict, what: str = "kernel") -> tuple[int, int, int]:
        """Workgroups per dimension for these sizes, after checking ``requires`` (LaunchError naming
        the sizes when one fails)."""
        checked: dict[str, int] = {}
        for name, value in sizes.items():
            size = -1
            if not isinstance(value, bool):
                try:                              # an integer of any kind (numpy's too), never 1.5 or True
                    size = operator.index(value)
                except TypeError:
                    pass
            if size < 0:
                raise LaunchError(f"{what}: size {name}={value!r} is not a size (an integer >= 0)")
            checked[name] = size
        sizes = checked
        env = {**self.constants, **sizes}
        for expr, message in self.requires:
            if not evaluate(expr, env, f"{what}: requires"):
                shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
                raise LaunchError(f"{what}: {message} ({shown})")
        grid = tuple(evaluate(g, env, f"{what}: grid[{i}]") for i, g in enumerate(self.grid))
        if any(not isinstance(g, int) or isinstance(g, bool) or g < 0 for g in grid):
            raise LaunchError(f"{what}: the launch rule gives grid {grid} for sizes {sizes}")
        # the dispatch packet holds the grid in work-items, 32 bits per dimension (hsa_kernel_dispatch_packet_t)
        for i, (g, b) in enumerate(zip(grid, self.block)):
            if g * b > MAX_GRID_ITEMS:
                shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
                raise LaunchError(f"{what}: sizes {shown} need {g} workgroups of {b} in dimension {i}, more "
                                  f"than a dispatch can address ({MAX_GRID_ITEMS} work-items)")
        return grid

    def to_json(self) -> dict:
        d = asdict(self)
        d["requires"] = [list(r) for r in self.requires]
        return d

    @classmethod
    def from_json(cls, d: dict) -> LaunchInfo:
        return cls(tensors=tuple(TensorParam(t["name"], t["dtype"], tuple(t["shape"]), t["role"], t.get("fill", ""))
                                 for t in d["tensors"]),
                   scalars=tuple(ScalarParam(s["name"], s["dtype"], s.get("default"),
                                             tuple(s["bounds"]) if s.get("bounds") is not None else None)
                                 for s in d["scalars"]),
                   grid=tuple(d["grid"]), block=tuple(d["block"]), kernargs=dict(d["kernargs"]),
                   requires=tuple(tuple(r) for r in d["requires"]), constants=dict(d["constants"]),
                   shared_bytes=int(d.get("shared_bytes", 0)))
