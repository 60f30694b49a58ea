"""The toolchain layer: discovery order, probing, target IDs, assembler errors, linking several kernels.

Discovery is tested in sandboxes: PATH, ROCM_PATH and ISAGEN_LLVM_DIR point at temporary folders of
symlinks to the real tools, and ``ziglang`` is made unimportable where a test needs it gone.  What a
code object holds is read back with LLVM's readelf and pyelftools, never with isagen's own reader.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys

import pytest
from elftools.elf.elffile import ELFFile

from isagen.builders.program import KernelBuilder
from isagen.errors import ToolchainError
from isagen.objects import assembler, emit, toolchain

MC19 = shutil.which("llvm-mc-19")
LLD19 = shutil.which("ld.lld-19")
READELF = shutil.which("llvm-readelf-19")
CLANG19 = shutil.which("clang-19")
needs_llvm19 = pytest.mark.skipif(not (MC19 and LLD19 and READELF), reason="needs apt llvm-19 lld-19")
needs_zig = pytest.mark.skipif(toolchain._zig_binary() is None, reason="needs `pip install ziglang`")


def program(target="gfx942", name="tc_kernel"):
    k = KernelBuilder(name, target, workgroup_size=64)
    x = k.args.pointer("x", "f32")
    k.args.value("n", "i32")
    t = k.vgpr(2, "t")
    k.v_lshlrev_b32(t[0], 2, k.tid, comment="byte offset")
    k.v_add_u32(t[1], 1, t[0])
    k.free(t, k.tid)
    assert x.offset == 0
    return k.finish(check=False)


@pytest.fixture(scope="module")
def sources():
    return {t: emit.render_assembly(program(t)) for t in ("gfx942", "gfx950")}


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Empty PATH / ROCm / no ISAGEN_LLVM_DIR / no ziglang; the test adds back what it wants."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    monkeypatch.delenv("ISAGEN_LLVM_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "ziglang", None)
    return tmp_path


def link_tools(folder, **names):
    folder.mkdir(parents=True, exist_ok=True)
    for name, target in names.items():
        os.symlink(target, folder / name.replace("_", "."))
    return folder


def readelf(*args):
    return subprocess.run([READELF, *args], capture_output=True, text=True, check=True).stdout


def e_flags(data: bytes) -> int:
    return ELFFile(io.BytesIO(data)).header["e_flags"]


# ----------------------------------------------------------------------------- discovery
@needs_llvm19
def test_newest_llvm_on_path_wins_and_gfx950_needs_something_newer(sandbox):
    llvm14 = shutil.which("llvm-mc", path="/usr/bin:/usr/local/bin")
    tools = {"llvm-mc-19": MC19, "ld_lld-19": LLD19}
    if llvm14:
        tools["llvm-mc"] = llvm14          # LLVM 14 (Debian's default) knows no gfx94x
    if CLANG19:
        tools["clang-19"] = CLANG19
    link_tools(sandbox / "bin", **tools)
    order = [(os.path.basename(tc.assembler.path), tc.assembler.version) for tc, _, _ in toolchain.candidates()]
    majors = [int(v.split(".")[0]) for _, v in order]
    assert majors == sorted(majors, reverse=True) and order[0][0] == "llvm-mc-19"   # newest first, llvm-mc first
    assert len(order) == len(tools) - 1
    tc = toolchain.find_toolchain("gfx942")
    assert (tc.source, tc.flavor) == ("PATH", "llvm-mc")
    assert os.path.basename(tc.assembler.path) == "llvm-mc-19" and tc.assembler.version.startswith("19.")
    with pytest.raises(ToolchainError) as e:
        toolchain.find_toolchain("gfx950")
    msg = str(e.value)
    assert "\n" not in msg and "pip install ziglang" in msg and "does not know gfx950" in msg


@needs_llvm19
def test_rocm_comes_before_path(sandbox):
    link_tools(sandbox / "rocm" / "llvm" / "bin", **{"llvm-mc": MC19, "ld_lld": LLD19})
    link_tools(sandbox / "bin", **{"llvm-mc-19": MC19, "ld_lld-19": LLD19})
    os.environ["ROCM_PATH"] = str(sandbox / "rocm")
    tc = toolchain.find_toolchain("gfx942")
    assert tc.source == "ROCm" and tc.assembler.path == str(sandbox / "rocm" / "llvm" / "bin" / "llvm-mc")


@needs_llvm19
def test_clang_alone_is_enough(sandbox):
    clang = CLANG19
    if clang is None:
        pytest.skip("clang-19 not installed")
    link_tools(sandbox / "bin", **{"clang-19": clang, "ld_lld-19": LLD19})
    tc = toolchain.find_toolchain("gfx942")
    assert tc.flavor == "clang"
    co = toolchain.assemble(emit.render_assembly(program()), "gfx942", toolchain=tc)
    assert e_flags(co) == 0xE4C          # gfx942 (0x4c) | xnack off (0x200) | sramecc on (0xc00)


@needs_llvm19
@needs_zig
def test_isagen_llvm_dir_is_used_alone(monkeypatch):
    """An LLVM named by ISAGEN_LLVM_DIR is the only one used: no silent fallback to zig for gfx950."""
    llvm19_bin = os.path.dirname(os.path.realpath(MC19))
    monkeypatch.setenv("ISAGEN_LLVM_DIR", llvm19_bin)
    tc = toolchain.find_toolchain("gfx942")
    assert tc.source == "ISAGEN_LLVM_DIR" and os.path.dirname(tc.assembler.path) == llvm19_bin
    with pytest.raises(ToolchainError, match=r"ISAGEN_LLVM_DIR.*gfx950|gfx950.*ISAGEN_LLVM_DIR"):
        toolchain.find_toolchain("gfx950")


def test_isagen_llvm_dir_without_tools_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("ISAGEN_LLVM_DIR", str(tmp_path))
    with pytest.raises(ToolchainError) as e:
        toolchain.find_toolchain("gfx942")
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path) in msg and "neither llvm-mc nor clang" in msg


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_no_toolchain_names_what_to_install(sandbox, target, sources):
    with pytest.raises(ToolchainError) as e:
        toolchain.assemble(sources[target], target)
    msg = str(e.value)
    assert "\n" not in msg and f"no assembler for {target}" in msg
    assert "pip install ziglang" in msg and "ROCm" in msg
    if target == "gfx942":
        assert "llvm-19 lld-19" in msg


@needs_llvm19
def test_probes_are_cached(sandbox, monkeypatch):
    link_tools(sandbox / "bin", **{"llvm-mc-19": MC19, "ld_lld-19": LLD19})
    toolchain.find_toolchain("gfx942")
    calls = []
    real = toolchain._run
    monkeypatch.setattr(toolchain, "_run", lambda *a, **k: calls.append(a) or real(*a, **k))
    toolchain._FIND_CACHE.clear()
    toolchain.find_toolchain("gfx942")
    assert calls == []                    # discovery again, but no new probe


# ----------------------------------------------------------------------------- target IDs
def test_target_id_parsing():
    P = toolchain.TargetID.parse
    assert str(P("gfx942:xnack-:sramecc+")) == "gfx942:sramecc+:xnack-"      # LLVM's canonical order
    assert P("gfx950").sramecc is None and P("gfx950").mattr == ""
    assert P("gfx942:sramecc+:xnack-").mattr == "+sramecc,-xnack"
    assert str(toolchain.resolve_target_id("gfx950")) == "gfx950:sramecc+:xnack-"   # bare name: production ID
    for bad in ("gfx90a", "gfx942:foo+", "gfx942:xnack+:xnack-"):
        with pytest.raises(ToolchainError):
            P(bad)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_feature_any_target_id(target, tmp_path):
    text = emit.render_assembly(program(target), target_id=target)
    co = toolchain.assemble(text, target)
    flags = e_flags(co)
    assert flags & 0xFF == {"gfx942": 0x4C, "gfx950": 0x4F}[target]
    assert flags & 0x300 == 0x100 and flags & 0xC00 == 0x400          # XNACK_ANY_V4, SRAMECC_ANY_V4
    if READELF:
        (tmp_path / "any.co").write_bytes(co)
        assert re.search(r"Flags:.*xnack, sramecc", readelf("-h", str(tmp_path / "any.co")))


def test_source_and_requested_target_must_agree(sources):
    with pytest.raises(ToolchainError, match="gfx942.*gfx950"):
        toolchain.assemble(sources["gfx942"], "gfx950")
    with pytest.raises(ToolchainError, match="sramecc-"):
        toolchain.assemble(sources["gfx942"], "gfx942:sramecc-:xnack-")


# ----------------------------------------------------------------------------- assembling
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_assembler_error_is_one_line_with_the_source_line(sources, target):
    lines = sources[target].splitlines()
    n = next(i for i, ln in enumerate(lines) if "v_add_u32" in ln)
    lines[n] = "  v_add_u32 v1, v2, v3, v4, v5      // one operand too many"
    lines.insert(n + 1, "  v_bogus_op v0")
    with pytest.raises(ToolchainError) as e:
        toolchain.assemble("\n".join(lines) + "\n", target, name="bad")
    msg = str(e.value)
    assert "\n" not in msg
    assert f"bad.s:{n + 1}:" in msg                         # the first error, by line number
    assert "v_add_u32 v1, v2, v3, v4, v5" in msg             # and the offending source line
    assert "invalid operand" in msg


@needs_llvm19
@needs_zig
def test_llvm19_and_zig_encode_gfx942_identically(sources):
    """Two independent LLVMs, driven with different flags, agree on the machine code and the target ID."""
    cands = [tc for tc, _, _ in toolchain.candidates() if tc]
    mc = next(tc for tc in cands if tc.source == "PATH" and tc.assembler.version.startswith("19."))
    zig = next(tc for tc in cands if tc.source == "ziglang")
    a = toolchain.assemble(sources["gfx942"], "gfx942", toolchain=mc)
    b = toolchain.assemble(sources["gfx942"], "gfx942", toolchain=zig)

    def text(data):
        return ELFFile(io.BytesIO(data)).get_section_by_name(".text").data()

    assert e_flags(a) == e_flags(b) == 0xE4C
    assert text(a) == text(b) and len(text(a)) > 8


def test_report_names_a_tool_for_each_target():
    report = assembler.toolchain_report()
    for target in ("gfx942", "gfx950"):
        line = next(ln for ln in report.splitlines() if ln.startswith(target))
        try:
            tc = toolchain.find_toolchain(target)
            assert tc.assembler.name in line and tc.assembler.version in line
        except ToolchainError as e:
            assert str(e) in line


# ----------------------------------------------------------------------------- linking
def _kernels_in_notes(path):
    out = readelf("--notes", path)
    return out.count("NT_AMDGPU_METADATA"), re.findall(r"^\s+\.name:\s+(k_\w+)$", out, re.MULTILINE)


@needs_llvm19
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_link_puts_every_kernel_in_one_metadata_note(target, tmp_path):
    objs = [toolchain.assemble_object(emit.render_assembly(program(target, name)), target, name=name)
            for name in ("k_first", "k_second", "k_third")]
    co = toolchain.link(objs)
    path = tmp_path / "lib.co"
    path.write_bytes(co)
    notes, names = _kernels_in_notes(str(path))
    assert notes == 1 and names == ["k_first", "k_second", "k_third"]
    syms = readelf("-s", str(path))
    for name in ("k_first", "k_second", "k_third"):
        assert (re.search(rf"FUNC .* {name}$", syms, re.MULTILINE)
                and re.search(rf"OBJECT .* {name}\.kd$", syms, re.MULTILINE))
    assert e_flags(co) == e_flags(objs[0])
    # a plain ld.lld link keeps one note per object: runtimes read the first, the others are lost
    for n, o in enumerate(objs):
        (tmp_path / f"{n}.o").write_bytes(o)
    subprocess.run([LLD19, "-shared", *(str(tmp_path / f"{n}.o") for n in range(3)), "-o", str(tmp_path / "plain.co")],
                   check=True)
    assert _kernels_in_notes(str(tmp_path / "plain.co"))[0] == 3


def test_link_refuses_mixed_targets_linked_objects_and_duplicates():
    o942 = toolchain.assemble_object(emit.render_assembly(program("gfx942", "k_a")), "gfx942")
    o950 = toolchain.assemble_object(emit.render_assembly(program("gfx950", "k_b")), "gfx950")
    with pytest.raises(ToolchainError, match="different targets"):
        toolchain.link([o942, o950])
    co = toolchain.assemble(emit.render_assembly(program("gfx942", "k_c")), "gfx942")
    with pytest.raises(ToolchainError, match="relocatable"):
        toolchain.link([o942, co])
    with pytest.raises(ToolchainError, match="k_a"):
        toolchain.link([o942, o942])


# ----------------------------------------------------------------------------- tools that lie
def _script(path, body):
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


@needs_llvm19
@pytest.mark.parametrize("broken", ["llvm-mc", "ld.lld"])
@pytest.mark.parametrize("how", ["writes nothing", "writes an empty file"])
def test_a_tool_that_exits_0_without_output_is_named(tmp_path, monkeypatch, sources, broken, how):
    """A tool under ISAGEN_LLVM_DIR that reports success but writes no output (or an empty one): a
    ToolchainError naming the tool and the file, both when the toolchain is searched (the probe) and
    when it is handed to assemble() directly -- not a FileNotFoundError from the reader."""
    real = {"llvm-mc": MC19, "ld.lld": LLD19}
    folder = tmp_path / "llvm"
    folder.mkdir()
    for name, target in real.items():
        if name != broken:
            os.symlink(target, folder / name)
    # the last argument is the output file (-o FILE) for both tools' command lines
    body = 'for a; do out="$a"; done; ' + ('exit 0' if how == "writes nothing" else ': > "$out"; exit 0')
    _script(folder / broken, f'case "$1" in --version) echo "LLVM version 19.1.7"; exit 0;; esac; {body}')
    monkeypatch.setenv("ISAGEN_LLVM_DIR", str(folder))
    for cache in ("_FIND_CACHE", "_PROBE_CACHE", "_VERSION_CACHE"):     # fresh, and restored afterwards
        monkeypatch.setattr(toolchain, cache, {})
    what = r"did not write \S+\.(o|co)" if how == "writes nothing" else r"wrote an empty \S+\.(o|co)"
    with pytest.raises(ToolchainError) as e:
        toolchain.find_toolchain("gfx942")
    msg = str(e.value)
    assert "\n" not in msg and re.search(rf"{re.escape(broken)} \({re.escape(str(folder / broken))}\) exited 0 "
                                         rf"but {what}", msg), msg
    tc, _ = toolchain._dir_toolchain(str(folder), "ISAGEN_LLVM_DIR")
    with pytest.raises(ToolchainError, match=rf"{re.escape(broken)} .* exited 0 but {what}"):
        toolchain.assemble(sources["gfx942"], "gfx942", toolchain=tc)


@needs_llvm19
def test_link_refuses_objects_with_malformed_metadata(sources):
    """link() reads its inputs' metadata notes: one of the wrong shape is a ToolchainError naming the field."""
    from co_support import read_metadata, with_metadata
    obj = toolchain.assemble_object(sources["gfx942"], "gfx942")
    md = read_metadata(obj)
    md["amdhsa.kernels"] = 5
    with pytest.raises(ToolchainError, match=r"AMDGPU metadata: amdhsa.kernels: expected a list"):
        toolchain.link([with_metadata(obj, md)])
