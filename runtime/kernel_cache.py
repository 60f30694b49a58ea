"""What the torch-level front ends (``isagen.attention``, ``isagen.scaled_mm``, ...) share: the kernels they
build on demand, built once per process and parameters, and the target a call runs for."""

from __future__ import annotations

import threading

import torch

from isagen.api import Kernel, build
from isagen.errors import LaunchError, TargetError
from isagen.runtime import gpu
from isagen.targets import build_target

_KERNELS: dict[tuple, Kernel] = {}
_lock = threading.Lock()


def cached_build(spec: str, target: str, **params) -> Kernel:
    """``isagen.build(spec, target, **params)``, once per process for each (spec, target, params)."""
    key = (spec, target, tuple(sorted(params.items())))
    with _lock:
        kernel = _KERNELS.get(key)
        if kernel is None:
            kernel = _KERNELS[key] = build(spec, target, **params)
        return kernel


def call_target(target, backend_name: str, device: torch.device, op: str) -> str:
    """The target a call of ``op`` builds for: ``target`` when given (a name or target ID), the GPU's
    architecture on the hip backend, else the default (the emulator runs either); mistakes are one
    line starting ``op:``."""
    if target is not None:
        if not isinstance(target, str):
            raise LaunchError(f"{op}: target must be a target name such as {gpu.DEFAULT_TARGET}, "
                              f"got {type(target).__name__}")
        try:
            return build_target(target).name
        except TargetError as e:
            raise TargetError(f"{op}: {e}") from None
    if backend_name == "hip" and device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return gpu.device_arch(index).split(":")[0]
    return gpu.default_target()
