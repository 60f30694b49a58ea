"""The emulator backend: run built kernels on CPU tensors with ``isagen.runtime.emu``.

Each launch copies every tensor argument into the emulated device's memory, runs the kernel's machine
code, and copies the outputs (tensors the kernel writes) back into the caller's tensors, so a call
behaves like the GPU launch it stands for.  Tensors go over as raw bytes, so every element type
(bf16, fp8 included) travels unchanged.

The kernel arguments are packed by the kernel's ``KernArgs`` exactly as for the GPU; the emulator
takes them per metadata argument, so each is handed over as the bytes of that blob (an address, or
a numpy scalar of the argument's type) and the emulator's own metadata-driven packing must reproduce
the same blob.
"""

from __future__ import annotations

import collections
import hashlib
import os
import time

import numpy as np

from isagen.errors import LaunchError
from isagen.runtime.backends.base import Backend
from isagen.runtime.emu import Device

_NUMPY = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64, "f32": np.float32,
          "f64": np.float64, "i16": np.int16, "u16": np.uint16}


def _bytes_of(tensor) -> np.ndarray:
    """The tensor's storage bytes (it is contiguous: the caller checked) as a flat uint8 array."""
    import torch
    flat = tensor.detach().reshape(-1)
    return flat.view(torch.uint8).numpy() if flat.numel() else np.zeros(0, np.uint8)


def sanitize_enabled() -> bool:
    """The emulator's sanitizer is on unless ``ISAGEN_EMU_SANITIZE`` is 0/off/false (it costs ~2x); unset,
    it is off on the cuda engine (``ISAGEN_EMU_DEVICE=cuda``), where its host-side bookkeeping costs far more
    (docs/emulator.md, "The cuda engine"); ``ISAGEN_EMU_SANITIZE=1`` runs it there too."""
    default = "0" if os.environ.get("ISAGEN_EMU_DEVICE", "cpu").strip().lower() == "cuda" else "1"
    value = os.environ.get("ISAGEN_EMU_SANITIZE", default).strip().lower()
    if value in ("0", "off", "false", "no"):
        return False
    if value in ("1", "on", "true", "yes", ""):
        return True
    raise LaunchError(f"ISAGEN_EMU_SANITIZE={value!r}: use 1 or 0")


MAX_MODULES = 32      # loaded code objects the backend keeps (see EmuBackend._modules)


class EmuBackend(Backend):
    """Runs kernels in the CPU emulator; tensors must be CPU tensors."""

    name = "emu"

    def __init__(self) -> None:
        self._devices: dict[tuple, object] = {}
        # (target, sanitize, SHA-256 of the code object) -> loaded module, least recently used first: a
        # module holds its decoded and compiled code (closures per instruction), so a process that runs
        # many kernels (a test suite, a tuning sweep) keeps the last MAX_MODULES, not all of them
        self._modules: collections.OrderedDict[tuple, object] = collections.OrderedDict()
        self.last_stats = None

    def check_device(self, name: str, tensor) -> None:
        if tensor.device.type != "cpu":
            raise LaunchError(f"tensor '{name}' is on {tensor.device}; the emulator backend takes CPU tensors "
                              "(move it with .cpu(), or use ISAGEN_BACKEND=hip on an AMD GPU)")

    def _module(self, kernel):
        target = kernel.target
        sanitize = sanitize_enabled()
        # the engine as $ISAGEN_EMU_DEVICE names it now (Device validates it): a change of it takes effect
        engine = os.environ.get("ISAGEN_EMU_DEVICE", "cpu").strip().lower() or "cpu"
        dev = self._devices.get((target, sanitize, engine))
        if dev is None:
            dev = self._devices[(target, sanitize, engine)] = Device(target, sanitize=sanitize)
        key = (target, sanitize, engine, hashlib.sha256(kernel.code_object).hexdigest())
        mod = self._modules.get(key)
        if mod is None:
            mod = self._modules[key] = dev.load_module(kernel.code_object)
            while len(self._modules) > MAX_MODULES:
                self._modules.popitem(last=False)
        else:
            self._modules.move_to_end(key)
        return dev, mod

    def run(self, kernel, tensors: dict, values: dict, grid, block, *, timing: bool = False,
            outputs=()):
        """Launch ``kernel`` on emulated memory.  ``values`` maps kernel argument names to tensors or
        numbers; ``outputs`` names the tensors to copy back.  Returns the wall time in ms when
        ``timing`` (the emulator's counters are in ``self.last_stats``)."""
        import torch
        dev, mod = self._module(kernel)
        buffers = {}
        try:
            for name, t in tensors.items():
                buffers[name] = dev.to_device(_bytes_of(t), name=name)
            by_tensor = {id(t): buffers[name] for name, t in tensors.items()}
            blob = kernel.args.pack(**{k: (by_tensor[id(v)] if isinstance(v, torch.Tensor) else v)
                                       for k, v in values.items()})
            args = []
            for a in kernel.args:
                if a.kind == "pointer":
                    args.append(int.from_bytes(blob[a.offset:a.offset + 8], "little"))
                else:
                    args.append(np.frombuffer(blob, _NUMPY[a.dtype], count=1, offset=a.offset)[0])
            t0 = time.perf_counter()
            mod.launch(kernel.symbol, grid=tuple(grid), block=tuple(block), args=args,
                       shared_bytes=kernel.launch.shared_bytes)
            wall_ms = (time.perf_counter() - t0) * 1e3
            self.last_stats = getattr(mod, "last_stats", None)
            for name in outputs:
                t = tensors[name]
                data = dev.from_device(buffers[name], (t.numel() * t.element_size(),), np.uint8)
                t.detach().reshape(-1).view(torch.uint8).copy_(torch.from_numpy(data))
        finally:
            for buf in buffers.values():
                dev.free(buf)
        return wall_ms if timing else None
