"""Which assembler makes a program's code object: isagen's own encoder and ELF writer (the default;
no LLVM needed), or LLVM (``isagen.objects.toolchain``).

This module is light on purpose: ``isagen gen`` imports it at start-up, and the LLVM side (the
toolchain search, ``subprocess``, temporary files) is imported only when LLVM is asked for or a
kernel falls back to it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from isagen.errors import ToolchainError

if TYPE_CHECKING:
    from isagen.objects.toolchain import Toolchain

#: the assemblers ``code_object`` knows: isagen's own encoder and ELF writer, or LLVM (``isagen.objects.toolchain``)
ASSEMBLERS = ("isagen", "llvm")
DEFAULT_ASSEMBLER = "isagen"


class AssemblerFallbackWarning(UserWarning):
    """isagen's in-process assembler could not encode a kernel, which LLVM then assembled."""


def default_assembler() -> str:
    """``$ISAGEN_ASSEMBLER`` (isagen or llvm) if set, else isagen's own."""
    return check_assembler(os.environ.get("ISAGEN_ASSEMBLER") or DEFAULT_ASSEMBLER, "ISAGEN_ASSEMBLER")


def check_assembler(assembler: str, where: str = "assembler") -> str:
    if assembler not in ASSEMBLERS:
        raise ToolchainError(f"{where}={assembler!r}: choose {' or '.join(ASSEMBLERS)}")
    return assembler


def code_object(program, target_id: str | None = None, *, assembler: str | None = None,
                asm_text: str | None = None, toolchain: Toolchain | None = None) -> tuple[bytes, str]:
    """The code object of a built ``Program`` and what made it: ``(bytes, "isagen" | "llvm")``.

    ``assembler="isagen"`` (the default, see ``default_assembler``) encodes the program and writes the
    ELF in process (``isagen.objects.elf_writer``; no LLVM needed); an instruction form the encoder
    does not cover makes that kernel go through LLVM instead, with one ``AssemblerFallbackWarning``
    line naming it.  ``assembler="llvm"`` assembles emit's ``.s`` (``asm_text`` if the caller has it)
    with ``find_toolchain``'s LLVM.  Both give the same ``.text``, descriptor and metadata note
    (tests/objects/test_elf_writer.py)."""
    from isagen.isa.encoder import EncodeError
    from isagen.objects.elf_writer import write_code_object

    assembler = check_assembler(assembler) if assembler else default_assembler()
    tid = target_id or program.target.target_id
    if assembler == "isagen":
        try:
            return write_code_object(program, tid), "isagen"
        except EncodeError as e:
            import warnings
            warnings.warn(f"isagen: {program.name} ({program.target.name}): the in-process assembler cannot encode "
                          f"it ({e}); assembling it with LLVM", AssemblerFallbackWarning, stacklevel=2)
    from isagen.objects.emit import render_assembly
    from isagen.objects.toolchain import assemble
    text = asm_text if asm_text is not None else render_assembly(program, tid)
    return assemble(text, tid, name=program.name, toolchain=toolchain), "llvm"


def toolchain_report() -> str:
    """What ``isagen toolchain`` prints: the assembler of code objects, then LLVM's candidates in search
    order (``isagen.objects.toolchain``), versions, and each target's pick."""
    from isagen.objects.toolchain import candidates, find_toolchain, probe
    from isagen.targets import TARGETS, get_target
    try:
        chosen = default_assembler()
    except ToolchainError as e:
        chosen = f"none ({e})"
    lines = [f"code objects: assembler {chosen} (isagen: encoded and written in process for {', '.join(TARGETS)}, "
             "no LLVM needed; llvm: the LLVM below, also used for hand-written .s and when isagen cannot encode "
             "a kernel)",
             "search order: ISAGEN_LLVM_DIR (exclusive when set), ROCm ($ROCM_PATH/llvm/bin), "
             "llvm-mc/clang + ld.lld on PATH (newest first), ziglang"]
    cands = candidates()
    if not cands:
        lines.append("  no candidates found")
    for tc, where, why in cands:
        if tc is None:
            lines.append(f"  {where}: unusable: {why}")
            continue
        support = []
        for proc in TARGETS:
            r = probe(tc, proc)
            support.append(f"{proc} yes" if r.ok else f"{proc} no ({r.why})")
        lines.append(f"  {tc.describe()}: {', '.join(support)}")
    for proc in TARGETS:
        try:
            tc = find_toolchain(proc)
            lines.append(f"{proc} ({get_target(proc).target_id}) -> {tc.assembler.name} + {tc.linker.name} "
                         f"(LLVM {tc.assembler.version}, {tc.source})")
        except ToolchainError as e:
            lines.append(f"{proc} -> none: {e}")
    return "\n".join(lines)
