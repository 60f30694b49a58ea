"""The ISA definition files (``isagen/isa/defs/*.yaml``) as parsed once: a ``marshal`` copy of the
parsed document in isagen's cache directory, keyed by the SHA-256 of the file's bytes, the PyYAML
that parsed it and Python's marshal format, read instead of parsing the YAML again (issue 17: a
process that builds one kernel spends ~12 ms parsing them, reading the copy ~1 ms).  Spec files use
the same copies (``load_copy``/``store_copy``, ``isagen.builders.spec``), so that a build whose
inputs were all seen before does not import PyYAML at all.

``marshal`` holds only Python's own value types (the documents are dicts, lists, strings, numbers,
booleans and None), so a copy is data, never code; a copy that is unreadable, of another format or
not a mapping is ignored and rewritten.  Copies are written atomically (a temporary file renamed
into place); where the cache directory cannot be written, the YAML is simply parsed each time.

The cache directory is ``$ISAGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/isagen``, else
``~/.cache/isagen`` (``isagen.objects.cache`` keeps built kernels there too); the copies live in
its ``isa/`` folder.
"""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path
from typing import Any

try:    # CPython's own SHA-256, the same digest as hashlib's without loading OpenSSL (~3 ms of a process)
    from _sha256 import sha256  # type: ignore[import-not-found]
except ImportError:     # another Python, or 3.12+ (_sha2)
    from hashlib import sha256

#: part of every copy's name: a copy made by another Python (another marshal format) is not read
_FORMAT = f"m{marshal.version}-py{sys.version_info[0]}{sys.version_info[1]}"


def cache_root() -> Path:
    """isagen's cache directory (not created here)."""
    env = os.environ.get("ISAGEN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(os.path.expanduser(xdg)) else Path.home() / ".cache"
    return base / "isagen"


def load_yaml_file(path: Path) -> dict[str, Any]:
    """The parsed YAML document of ``path`` (``{}`` for a missing file or an empty document), from the
    marshal copy when there is one for these exact bytes."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    doc = load_copy(path.stem, data)
    if isinstance(doc, dict):
        return doc
    import yaml
    doc = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: an ISA definition file is a mapping, got {type(doc).__name__}")
    store_copy(path.stem, data, doc)
    return doc


def _copy_path(stem: str, source: bytes) -> Path:
    key = sha256(source + b"\0" + _yaml_fingerprint().encode()).hexdigest()[:40]
    return cache_root() / "isa" / f"{stem}-{key}-{_FORMAT}.marshal"


_YAML_FINGERPRINT: str | None = None


def _yaml_fingerprint() -> str:
    """Which PyYAML parsed a copy (its module file's size and time), without importing it: a copy made
    by another PyYAML is not read."""
    global _YAML_FINGERPRINT
    if _YAML_FINGERPRINT is None:
        import importlib.util
        spec = importlib.util.find_spec("yaml")
        origin = spec.origin if spec is not None else None
        try:
            st = os.stat(origin) if origin else None
        except OSError:
            st = None
        _YAML_FINGERPRINT = f"{origin}:{st.st_size}:{st.st_mtime_ns}" if st else "no-yaml"
    return _YAML_FINGERPRINT


def load_copy(stem: str, source: bytes) -> Any:
    """The value ``store_copy`` kept for these exact ``source`` bytes, or None."""
    try:
        return marshal.loads(_copy_path(stem, source).read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None


def store_copy(stem: str, source: bytes, value: Any) -> None:
    """Keep ``value`` (Python's own value types only) as what ``source`` parses to; silently nothing
    where the cache cannot be written or marshal cannot hold a value (a YAML timestamp, ...)."""
    try:
        blob = marshal.dumps(value)
    except ValueError:
        return
    _write_atomically(_copy_path(stem, source), blob)


def _write_atomically(path: Path, blob: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
