"""YAML kernel specs: load, validate against the generator's declared schema, build.

A spec names its generator and fixes the parameters of one kernel::

    kernel: elementwise             # the generator (isagen/builders/registry.py)
    name: axpy_f32                  # the kernel symbol and the output file stem
    description: y = alpha*x + y in fp32
    targets: [gfx942, gfx950]       # what `isagen gen --target all` builds
    params: {op: axpy, dtype: f32, block: 256, vec: 4}
    shapes: {n: 1000000}            # default run-time shapes (isagen run, benchmarks)
    emulator_shapes: {n: 65536}     # optional: isagen run's defaults on the emulator, in place of shapes
    reference: alpha * x + y        # torch expression (or a reference-function name) for runtime checks
    tolerance: {rtol: 1e-5, reduction: k}   # optional: how far the output may be from the reference

Every problem is a ``SpecError`` whose message is one line naming the file, the line and the field::

    specs/axpy_f32.yaml:7: params.block: 100 is not a power of two

``-D name=value`` overrides (``load_spec(path, overrides=["block=128"])``) are parsed per the declared
parameter type and validated the same way.  See docs/specs.md.
"""

from __future__ import annotations

import ast
import re
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from isagen.builders.program import KernelBuilder, Program, cyclic_gc_paused
from isagen.builders.registry import Generator, Params, get_generator
from isagen.errors import IsagenError, SpecError
from isagen.isa.defs_cache import load_copy, store_copy
from isagen.records import record, value_methods
from isagen.targets import TARGETS, Target, build_target, get_target

if TYPE_CHECKING:
    import yaml

FIELDS = ("kernel", "name", "description", "targets", "params", "shapes", "emulator_shapes", "reference",
          "tolerance")
TOLERANCE_KEYS = ("rtol", "atol", "reduction", "accumulate", "magnitude", "bound")
ACCUMULATE = ("f32", "f64", "f16", "bf16")
REQUIRED = ("kernel", "name", "targets")


def bundled_specs_dir() -> Path:
    """The specs shipped with isagen (``specs/`` of the repository, ``isagen/specs`` when installed)."""
    return Path(__file__).resolve().parent.parent / "specs"


@value_methods
@record(repr=False, eq=False)
class Override:
    """One ``-D name=value`` given on the command line (or to ``load_spec``)."""

    name: str
    text: str          # the value as written after '='

    def __str__(self) -> str:
        return f"-D {self.name}={printable(self.text)}"


def printable(text: str) -> str:
    """``text`` as typed, or its repr when it holds a newline or another control character: an error
    message quoting the user's text stays one line."""
    return text if text.isprintable() else repr(text)


