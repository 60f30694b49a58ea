"""The elementwise kernels through the whole path: every bundled spec builds for every target it lists
and the real toolchain assembles it; LLVM reads back what the spec asked for; every variant passes the
project's checks."""

import itertools
import re
import shutil
import subprocess

import pytest

from isagen.builders.spec import bundled_specs_dir, load_specs, parse_spec
from isagen.cli import main
from isagen.kernels.elementwise import ELEMENT_BYTES, OPS
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble

READELF = shutil.which("llvm-readelf-19") or shutil.which("llvm-readelf")
OBJDUMP = shutil.which("llvm-objdump-19")
needs_llvm = pytest.mark.skipif(READELF is None or OBJDUMP is None,
                                reason="needs llvm-readelf-19 and llvm-objdump-19 (apt install llvm-19)")

SPECS = load_specs([bundled_specs_dir()])
ELEMENTWISE = [s for s in SPECS if s.kernel == "elementwise"]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """`isagen gen specs/` once: every spec for every target it lists, assembled by the real toolchain."""
    out = tmp_path_factory.mktemp("gen")
    assert main(["gen", str(bundled_specs_dir()), "-o", str(out)]) == 0
    return out


def test_every_spec_and_target_assembles(library):
    for s in SPECS:
        for t in s.targets:
            co = (library / f"{s.name}.{t}.co").read_bytes()
            assert co[:4] == b"\x7fELF", (s.name, t)


RAW_REGISTER = re.compile(r"(?<![\w+])(?:[vsa]\d+|[vsa]\[\d+(?::\d+)?\])(?![\w+])")


def test_every_generated_file_reads_well(library):
    """The .s of every bundled spec and target (as `isagen gen` wrote it): each s_waitcnt, s_nop and
    s_barrier says why it is there, and an instruction names its registers through the .set symbols
    (or says in a comment what a bare register holds)."""
    checked = 0
    for s in SPECS:
        for t in s.targets:
            text = (library / f"{s.name}.{t}.s").read_text()
            body = text.split(f"\n{s.name}:\n", 1)[1].split("\n.Lfunc_end", 1)[0]
            sets = set(re.findall(r"^\.set (\w+),", text, re.M))
            assert sets, (s.name, t)
            for line in body.splitlines():
                if not re.match(r"\s+[a-z]", line):          # labels and comment lines
                    continue
                code, _, why = line.partition("//")
                if re.match(r"\s+(s_waitcnt|s_nop|s_barrier)\b", code):
                    assert why.strip(), f"{s.name}.{t}: no reason given for: {line.strip()}"
                    checked += 1
                if RAW_REGISTER.search(code):
                    assert why.strip(), f"{s.name}.{t}: unnamed register, no comment: {line.strip()}"
                for sym in re.findall(r"\b((?:vgpr|agpr|sgpr)_\w+)", code):
                    assert sym in sets, f"{s.name}.{t}: {sym} has no .set"
    assert checked > 0


@needs_llvm
@pytest.mark.parametrize("spec", ELEMENTWISE, ids=lambda s: s.name)
def test_metadata_matches_the_spec_and_launch_contract(library, spec):
    for t in spec.targets:
        notes = subprocess.run([READELF, "--notes", str(library / f"{spec.name}.{t}.co")],
                               capture_output=True, text=True, check=True).stdout
        assert re.search(rf"\.name:\s+{spec.name}\b", notes)
        assert re.search(rf"\.max_flat_workgroup_size:\s+{spec.params.block}\b", notes)
        assert re.search(r"\.wavefront_size:\s+64\b", notes)
        assert re.search(r"\.group_segment_fixed_size:\s+0\b", notes)
        # the kernel arguments, in order, are the contract's tensors (pointers), scalars and sizes
        names = [n.replace("!str ", "") for n in re.findall(r"\.name:\s+(?:!str )?(\w+)", notes)]
        info = spec.launch_info(t)
        expected = [x.name for x in info.tensors] + [x.name for x in info.scalars] + info.size_symbols
        assert names[:len(expected)] == expected
        kinds = re.findall(r"\.value_kind:\s+(\w+)", notes)
        assert kinds == ["global_buffer"] * len(info.tensors) + ["by_value"] * (len(expected) - len(info.tensors))


