"""The backends that run built kernels, and the choice between them.

``hip`` (``backends/hip.py``) launches on an AMD GPU through hip-python; ``emu`` (``backends/emu.py``)
runs the CPU emulator.  Both implement ``Backend`` (``backends/base.py``); GPU detection is
``isagen.runtime.gpu``.

The choice, in order: the ``backend=`` argument, then ``ISAGEN_BACKEND=hip|emu``, then ``hip`` when
torch sees a ROCm GPU of a supported architecture (``gpu.rocm_gpu_available``), else ``emu``.
"""

from __future__ import annotations

import os

from isagen.errors import LaunchError
from isagen.runtime import gpu
from isagen.runtime.backends.base import Backend
from isagen.runtime.backends.emu import EmuBackend
from isagen.runtime.backends.hip import HipBackend

BACKENDS: dict[str, type] = {"hip": HipBackend, "emu": EmuBackend}

__all__ = ["BACKENDS", "Backend", "choose_backend", "get_backend"]


def choose_backend(name: str | None = None) -> str:
    """The backend name to use (see the module docstring for the order)."""
    source = "backend="
    if name is None:
        name = os.environ.get("ISAGEN_BACKEND") or None
        source = "ISAGEN_BACKEND="
    if name is not None:
        name = name.strip().lower()
        if name not in BACKENDS:
            raise LaunchError(f"unknown backend {source}'{name}' (choose {' or '.join(BACKENDS)})")
        return name
    return "hip" if gpu.rocm_gpu_available()[0] else "emu"


# one backend object per process and name: each keeps its loaded modules (and the emulator its devices)
_instances: dict[str, Backend] = {}


def get_backend(name: str | None = None) -> Backend:
    """The backend object for ``choose_backend(name)``."""
    name = choose_backend(name)
    if name not in _instances:
        _instances[name] = BACKENDS[name]()
    return _instances[name]
