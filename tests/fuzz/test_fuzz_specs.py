"""Property: the spec loader, given any text, returns a Spec or raises an ``IsagenError`` of one line that
starts with the file name; it never lets a Python exception out (issue 13: unhashable keys, huge
integers, deep nesting, control characters all once did).  Inputs: arbitrary text, arbitrary YAML
documents, the bundled specs with their text mutated, and the bundled specs with one value replaced."""

from __future__ import annotations

import yaml
from fuzz_support import assert_one_line
from hypothesis import given
from hypothesis import strategies as st

from isagen.builders.spec import FIELDS, bundled_specs_dir, parse_spec
from isagen.errors import IsagenError

PATH = "fuzz.yaml"
BUNDLED = {p.name: p.read_text() for p in sorted(bundled_specs_dir().glob("*.yaml"))}


def load(text: str):
    try:
        return parse_spec(text, PATH)
    except IsagenError as e:
        assert assert_one_line(e).startswith(PATH), str(e)
        return None


# YAML-ish scalars, including the kinds that broke the loader: long digit strings, NaN, control
# characters, YAML's own punctuation
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10 ** 30, max_value=10 ** 60),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", "-", "~", "0x1f", "1e5", "1_000", ".inf", ".nan", "yes", "on", "null", "*a", "&a", "!!int x",
                     "axpy", "bf16", "f32", "gfx942", "gfx950", "gfx942:xnack+", "n", "k"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4)),
    max_leaves=12)


@given(st.text(max_size=300))
def test_any_text(text):
    load(text)


@given(st.binary(max_size=200))
def test_any_bytes_as_latin1(data):
    load(data.decode("latin-1"))


@given(st.dictionaries(st.sampled_from(FIELDS + ("param", "shape", "bogus")), values, max_size=8))
def test_any_document_of_spec_fields(doc):
    load(yaml.safe_dump(doc, allow_unicode=True))


@given(values)
def test_any_document(doc):
    load(yaml.safe_dump(doc, allow_unicode=True))


@st.composite
def mutated_text(draw):
    """A bundled spec's text with one edit: characters replaced, inserted or deleted, a line doubled or
    dropped, brackets and punctuation thrown in."""
    text = BUNDLED[draw(st.sampled_from(sorted(BUNDLED)))]
    i = draw(st.integers(0, len(text)))
    j = draw(st.integers(i, min(len(text), i + 40)))
    junk = draw(st.one_of(st.text(max_size=12), st.sampled_from(
        ["[", "]", "{", "}", ":", ": ", "- ", "\t", "\n", "\x00", "'", '"', "&a ", "*a", "!!binary ", "? ",
         "9" * 5000, "[" * 200, "{a: " * 50, "---\n", "...\n", "#", "\ufeff", "\r"])))
    how = draw(st.sampled_from(["replace", "insert", "delete", "dup-line", "drop-line"]))
    if how == "replace":
        return text[:i] + junk + text[j:]
    if how == "insert":
        return text[:i] + junk + text[i:]
    if how == "delete":
        return text[:i] + text[j:]
    lines = text.splitlines(keepends=True)
    k = draw(st.integers(0, len(lines) - 1))
    return "".join(lines[:k] + ([lines[k]] * 2 if how == "dup-line" else []) + lines[k + 1:])


@given(mutated_text())
def test_mutated_bundled_specs(text):
    load(text)


@st.composite
def replaced_value(draw):
    """A bundled spec with one field, or one entry of params/shapes/tolerance, replaced by any value."""
    doc = yaml.safe_load(BUNDLED[draw(st.sampled_from(sorted(BUNDLED)))])
    field = draw(st.sampled_from(FIELDS))
    new = draw(values)
    if field in ("params", "shapes", "tolerance") and isinstance(doc.get(field), dict) and doc[field] \
            and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(doc[field])))
        doc[field][key] = new
    else:
        doc[field] = new
    return doc


@given(replaced_value())
def test_bundled_specs_with_a_replaced_value(doc):
    load(yaml.safe_dump(doc, allow_unicode=True))


def test_the_bundled_specs_load():
    # the base of the mutations: every bundled spec is valid as it stands
    assert all(load(text) is not None for text in BUNDLED.values())
