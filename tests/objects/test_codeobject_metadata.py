"""The AMDGPU metadata note is checked against a schema when a code object is read.

Each document below is well-formed msgpack of the wrong shape for a field isagen reads; written into an
isagen-built code object (the ELF otherwise intact), it must give one ``CodeObjectError`` naming the
file and the field's path, from the API and as one ``isagen: error:`` line with exit 2 from
``isagen disasm`` and ``isagen report`` — where each crashed before (TypeError, AttributeError,
IndexError, ZeroDivisionError).  The well-formed original, and the foreign objects of the other
tests (Triton's, clang's), still load.
"""

from __future__ import annotations

import re

import pytest
from co_support import edited, read_metadata, with_metadata

from isagen.errors import CodeObjectError
from isagen.objects.codeobject import read_code_object


@pytest.fixture(scope="module")
def good() -> bytes:
    import isagen
    return isagen.build("axpy_f32", "gfx942", use_cache=False).code_object




K = ("amdhsa.kernels", 0)
#: (path, value, the field the error must name, what it must say)
CASES = [
    ((), 1, "the root", "expected a map"),
    ((), [], "the root", "expected a map"),
    (("amdhsa.kernels",), 5, "amdhsa.kernels", "expected a list"),
    (("amdhsa.kernels",), None, "amdhsa.kernels", "expected a list"),
    (("amdhsa.kernels",), [5], "amdhsa.kernels[0]", "expected a map"),
    (("amdhsa.version",), "1.2", "amdhsa.version", "expected [major, minor]"),
    (("amdhsa.target",), 7, "amdhsa.target", "expected a string"),
    ((*K, ".args"), "x", "amdhsa.kernels[0].args", "expected a list"),
    ((*K, ".args", 0), 3, "amdhsa.kernels[0].args[0]", "expected a map"),
    ((*K, ".args", 0, ".offset"), ..., "amdhsa.kernels[0].args[0]", "no .offset"),
    ((*K, ".args", 0, ".size"), -8, "amdhsa.kernels[0].args[0].size", "non-negative integer"),
    ((*K, ".args", 1, ".offset"), 1 << 40, "amdhsa.kernels[0].args[1].offset", "non-negative integer up to"),
    ((*K, ".args", 0, ".value_kind"), 1, "amdhsa.kernels[0].args[0].value_kind", "expected a string"),
    ((*K, ".vgpr_count"), "", "amdhsa.kernels[0].vgpr_count", "expected a non-negative integer"),
    ((*K, ".vgpr_count"), True, "amdhsa.kernels[0].vgpr_count", "expected a non-negative integer"),
    ((*K, ".vgpr_count"), 1025, "amdhsa.kernels[0].vgpr_count", "up to 1024"),
    ((*K, ".agpr_count"), 1.5, "amdhsa.kernels[0].agpr_count", "expected a non-negative integer"),
    ((*K, ".agpr_count"), 200, "amdhsa.kernels[0].agpr_count", "more than the .vgpr_count"),
    ((*K, ".sgpr_count"), None, "amdhsa.kernels[0].sgpr_count", "expected a non-negative integer"),
    ((*K, ".group_segment_fixed_size"), -1, "amdhsa.kernels[0].group_segment_fixed_size", "non-negative"),
    ((*K, ".private_segment_fixed_size"), -4, "amdhsa.kernels[0].private_segment_fixed_size", "non-negative"),
    ((*K, ".reqd_workgroup_size"), [64], "amdhsa.kernels[0].reqd_workgroup_size", "expected 3 integers"),
    ((*K, ".reqd_workgroup_size"), [0, 1, 1], "amdhsa.kernels[0].reqd_workgroup_size", "expected 3 integers"),
    ((*K, ".reqd_workgroup_size"), [64, 64, 1], "amdhsa.kernels[0].reqd_workgroup_size", "product"),
    ((*K, ".max_flat_workgroup_size"), 0, "amdhsa.kernels[0].max_flat_workgroup_size", "from 1 to 1024"),
    ((*K, ".wavefront_size"), 48, "amdhsa.kernels[0].wavefront_size", "one of 32, 64"),
    ((*K, ".kernarg_segment_align"), 3, "amdhsa.kernels[0].kernarg_segment_align", "expected one of"),
    ((*K, ".symbol"), ["k.kd"], "amdhsa.kernels[0].symbol", "expected a string"),
    ((*K, ".name"), {"a": 1}, "amdhsa.kernels[0].name", "expected a string"),
    ((*K, ".uses_dynamic_stack"), 0, "amdhsa.kernels[0].uses_dynamic_stack", "expected a boolean"),
]