def one_line(message: str) -> str:
    """``message`` with every control character (a newline in a quoted key or value) escaped as Python
    writes it, so that an error quoting the user's text is still one line."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def _as_overrides(items) -> list[Override]:
    return [o if isinstance(o, Override) else parse_overrides([o])[0] for o in items or ()]


def parse_overrides(items) -> list[Override]:
    """``["block=128", "dtype=bf16"]`` -> overrides; a malformed item is a SpecError."""
    out = []
    for item in items or []:
        name, sep, text = str(item).partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise SpecError(f"-D {printable(str(item))}: expected name=value (for example -D block=128)")
        out.append(Override(name, text))
    return out


@value_methods
@record(repr=False, eq=False)
class Spec:
    """A loaded spec file: its generator, resolved parameters and targets."""

    path: str                         # as given (for messages; the .s header writes only the file name)
    name: str
    kernel: str
    description: str
    targets: tuple[str, ...]
    params: Params
    shapes: dict
    reference: str | None
    generator: Generator
    lines: dict = field(default_factory=dict)        # "params.block" -> line number in the file
    overridden: dict = field(default_factory=dict)   # param name -> Override
    tolerance: dict = field(default_factory=dict)    # rtol, atol, reduction, accumulate; or bound (docs/specs.md)
    # isagen run's default sizes on the emulator, where they differ from ``shapes`` (docs/specs.md)
    emulator_shapes: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ messages
    def where(self, fieldname: str) -> str:
        """``file:line: field`` (or ``file: -D x=y: field`` for an override) as an error prefix."""
        pname = fieldname.split(".", 1)[1] if fieldname.startswith("params.") else None
        if pname and pname in self.overridden:
            return f"{self.path}: {self.overridden[pname]}: {fieldname}"
        line = self.lines.get(fieldname)
        if line is None and pname:
            return f"{self.path}: {fieldname} (default {self.params.get(pname)!r})"
        return f"{self.path}:{line}: {fieldname}" if line else f"{self.path}: {fieldname}"

    def error(self, fieldname: str, message: str) -> SpecError:
        return SpecError(one_line(f"{self.where(fieldname)}: {message}"))

    # ------------------------------------------------------------------ targets
    def select_targets(self, which: str | None = None) -> list[Target]:
        """``None``/``"all"``: every target the spec lists; otherwise that one (which the spec must list)."""
        if which in (None, "all"):
            return [get_target(t) for t in self.targets]
        target = build_target(which)
        if target.name not in self.targets:
            raise self.error("targets", f"the spec lists {', '.join(self.targets)}; "
                                        f"target {target.name} is not one of them")
        return [target]

    # ------------------------------------------------------------------ building
    def header(self) -> list[str]:
        # the file name, not the path as given: the .s must not differ between checkouts
        lines = [f"spec: {Path(self.path).name} (generator '{self.kernel}')"]
        if self.description:
            lines.append(f"description: {self.description}")
        lines.append(f"params: {self.params.describe()}")
        if self.reference:
            lines.append(f"reference: {self.reference}")
        return lines

    def validate(self, target) -> Target:
        """Check that this spec can be built for ``target`` (listed, and the generator's own rules for
        parameter combinations); returns the Target.  Cheap: nothing is built."""
        target = self.select_targets(target.name if isinstance(target, Target) else target)[0]
        gen = self.generator
        for fieldname, message in (gen.validate(self.params, target) if gen.validate else []):
            raise self.error(f"params.{fieldname}", message)
        return target

    def build(self, target, *, force: bool = False):
        """Spec + target -> finished ``Program`` (checks run).  With ``force``, rejections of a kernel
        that can be built are recorded in ``Program.rejected`` (and the .s header) instead of raised."""
        target = self.validate(target)
        gen = self.generator
        try:
            with cyclic_gc_paused():
                result = gen.fn(self.params, target)
                if isinstance(result, KernelBuilder):
                    result.header[:0] = self.header()
                    program = result.finish(force=force)
                elif isinstance(result, Program):
                    program = result
                else:
                    raise TypeError(f"generator '{gen.name}' returned {type(result).__name__}, "
                                    "not a KernelBuilder or Program")
        except IsagenError as e:
            raise _with_prefix(e, self.path, target) from None
        rejections = gen.check(self.params, target, program) if gen.check else []
        if rejections:
            if not force:
                fieldname, message = rejections[0]
                more = f" (and {len(rejections) - 1} more)" if len(rejections) > 1 else ""
                raise self.error(f"params.{fieldname}", f"{message}{more}; --force emits it anyway")
            reasons = [f"params.{f}: {m}" for f, m in rejections]
            program.rejected = "; ".join(([program.rejected] if program.rejected else []) + reasons)
        return program

    def launch_info(self, target):
        """The launch contract (``isagen.builders.contract.LaunchInfo``) of this spec's kernel on ``target``."""
        return self.generator.launch_info(self.params, get_target(target))

    def launch_dims(self, target, shapes: dict | None = None):
        """Grid and workgroup size for ``shapes`` (default: the spec's ``shapes:``)."""
        merged = dict(self.shapes)
        merged.update(shapes or {})
        return self.generator.launch_dims(self.params, merged, get_target(target))


def _with_prefix(error: IsagenError, path: str, target: Target) -> IsagenError:
    """The same kind of error, its message prefixed with the spec and target (once)."""
    text = str(error)
    if text.startswith(path):
        return error
    text = f"{path} [{target.name}]: {text}"
    try:
        new = type(error)(text)
    except TypeError:                      # a subclass with a different constructor
        new = IsagenError(text)
        new.exit_code = error.exit_code
    return new


