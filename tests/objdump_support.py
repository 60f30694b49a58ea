"""llvm-objdump as the reference of isagen's decoder: each target's objdump (gfx942: LLVM 19, gfx950:
LLVM 22, the first LLVM Debian ships that knows gfx950), run once over many code objects, and the
instruction-for-instruction comparison the disassembly tests share."""

from __future__ import annotations

import re
import shutil
import subprocess

from isagen.isa import decoder as D

OBJDUMP = {"gfx942": "llvm-objdump-19", "gfx950": "llvm-objdump-22"}
APT = {"gfx942": "llvm-19", "gfx950": "llvm-22"}

_HEADER = re.compile(r"^(\S.*):\s+file format ", re.M)


def objdump_for(target: str) -> str | None:
    return shutil.which(OBJDUMP[target])


def skip_reason(target: str) -> str:
    return f"needs {OBJDUMP[target]} (apt-get install {APT[target]})"


def objdump_all(tool: str, paths: list[str]) -> dict[str, dict[int, str]]:
    """{path: {address: normalised text}} from one objdump run over all paths."""
    # -z: print runs of zero words too (the padding ld.lld puts between the kernels of a linked library)
    # instead of objdump's "...", so that every word of .text is compared
    out = subprocess.run([tool, "-d", "-z", *paths], capture_output=True, text=True, check=True).stdout
    heads = list(_HEADER.finditer(out))
    res = {}
    for h, nxt in zip(heads, heads[1:] + [None]):
        body = out[h.end():nxt.start() if nxt else len(out)]
        insts = {}
        for line in body.splitlines():
            if not line.startswith("\t") or "//" not in line:
                continue
            text, rest = line.split("//", 1)
            m = re.match(r"\s*([0-9A-Fa-f]+):", rest)
            insts[int(m.group(1), 16)] = " ".join(text.split())
        res[h.group(1)] = insts
    return res


def compare(where: str, co, theirs: dict[int, str]) -> tuple[list[str], int]:
    """Disagreements of isagen's decode of ``co`` with objdump's ``theirs`` and the number decoded.

    objdump names a branch target by the symbol at that address where the object has one (AITER's
    objects keep their ``label_XXXX`` symbols): such a text counts as equal when the symbol's address
    is the instruction's branch target.  An object the decoder refuses passes only if objdump also
    prints ``<unknown>`` at that offset and the instructions before it agree."""
    bad = []
    try:
        insts = D.decode(co.text, co.mach, base=co.text_address)
    except D.DecodeError as e:
        at = co.text_address + e.offset
        if theirs.get(at) != "<unknown>":
            bad.append(f"{where}: isagen refuses offset {e.offset:#x} ({e.reason}), objdump prints {theirs.get(at)!r}")
        insts = D.decode(co.text[:e.offset], co.mach, base=co.text_address) if e.offset else []
        theirs = {a: t for a, t in theirs.items() if a < at}
    syms = {s.name: s.value for s in co.symbols}
    diff = []
    for i in insts:
        mine, ref = " ".join(i.text.split()), theirs.get(i.pc)
        if ref != mine and ref is not None and i.branch_target is not None:
            name = ref.rpartition(" ")[2]
            if syms.get(name, -1) == i.branch_target and ref.rpartition(" ")[0] == mine.rpartition(" ")[0]:
                continue
        if ref != mine:
            diff.append(f"{where} 0x{i.pc:x}: objdump '{ref}' isagen '{i.text}'")
    if len(insts) != len(theirs):
        diff.append(f"{where}: objdump printed {len(theirs)} instructions, isagen decoded {len(insts)}")
    return bad + diff[:5], len(insts)