def _ids(case):
    return f"{'/'.join(map(str, case[0])) or 'root'}={case[1]!r}"[:60]


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_wrong_shapes_name_the_field(good, tmp_path, case):
    path, value, field, says = case
    bad = with_metadata(good, edited(read_metadata(good), path, value))
    f = tmp_path / "bad.co"
    f.write_bytes(bad)
    with pytest.raises(CodeObjectError) as ei:
        read_code_object(f)
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(f"{f}: offset 0x"), msg
    assert re.search(rf"AMDGPU metadata: {re.escape(field)}: .*{re.escape(says)}", msg), msg


@pytest.mark.parametrize("command", ["disasm", "report"])
def test_wrong_shapes_through_the_cli_are_one_line_exit_2(good, tmp_path, capsys, command):
    """Every case through the command line: exit 2, nothing on stdout, one error line naming the field."""
    from isagen.cli import main
    for i, (path, value, field, _) in enumerate(CASES):
        f = tmp_path / f"bad{i}.co"
        f.write_bytes(with_metadata(good, edited(read_metadata(good), path, value)))
        assert main([command, str(f)]) == 2, (path, value)
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, (path, value, err)
        assert err.startswith(f"isagen: error: {f}: offset 0x") and f"AMDGPU metadata: {field}" in err, err


def test_the_original_and_extra_fields_still_load(good):
    """The schema checks only what isagen reads: the original loads, and so do fields it does not know
    of (producers add their own), a kernel without the optional fields, and a note without kernels."""
    md = read_metadata(good)
    assert read_code_object(good).kernel().metadata == md["amdhsa.kernels"][0]
    extra = edited(md, (*K, ".vendor_field"), {"anything": [1, "x", None]})
    extra = edited(extra, (*K, ".args", 0, ".is_const"), True)
    assert read_code_object(with_metadata(good, extra)).kernel().metadata[".vendor_field"]
    kmd = md["amdhsa.kernels"][0]
    bare = edited(md, K, {k: kmd[k] for k in (".name", ".symbol")})
    k = read_code_object(with_metadata(good, bare)).kernel()
    assert k.args == [] and k.vgpr_count is None
    none = read_code_object(with_metadata(good, edited(md, ("amdhsa.kernels",), ...)))
    assert list(none.kernels) == ["axpy_f32"] and none.kernels["axpy_f32"].metadata == {}


def test_a_processor_without_a_decoder_names_the_file(good, tmp_path, capsys):
    """e_flags naming no known processor (found by the fuzz suite): the decoder's error is one line that
    names the file and the ELF header's e_flags, from the API and from `isagen disasm`/`report`."""
    from isagen.cli import main
    bad = bytearray(good)
    bad[48] = 0                              # EF_AMDGPU_MACH: none
    f = tmp_path / "nomach.co"
    f.write_bytes(bytes(bad))
    co = read_code_object(f)
    with pytest.raises(CodeObjectError, match=rf"^{re.escape(str(f))}: offset 0x30 \(e_flags\): kernel axpy_f32: "
                                              r"no decoder for target 'unknown-0x000'"):
        co.kernel().decode()
    for command in ("disasm", "report"):
        assert main([command, str(f)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith(f"isagen: error: {f}: offset 0x30"), err


def test_the_emulator_loader_refuses_them_too(good):
    """The emulator loads code objects through the same reader: the schema error, not a crash at launch."""
    from isagen.runtime.emu.device import Device
    md = read_metadata(good)
    bad = with_metadata(good, edited(md, (*K, ".args", 0, ".size"), "8"))
    with pytest.raises(CodeObjectError, match=r"AMDGPU metadata: amdhsa.kernels\[0\].args\[0\].size: expected a "
                                              r"non-negative integer"):
        Device("gfx942").load_module(bad)
    assert Device("gfx942").load_module(good).kernel_names == ["axpy_f32"]
