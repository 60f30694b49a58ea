"""Reading AMDGPU code objects, checked against LLVM's own view of the same file.

* kernel descriptor fields vs `llvm-objdump-19 -D --disassemble-symbols=K.kd` (which prints the
  descriptor back as .amdhsa_ directives) on objects assembled from directives we chose;
* target ID vs `llvm-readelf-19 -h`; metadata vs the YAML we wrote / clang's note;
* kernel code bytes = the function symbol's bytes;
* bad input: truncated file, not an ELF, a non-AMDGPU ELF, an unknown opcode in a kernel — one
  line naming the file and the byte offset.
"""

import re
import shutil
import struct
import subprocess

import pytest

from isagen.cli import main as cli_main
from isagen.errors import CodeObjectError
from isagen.objects.codeobject import KernelNotFound, read_code_object

MC, LLD, OBJDUMP, READELF = "llvm-mc-19", "ld.lld-19", "llvm-objdump-19", "llvm-readelf-19"
_missing = [t for t in (MC, LLD, OBJDUMP, READELF) if shutil.which(t) is None]
needs_llvm = pytest.mark.skipif(bool(_missing), reason=f"{', '.join(_missing)} not installed "
                                "(apt-get install llvm-19 lld-19)")

KERNEL_S = """\
.amdgcn_target "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"
.amdhsa_code_object_version 5
.text
.globl k
.p2align 8
.type k,@function
k:
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_mov_b32 v1, 1.0
  s_waitcnt lgkmcnt(0)
  {extra}
  s_endpgm
.Lk_end:
  .size k, .Lk_end-k
.rodata
.p2align 6
.amdhsa_kernel k
  .amdhsa_group_segment_fixed_size 4096
  .amdhsa_private_segment_fixed_size 16
  .amdhsa_kernarg_size 24
  .amdhsa_user_sgpr_dispatch_ptr 1
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_user_sgpr_kernarg_preload_length 2
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_system_sgpr_workgroup_id_y 1
  .amdhsa_system_vgpr_workitem_id 2
  .amdhsa_next_free_vgpr 37
  .amdhsa_next_free_sgpr 20
  .amdhsa_accum_offset 12
  .amdhsa_float_denorm_mode_32 0
  .amdhsa_ieee_mode 0
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     25
    .args:
      - .address_space:  global
        .name:           xs
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .name:           count
        .offset:         8
        .size:           4
        .value_kind:     by_value
    .group_segment_fixed_size: 4096
    .kernarg_segment_align: 8
    .kernarg_segment_size: 24
    .max_flat_workgroup_size: 256
    .name:           k
    .private_segment_fixed_size: 16
    .sgpr_count:     26
    .sgpr_spill_count: 0
    .symbol:         k.kd
    .vgpr_count:     37
    .vgpr_spill_count: 0
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-
amdhsa.version:
  - 1
  - 2
...
.end_amdgpu_metadata
"""


def build(tmp_path, extra="s_nop 0", name="k", mattr="+sramecc,-xnack",
          target="gfx942:sramecc+:xnack-"):
    s, o, co = (tmp_path / f"{name}{ext}" for ext in (".s", ".o", ".co"))
    s.write_text(KERNEL_S.replace("{extra}", extra).replace("gfx942:sramecc+:xnack-", target))
    subprocess.run([MC, "-triple", "amdgcn-amd-amdhsa", "-mcpu=gfx942", f"-mattr={mattr}",
                    "-filetype=obj", str(s), "-o", str(o)], check=True)
    subprocess.run([LLD, "-shared", str(o), "-o", str(co)], check=True)
    return str(co)


def objdump_kd(path, sym):
    out = subprocess.run([OBJDUMP, "-D", f"--disassemble-symbols={sym}", path],
                         capture_output=True, text=True, check=True).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"\.amdhsa_(\w+) (-?\d+)", out)}


