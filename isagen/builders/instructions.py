"""The instruction methods of ``KernelBuilder``, as type checkers and editors see them.

At run time this class is empty: ``KernelBuilder.__getattr__`` makes every instruction of the
kernel's target callable.  The declarations are in ``instructions.pyi`` next to this file (a stub
takes precedence over the module for mypy, pyright and editors), generated from the ISA table by
``python -m isagen.builders.stubgen``; docs/isa.md, "Typed instruction methods", has the details.
"""


class InstructionMethods:
    """One method per instruction of any target (declared in instructions.pyi)."""

    __slots__ = ()
