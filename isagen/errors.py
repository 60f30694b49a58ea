"""User-facing errors.

Every error a user can cause (a bad spec, an impossible tile, a register overflow, a missing toolchain,
a malformed code object) is raised as an ``IsagenError``: its message is one line that says what is
wrong and where.  The CLI prints that line and exits with code 2; it never shows a traceback for one.
Anything else that escapes is a bug in isagen.
"""


class IsagenError(Exception):
    """Base class: a problem with the user's input or environment, reported as one line."""

    exit_code = 2


class SpecError(IsagenError):
    """A kernel spec is malformed or asks for something impossible (names file and field)."""


class ISAError(IsagenError):
    """An instruction was given operands or modifiers its definition does not allow."""


class AllocationError(IsagenError):
    """A register or LDS allocation failed, was freed twice, or leaked."""


class TargetError(IsagenError):
    """An unknown or unsupported target."""


class ToolchainError(IsagenError):
    """No usable assembler/linker, or the assembler rejected the program."""


class CheckError(IsagenError):
    """A finished program violates a hazard, wait, barrier or register-limit rule."""


class CodeObjectError(IsagenError):
    """A code object could not be read or decoded (names the file and byte offset)."""


class LaunchError(IsagenError):
    """A kernel launch was given bad arguments (names the argument)."""
