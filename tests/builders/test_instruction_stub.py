"""The typed stubs: KernelBuilder's instruction methods (isagen/builders/instructions.pyi) and each
generator's parameter class (isagen/builders/params.pyi)."""

import ast
from pathlib import Path

import mypy.api
import pytest

from isagen.builders import params
from isagen.builders.registry import get_generator, load_generators
from isagen.builders.stubgen import PARAMS_STUB_PATH, REGENERATE, STUB_PATH, render_params_stub, render_stub
from isagen.isa.table import isa_table
from isagen.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]


def test_committed_stubs_are_current():
    assert STUB_PATH.read_text() == render_stub(), f"{STUB_PATH} is stale: run `{REGENERATE}`"
    assert PARAMS_STUB_PATH.read_text() == render_params_stub(), f"{PARAMS_STUB_PATH} is stale: run `{REGENERATE}`"


def test_params_stub_declares_each_generators_fields_with_their_types():
    tree = ast.parse(PARAMS_STUB_PATH.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    gens = load_generators()
    assert set(classes) == {g.params_type.__name__ for g in gens.values()}
    for gen in gens.values():
        body = classes[gen.params_type.__name__].body
        fields = {n.target.id: ast.unparse(n.annotation) for n in body if isinstance(n, ast.AnnAssign)}
        assert fields == {"name": "str", **{k: p.type for k, p in gen.params.items()}}, gen.name


def test_parameter_classes_are_importable_by_name_at_run_time():
    assert params.ElementwiseParams is get_generator("elementwise").params_type
    assert params.GemmBf16Params is get_generator("gemm_bf16").params_type
    with pytest.raises(AttributeError, match="no parameter class 'ElementwiseParam'"):
        params.ElementwiseParam  # noqa: B018


def test_targets_spell_shared_instructions_alike():
    # the generator writes one method per mnemonic from the first target that has it
    tables = [isa_table(t).defs for t in sorted(TARGETS)]
    for name in set(tables[0]) & set(tables[1]):
        a, b = tables[0][name], tables[1][name]
        assert [(o.name, o.kind, o.is_def) for o in a.operands] == [(o.name, o.kind, o.is_def) for o in b.operands]
        assert {m: s.type for m, s in a.mods.items()} == {m: s.type for m, s in b.mods.items()}, name


def test_stub_declares_every_instruction_with_its_operands_and_modifiers():
    tree = ast.parse(STUB_PATH.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "InstructionMethods")
    methods = {f.name: f.args for f in cls.body if isinstance(f, ast.FunctionDef)}
    declared = {}
    for t in TARGETS:
        declared.update(isa_table(t).defs)
    assert set(methods) == set(declared)
    for name, idef in declared.items():
        args = methods[name]
        operands = args.posonlyargs[1:] if args.posonlyargs else args.args[1:]
        assert len(operands) == len(idef.operands), name
        keywords = [a.arg for a in args.kwonlyargs]
        assert keywords == ["comment", "lds", "lanes", *idef.mods], name


SNIPPET = """\
from isagen.builders.program import KernelBuilder


def build() -> None:
    k = KernelBuilder("t", "gfx942")
    v = k.vgpr(2, "x")
    loop = k.label("loop")
    k.v_add_f32(v[0], v[1], 1.0, comment="fine")
    k.s_branch(loop)
    k.v_add_f23(v[0], v[1], 1.0)
    k.s_branch(v)
    k.v_add_f32(v[0], v[1], "one")
    k.free(v)
"""


PARAMS_SNIPPET = """\
from isagen.builders.params import ElementwiseParams


def lanes(p: ElementwiseParams) -> int:
    per_lane: int = p.vec * p.unroll
    kind: str = p.dtype
    wrong: int = p.dtype
    missing = p.blok
    p.block = 64
    return p.block * per_lane + len(kind)
"""


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory):
    """mypy (the project's configuration) over both snippets in one run: {snippet: {line: error}}."""
    tmp = tmp_path_factory.mktemp("mypy")
    snippets = {"builder": SNIPPET, "params": PARAMS_SNIPPET}
    for name, text in snippets.items():
        (tmp / f"{name}_snippet.py").write_text(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)                      # mypy finds this checkout's isagen (and its stubs) from here
        out, err, status = mypy.api.run([*(str(tmp / f"{n}_snippet.py") for n in snippets),
                                         "--config-file", str(ROOT / "pyproject.toml"),
                                         "--cache-dir", str(tmp / "cache"), "--no-error-summary"])
    assert status == 1, out + err
    found: dict[str, dict[int, str]] = {name: {} for name in snippets}
    for entry in out.splitlines():
        path, lineno, rest = (entry.split(":", 2) + ["", ""])[:3]
        name = Path(path).name.removesuffix("_snippet.py")
        if name in found and rest.startswith(" error:"):        # the snippets' errors, nothing else
            found[name][int(lineno)] = rest
    return found


def _line(snippet: str, text: str) -> int:
    return next(n for n, line in enumerate(snippet.splitlines(), 1) if line.strip() == text)


def test_mypy_catches_a_misspelt_mnemonic_and_a_wrong_operand_kind(mypy_errors):
    found = mypy_errors["builder"]
    misspelt, register_as_label, text_as_source = (_line(SNIPPET, t) for t in (
        "k.v_add_f23(v[0], v[1], 1.0)", "k.s_branch(v)", 'k.v_add_f32(v[0], v[1], "one")'))
    assert sorted(found) == [misspelt, register_as_label, text_as_source], found
    assert '"KernelBuilder" has no attribute "v_add_f23"' in found[misspelt]
    assert 'Argument 1 to "s_branch"' in found[register_as_label]
    assert 'Argument 3 to "v_add_f32"' in found[text_as_source]


def test_mypy_sees_each_generators_parameter_fields(mypy_errors):
    found = mypy_errors["params"]
    wrong_type, misspelt, assigned = (_line(PARAMS_SNIPPET, t) for t in (
        "wrong: int = p.dtype", "missing = p.blok", "p.block = 64"))
    assert sorted(found) == [wrong_type, misspelt, assigned], found
    assert 'expression has type "str", variable has type "int"' in found[wrong_type]
    assert '"ElementwiseParams" has no attribute "blok"' in found[misspelt]
    assert "read-only" in found[assigned] or "frozen" in found[assigned]