@needs_llvm
def test_descriptor_fields_match_llvm_objdump(tmp_path):
    path = build(tmp_path)
    co = read_code_object(path)
    kd = co.kernel("k").descriptor
    ref = objdump_kd(path, "k.kd")
    assert kd.group_segment_fixed_size == ref["group_segment_fixed_size"] == 4096
    assert kd.private_segment_fixed_size == ref["private_segment_fixed_size"] == 16
    assert kd.kernarg_size == ref["kernarg_size"] == 24
    assert kd.accum_offset == ref["accum_offset"] == 12
    assert kd.vgpr_count == ref["next_free_vgpr"] == 40          # 37 rounded to the granule of 8
    assert kd.sgpr_count == ref["next_free_sgpr"]
    assert kd.float_denorm_mode_32 == ref["float_denorm_mode_32"] == 0
    assert kd.float_denorm_mode_16_64 == ref["float_denorm_mode_16_64"]
    assert kd.ieee_mode == bool(ref["ieee_mode"]) is False
    assert kd.dx10_clamp == bool(ref["dx10_clamp"])
    assert kd.workgroup_id_enabled == (True, True, False)
    assert kd.workitem_id_vgprs == ref["system_vgpr_workitem_id"] == 2
    assert kd.user_sgprs["dispatch_ptr"] and kd.user_sgprs["kernarg_segment_ptr"]
    assert not kd.user_sgprs["queue_ptr"]
    assert kd.kernarg_preload_length == ref["user_sgpr_kernarg_preload_length"] == 2
    assert kd.tg_split == bool(ref["tg_split"])
    assert kd.private_segment_enabled == bool(ref["enable_private_segment"])
    # dispatch ptr s[0:1], kernarg ptr s[2:3], then 2 preloaded kernarg SGPRs: 6 user SGPRs
    assert kd.user_sgpr_layout() == [("dispatch_ptr", 0, 2), ("kernarg_segment_ptr", 2, 2),
                                     ("kernarg_preload", 4, 2)]
    assert kd.user_sgpr_count == 6


@needs_llvm
def test_target_metadata_and_code(tmp_path):
    path = build(tmp_path)
    co = read_code_object(path)
    flags = subprocess.run([READELF, "-h", path], capture_output=True, text=True).stdout
    assert "gfx942, xnack-, sramecc+" in flags
    assert co.target_id == "gfx942:sramecc+:xnack-" and co.code_object_version == 5
    assert (co.sramecc, co.xnack) == ("on", "off")
    k = co.kernel("k")
    md = k.metadata
    assert md[".agpr_count"] == 25 and md[".vgpr_count"] == 37 and md[".sgpr_count"] == 26
    assert md[".max_flat_workgroup_size"] == 256 and md[".wavefront_size"] == 64
    assert [(a[".name"], a[".offset"], a[".size"], a[".value_kind"]) for a in k.args] == [
        ("xs", 0, 8, "global_buffer"), ("count", 8, 4, "by_value")]
    assert co.metadata["amdhsa.version"] == [1, 2]
    # code = the function symbol's bytes; decoding gives the source instructions
    sym = next(s for s in co.symbols if s.name == "k" and s.type == "STT_FUNC")
    assert k.code_address == sym.value and len(k.code) == sym.size
    assert [i.text for i in k.decode()] == [
        "s_load_dwordx2 s[4:5], s[0:1], 0x0", "v_mov_b32_e32 v1, 1.0",
        "s_waitcnt lgkmcnt(0)", "s_nop 0", "s_endpgm"]
    with pytest.raises(KernelNotFound, match=r"no kernel named 'nope' \(kernels: k\)"):
        co.kernel("nope")
    # bytes input works the same
    assert read_code_object(open(path, "rb").read()).kernel().name == "k"


@needs_llvm
def test_feature_any_target_id(tmp_path):
    path = build(tmp_path, mattr="", target="gfx942")
    co = read_code_object(path)
    flags = subprocess.run([READELF, "-h", path], capture_output=True, text=True).stdout
    assert "gfx942, xnack, sramecc" in flags           # LLVM's spelling of "any"
    assert co.target_id == "gfx942" and (co.sramecc, co.xnack) == ("any", "any")


