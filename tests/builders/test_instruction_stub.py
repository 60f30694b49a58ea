"""The typed stubs: KernelBuilder's instruction methods (isagen/builders/instructions.pyi) and each
generator's parameter class (isagen/builders/params.pyi)."""

import ast
import textwrap
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


def test_mypy_catches_a_misspelt_mnemonic_and_a_wrong_operand_kind(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)                 # mypy finds this checkout's isagen (and its stub) from here
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    line = {text.strip(): n for n, text in enumerate(SNIPPET.splitlines(), 1)}
    out, err, status = mypy.api.run([str(snippet), "--config-file", str(ROOT / "pyproject.toml"),
                                     "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"])
    assert status == 1, out + err
    errors = [e for e in out.splitlines() if ": error:" in e]
    found = {int(e.split(":")[1]): e for e in errors}
    assert sorted(found) == sorted([line["k.v_add_f23(v[0], v[1], 1.0)"], line["k.s_branch(v)"],
                                    line['k.v_add_f32(v[0], v[1], "one")']]), textwrap.indent(out, "  ")
    assert '"KernelBuilder" has no attribute "v_add_f23"' in found[line["k.v_add_f23(v[0], v[1], 1.0)"]]
    assert 'Argument 1 to "s_branch"' in found[line["k.s_branch(v)"]]
    assert 'Argument 3 to "v_add_f32"' in found[line['k.v_add_f32(v[0], v[1], "one")']]


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


def test_mypy_sees_each_generators_parameter_fields(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    snippet = tmp_path / "params_snippet.py"
    snippet.write_text(PARAMS_SNIPPET)
    line = {text.strip(): n for n, text in enumerate(PARAMS_SNIPPET.splitlines(), 1)}
    out, err, status = mypy.api.run([str(snippet), "--config-file", str(ROOT / "pyproject.toml"),
                                     "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"])
    assert status == 1, out + err
    found = {int(e.split(":")[1]): e for e in out.splitlines() if ": error:" in e}
    assert sorted(found) == sorted(line[t] for t in ("wrong: int = p.dtype", "missing = p.blok", "p.block = 64")), out
    assert 'expression has type "str", variable has type "int"' in found[line["wrong: int = p.dtype"]]
    assert '"ElementwiseParams" has no attribute "blok"' in found[line["missing = p.blok"]]
    assert "read-only" in found[line["p.block = 64"]] or "frozen" in found[line["p.block = 64"]]
