"""`isagen disasm` agrees with llvm-objdump, instruction for instruction, over every code object the
test session built or ran: gfx942 against `llvm-objdump-19` (issue 4), gfx950 against
`llvm-objdump-22` (issue 13; LLVM 19 has no gfx950).

tests/conftest.py records each code object isagen's toolchain links and each one loaded into the
emulator (isagen's kernels, Triton's, clang's), and runs this module after every other test, so in a
full run it sees everything the suite built.  So that it means something when run alone too, every
bundled spec that lists the target is built here first unless the session already built it, and for
gfx950 a Triton matmul is compiled (where triton is installed) so that a second compiler's code is in.

The comparison is tests/objdump_support.py's (text before objdump's `//` comment, blanks collapsed),
over every word of each object's ``.text`` (objdump's ``-z``): one objdump run for all of them.  An
object the decoder refuses passes only if objdump also prints `<unknown>` at that offset and the
instructions before it agree (the planted bad code objects of the error tests).
"""

from __future__ import annotations

import os
import sys

import pytest
from objdump_support import compare, objdump_all, objdump_for, skip_reason

from isagen.errors import CodeObjectError
from isagen.objects.codeobject import read_code_object

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bundled_specs(target):
    from isagen.builders.spec import bundled_specs_dir, load_specs
    return [s for s in load_specs([bundled_specs_dir()]) if target in s.targets]


def _of_target(objects: dict, target: str) -> dict:
    """sha -> (origin, CodeObject) of the registered objects that are ``target`` code objects."""
    out = {}
    for sha, (origin, data) in objects.items():
        try:
            co = read_code_object(data)
        except CodeObjectError:
            continue                 # not a loadable object (the error tests' inputs)
        if co.mach == target and co.text:
            out[sha] = (origin, co)
    return out


def _triton_gfx950(registry) -> None:
    """Triton's gfx950 matmul (bf16 and fp8, vectorised), registered as the emulator tests would.
    Without triton (an optional test dependency) the objects of isagen alone are compared."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import triton_kernels as T
    finally:
        sys.path.pop(0)
    for dtype in ("bf16", "fp8"):
        k = T.compile_matmul("gfx950", 64, 64, 64, 4, dtype, aligned=True)
        registry.add(k.hsaco, f"triton (matmul {dtype}, gfx950)")


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_every_code_object_of_the_session_matches_objdump(code_object_registry, tmp_path, target):
    tool = objdump_for(target)
    if tool is None:
        pytest.skip(skip_reason(target))
    assert code_object_registry.hooked == ["isagen.objects.toolchain._link_in", "Device.load_module"], \
        "tests/conftest.py could not hook the toolchain / emulator"
    from isagen.objects.emit import render_assembly
    from isagen.objects.toolchain import assemble

    specs = _bundled_specs(target)
    have = {name for _, co in _of_target(code_object_registry.objects, target).values() for name in co.kernels}
    for spec in specs:
        if spec.name not in have:                        # registered by the hook as it links
            assemble(render_assembly(spec.build(target)), target, name=spec.name)
    if target == "gfx950":
        _triton_gfx950(code_object_registry)

    objects = _of_target(code_object_registry.objects, target)
    names = {name for _, co in objects.values() for name in co.kernels}
    missing = [s.name for s in specs if s.name not in names]
    assert not missing, f"bundled specs not built for {target}: {missing}"

    paths = {}
    for sha, (_origin, co) in objects.items():
        p = tmp_path / f"{sha[:16]}.co"
        p.write_bytes(co.data)         # the ELF itself (an offload bundle's entry: objdump reads no bundles)
        paths[sha] = str(p)
    ref = objdump_all(tool, list(paths.values()))

    bad, total = [], 0
    for sha, (origin, co) in objects.items():
        b, n = compare(f"{origin} [{', '.join(co.kernels)}]", co, ref[paths[sha]])
        bad += b
        total += n
    assert not bad, f"{len(bad)} disagreements over {len(objects)} objects:\n" + "\n".join(bad[:40])
    assert len(objects) >= len(specs) and total > 10000