@needs_llvm
def test_opencl_metadata_agrees_with_descriptor(tmp_path):
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    cl = tmp_path / "r.cl"
    cl.write_text("__kernel void r(__global float* x) { __local float b[64]; "
                  "int i = __builtin_amdgcn_workitem_id_x(); b[i] = x[i]; "
                  "__builtin_amdgcn_s_barrier(); x[i] = b[63 - i]; }")
    o, co_path = tmp_path / "r.o", tmp_path / "r.co"
    subprocess.run(["clang-19", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx942", "-x", "cl",
                    "-cl-std=CL2.0", "-O3", "-nogpulib", "-c", str(cl), "-o", str(o)], check=True)
    subprocess.run([LLD, "-shared", str(o), "-o", str(co_path)], check=True)
    co = read_code_object(str(co_path))
    k = co.kernel("r")
    assert k.metadata[".group_segment_fixed_size"] == k.descriptor.group_segment_fixed_size == 256
    assert k.metadata[".kernarg_segment_size"] == k.descriptor.kernarg_size
    assert k.descriptor.user_sgprs["kernarg_segment_ptr"]
    notes = subprocess.run([READELF, "--notes", str(co_path)], capture_output=True, text=True).stdout
    assert f".vgpr_count:     {k.vgpr_count}" in notes and f".sgpr_count:     {k.sgpr_count}" in notes


# ----------------------------------------------------------------------------- bad input

def _one_line(exc):
    s = str(exc)
    assert "\n" not in s
    return s


@needs_llvm
def test_truncated_files_name_the_offset(tmp_path):
    data = open(build(tmp_path), "rb").read()
    for cut in (3, 40, 100, len(data) // 2, len(data) - 10):
        p = tmp_path / f"cut{cut}.co"
        p.write_bytes(data[:cut])
        with pytest.raises(CodeObjectError) as e:
            read_code_object(str(p))
        msg = _one_line(e.value)
        assert str(p) in msg and re.search(r"offset 0x[0-9a-f]+", msg), msg


def test_not_an_elf(tmp_path):
    p = tmp_path / "text.co"
    p.write_text("hello, this is not a code object\n")
    with pytest.raises(CodeObjectError, match=r"text\.co: offset 0x0: not an ELF file"):
        read_code_object(str(p))


def test_non_amdgpu_elf(tmp_path):
    # a minimal x86-64 ELF header (e_machine 62)
    hdr = bytearray(64)
    hdr[:4] = b"\x7fELF"
    hdr[4], hdr[5], hdr[6] = 2, 1, 1
    struct.pack_into("<HHI", hdr, 16, 3, 62, 1)
    p = tmp_path / "x86.so"
    p.write_bytes(bytes(hdr))
    with pytest.raises(CodeObjectError, match=r"x86\.so: offset 0x12: not an AMDGPU code object "
                                              r"\(e_machine 62"):
        read_code_object(str(p))


def test_missing_file(tmp_path):
    with pytest.raises(CodeObjectError, match="cannot read"):
        read_code_object(str(tmp_path / "nope.co"))


@needs_llvm
def test_unknown_opcode_in_kernel_names_file_offset(tmp_path, capsys):
    # 0xbfff0000 is SOPP opcode 127, which gfx942 does not have
    path = build(tmp_path, extra=".long 0xbfff0000")
    co = read_code_object(path)
    k = co.kernel("k")
    bad_off = k.code_offset + 16                  # after s_load (8), v_mov (4), s_waitcnt (4)
    with pytest.raises(CodeObjectError) as e:
        k.decode()
    msg = _one_line(e.value)
    assert path in msg and f"offset 0x{bad_off:x}" in msg and "unknown SOPP opcode 127" in msg
    assert cli_main(["disasm", path]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"offset 0x{bad_off:x}" in err


# ----------------------------------------------------------------------------- gfx950

def _zig():
    import importlib.util
    return importlib.util.find_spec("ziglang")


@pytest.mark.skipif(_zig() is None, reason="ziglang not installed (pip install ziglang)")
def test_gfx950_code_object_from_zig(tmp_path):
    import sys
    # zig's triple is amdgcn-amdhsa-none: leave out .amdgcn_target (it must match exactly)
    src = KERNEL_S.replace("{extra}", "v_cvt_pk_bf16_f32 v2, v3, v4").replace(
        "gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-").replace(
        '.amdgcn_target "amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-"\n', "")
    s, o, co_path = tmp_path / "z.s", tmp_path / "z.o", tmp_path / "z.co"
    s.write_text(src)
    subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "amdgcn-amdhsa-none",
                    "-mcpu=gfx950+sramecc", "-c", str(s), "-o", str(o)], check=True)
    subprocess.run([sys.executable, "-m", "ziglang", "ld.lld", "-shared", str(o), "-o",
                    str(co_path)], check=True)
    co = read_code_object(str(co_path))
    assert co.mach == "gfx950" and co.target_id == "gfx950:sramecc+:xnack-"
    k = co.kernel("k")
    assert k.descriptor.accum_offset == 12 and k.descriptor.kernarg_preload_length == 2
    texts = [i.text for i in k.decode()]
    assert texts[3] == "v_cvt_pk_bf16_f32 v2, v3, v4", texts


