"""The import graph of the isagen package: no cycles, and the layers import one way only.

The graph is read from the source (``ast``), not from ``sys.modules``, so it holds every import a
module can make: module-level ones, function-local ones (a cycle through a lazy import is still a
cycle; it only fails later, and at run time) and ``importlib.import_module("literal")`` calls.

An edge goes to the module that must be imported for the statement to work:

* ``import a.b.c`` and ``from a.b import c`` where ``a.b.c`` is a module: to ``a.b.c``.
* ``from a.b import name`` where ``name`` is not a module: to ``a.b`` itself.  So a submodule that
  takes names from its own package's ``__init__`` (while that ``__init__`` imports the submodule) is
  a cycle, which is what it is at run time; the parent packages that ``import a.b.c`` initialises on
  the way are not edges (every submodule would otherwise be in a cycle with any package that imports
  one of its submodules, however harmless).

Layers, lowest first; a module may import its own layer and the layers below it, never above:

    0. ISA          isagen (the root: ``__version__``, and ``build``/``Kernel`` resolved lazily through a
                    name table, not an import statement), isagen.errors, isagen.targets, isagen.isa
    1. checks       isagen.checks
    2. builders     isagen.builders, isagen.tiles, isagen.prims
    3. generators   isagen.kernels, and the code object side: isagen.objects
    4. front ends   isagen.api, isagen.runtime, isagen.report, isagen.model
    5. commands     isagen.cli, isagen.__main__

One upward import is allowed: the generator registry's plugin loader
(``isagen.builders.registry.load_generators``) imports the ``isagen.kernels`` package and each of its
generator modules by name, so that adding a generator is adding a file.  The generators import the
registry, not the other way round, in every other sense.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "isagen"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("ISA", ("isagen", "isagen.errors", "isagen.targets", "isagen.isa")),
    ("checks", ("isagen.checks",)),
    ("builders", ("isagen.builders", "isagen.tiles", "isagen.prims")),
    ("generators", ("isagen.kernels", "isagen.objects")),
    ("front ends", ("isagen.api", "isagen.runtime", "isagen.report", "isagen.model")),
    ("commands", ("isagen.cli", "isagen.__main__")),
]

# (importing module, imported package): why this upward import is allowed
ALLOWED_UPWARD = {
    ("isagen.builders.registry", "isagen.kernels"):
        "the registry's plugin loader imports the generator modules by name",
}


# ---------------------------------------------------------------------------- reading the graph
def package_modules(root: Path, name: str = "isagen") -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name (symlinked subpackages followed:
    kernels/, runtime/ and cli.py are installed into the package that way)."""
    modules = {}
    for folder, subdirs, files in os.walk(root, followlinks=True):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            parts = [name, *Path(folder, file).relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = Path(folder, file)
    return modules


def _known(dotted: str, modules) -> str | None:
    """``dotted`` if it is a module of the package, else its longest prefix that is, else None."""
    parts = dotted.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module named by ``from <node.module> import ...`` inside ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported_names(module: str, is_package: bool, node) -> list[str]:
    """The dotted names an import statement or ``importlib.import_module("...")`` call needs."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        source = _absolute(module, is_package, node)
        return [f"{source}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name == "import_module":
            return [node.args[0].value]
    return []


def _typing_only_nodes(tree: ast.AST) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:``: imports a type checker reads and the interpreter never runs,
    so they close no cycle (the ``else:`` branch does run and is kept)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def import_edges(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module of the package: line of the first import of it}."""
    edges: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        out = edges.setdefault(module, {})
        tree = ast.parse(path.read_text(), str(path))
        typing_only = _typing_only_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            for dotted in _imported_names(module, is_package, node):
                if isinstance(node, ast.ImportFrom) and dotted not in modules:
                    dotted = dotted.rsplit(".", 1)[0]      # from package import name: the package
                target = _known(dotted, modules)
                if target is not None and target != module:
                    out.setdefault(target, node.lineno)
    return edges


# ---------------------------------------------------------------------------- cycles
def _strongly_connected(edges) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _shortest_cycle(start: str, members: set[str], edges) -> list[str]:
    """The shortest path start -> ... -> start inside one component (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node]):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child in members and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in a component but on no cycle")


def _shown(path: Path) -> Path:
    """A module's file as the repository names it (isagen/report/command.py), else as given."""
    return path.relative_to(PACKAGE_ROOT.parent) if path.is_relative_to(PACKAGE_ROOT.parent) else path


def describe_cycles(edges, modules) -> list[str]:
    """One readable line per import cycle: each step names the module, file and line of the import."""
    lines = []
    for component in _strongly_connected(edges):
        chain = _shortest_cycle(component[0], set(component), edges)
        steps = [chain[0]]
        for a, b in zip(chain, chain[1:]):
            steps.append(f" -> {b} (imported at {_shown(modules[a])}:{edges[a][b]})")
        lines.append("".join(steps) + f"   [{len(component)} modules in this cycle: {', '.join(component)}]")
    return lines


# ---------------------------------------------------------------------------- layers
def layer_of(module: str) -> int | None:
    best = None
    for rank, (_, packages) in enumerate(LAYERS):
        for package in packages:
            if (module == package or module.startswith(package + ".")) and \
                    (best is None or len(package) > len(best[1])):
                best = (rank, package)
    return None if best is None else best[0]


def upward_imports(edges, modules) -> list[str]:
    problems = []
    for module, targets in sorted(edges.items()):
        for target, line in sorted(targets.items()):
            mine, theirs = layer_of(module), layer_of(target)
            if mine is None or theirs is None or theirs <= mine:
                continue
            if any(module == m and (target == p or target.startswith(p + "."))
                   for m, p in ALLOWED_UPWARD):
                continue
            problems.append(f"{module} (layer {LAYERS[mine][0]}) imports {target} (layer {LAYERS[theirs][0]}) "
                            f"at {modules[module].name}:{line}")
    return problems


# ---------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def graph():
    modules = package_modules(PACKAGE_ROOT)
    return modules, import_edges(modules)


def test_the_package_has_no_import_cycle(graph):
    modules, edges = graph
    cycles = describe_cycles(edges, modules)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_every_module_belongs_to_a_layer(graph):
    modules, _ = graph
    homeless = sorted(m for m in modules if layer_of(m) is None)
    assert not homeless, f"place these modules in LAYERS (tests/test_imports.py): {', '.join(homeless)}"


def test_layers_import_downward_only(graph):
    modules, edges = graph
    problems = upward_imports(edges, modules)
    assert not problems, "imports against the layer order (see this file's docstring):\n" + "\n".join(problems)


def test_the_allowed_upward_import_still_exists(graph):
    """An exception nobody needs any more must go, not linger as a licence."""
    _, edges = graph
    for module, package in ALLOWED_UPWARD:
        assert any(t == package or t.startswith(package + ".") for t in edges.get(module, ())), \
            f"{module} no longer imports {package}: drop it from ALLOWED_UPWARD"


def _modules_loaded_by(statement: str) -> set[str]:
    """Top-level names in ``sys.modules`` after ``statement`` runs in a fresh interpreter."""
    code = f"import sys\n{statement}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return set(done.stdout.split())


def test_heavy_optional_packages_stay_lazy():
    """``import isagen`` loads neither torch nor yaml (``build``/``Kernel`` load on first use), and the
    front ends import torch, hip-python and matplotlib only inside the functions that need them."""
    assert not {"torch", "yaml"} & _modules_loaded_by("import isagen")
    front_ends = "import isagen.api, isagen.cli, isagen.report, isagen.runtime.backends, isagen.runtime.run"
    assert not {"torch", "hip", "matplotlib", "triton"} & _modules_loaded_by(front_ends)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_lazy_and_dynamic_imports_is_found_and_told_as_a_chain(tmp_path):
    """The checker itself: a cycle closed by a function-local import and an ``import_module`` call,
    plus a submodule that takes a name from its own package's ``__init__``."""
    _write(tmp_path, {
        "__init__.py": "",
        "a.py": "import isagen.b\n",
        "b.py": "def f():\n    from isagen.c import g\n    return g\n",
        "c.py": "import importlib\n\ndef g():\n    return importlib.import_module('isagen.a')\n",
        "d.py": "from isagen import b\n",                            # no cycle: b is a module
        "e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from isagen.f import F\n",
        "f.py": "import isagen.e\nF = 1\n",                          # no cycle: e's import is typing-only
        "p/__init__.py": "from isagen.p.q import run\nNAME = 1\n",
        "p/q.py": "from isagen.p import NAME\n\ndef run():\n    return NAME\n",
    })
    modules = package_modules(tmp_path)
    edges = import_edges(modules)
    assert edges["isagen.b"] == {"isagen.c": 2} and edges["isagen.c"] == {"isagen.a": 4}
    assert edges["isagen.d"] == {"isagen.b": 1}
    assert edges["isagen.e"] == {} and edges["isagen.f"] == {"isagen.e": 1}
    cycles = describe_cycles(edges, modules)
    assert cycles == [
        f"isagen.a -> isagen.b (imported at {tmp_path}/a.py:1) -> isagen.c (imported at {tmp_path}/b.py:2)"
        f" -> isagen.a (imported at {tmp_path}/c.py:4)   [3 modules in this cycle: isagen.a, isagen.b, isagen.c]",
        f"isagen.p -> isagen.p.q (imported at {tmp_path}/p/__init__.py:1) -> isagen.p (imported at {tmp_path}/p/q.py:1)"
        f"   [2 modules in this cycle: isagen.p, isagen.p.q]"]


def test_an_upward_import_is_named_with_both_layers():
    modules = {"isagen.isa.table": Path("table.py"), "isagen.runtime.gpu": Path("gpu.py"),
               "isagen.builders.registry": Path("registry.py"), "isagen.kernels": Path("__init__.py")}
    edges = {"isagen.isa.table": {"isagen.runtime.gpu": 7}, "isagen.runtime.gpu": {"isagen.isa.table": 3},
             "isagen.builders.registry": {"isagen.kernels": 270}, "isagen.kernels": {}}
    assert upward_imports(edges, modules) == [
        "isagen.isa.table (layer ISA) imports isagen.runtime.gpu (layer front ends) at table.py:7"]
