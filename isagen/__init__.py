"""isagen: raw AMD CDNA assembly for AI kernels, generated from Python.

Layers, one way only: ISA tables and instruction objects (``isagen.isa``) → kernel builders
(``isagen.program``, ``isagen.kernels``; pure: spec + target → program) → toolchain
(``isagen.toolchain``: assemble and link) → runtime (``isagen.runtime``: launch).
"""

__version__ = "0.1.0"
