"""The on-disk kernel cache: location, keys, a second build that never reaches the assembler, atomic
entries, and corrupt or partial entries that are reported and rebuilt instead of loaded."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import isagen
from isagen.objects import cache, toolchain


@pytest.fixture()
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path / "c"))
    return tmp_path / "c"


def test_location_follows_platform_conventions(monkeypatch, tmp_path):
    monkeypatch.delenv("ISAGEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "isagen"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "isagen"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")           # the XDG spec says: ignore it
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "isagen"
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


def test_key_is_a_content_hash():
    a = cache.cache_key(spec="kernel: x", params={"block": 256}, target="gfx942")
    assert a == cache.cache_key(target="gfx942", params={"block": 256}, spec="kernel: x")   # order-free
    assert len(a) == 64 and int(a, 16) >= 0
    for changed in ({"spec": "kernel: y"}, {"params": {"block": 128}}, {"target": "gfx950"}):
        assert cache.cache_key(**{"spec": "kernel: x", "params": {"block": 256}, "target": "gfx942", **changed}) != a


def test_second_build_comes_from_the_cache(cache_root, monkeypatch):
    k1 = isagen.build("axpy_f32", "gfx942")
    assert Path(k1.path).parent.parent == cache_root and (Path(k1.path) / "kernel.co").read_bytes() == k1.code_object
    assert "axpy_f32:" in (Path(k1.path) / "kernel.s").read_text()

    def no_assembler(*a, **k):
        raise AssertionError("a cached build must not assemble")
    monkeypatch.setattr(toolchain, "assemble", no_assembler)
    k2 = isagen.build("axpy_f32", "gfx942")
    assert k2.code_object == k1.code_object and k2.key == k1.key and k2.path == k1.path
    assert k2.launch == k1.launch and [a.metadata() for a in k2.args] == [a.metadata() for a in k1.args]
    # another parameter value or target is another entry
    monkeypatch.undo()
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(cache_root))
    k3 = isagen.build("axpy_f32", "gfx942", block=128)
    assert k3.key != k1.key and k3.launch.block == (128, 1, 1)
    assert isagen.build("axpy_f32", "gfx942", block=256).key == k1.key      # the default, spelled out
    assert len(list((cache_root / "kernels").iterdir())) == 2


@pytest.mark.parametrize("damage", ["flip a byte of kernel.co", "truncate entry.json", "remove kernel.s",
                                    "edit the key"])
def test_corrupt_entries_are_reported_and_rebuilt(cache_root, damage):
    k1 = isagen.build("axpy_f32", "gfx942")
    entry = Path(k1.path)
    if damage == "flip a byte of kernel.co":
        co = bytearray((entry / "kernel.co").read_bytes())
        co[len(co) // 2] ^= 0x40
        (entry / "kernel.co").write_bytes(bytes(co))
    elif damage == "truncate entry.json":
        text = (entry / "entry.json").read_text()
        (entry / "entry.json").write_text(text[: len(text) // 2])
    elif damage == "remove kernel.s":
        (entry / "kernel.s").unlink()
    else:
        data = json.loads((entry / "entry.json").read_text())
        data["key"] = "0" * 64
        (entry / "entry.json").write_text(json.dumps(data))
    with pytest.warns(cache.CacheWarning, match=rf"isagen cache entry {entry} is corrupt .*rebuilding it"):
        k2 = isagen.build("axpy_f32", "gfx942")
    assert k2.code_object == k1.code_object                         # rebuilt, not loaded
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k3 = isagen.build("axpy_f32", "gfx942")                     # the rebuilt entry is whole again
    assert k3.code_object == k1.code_object


def test_store_is_atomic_and_ignores_partial_writes(tmp_path):
    key = cache.cache_key(spec="s")
    # a writer that died mid-way leaves only a hidden temporary directory: not an entry
    (tmp_path / "kernels" / f".k-{key[:32]}.tmp123").mkdir(parents=True)
    (tmp_path / "kernels" / f".k-{key[:32]}.tmp123" / "kernel.co").write_bytes(b"half")
    assert cache.load("k", key, tmp_path) is None
    path = cache.store("k", key, {"name": "k"}, b"\x7fELF-bytes", "asm text", tmp_path)
    entry, co, asm = cache.load("k", key, tmp_path)
    assert (co, asm, entry["name"], entry["key"]) == (b"\x7fELF-bytes", "asm text", "k", key)
    assert sorted(p.name for p in path.iterdir()) == ["entry.json", "kernel.co", "kernel.s"]
    # storing the same key again (a concurrent builder) keeps one whole entry
    cache.store("k", key, {"name": "k"}, b"\x7fELF-bytes", "asm text", tmp_path)
    assert cache.load("k", key, tmp_path)[1] == b"\x7fELF-bytes"
    # a damaged entry in the way of a store is replaced
    (path / "kernel.co").write_bytes(b"\x7fELF-bytez")
    cache.store("k", key, {"name": "k"}, b"\x7fELF-bytes", "asm text", tmp_path)
    assert cache.load("k", key, tmp_path)[1] == b"\x7fELF-bytes"
    assert cache.clear(tmp_path) == 2 and cache.load("k", key, tmp_path) is None


def test_an_unwritable_cache_warns_and_the_kernel_still_runs(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(blocker / "cache"))       # a file where a directory must be
    monkeypatch.setenv("ISAGEN_BACKEND", "emu")
    with pytest.warns(cache.CacheWarning, match=rf"cannot write the isagen cache in {blocker / 'cache'}/kernels"):
        k = isagen.build("axpy_f32", "gfx942")
    assert k.path is None and k.code_object[:4] == b"\x7fELF"
    import torch
    x, y = torch.ones(300), torch.ones(300)
    k(x, y, alpha=2.0)
    assert torch.equal(y, torch.full((300,), 3.0))
