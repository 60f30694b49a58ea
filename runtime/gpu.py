"""GPU detection, the one place that asks torch what AMD GPU this process can use.

An architecture is supported when ``isagen.targets.TARGETS`` has it.  Everything here goes through
torch's ROCm build (``torch.version.hip``, ``torch.cuda.is_available()``, the device's
``gcnArchName``) and never calls HIP, so it works, and answers "no GPU", on any machine.

A leaf of the runtime (it imports only ``isagen.targets``): the backends, the build's default target
and the emulator's default device all take their answer from here.
"""

from __future__ import annotations

from isagen.targets import DEFAULT_TARGET, TARGETS

SUPPORTED_ARCHS = tuple(TARGETS)
# DEFAULT_TARGET (the target table's): what a build and an emulated Device get when no supported GPU
# says otherwise


def torch_rocm_arch() -> str | None:
    """The processor (e.g. ``gfx942``) of torch's current ROCm GPU, or None when torch sees none."""
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
    """The current AMD GPU's architecture when it is a supported one, else ``DEFAULT_TARGET``."""
    arch = torch_rocm_arch()
    return arch if arch in SUPPORTED_ARCHS else DEFAULT_TARGET


def device_arch(device_index: int) -> str:
    """``gcnArchName`` of a torch ROCm device, with its features, e.g. ``gfx942:sramecc+:xnack-``."""
    import torch
    return torch.cuda.get_device_properties(device_index).gcnArchName