@needs_llvm
@pytest.mark.parametrize("spec", [s for s in ELEMENTWISE if "gfx942" in s.targets], ids=lambda s: s.name)
def test_gfx942_disassembly_has_the_memory_ops_the_spec_asks_for(library, spec):
    p = spec.params
    op = OPS[p.op]
    text = subprocess.run([OBJDUMP, "-d", str(library / f"{spec.name}.gfx942.co")],
                          capture_output=True, text=True, check=True).stdout
    mnems = re.findall(r"^\s+(\w+)", text, re.M)
    width = {4: "dword", 8: "dwordx2", 16: "dwordx4"}[p.vec * ELEMENT_BYTES[p.dtype]]
    assert mnems.count(f"buffer_load_{width}") == len(op.inputs) * p.unroll
    assert mnems.count(f"buffer_store_{width}") == p.unroll
    half = ELEMENT_BYTES[p.dtype] == 2
    assert mnems.count("buffer_load_ushort") == (len(op.inputs) if half else 0)
    assert mnems.count("buffer_store_short") == (1 if half else 0)
    assert "v_cvt_pk_bf16_f32" not in mnems                  # gfx942 has no such instruction
    assert mnems.count("s_endpgm") == 1
    # V# word 3 for a raw gfx9 buffer: DATA_FORMAT (bits 18:15) = 4 (32-bit), everything else 0
    tensors = len(op.inputs) + (op.output not in op.inputs)
    assert len(re.findall(rf"s_mov_b32 s\d+, 0x{4 << 15:x}\b", text)) == tensors
    # no branch: the tail is handled by the buffer range check and one lane's 2-byte access
    assert not [m for m in mnems if m.startswith("s_cbranch") or m == "s_branch"]


def test_bf16_rounding_instruction_per_target():
    spec = next(s for s in ELEMENTWISE if s.params.dtype == "bf16")
    gfx950 = render_assembly(spec.build("gfx950"))
    gfx942 = render_assembly(spec.build("gfx942"))
    assert "v_cvt_pk_bf16_f32" in gfx950 and "v_bfe_u32" not in gfx950
    assert "v_cvt_pk_bf16_f32" not in gfx942 and "0x7fff" in gfx942


def _variants():
    for op, dtype, vec, unroll in itertools.product(OPS, ELEMENT_BYTES, (1, 2, 4, 8), (1, 3)):
        if vec * ELEMENT_BYTES[dtype] in (4, 8, 16):
            yield op, dtype, vec, unroll


def _spec(op, dtype, vec, unroll, block=128):
    text = (f"kernel: elementwise\nname: ew_{op}_{dtype}_v{vec}_u{unroll}\ntargets: [gfx942, gfx950]\n"
            f"params: {{op: {op}, dtype: {dtype}, vec: {vec}, unroll: {unroll}, block: {block}}}\n")
    return parse_spec(text, f"<{op}/{dtype}/vec{vec}/unroll{unroll}>")


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_every_variant_passes_the_checks_and_reads_well(target):
    for variant in _variants():
        program = _spec(*variant).build(target)          # finish(): hazards, waits, registers, leaks
        assert program.rejected is None and not program.leaks
        asm = render_assembly(program)
        for line in asm.splitlines():
            if re.match(r"\s+(s_waitcnt|s_nop|s_barrier)\b", line):
                assert "//" in line, f"{variant}: uncommented {line.strip()}"
        assert ".set vgpr_offset" in asm and ".set sgpr_n," in asm


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_each_op_and_dtype_assembles(target):
    for op, dtype in itertools.product(OPS, ELEMENT_BYTES):
        vec = 16 // ELEMENT_BYTES[dtype]
        program = _spec(op, dtype, vec, 2).build(target)
        co = assemble(render_assembly(program), target, name=program.name)
        assert co[:4] == b"\x7fELF"


def test_register_use_grows_with_unroll_and_occupancy_rule():
    base = _spec("axpy", "f32", 4, 1).build("gfx942")
    big = _spec("axpy", "f32", 4, 8).build("gfx942")
    # two inputs x 4 dwords x 7 more chunks, plus 7 more chunk offsets (+1 if a tuple needs re-aligning)
    assert 2 * 4 * 7 + 7 <= big.vgprs - base.vgprs <= 2 * 4 * 7 + 7 + 1
    assert big.occupancy()["waves_per_simd"] <= base.occupancy()["waves_per_simd"]