# ---------------------------------------------------------------------- loading
def load_spec(path, overrides=()) -> Spec:
    """Read and validate one spec file; ``overrides`` are ``-D`` strings or ``Override``s."""
    path_text = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise SpecError(f"{path_text}: no such spec file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise SpecError(f"{path_text}: cannot read the spec ({e.__class__.__name__})") from None
    return parse_spec(text, path_text, overrides)


def load_specs(paths, overrides=()) -> list[Spec]:
    """Specs from files and directories (a directory gives its ``*.yaml`` files, sorted)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
            if not found:
                raise SpecError(f"{p}: no *.yaml specs in this directory")
            files += found
        else:
            files.append(p)
    return [load_spec(f, overrides) for f in files]


# Limits of the YAML a spec may hold.  A spec is a few small mappings, so these are far above any real
# one; they turn inputs that would otherwise end in a RecursionError (deep nesting: PyYAML composes and
# constructs recursively) or a ValueError (Python refuses int() of more than 4300 digits) into one line.
MAX_DEPTH = 32            # nesting of mappings/sequences
MAX_INT_DIGITS = 40       # a 128-bit integer has 39 digits; no parameter or size comes near it
NAME_MAX_CHARS = 128      # a kernel symbol: see _check_name


_LOADER: type | None = None


def _loader_class() -> type:
    """The spec loader (made on first use, so that a spec read from its parsed copy imports no yaml)."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class _Loader(yaml.SafeLoader):
            """Safe YAML that refuses what a spec can never hold before constructing Python values from
            it: nesting deeper than ``MAX_DEPTH`` (checked while composing, so the composer never
            recurses that far), collections as mapping keys, integers of more than ``MAX_INT_DIGITS``
            digits; and reports duplicate mapping keys instead of silently overwriting them."""

            _depth = 0

            def compose_node(self, parent, index):
                self._depth += 1
                try:
                    if self._depth > MAX_DEPTH:
                        mark = self.peek_event().start_mark
                        raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                                          mark)
                    return super().compose_node(parent, index)
                finally:
                    self._depth -= 1

        _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
        _LOADER = _Loader
    return _LOADER


def _check_nodes(root: yaml.Node) -> None:
    """The schema walk over the composed node tree: every mapping key a scalar, every integer of a
    sane length.  Iterative, and each node once (aliases may share or even contain nodes)."""
    import yaml
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    kind = "mapping" if isinstance(key, yaml.MappingNode) else "list"
                    raise yaml.constructor.ConstructorError(
                        None, None, f"a {kind} used as a mapping key (keys are names or plain values)",
                        key.start_mark)
                stack += (key, value)
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
        elif node.tag == "tag:yaml.org,2002:int":
            digits = sum(c.isalnum() for c in node.value)
            if digits > MAX_INT_DIGITS:
                raise yaml.constructor.ConstructorError(
                    None, None, f"an integer of {digits} digits is out of range", node.start_mark)


