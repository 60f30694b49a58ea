"""Which backend runs a kernel: ``hip`` on an AMD GPU, ``emu`` (the CPU emulator) anywhere else.

The choice, in order: the ``backend=`` argument, then ``ISAGEN_BACKEND=hip|emu``, then ``hip`` when
torch sees a ROCm GPU of a supported architecture (``torch.version.hip``, ``torch.cuda.is_available()``
and the device's ``gcnArchName`` in gfx942/gfx950), else ``emu``.  Detection never calls HIP.
"""

from __future__ import annotations

import os

from isagen.errors import LaunchError

BACKENDS = ("hip", "emu")
SUPPORTED_ARCHS = ("gfx942", "gfx950")
DEFAULT_TARGET = "gfx942"


def torch_rocm_arch() -> str | None:
    """The processor (``gfx942``) of torch's current ROCm GPU, or None when torch sees none."""
    try:
        import torch
    except ImportError:
        return None
    if not getattr(torch.version, "hip", None):
        return None
    try:
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            return None
        name = torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName
    except (RuntimeError, AssertionError, AttributeError):
        return None
    return name.split(":")[0] or None


def rocm_gpu_available() -> tuple[bool, str]:
    """(available, why not): a supported AMD GPU that torch can use."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not getattr(torch.version, "hip", None):
        return False, f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None)"
    arch = torch_rocm_arch()
    if arch is None:
        return False, "torch sees no ROCm GPU (torch.cuda.is_available() is False)"
    if arch not in SUPPORTED_ARCHS:
        return False, f"the GPU is {arch}; isagen supports {', '.join(SUPPORTED_ARCHS)}"
    return True, ""


def default_target() -> str:
    """The current AMD GPU's architecture when it is a supported one, else gfx942."""
    arch = torch_rocm_arch()
    return arch if arch in SUPPORTED_ARCHS else DEFAULT_TARGET


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
    return "hip" if rocm_gpu_available()[0] else "emu"


_instances: dict[str, object] = {}


def get_backend(name: str | None = None):
    """The backend object (one per process) for ``choose_backend(name)``."""
    name = choose_backend(name)
    if name not in _instances:
        if name == "hip":
            from isagen.runtime.hip import HipBackend
            _instances[name] = HipBackend()
        else:
            from isagen.runtime.emu_backend import EmuBackend
            _instances[name] = EmuBackend()
    return _instances[name]
