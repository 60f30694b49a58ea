"""Session-wide test infrastructure.

Code-object registry: every code object the session builds with isagen's toolchain (each one passes
through ``isagen.objects.toolchain._link_in``, whether from ``assemble`` or ``link``) or runs in the emulator
(``Device.load_module``: isagen's, Triton's, clang's) is remembered.  tests/objects/test_disasm_every_object.py
is moved to the end of the run and checks that ``isagen disasm`` agrees with ``llvm-objdump-19 -d`` on
every gfx942 one (issue 4: "over every code object the test suite builds and over Triton-compiled
ones").  The hooks only record; what the wrapped functions return is unchanged.
"""

from __future__ import annotations

import hashlib
import os

import pytest

LAST_MODULES = ("test_disasm_every_object.py",)


class CodeObjectRegistry:
    """sha256 -> (where it came from, bytes) of every ELF code object seen, first origin kept."""

    def __init__(self):
        self.objects: dict[str, tuple[str, bytes]] = {}
        self.hooked: list[str] = []

    def add(self, data, origin: str) -> None:
        data = bytes(data)
        if data[:4] == b"\x7fELF":
            self.objects.setdefault(hashlib.sha256(data).hexdigest(), (origin, data))


REGISTRY = CodeObjectRegistry()


def _install_hooks() -> None:
    from isagen.objects import toolchain

    link_in = getattr(toolchain, "_link_in", None)
    if link_in is not None:
        def recording_link_in(tc, tmp, objs, out):
            data = link_in(tc, tmp, objs, out)
            REGISTRY.add(data, f"isagen.objects.toolchain ({os.path.basename(out)})")
            return data
        toolchain._link_in = recording_link_in
        REGISTRY.hooked.append("isagen.objects.toolchain._link_in")

    try:
        from isagen.runtime.emu.device import Device
    except ImportError:             # the emulator's own tests report that
        return
    load_module = Device.load_module

    def recording_load_module(self, co_bytes):
        module = load_module(self, co_bytes)
        if isinstance(co_bytes, (bytes, bytearray, memoryview)):
            data = bytes(co_bytes)
        else:
            with open(co_bytes, "rb") as f:
                data = f.read()
        REGISTRY.add(data, "emulator (kernels " + ", ".join(module.kernel_names) + ")")
        return module
    Device.load_module = recording_load_module
    REGISTRY.hooked.append("Device.load_module")


def pytest_configure(config):
    _install_hooks()


def pytest_collection_modifyitems(session, config, items):
    """Run the whole-session checks after every other test."""
    last = [it for it in items if os.path.basename(str(it.fspath)) in LAST_MODULES]
    if last:
        items[:] = [it for it in items if it not in last] + last


@pytest.fixture(scope="session")
def code_object_registry() -> CodeObjectRegistry:
    return REGISTRY
