"""The typed stub of KernelBuilder's instruction methods (isagen/builders/instructions.pyi)."""

import ast
import textwrap
from pathlib import Path

import mypy.api

from isagen.builders.stubgen import REGENERATE, STUB_PATH, render_stub
from isagen.isa.table import isa_table
from isagen.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]


def test_committed_stub_is_current():
    assert STUB_PATH.read_text() == render_stub(), f"{STUB_PATH} is stale: run `{REGENERATE}`"


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
