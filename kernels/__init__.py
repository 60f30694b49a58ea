"""Kernel generators (installed as ``isagen.kernels``).

Each generator is a pure function ``(params: dict, target: Target) -> Program``; it is registered
under the name a spec's ``kernel:`` field uses.
"""
