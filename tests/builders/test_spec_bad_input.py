"""Spec text that once escaped the loader as a Python exception (unhashable keys, huge integers, deep
nesting, control characters, an over-long name, a mapping field of the wrong type), and more of the same
kinds: each is one SpecError line naming the file and the line of the problem (issue 13)."""

import pytest

from isagen.builders.spec import MAX_DEPTH, NAME_MAX_CHARS, load_spec, load_specs, parse_spec
from isagen.errors import SpecError

HEAD = "kernel: elementwise\nname: k\ntargets: [gfx942]\n"     # lines 1-3; the case's text starts at line 4


def deep(n: int, open_="[", close="]") -> str:
    return open_ * n + close * n


# (text after HEAD, words the message must hold, the line it must name, or None for "no line")
CASES = [
    ("params: {op: axpy, [1, 2]: 3}\n", "a list used as a mapping key", 4),
    ("tolerance: {[1]: 3}\n", "a list used as a mapping key", 4),
    ("params:\n  op: axpy\n  {a: 1}: 2\n", "a mapping used as a mapping key", 6),
    ("shapes: {[n]: 5}\n", "a list used as a mapping key", 4),
    ("? [a, b]\n: 1\n", "a list used as a mapping key", 4),
    ("params: {block: " + "9" * 5000 + "}\n", "an integer of 5000 digits is out of range", 4),
    ("shapes: {n: " + "1" * 41 + "}\n", "an integer of 41 digits", 4),
    ("shapes: {n: -" + "1" * 100 + "}\n", "an integer of 100 digits", 4),
    ("shapes: {n: 0x" + "f" * 60 + "}\n", "digits is out of range", 4),
    ("description: " + deep(3000) + "\n", f"nested more than {MAX_DEPTH} levels deep", 4),
    ("description: " + deep(3000, "{a: ", "}") + "\n", f"nested more than {MAX_DEPTH} levels deep", 4),
    ("description: " + deep(100, "[{a: ", "}]") + "\n", f"nested more than {MAX_DEPTH} levels deep", 4),
    ("description: a\x00b\n", "unacceptable character #x0000", 4),
    ("description: a\x07b\n", "unacceptable character #x0007", 4),
    ("\n\ndescription: \x1b[31m\n", "unacceptable character #x001b", 6),
    ("params: false\n", "params: expected a mapping", 4),
    ("params: 0\n", "params: expected a mapping", 4),
    ("params: [op, axpy]\n", "params: expected a mapping", 4),
    ("params: ''\n", "params: expected a mapping", 4),
    ("shapes: false\n", "shapes: expected a mapping", 4),
    ("shapes: []\n", "shapes: expected a mapping", 4),
    ("tolerance: false\n", "tolerance: expected a mapping", 4),
    ("tolerance: 0\n", "tolerance: expected a mapping", 4),
    ("tolerance: {reduction: [n]}\n", "tolerance.reduction: expected the size symbol", 4),
    ("tolerance: {reduction: {n: 1}, accumulate: f32}\n", "tolerance.reduction: expected the size symbol", 4),
    ("tolerance: {reduction: n, accumulate: [f32]}\n", "tolerance.accumulate: expected one of", 4),
    ("tolerance: {rtol: .nan}\n", "tolerance.rtol: expected a number >= 0", 4),
    ("tolerance: {atol: -1e-5}\n", "tolerance.atol: expected a number >= 0", 4),
    ("shapes: {n: 1.5}\n", "shapes.n: expected a size", 4),
    ("shapes: {n: true}\n", "shapes.n: expected a size", 4),
    ("shapes: {n: .inf}\n", "shapes.n: expected a size", 4),
    ("params: {block: !!binary 'AAAA'}\n", "params.block", 4),
    ("params: {block: !!python/object:os.system x}\n", "malformed YAML", 4),
    ("params: {block: *nothing}\n", "malformed YAML", 4),
    ("a: &x [*x]\n", "unknown field", 4),
    ("reference: [alpha]\n", "reference: expected a torch expression", 4),
    # found by the long fuzz profile: a newline inside a quoted key or value came back in the message
    ('"a\\nb": 1\n', "a\\nb: unknown field", 4),
    ('params: {"bl\\nock": 1}\n', "unknown parameter 'bl\\nock'", 4),
    ('params: {op: "ax\\rpy"}\n', "params.op", 4),
    ('shapes: {"n\\u2028": 1}\n', "unknown shape 'n\\u2028'", 4),
    ('tolerance: {reduction: "n\\n"}\n', "got 'n\\n'", 4),
]


