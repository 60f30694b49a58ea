"""isagen: raw AMD CDNA assembly for AI kernels, generated from Python.

Layers, one way only: ISA tables and instruction objects (``isagen.isa``) → kernel builders
(``isagen.builders.program``, ``isagen.kernels``; pure: spec + target → program) → toolchain
(``isagen.objects.toolchain``: assemble and link) → runtime (``isagen.runtime``: launch).  The full
order, which tests/test_imports.py checks, is in that test's docstring.
"""

from importlib import import_module as _import_module

__version__ = "0.1.0"

# ``isagen.build``, ``isagen.Kernel``, ``isagen.attention``, ``isagen.attention_backward``,
# ``isagen.scaled_mm`` and ``isagen.mx_mm`` load on first use, so ``import isagen`` stays light (no torch, no yaml)
_LAZY = {"build": ("isagen.api", "build"), "Kernel": ("isagen.api", "Kernel"),
         "attention": ("isagen.runtime.attention", "attention"),
         "attention_backward": ("isagen.runtime.attention", "attention_backward"),
         "scaled_mm": ("isagen.runtime.scaled_mm", "scaled_mm"),
         "mx_mm": ("isagen.runtime.mx_mm", "mx_mm"),
         "mx_dequantize": ("isagen.runtime.mx_mm", "mx_dequantize")}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(_import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'isagen' has no attribute '{name}'")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
