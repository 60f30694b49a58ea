"""A cache entry is used only when all of it is what was stored: one digest covers every field of
``entry.json`` and both files.  Each alteration below -- a field of ``entry.json`` changed (every leaf
value, the grid expression among them), added or removed, a file's byte flipped, a file truncated --
must be reported (``CacheWarning`` naming the entry), the entry rebuilt, and the kernel's results
right against torch.  Before the digest, an edited grid (``cdiv(n, 2048)`` -> ``cdiv(n, 3048)``) was
loaded silently and left part of the output unwritten, and an edited field name crashed every
later build with a KeyError."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from co_support import edited

import isagen
from isagen.objects import cache


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A whole entry of axpy_f32 (built once), copied into each test's cache."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ISAGEN_CACHE_DIR", str(root))
        k = isagen.build("axpy_f32", "gfx942")
    return Path(k.path), k.code_object


@pytest.fixture()
def entry(pristine, tmp_path, monkeypatch):
    src, _ = pristine
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ISAGEN_BACKEND", "emu")
    dst = tmp_path / "kernels" / src.name
    shutil.copytree(src, dst)
    return dst


def _leaves(node, path=()):
    """(path, value) of every leaf of a JSON document."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(node, list) and node:
        for i, v in enumerate(node):
            yield from _leaves(v, (*path, i))
    else:
        yield path, node


def _altered(value):
    """Another value of the same kind (the smallest edit a hand or a disk could make)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value.replace("2048", "3048") if "2048" in value else value + "x"
    if value is None:
        return 0
    return [0] if value == [] else {"x": 0}




def _json_edits(doc):
    """name -> the edited document: every leaf altered, every top-level field removed, one added."""
    edits = {f"change {'/'.join(map(str, p))}": edited(doc, p, _altered(v)) for p, v in _leaves(doc)}
    edits |= {f"remove {k}": edited(doc, (k,), ...) for k in doc}
    edits["add a field"] = {**doc, "extra": 1}
    return edits


def _file_edits(entry):
    """name -> (file, new bytes): a flipped byte and a truncation of each file."""
    out = {}
    for f in ("kernel.co", "kernel.s", "entry.json"):
        data = (entry / f).read_bytes()
        flipped = bytearray(data)
        flipped[len(data) // 3] ^= 0x01
        out[f"flip a bit of {f}"] = (f, bytes(flipped))
        out[f"truncate {f}"] = (f, data[:len(data) - 7])
    return out


def test_every_alteration_is_refused_by_load(pristine, tmp_path):
    """cache.load over every edit of every part: None and a CacheWarning naming the entry, which is gone."""
    src, _ = pristine
    key = json.loads((src / "entry.json").read_text())["key"]
    name = src.name.rsplit("-", 1)[0]
    doc = json.loads((src / "entry.json").read_text())
    edits = {n: ("entry.json", json.dumps(d).encode()) for n, d in _json_edits(doc).items()}
    edits |= _file_edits(src)
    edits["nest entry.json 100000 deep"] = ("entry.json", b"[" * 100000 + b"]" * 100000)
    edits["entry.json not UTF-8"] = ("entry.json", b'{"name": "\xff"}')
    edits["kernel.s not UTF-8"] = ("kernel.s", (src / "kernel.s").read_bytes() + b"\xff")
    assert len(edits) > 60
    for what, (fname, data) in edits.items():
        dst = cache.entry_dir(name, key, tmp_path)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        assert cache.load(name, key, tmp_path)[1] == pristine[1], what      # the copy itself is whole
        (dst / fname).write_bytes(data)
        with pytest.warns(cache.CacheWarning, match=rf"isagen cache entry {dst} is corrupt"):
            assert cache.load(name, key, tmp_path) is None, what
        assert not dst.exists(), what


# the full cycle (build -> warning -> rebuilt entry -> correct results) over one edit of each kind
FULL = ["change launch/grid/0", "change kernargs/3/offset", "change kernarg_segment_size", "change shapes/n",
        "change launch/tensors/1/name", "change params/unroll", "remove launch", "remove digest", "add a field",
        "flip a bit of kernel.co", "truncate kernel.co", "flip a bit of kernel.s", "truncate kernel.s",
        "truncate entry.json"]


@pytest.mark.parametrize("what", FULL)
def test_an_altered_entry_is_rebuilt_and_the_results_are_right(pristine, entry, what):
    import torch
    doc = json.loads((entry / "entry.json").read_text())
    edits = {n: ("entry.json", json.dumps(d).encode()) for n, d in _json_edits(doc).items()} | _file_edits(entry)
    fname, data = edits[what]
    (entry / fname).write_bytes(data)
    with pytest.warns(cache.CacheWarning, match=rf"isagen cache entry {entry} is corrupt .*rebuilding it"):
        k = isagen.build("axpy_f32", "gfx942")
    assert k.code_object == pristine[1] and Path(k.path) == entry
    assert json.loads((entry / "entry.json").read_text()) == json.loads((pristine[0] / "entry.json").read_text())
    n = 3000                                           # > 2048: the grid covers a second workgroup
    x, y = torch.randn(n), torch.randn(n)
    want = 2.5 * x + y
    k(x, y, alpha=2.5)
    torch.testing.assert_close(y, want)               # FMA vs torch's mul+add: float32 tolerance
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isagen.build("axpy_f32", "gfx942").code_object == pristine[1]     # whole again: no warning


def test_a_digest_valid_entry_with_an_unusable_field_is_rebuilt(pristine, entry):
    """An entry whose fields the loader cannot use, digest and all consistent (written by another
    isagen, or re-signed by hand), is rebuilt rather than an error on every later build."""
    import torch
    doc = json.loads((entry / "entry.json").read_text())
    co, asm = (entry / "kernel.co").read_bytes(), (entry / "kernel.s").read_bytes()
    for bad in ({"kernargs": "x"}, {"kernargs": [{"name": "x"}]}, {"launch": {"grid": 5}},
                {"kernarg_segment_size": 99}):
        shutil.rmtree(entry, ignore_errors=True)
        shutil.copytree(pristine[0], entry)
        d = {**doc, **bad}
        d["digest"] = cache.entry_digest(d, co, asm)
        (entry / "entry.json").write_text(json.dumps(d))
        with pytest.warns(cache.CacheWarning, match=rf"isagen cache entry {entry} is corrupt"):
            k = isagen.build("axpy_f32", "gfx942")
        x, y = torch.ones(300), torch.ones(300)
        k(x, y, alpha=2.0)
        assert torch.equal(y, torch.full((300,), 3.0)), bad
