"""Kernel generators (installed as ``isagen.kernels``).

Each module here registers one or more generators with ``@generator(...)`` from
``isagen.builders.registry``: a pure function ``(params, target) -> KernelBuilder`` plus the schema of
its parameters, the run-time shapes it takes and its launch rule.  ``registry.load_generators()``
imports every module of this package, so adding a generator is adding a file.
"""
