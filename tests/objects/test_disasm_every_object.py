"""`isagen disasm` agrees with `llvm-objdump-19 -d`, instruction for instruction, over every gfx942 code
object the test session built or ran (issue 4).

tests/conftest.py records each code object isagen's toolchain links and each one loaded into the
emulator (isagen's kernels, Triton's, clang's), and runs this module after every other test, so in a
full run it sees everything the suite built.  So that it means something when run alone too, every
bundled spec that lists gfx942 is built here first unless the session already built it.

The comparison is the one tests/objects/test_disasm_vs_objdump.py makes (text before objdump's `//` comment,
blanks collapsed), over every word of each object's ``.text`` (objdump's ``-z``: the zero padding between
the kernels of a linked library is printed, not elided as "..."): one objdump run for all of them.  An
object the decoder refuses passes only if objdump also prints `<unknown>` at that offset and the
instructions before it agree (the planted bad code objects of the error tests).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from isagen.errors import CodeObjectError
from isagen.isa import decoder as D
from isagen.objects.codeobject import read_code_object

OBJDUMP = shutil.which("llvm-objdump-19")
pytestmark = pytest.mark.skipif(OBJDUMP is None or shutil.which("llvm-mc-19") is None,
                                reason="needs llvm-objdump-19 and llvm-mc-19 (apt install llvm-19 lld-19)")

_HEADER = re.compile(r"^(\S.*):\s+file format ", re.M)


def _objdump_all(paths: list[str]) -> dict[str, dict[int, str]]:
    """{path: {address: normalised text}} from one llvm-objdump-19 run over all paths."""
    # -z: print runs of zero words too (the padding ld.lld puts between the kernels of a linked library)
    # instead of objdump's "...", so that every word of .text is compared
    out = subprocess.run([OBJDUMP, "-d", "-z", *paths], capture_output=True, text=True, check=True).stdout
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


def _bundled_gfx942_specs():
    from isagen.builders.spec import bundled_specs_dir, load_specs
    return [s for s in load_specs([bundled_specs_dir()]) if "gfx942" in s.targets]


def _gfx942(objects: dict) -> dict:
    """sha -> (origin, CodeObject) of the registered objects that are gfx942 code objects."""
    out = {}
    for sha, (origin, data) in objects.items():
        try:
            co = read_code_object(data)
        except CodeObjectError:
            continue                 # not a loadable object (the error tests' inputs)
        if co.mach == "gfx942" and co.text:
            out[sha] = (origin, co)
    return out


def test_every_gfx942_code_object_of_the_session_matches_objdump(code_object_registry, tmp_path):
    assert code_object_registry.hooked == ["isagen.objects.toolchain._link_in", "Device.load_module"], \
        "tests/conftest.py could not hook the toolchain / emulator"
    from isagen.objects.emit import render_assembly
    from isagen.objects.toolchain import assemble

    have = {name for _, co in _gfx942(code_object_registry.objects).values() for name in co.kernels}
    for spec in _bundled_gfx942_specs():
        if spec.name not in have:                        # registered by the hook as it links
            assemble(render_assembly(spec.build("gfx942")), "gfx942", name=spec.name)

    objects = _gfx942(code_object_registry.objects)
    names = {name for _, co in objects.values() for name in co.kernels}
    missing = [s.name for s in _bundled_gfx942_specs() if s.name not in names]
    assert not missing, f"bundled specs not built for gfx942: {missing}"

    paths = {}
    for sha, (_origin, co) in objects.items():
        p = tmp_path / f"{sha[:16]}.co"
        p.write_bytes(co.data)         # the ELF itself (an offload bundle's entry: objdump reads no bundles)
        paths[sha] = str(p)
    ref = _objdump_all(list(paths.values()))

    bad, total = [], 0
    for sha, (origin, co) in objects.items():
        theirs = ref[paths[sha]]
        where = f"{origin} [{', '.join(co.kernels)}]"
        try:
            insts = D.decode(co.text, co.mach, base=co.text_address)
        except D.DecodeError as e:
            at = co.text_address + e.offset
            if theirs.get(at) != "<unknown>":
                bad.append(f"{where}: isagen refuses offset {e.offset:#x} ({e.reason}), objdump prints "
                           f"{theirs.get(at)!r}")
            insts = D.decode(co.text[:e.offset], co.mach, base=co.text_address) if e.offset else []
            theirs = {a: t for a, t in theirs.items() if a < at}
        total += len(insts)
        diff = [f"{where} 0x{i.pc:x}: objdump '{theirs.get(i.pc)}' isagen '{i.text}'"
                for i in insts if theirs.get(i.pc) != " ".join(i.text.split())]
        if len(insts) != len(theirs):
            diff.append(f"{where}: objdump printed {len(theirs)} instructions, isagen decoded {len(insts)}")
        bad += diff[:5]
    assert not bad, f"{len(bad)} disagreements over {len(objects)} objects:\n" + "\n".join(bad[:40])
    assert len(objects) >= len(_bundled_gfx942_specs()) and total > 10000