@needs_llvm
def test_bad_code_objects_through_the_cli_are_one_line_exit_2(tmp_path):
    """`python -m isagen disasm BAD.co` (the real entry point): exit 2, one stderr line naming the file
    and the offset, no traceback - for a truncated object, a non-AMDGPU ELF and an unknown opcode."""
    import os
    import sys
    good = open(build(tmp_path), "rb").read()
    x86 = bytearray(64)
    x86[:4], x86[4:7] = b"\x7fELF", bytes([2, 1, 1])
    struct.pack_into("<HHI", x86, 16, 3, 62, 1)
    cases = {"cut.co": (good[:len(good) // 2], r"offset 0x[0-9a-f]+: truncated"),
             "x86.co": (bytes(x86), r"offset 0x12: not an AMDGPU code object"),
             "text.co": (b"hello\n", r"offset 0x0: not an ELF file")}
    bad_op = build(tmp_path, extra=".long 0xbfff0000", name="badop")
    off = read_code_object(bad_op).kernel("k").code_offset + 16
    cases["badop.co"] = (open(bad_op, "rb").read(), rf"offset 0x{off:x}\b.*unknown SOPP opcode 127")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    for name, (data, pattern) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        r = subprocess.run([sys.executable, "-m", "isagen", "disasm", str(p)], capture_output=True, text=True,
                           env=env)
        err = r.stderr.strip()
        assert r.returncode == 2 and r.stdout == "", (name, r)
        assert "\n" not in err and "Traceback" not in err, err
        assert err.startswith("isagen: error: ") and str(p) in err and re.search(pattern, err), err


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 not installed (apt-get install clang-19)")
def test_offload_bundles_from_hip(tmp_path, capsys):
    """`hipcc --genco` writes a clang offload bundle: its gfx942 entry is read (the one named by target=
    when there are several) - the same bytes clang-offload-bundler --unbundle extracts."""
    src = tmp_path / "k.hip"
    src.write_text('extern "C" __attribute__((global)) void k(float* p) '
                   '{ p[__builtin_amdgcn_workitem_id_x()] = 1.f; }\n')
    one, two = tmp_path / "one.co", tmp_path / "two.co"
    for out, archs in ((one, ["gfx942"]), (two, ["gfx90a", "gfx942:xnack-"])):
        subprocess.run(["clang-19", "-x", "hip", *(f"--offload-arch={a}" for a in archs), "-nogpulib", "-nogpuinc",
                        "--cuda-device-only", "-O3", str(src), "-o", str(out)], check=True, capture_output=True)
    co = read_code_object(str(one))
    assert co.mach == "gfx942" and list(co.kernels) == ["k"] and co.data[:4] == b"\x7fELF"
    assert f"{one} (bundle entry hipv4-amdgcn-amd-amdhsa--gfx942 at offset 0x" in co.source
    bundler = shutil.which("clang-offload-bundler-19")
    if bundler:                                   # the entry LLVM's own unbundler extracts
        ref = tmp_path / "ref.co"
        subprocess.run([bundler, "--unbundle", "--type=o", "--targets=hipv4-amdgcn-amd-amdhsa--gfx942",
                        f"--input={one}", f"--output={ref}"], check=True, capture_output=True)
        assert co.data == ref.read_bytes()
    assert read_code_object(str(two), target="gfx942").target_id == "gfx942:xnack-"
    with pytest.raises(CodeObjectError, match=r"offset 0x18: the offload bundle holds code objects for gfx90a, "
                                              r"gfx942: choose one"):
        read_code_object(str(two))
    with pytest.raises(CodeObjectError, match=r"holds no gfx950 code object \(it has: gfx90a, gfx942\)"):
        read_code_object(str(two), target="gfx950")
    data = one.read_bytes()
    with pytest.raises(CodeObjectError, match=r"offset 0x[0-9a-f]+: truncated offload bundle"):
        read_code_object(data[:len(data) - 100])
    assert cli_main(["disasm", str(two), "--target", "gfx942"]) == 0 and "k:" in capsys.readouterr().out