@pytest.mark.parametrize("text, words, line", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_bad_spec_text_is_one_line_naming_file_and_line(tmp_path, text, words, line):
    path = tmp_path / "k.yaml"
    path.write_text(HEAD + text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert "\n" not in msg and words in msg, msg
    assert msg.startswith(f"{path}:{line}:" if line else f"{path}:"), msg


@pytest.mark.parametrize("name, words", [
    ("a" * 300, f"at most {NAME_MAX_CHARS} characters"),
    ("a" * (NAME_MAX_CHARS + 1), f"at most {NAME_MAX_CHARS} characters"),
    ("café", "must be a kernel symbol"),          # str.isidentifier() takes it; an unquoted ELF symbol does not
    ("k\u0301", "must be a kernel symbol"),
    ("1k", "must be a kernel symbol"),
    ("a.b", "must be a kernel symbol"),
    ("'../k'", "must be a kernel symbol"),
    ("'k '", "must be a kernel symbol"),
    ("''", "must be a kernel symbol"),
    ("123", "must be a kernel symbol"),
    ("[k]", "must be a kernel symbol"),
])
def test_bad_names(tmp_path, name, words):
    path = tmp_path / "k.yaml"
    path.write_text(HEAD.replace("name: k", f"name: {name}"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}:2: name: ") and words in str(info.value)


def test_the_longest_name_builds(tmp_path):
    # the limit is not below what the files made from a name need: one of exactly NAME_MAX_CHARS loads
    path = tmp_path / "k.yaml"
    path.write_text(HEAD.replace("name: k", "name: " + "k" * NAME_MAX_CHARS) + "params: {op: axpy, dtype: f32}\n")
    assert len(load_spec(path).name) == NAME_MAX_CHARS


def test_empty_mapping_fields_are_empty(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text(HEAD + "params: {op: axpy, dtype: f32}\nshapes:\ntolerance:\n")
    spec = load_spec(path)
    assert spec.shapes == {} and spec.tolerance == {}


def test_shared_aliases_are_walked_once():
    # a "billion laughs" document: nine levels of nine aliases; walked per node, not per path
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    with pytest.raises(SpecError, match="unknown field"):
        parse_spec(HEAD + "\n".join(lines) + "\n", "laughs.yaml")


def test_spec_text_of_the_wrong_type():
    with pytest.raises(SpecError, match="spec text must be a string, got bytes"):
        parse_spec(b"kernel: x", "b.yaml")


def test_a_directory_with_a_bad_spec_names_it(tmp_path):
    (tmp_path / "a.yaml").write_text(HEAD + "params: {block: " + "9" * 5000 + "}\n")
    with pytest.raises(SpecError, match="a.yaml:4: malformed YAML: an integer of 5000 digits"):
        load_specs([tmp_path])


def test_isagen_list_marks_a_bad_spec_invalid_and_goes_on(tmp_path, capsys):
    from isagen.cli import main as cli_main
    (tmp_path / "a_bad.yaml").write_text(HEAD + "params: {block: " + "9" * 5000 + "}\n")
    (tmp_path / "b_deep.yaml").write_text(HEAD + "description: " + deep(3000) + "\n")
    (tmp_path / "c_good.yaml").write_text(HEAD + "params: {op: axpy, dtype: f32}\n")
    assert cli_main(["list", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "a_bad.yaml: INVALID" in out and "b_deep.yaml: INVALID" in out and "kernel: elementwise" in out
    assert err.count("isagen: error: ") == 2 and "Traceback" not in err


def test_build_of_a_spec_with_a_300_character_name(tmp_path):
    import isagen
    path = tmp_path / "k.yaml"
    path.write_text(HEAD.replace("name: k", "name: " + "a" * 300) + "params: {op: axpy, dtype: f32}\n")
    with pytest.raises(SpecError, match=f"name: a kernel symbol of at most {NAME_MAX_CHARS} characters"):
        isagen.build(str(path), "gfx942", use_cache=False)
