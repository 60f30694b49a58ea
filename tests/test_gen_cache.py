"""``isagen gen``'s build cache (issue 17): an unchanged build is copied from the cache byte for byte,
and any change of what decides its bytes (the spec's text, -D, --target, --force, isagen's source, a
package that shapes the bytes) misses it; a corrupt entry is reported and rebuilt; ``--no-cache``
and LLVM-assembled builds never touch it; a build from the cache imports no builder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from isagen.builders.spec import bundled_specs_dir
from isagen.cli import main
from isagen.objects import cache

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(root))
    monkeypatch.delenv("ISAGEN_ASSEMBLER", raising=False)
    return root


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "axpy.yaml"
    path.write_text((bundled_specs_dir() / "axpy_f32.yaml").read_text())
    return path


def gen(out: Path, *args: str) -> tuple[dict[str, bytes], str]:
    """Run ``isagen gen`` in process; the files it wrote and its stdout's last line."""
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["gen", *args, "-o", str(out)]) == 0
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}, buf.getvalue().strip().splitlines()[-1]


def entries(root: Path) -> list[Path]:
    kernels = root / "kernels"
    return sorted(kernels.iterdir()) if kernels.is_dir() else []


def test_an_unchanged_build_comes_from_the_cache_with_the_same_bytes(tmp_path, cache_root, spec):
    built, line = gen(tmp_path / "a", str(spec))
    assert "from the cache" not in line and len(built) == 4          # 2 targets x (.s, .co)
    assert entries(cache_root)
    again, line = gen(tmp_path / "b", str(spec))
    assert "2 of 2 builds from the cache" in line
    assert again == built
    fresh, line = gen(tmp_path / "c", str(spec), "--no-cache")
    assert "from the cache" not in line and fresh == built


@pytest.mark.parametrize("change", ["spec text", "define", "target", "force", "source", "package"])
def test_what_decides_the_bytes_misses_the_cache(tmp_path, cache_root, spec, change, monkeypatch):
    gen(tmp_path / "a", str(spec), "--target", "gfx942")
    args = [str(spec), "--target", "gfx942"]
    if change == "spec text":
        spec.write_text(spec.read_text() + "\n# a comment\n")
    elif change == "define":
        args += ["-D", "block=128"]
    elif change == "target":
        args[-1] = "gfx950"
    elif change == "force":
        args.append("--force")
    elif change == "source":
        monkeypatch.setattr(cache, "_SOURCE_HASH", "0" * 64)         # as if a generator were edited
    else:
        versions = cache.dependency_versions()
        monkeypatch.setattr(cache, "dependency_versions", lambda: {**versions, "numpy": "another numpy"})
    _, line = gen(tmp_path / "b", *args)
    assert "from the cache" not in line


def test_a_corrupt_entry_is_reported_and_rebuilt(tmp_path, cache_root, spec, monkeypatch):
    built, _ = gen(tmp_path / "a", str(spec), "--target", "gfx942")
    for e in entries(cache_root):
        co = e / "kernel.co"
        if co.stat().st_size:
            data = bytearray(co.read_bytes())
            data[len(data) // 2] ^= 0xFF                                # one byte of a code object
            co.write_bytes(bytes(data))
    shown = []          # (gen shows a build's other warnings with warnings.showwarning, as they came)
    with monkeypatch.context() as m:
        m.setattr(warnings, "showwarning", lambda message, category, *a, **k: shown.append((category, message)))
        again, line = gen(tmp_path / "b", str(spec), "--target", "gfx942")
    assert again == built and "from the cache" not in line
    assert [c for c, _ in shown] == [cache.CacheWarning] and "is corrupt" in str(shown[0][1])
    _, line = gen(tmp_path / "c", str(spec), "--target", "gfx942")      # rebuilt, and kept again
    assert "1 of 1 builds from the cache" in line


def test_no_cache_and_llvm_builds_leave_the_cache_alone(tmp_path, cache_root, spec):
    gen(tmp_path / "a", str(spec), "--no-cache", "--asm-only")
    assert entries(cache_root) == []
    gen(tmp_path / "b", str(spec), "--asm-only", "--assembler", "llvm")
    assert entries(cache_root) == []


def test_a_build_from_the_cache_imports_no_builder(tmp_path, cache_root, spec):
    gen(tmp_path / "a", str(spec), "--asm-only")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import sys; from isagen.cli import main; rc = main(sys.argv[1:]); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('isagen.builders', 'numpy')))))")
    done = subprocess.run([sys.executable, "-c", "import json; " + code, "gen", str(spec), "--asm-only", "-o",
                           str(tmp_path / "b")], capture_output=True, text=True, env=env, check=True)
    out = done.stdout.strip().splitlines()
    assert "2 of 2 builds from the cache" in out[-2]
    assert json.loads(out[-1]) == []
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(p.name for p in (tmp_path / "a").iterdir())
