"""The emulator backend: run built kernels on CPU tensors with ``isagen.runtime.emu``.

Each launch copies every tensor argument into the emulated device's memory, runs the kernel's machine
code, and copies the outputs (tensors the kernel writes) back into the caller's tensors, so a call
behaves like the GPU launch it stands for.  Tensors go over as raw bytes, so every element type
(bf16, fp8 included) travels unchanged.
"""

from __future__ import annotations

import time

import numpy as np

from isagen.errors import LaunchError


def _bytes_of(tensor) -> np.ndarray:
    """The tensor's storage bytes (it is contiguous: the caller checked) as a flat uint8 array."""
    import torch
    flat = tensor.detach().reshape(-1)
    return flat.view(torch.uint8).numpy() if flat.numel() else np.zeros(0, np.uint8)


class EmuBackend:
    """Runs kernels in the CPU emulator; tensors must be CPU tensors."""

    name = "emu"

    def __init__(self):
        self._devices: dict[str, object] = {}
        self._modules: dict[tuple[str, int], object] = {}
        self.last_stats = None

    def check_device(self, name: str, tensor) -> None:
        if tensor.device.type != "cpu":
            raise LaunchError(f"tensor '{name}' is on {tensor.device}; the emulator backend takes CPU tensors "
                              "(move it with .cpu(), or use ISAGEN_BACKEND=hip on an AMD GPU)")

    def _module(self, kernel):
        from .emu import Device
        target = kernel.target
        dev = self._devices.get(target)
        if dev is None:
            dev = self._devices[target] = Device(target)
        key = (target, id(kernel))
        entry = self._modules.get(key)
        if entry is None or entry[0] is not kernel:
            entry = self._modules[key] = (kernel, dev.load_module(kernel.code_object))
        return dev, entry[1]

    def run(self, kernel, tensors: dict, values: dict, grid, block, *, timing: bool = False,
            outputs=()):
        """Launch ``kernel`` on emulated memory.  ``values`` maps kernel argument names to tensors or
        numbers; ``outputs`` names the tensors to copy back.  Returns the wall time in ms when
        ``timing`` (the emulator's own counts are in ``self.last_stats``)."""
        import torch
        dev, mod = self._module(kernel)
        buffers = {name: dev.to_device(_bytes_of(t)) for name, t in tensors.items()}
        args = []
        for arg in kernel.args:
            v = values[arg.name]
            if isinstance(v, torch.Tensor):
                v = buffers[next(n for n, t in tensors.items() if t is v)]
            args.append(v)
        t0 = time.perf_counter()
        mod.launch(kernel.symbol, grid=tuple(grid), block=tuple(block), args=args, shared_bytes=0)
        wall_ms = (time.perf_counter() - t0) * 1e3
        self.last_stats = getattr(mod, "last_stats", None)
        for name in outputs:
            t = tensors[name]
            data = dev.from_device(buffers[name], (t.numel() * t.element_size(),), np.uint8)
            t.detach().reshape(-1).view(torch.uint8).copy_(torch.from_numpy(np.ascontiguousarray(data)))
        return wall_ms if timing else None
