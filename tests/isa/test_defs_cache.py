"""The marshal copies of the ISA definition files (isagen.isa.defs_cache) against a plain YAML parse."""

import marshal

import pytest
import yaml

from isagen.isa import defs_cache
from isagen.isa.table import DEFS_DIR


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("name", sorted(p.name for p in DEFS_DIR.glob("*.yaml")))
def test_copy_is_the_parsed_document(cache_dir, name):
    path = DEFS_DIR / name
    expected = yaml.safe_load(path.read_text()) or {}
    first = defs_cache.load_yaml_file(path)                 # parses, writes the copy
    copies = list((cache_dir / "isa").glob(f"{path.stem}-*.marshal"))
    assert len(copies) == 1
    assert marshal.loads(copies[0].read_bytes()) == expected
    assert first == expected
    assert defs_cache.load_yaml_file(path) == expected      # from the copy


def test_a_changed_file_gets_a_new_copy(cache_dir, tmp_path):
    src = tmp_path / "x.yaml"
    src.write_text("instructions: {a: 1}\n")
    assert defs_cache.load_yaml_file(src) == {"instructions": {"a": 1}}
    src.write_text("instructions: {a: 2}\n")
    assert defs_cache.load_yaml_file(src) == {"instructions": {"a": 2}}
    assert len(list((cache_dir / "isa").glob("x-*.marshal"))) == 2


@pytest.mark.parametrize("garbage", [b"", b"\x00\x01garbage", marshal.dumps([1, 2, 3])])
def test_a_bad_copy_is_ignored_and_rewritten(cache_dir, tmp_path, garbage):
    src = tmp_path / "y.yaml"
    src.write_text("formats: {SOP1: {unit: salu}}\n")
    defs_cache.load_yaml_file(src)
    (copy,) = (cache_dir / "isa").glob("y-*.marshal")
    copy.write_bytes(garbage)
    assert defs_cache.load_yaml_file(src) == {"formats": {"SOP1": {"unit": "salu"}}}
    assert marshal.loads(copy.read_bytes()) == {"formats": {"SOP1": {"unit": "salu"}}}


def test_an_unwritable_cache_still_parses(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(blocker))
    src = tmp_path / "z.yaml"
    src.write_text("remove: [s_nop]\n")
    assert defs_cache.load_yaml_file(src) == {"remove": ["s_nop"]}
    assert defs_cache.load_yaml_file(tmp_path / "missing.yaml") == {}


def test_a_spec_seen_before_is_read_without_yaml(cache_dir, monkeypatch):
    import sys

    from isagen.builders.spec import bundled_specs_dir, parse_spec
    text = (bundled_specs_dir() / "gemm_bf16.yaml").read_text()
    first = parse_spec(text, "gemm_bf16.yaml")              # parsed with PyYAML, the copy kept
    assert list((cache_dir / "isa").glob("spec-*.marshal"))
    monkeypatch.setitem(sys.modules, "yaml", None)          # an import of yaml now fails
    again = parse_spec(text, "gemm_bf16.yaml")
    assert (again.name, again.kernel, again.targets, dict(again.params), again.shapes) == \
        (first.name, first.kernel, first.targets, dict(first.params), first.shapes)
    # an error still names the field's line, from the kept line numbers
    bad = text.replace("mfma: 16", "mfma: 17")
    monkeypatch.delitem(sys.modules, "yaml")
    with pytest.raises(Exception) as e1:
        parse_spec(bad, "g.yaml")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(Exception) as e2:
        parse_spec(bad, "g.yaml")
    assert str(e1.value) == str(e2.value) and "g.yaml:" in str(e2.value)