def _construct_mapping(loader, node, deep=False):
    import yaml
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (first at line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


def _load_yaml(text: str, path: str):
    """``(root node, data)`` of one YAML document, or a SpecError: the one guarded load every spec goes
    through (the reader refuses control characters already in the loader's constructor)."""
    import yaml
    loader = None
    try:
        loader = _loader_class()(text)  # one parse: the node tree (line numbers) and the data from it
        root = loader.get_single_node()
        if root is None:
            return None, None
        _check_nodes(root)
        return root, loader.construct_document(root)
    except yaml.reader.ReaderError as e:     # no mark: the line is where its character is
        line = text.count("\n", 0, e.position) + 1
        raise SpecError(f"{path}:{line}: malformed YAML: {str(e).splitlines()[0]}") from None
    except yaml.YAMLError as e:
        raise _yaml_error(path, e) from None
    finally:
        if loader is not None:
            loader.dispose()


def _parse_fields(text: str, path: str) -> tuple[dict, dict[str, int]]:
    """The spec's data (a mapping) and the line of each top-level field and of its direct children
    (``params.block``, ``shapes.n``, ``targets[0]``), or a SpecError.  A text seen before is read
    from its parsed copy (``isagen.isa.defs_cache``: keyed by the text, the PyYAML and Python; only
    specs that parsed cleanly are kept), without yaml."""
    source = text.encode("utf-8", "surrogatepass")
    kept = load_copy("spec", source)
    if (isinstance(kept, tuple) and len(kept) == 2 and isinstance(kept[0], dict)
            and isinstance(kept[1], dict)):
        return kept[0], kept[1]
    import yaml
    root, data = _load_yaml(text, path)
    if root is None:
        raise SpecError(f"{path}: the spec is empty (needs at least: {', '.join(REQUIRED)})")
    if not isinstance(root, yaml.MappingNode) or not isinstance(data, dict):
        raise SpecError(f"{path}:{root.start_mark.line + 1}: a spec is a mapping of fields "
                        f"({', '.join(FIELDS)}), got {_kind(data)}")
    lines: dict[str, int] = {}
    for key_node, value_node in root.value:
        key = str(key_node.value)
        lines[key] = key_node.start_mark.line + 1
        if isinstance(value_node, yaml.MappingNode):
            for k2, _ in value_node.value:
                lines[f"{key}.{k2.value}"] = k2.start_mark.line + 1
        elif isinstance(value_node, yaml.SequenceNode):
            for i, item in enumerate(value_node.value):
                lines[f"{key}[{i}]"] = item.start_mark.line + 1
    store_copy("spec", source, (data, lines))
    return data, lines


def _yaml_error(path: str, e: yaml.YAMLError) -> SpecError:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else path
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    context_mark = getattr(e, "context_mark", None)
    detail = problem
    if context and "duplicate" not in problem:
        started = ""
        if context_mark is not None and mark is not None and context_mark.line != mark.line:
            started = f" that starts at line {context_mark.line + 1}"
        detail = f"{problem} ({context}{started})"
    return SpecError(f"{where}: malformed YAML: {detail}")


def parse_spec(text: str, path: str = "<spec>", overrides=()) -> Spec:
    """Validate spec text (see the module docstring); ``path`` is used in messages."""
    if not isinstance(text, str):
        raise SpecError(f"{path}: spec text must be a string, got {type(text).__name__}")
    # the data, and the line numbers of top-level fields and of their direct children (params.block, shapes.n)
    data, lines = _parse_fields(text, path)

    def err(fieldname: str, message: str) -> SpecError:
        line = lines.get(fieldname) or lines.get(fieldname.split(".")[0].split("[")[0])
        # keys and values are quoted from the file as they are: one_line escapes a newline in them
        return SpecError(one_line(f"{path}:{line}: {fieldname}: {message}" if line
                                  else f"{path}: {fieldname}: {message}"))

    for key in data:
        if not isinstance(key, str):
            raise err(str(key), f"field names are strings, got {_kind(key)}")
        if key not in FIELDS:
            import difflib
            near = difflib.get_close_matches(key, FIELDS, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise err(key, f"unknown field{hint}; a spec has: {', '.join(FIELDS)}")
    for key in REQUIRED:
        if key not in data:
            raise SpecError(f"{path}: missing required field '{key}'")

    # kernel / name / description
    kernel = data["kernel"]
    if not isinstance(kernel, str):
        raise err("kernel", f"expected a generator name, got {_kind(kernel)}")
    try:
        gen = get_generator(kernel)
    except SpecError as e:
        raise err("kernel", str(e)) from None
    name = data["name"]
    problem = _check_name(name)
    if problem:
        raise err("name", problem)
    description = data.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise err("description", f"expected a string, got {_kind(description)}")
    description = " ".join(description.split())

    # targets
    targets = data["targets"]
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not targets:
        raise err("targets", f"expected a non-empty list of targets, got {_kind(targets)}")
    seen = []
    for i, t in enumerate(targets):
        fname = f"targets[{i}]"
        if not isinstance(t, str):
            raise err(fname, f"expected a target name, got {_kind(t)}")
        if t not in TARGETS:
            raise err(fname, f"unknown target '{t}' (isagen supports: {', '.join(TARGETS)})")
        if t not in gen.targets:
            raise err(fname, f"generator '{gen.name}' does not support {t} (it supports: {', '.join(gen.targets)})")
        if t in seen:
            raise err(fname, f"target {t} listed twice")
        seen.append(t)

    # params: file values, then -D overrides, validated against the schema
    raw = _mapping_field(data, "params")
    if not isinstance(raw, dict):
        raise err("params", f"expected a mapping of parameter: value, got {_kind(raw)}")
    values = gen.defaults()
    for key, value in raw.items():
        fname = f"params.{key}"
        if key not in gen.params:
            raise err(fname, gen.unknown_param(str(key)))
        problem = gen.params[key].problem(value)
        if problem:
            raise err(fname, problem)
        values[key] = gen.params[key].coerce(value)
    overridden = {}
    for ov in _as_overrides(overrides):
        prefix = f"{path}: {ov}: params.{ov.name}"
        if ov.name not in gen.params:
            raise SpecError(f"{prefix}: {gen.unknown_param(ov.name)}")
        schema = gen.params[ov.name]
        try:
            value = schema.parse(ov.text)
        except ValueError as e:
            raise SpecError(f"{prefix}: {e}") from None
        problem = schema.problem(value)
        if problem:
            raise SpecError(f"{prefix}: {problem}")
        values[ov.name] = schema.coerce(value)
        overridden[ov.name] = ov

    # shapes: default run-time shapes, named by the generator; emulator_shapes: the same for isagen run
    # on the emulator (sizes it leaves out come from shapes)
    size_fields: dict[str, dict] = {}
    for which in ("shapes", "emulator_shapes"):
        found = _mapping_field(data, which)
        if not isinstance(found, dict):
            raise err(which, f"expected a mapping of shape: size, got {_kind(found)}")
        for key, value in found.items():
            fname = f"{which}.{key}"
            if key not in gen.shapes:
                known = ", ".join(gen.shapes) or "none"
                raise err(fname, f"unknown shape '{key}' for generator '{gen.name}' (it takes: {known})")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise err(fname, f"expected a size (integer >= 0), got {_show(value)}")
        size_fields[which] = dict(found)

    # reference: a Python/torch expression or a reference-function name
    reference = data.get("reference")
    if reference is not None:
        if not isinstance(reference, str) or not reference.strip():
            raise err("reference", f"expected a torch expression or a reference name, got {_kind(reference)}")
        try:
            ast.parse(reference.strip(), mode="eval")
        except SyntaxError as e:
            raise err("reference", f"not a valid expression ({e.msg}): {reference.strip()}") from None
        reference = reference.strip()

    # tolerance: rtol/atol (numbers >= 0) and the reduction model (a size symbol, an accumulation type)
    tolerance = _mapping_field(data, "tolerance")
    if not isinstance(tolerance, dict):
        raise err("tolerance", f"expected a mapping (rtol, atol, reduction, accumulate), got {_kind(tolerance)}")
    tolerance = dict(tolerance)
    for key, value in tolerance.items():
        fname = f"tolerance.{key}"
        if key in ("rtol", "atol") and isinstance(value, str):
            try:                          # YAML 1.1 reads 1e-5 (no dot) as a string
                value = tolerance[key] = float(value)
            except ValueError:
                pass
        if key not in TOLERANCE_KEYS:
            raise err(fname, f"unknown key; a tolerance has: {', '.join(TOLERANCE_KEYS)}")
        if key in ("rtol", "atol") and (isinstance(value, bool) or not isinstance(value, (int, float))
                                        or not value >= 0):
            raise err(fname, f"expected a number >= 0, got {_show(value)}")
        if key == "reduction" and (not isinstance(value, str) or value not in gen.shapes):
            raise err(fname, f"expected the size symbol the output sums over (one of: {', '.join(gen.shapes)}), "
                             f"got {_show(value)}")
        if key == "accumulate" and (not isinstance(value, str) or value not in ACCUMULATE):
            raise err(fname, f"expected one of {', '.join(ACCUMULATE)}, got {_show(value)}")
        if key in ("bound", "magnitude"):
            if not isinstance(value, str) or not value.strip():
                what = ("each output's allowed error" if key == "bound" else
                        "each output's sum of absolute terms (what the reduction's growth scales)")
                raise err(fname, f"expected a torch expression giving {what}, got {_show(value)}")
            try:
                ast.parse(value.strip(), mode="eval")
            except SyntaxError as e:
                raise err(fname, f"not a valid expression ({e.msg}): {value.strip()}") from None
            tolerance[key] = value.strip()
    if "bound" in tolerance and len(tolerance) > 1:
        others = ", ".join(k for k in tolerance if k != "bound")
        raise err("tolerance.bound", f"replaces rtol, atol, reduction, accumulate and magnitude; give it alone "
                                     f"(not with {others})")
    if "accumulate" in tolerance and "reduction" not in tolerance:
        raise err("tolerance.accumulate", "needs tolerance.reduction (the size the output sums over)")
    tolerance = {k: (float(v) if k in ("rtol", "atol") else v) for k, v in tolerance.items()}

    spec = Spec(path=path, name=name, kernel=kernel, description=description, targets=tuple(seen),
                params=gen.make_params(values, name), shapes=size_fields["shapes"], reference=reference,
                generator=gen, lines=lines, overridden=overridden, tolerance=tolerance,
                emulator_shapes=size_fields["emulator_shapes"])
    return spec


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_name(name) -> str | None:
    """Why ``name`` cannot be a kernel's name, or None.  The name is the ELF symbol (LLVM takes an
    unquoted ASCII identifier) and the stem of every file made from it: ``<name>.<target>.co.tmp`` in
    the output directory and ``.<name>-<32 hex digits>.<8 random>`` in the cache, which must fit the
    file system's 255 bytes per name; 128 characters leaves room for both."""
    if not isinstance(name, str) or not _SYMBOL.fullmatch(name):
        return f"must be a kernel symbol (ASCII letters, digits and _, not starting with a digit), got {_show(name)}"
    if len(name) > NAME_MAX_CHARS:
        return f"a kernel symbol of at most {NAME_MAX_CHARS} characters (it names files), got {len(name)}"
    return None


def _mapping_field(data: dict, fieldname: str):
    """``params``/``shapes``/``tolerance`` absent or left empty (``params:``) is {}; any other value is
    returned as it is, for the caller's check (``params: false`` is an error, not an empty mapping)."""
    value = data.get(fieldname)
    return {} if value is None else value


def _kind(value) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string '{value}'"
    return f"a {type(value).__name__}"


def _show(value) -> str:
    return f"'{value}'" if isinstance(value, str) else _kind(value)
