"""The on-disk cache of built kernels.

A built kernel is stored under a key that is the SHA-256 of everything that determines its bytes:
the spec's content, the parameters, the target, isagen's version and source, and the assembler
(isagen's own, or LLVM with its version).  A second ``isagen.build`` of the same thing loads the
entry instead of generating and assembling.

Location: ``$ISAGEN_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/isagen``, else ``~/.cache/isagen``.
One entry is one directory ``kernels/<name>-<key>/`` holding

- ``kernel.co`` — the code object,
- ``kernel.s``  — the assembly it came from (for reading),
- ``entry.json`` — what a launch needs (kernarg layout, workgroup size, launch rule, tensors, scalars),
  the key, and ``digest``: one SHA-256 over every other field of ``entry.json`` and both files.

Entries are written into a temporary directory and renamed into place (atomic on POSIX), so a
reader sees a whole entry or none.  Loading recomputes the digest: a change anywhere in an entry (a
byte of either file, any field of ``entry.json``, a field added or removed) fails it, and so does a
field the reader cannot use (``discard``, called by the API).  An entry that fails is reported
(``CacheWarning``, naming the directory), removed and rebuilt — never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from isagen.isa.defs_cache import cache_root

FORMAT = 2          # bump when the entry layout changes: older entries then simply miss (it is part of the key)
ENTRY_FILES = ("kernel.co", "kernel.s")


class CacheWarning(UserWarning):
    """A cache entry was unreadable or corrupt and is being rebuilt."""


def cache_dir() -> Path:
    """The cache root (created on first write, not here)."""
    return cache_root()


_SOURCE_HASH: str | None = None


def source_hash() -> str:
    """SHA-256 over isagen's code that shapes a code object (the package and the kernel generators), so
    an edited generator never meets a stale cache entry, version bump or not."""
    global _SOURCE_HASH
    if _SOURCE_HASH is None:
        root = Path(__file__).resolve().parent.parent
        files = sorted(p for d in (root, (root / "kernels").resolve())
                       for p in d.rglob("*") if p.suffix in (".py", ".yaml", ".json") and "runtime" not in p.parts
                       and "__pycache__" not in p.parts and "specs" not in p.parts)
        h = hashlib.sha256()
        for p in files:
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        _SOURCE_HASH = h.hexdigest()
    return _SOURCE_HASH


def package_root() -> Path:
    """The isagen package directory (generators whose source lies under it are covered by
    ``source_hash``; the kernels folder may be a link out of it)."""
    return Path(__file__).resolve().parent.parent


def dependency_versions() -> dict[str, str]:
    """Where and which version of each third-party package that shapes a build's bytes (numpy in the
    generators' lane arithmetic, PyYAML reading specs and ISA tables, msgpack writing the metadata
    note) is installed: the file that names its version, with its size and time stamp.  Found
    without importing them (a cache hit then needs none of them)."""
    import importlib.util
    out = {}
    for name, rel in (("numpy", "version.py"), ("yaml", "__init__.py"), ("msgpack", "__init__.py")):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if not origin:
            out[name] = "absent"
            continue
        path = os.path.join(os.path.dirname(origin), rel)
        try:
            st = os.stat(path)
            out[name] = f"{path}:{st.st_size}:{st.st_mtime_ns}"
        except OSError:
            out[name] = origin
    return out


def cache_key(**parts) -> str:
    """SHA-256 (hex) of the canonical JSON of ``parts`` (keys sorted, no whitespace)."""
    text = json.dumps({"format": FORMAT, **parts}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def entry_dir(name: str, key: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "kernels" / f"{name}-{key[:32]}"


def entry_digest(entry: dict, co: bytes, asm: bytes) -> str:
    """SHA-256 over an entry's fields (canonical JSON: keys sorted, no whitespace; ``digest`` itself
    left out) and both files' bytes, each part length-prefixed so no two entries share a stream."""
    fields = json.dumps({k: v for k, v in entry.items() if k != "digest"}, sort_keys=True,
                        separators=(",", ":")).encode()
    h = hashlib.sha256()
    for part in (fields, co, asm):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _read(path: Path, key: str):
    """``(entry, co, asm, problem)``: the entry's parts, or a problem saying why it is not valid."""
    try:
        entry = json.loads((path / "entry.json").read_text())
        co = (path / "kernel.co").read_bytes()
        asm = (path / "kernel.s").read_bytes()
        text = asm.decode()
    except (OSError, ValueError, RecursionError) as e:   # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None, None, None, f"it cannot be read ({e.__class__.__name__}: {e})"
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
        return None, None, None, "its key does not match"
    try:
        digest = entry_digest(entry, co, asm)
    except (ValueError, RecursionError) as e:    # nesting json.loads took but json.dumps does not
        return None, None, None, f"it cannot be read ({e.__class__.__name__}: {e})"
    if entry.get("digest") != digest:
        return None, None, None, "its content does not match its recorded digest"
    return entry, co, text, None


