"""Builders: spec + target -> Program, pure (they never call the assembler).

``spec`` (YAML spec files, checked against the generator's schema) → ``registry`` (the generators and
their typed parameters) → a generator in ``isagen.kernels`` drives a ``program.KernelBuilder`` (register
pools from ``regs``, kernel arguments from ``kernarg``, launch geometry from ``launch``, tile and row
primitives from ``isagen.tiles`` / ``isagen.prims``) → ``KernelBuilder.finish()`` runs
``isagen.checks`` and returns the ``Program``.
"""