def discard(name: str, key: str, problem: str, root: Path | None = None, *, stacklevel: int = 3) -> None:
    """Report an entry that cannot be used (``CacheWarning`` naming its directory and ``problem``) and
    remove it, so that the caller rebuilds it."""
    path = entry_dir(name, key, root)
    warnings.warn(f"isagen cache entry {path} is corrupt ({problem}); rebuilding it", CacheWarning,
                  stacklevel=stacklevel)
    shutil.rmtree(path, ignore_errors=True)


def load(name: str, key: str, root: Path | None = None) -> tuple[dict, bytes, str] | None:
    """``(entry, code_object, assembly)`` for ``key``, or None when there is no valid entry."""
    path = entry_dir(name, key, root)
    if not path.is_dir():
        return None
    entry, co, asm, problem = _read(path, key)
    if problem:
        discard(name, key, problem, root, stacklevel=4)
        return None
    return entry, co, asm


def store(name: str, key: str, entry: dict, co: bytes, asm: str, root: Path | None = None, *,
          durable: bool = True) -> Path | None:
    """Write an entry atomically; returns its directory.  A concurrent writer of the same key wins
    harmlessly (both wrote the same content).  ``durable=False`` skips the fsyncs (``isagen gen``,
    whose outputs are files anyway: an entry a crash left short fails its digest and is rebuilt).
    A cache that cannot be written (read-only home, a file where the directory should be) is a
    ``CacheWarning`` naming it, and None: the kernel was built and is used, only not kept."""
    try:
        return _store(name, key, entry, co, asm, root, durable)
    except OSError as e:
        where = entry_dir(name, key, root).parent
        warnings.warn(f"cannot write the isagen cache in {where} ({e.strerror or e}); the kernel is used but not "
                      "cached (set ISAGEN_CACHE_DIR to a writable directory)", CacheWarning, stacklevel=3)
        return None


def _store(name: str, key: str, entry: dict, co: bytes, asm: str, root: Path | None, durable: bool = True) -> Path:
    final = entry_dir(name, key, root)
    final.parent.mkdir(parents=True, exist_ok=True)
    asm_bytes = asm.encode()
    entry = dict(entry, format=FORMAT, key=key)
    entry["digest"] = entry_digest(entry, co, asm_bytes)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        for fname, data in (("kernel.co", co), ("kernel.s", asm_bytes),
                            ("entry.json", json.dumps(entry, indent=1, sort_keys=True).encode())):
            with open(tmp / fname, "wb") as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
        if final.exists():
            if _read(final, key)[3] is None:   # a concurrent builder stored it meanwhile: keep theirs
                return final
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():         # someone else's entry appeared meanwhile: keep theirs
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def clear(root: Path | None = None) -> int:
    """Remove every entry; returns how many were removed."""
    kernels = (root or cache_dir()) / "kernels"
    n = 0
    if kernels.is_dir():
        for p in kernels.iterdir():
            shutil.rmtree(p, ignore_errors=True)
            n += 1
    return n
