"""isagen's in-process code objects (``isagen.objects.elf_writer``, ``assembler.code_object``)
against LLVM's, for every bundled spec on both targets, with independent tools:

* llvm-readelf (19 for gfx942, 22 for gfx950): the ELF header, section and program headers, the
  dynamic section and symbols, and the metadata note are what it prints for the code object LLVM
  assembles and ld.lld links from emit's ``.s`` (the ``.comment``/``.symtab``/string tables' offsets
  and sizes left aside: not loaded, and the ``.comment`` names another producer); ``.symtab`` holds
  the same symbols (the ``.set`` register and LDS names included);
* llvm-objdump -d (19 for gfx942, 22 for gfx950): the same disassembly;
* the bytes: everything the loader maps (headers, note, dynamic symbols, hash tables, descriptors,
  ``.text``, ``.dynamic``) is ld.lld's, byte for byte (only ``e_shoff`` differs);
* isagen's reader: the same kernels, descriptors, metadata and ``.text`` bytes;
* the emulator: axpy_f32 and gemm_bf16 built both ways give the same bits, and torch's answer.

Then the switch: a form the encoder cannot encode falls back to LLVM with one warning and LLVM's
bytes; the cache key names the assembler; and a build with no LLVM or zig anywhere still makes and
runs a code object.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import warnings

import pytest
import torch

import isagen.objects.elf_writer as elf_writer
from isagen import api
from isagen.builders.spec import bundled_specs_dir, load_specs
from isagen.errors import ToolchainError
from isagen.isa.encoder import EncodeError
from isagen.objects import toolchain
from isagen.objects.assembler import AssemblerFallbackWarning, code_object
from isagen.objects.codeobject import read_code_object
from isagen.objects.elf_writer import write_code_object
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble

TOOLS = {"gfx942": ("llvm-readelf-19", "llvm-objdump-19"), "gfx950": ("llvm-readelf-22", "llvm-objdump-22")}
# sections that are not loaded: their offsets follow the .comment, whose text names the producer
UNLOADED = re.compile(r"\] \.(comment|symtab|shstrtab|strtab) |Start of section headers|section headers, starting")


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is a test dependency (apt llvm-19 / llvm-22)"
    return path


def _readelf(tool: str, path) -> tuple[list[str], list[str]]:
    """(every line of the structure but the unloaded sections' and the .symtab listing, sorted .symtab rows)."""
    out = subprocess.run([tool, "-h", "-S", "-l", "-d", "--dyn-syms", "--notes", "--hash-table", "--gnu-hash-table",
                          str(path)], capture_output=True,
                         text=True, check=True).stdout
    syms = subprocess.run([tool, "-s", str(path)], capture_output=True, text=True, check=True).stdout
    rows = sorted(" ".join(ln.split()[1:]) for ln in syms.split("Symbol table '.symtab'")[1].splitlines()[2:]
                  if ln.strip())
    return [ln for ln in out.splitlines() if not UNLOADED.search(ln)], rows


def _loaded_image(co: bytes) -> bytes:
    """Every byte the loader maps — from the ELF header to the end of the last PT_LOAD's file bytes
    (``.dynamic``) — but ``e_shoff`` (where the unloaded section headers went).  ld.lld 19 and 22 lay
    them out exactly as isagen does, so they are compared whole (measured: every bundled kernel)."""
    phoff, = struct.unpack_from("<Q", co, 0x20)
    phnum, = struct.unpack_from("<H", co, 0x38)
    end = 0
    for i in range(phnum):
        typ, _flags, off, _va, _pa, filesz = struct.unpack_from("<IIQQQQ", co, phoff + 56 * i)
        if typ == 1:                                   # PT_LOAD
            end = max(end, off + filesz)
    return co[:0x28] + co[0x30:end]


def _objdump(tool: str, path) -> str:
    out = subprocess.run([tool, "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return out.split("\n", 2)[2]            # past the file name line


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_every_bundled_kernel_in_process_is_llvms(target, tmp_path):
    readelf, objdump = map(_tool, TOOLS[target])
    specs = [s for s in load_specs([bundled_specs_dir()]) if target in s.targets]
    assert len(specs) >= 25
    bad = []
    for spec in specs:
        program = spec.build(target)
        ours = write_code_object(program)
        theirs = assemble(render_assembly(program), target, name=spec.name)
        (tmp_path / "ours.co").write_bytes(ours)
        (tmp_path / "llvm.co").write_bytes(theirs)
        a, b = read_code_object(ours), read_code_object(theirs)
        if (a.text, a.metadata, a.target_id) != (b.text, b.metadata, b.target_id):
            bad.append(f"{spec.name}: isagen's reader sees different .text, metadata or target ID")
        ka, kb = a.kernel(spec.name), b.kernel(spec.name)
        if (ka.descriptor.raw, ka.code, ka.metadata) != (kb.descriptor.raw, kb.code, kb.metadata):
            bad.append(f"{spec.name}: kernel descriptor, code or kernel metadata differ")
        (sa, ya), (sb, yb) = _readelf(readelf, tmp_path / "ours.co"), _readelf(readelf, tmp_path / "llvm.co")
        if sa != sb:
            diff = next(f"{x!r} vs LLVM {y!r}" for x, y in zip(sa + [""], sb + [""]) if x != y)
            bad.append(f"{spec.name}: llvm-readelf differs: {diff}")
        if ya != yb:
            bad.append(f"{spec.name}: .symtab differs: {sorted(set(ya) ^ set(yb))[:4]}")
        if _objdump(objdump, tmp_path / "ours.co") != _objdump(objdump, tmp_path / "llvm.co"):
            bad.append(f"{spec.name}: llvm-objdump -d differs")
        if _loaded_image(ours) != _loaded_image(theirs):
            bad.append(f"{spec.name}: the loaded bytes differ from ld.lld's")
    assert not bad, "\n".join(bad)


def test_several_kernels_in_one_code_object_read_back():
    """Two kernels, one note listing both, each descriptor pointing at its own 256-byte aligned code."""
    specs = {s.name: s for s in load_specs([bundled_specs_dir()])}
    progs = [specs["axpy_f32"].build("gfx942"), specs["gemm_bf16"].build("gfx942")]
    co = read_code_object(write_code_object(progs))
    assert list(co.kernels) == ["axpy_f32", "gemm_bf16"]
    for p in progs:
        single = read_code_object(write_code_object(p)).kernel(p.name)
        k = co.kernel(p.name)
        assert k.code == single.code and k.metadata == single.metadata
        # all but the code's offset (8 bytes at 16), which the reader followed to this kernel's code
        assert k.descriptor.raw[:16] + k.descriptor.raw[24:] == single.descriptor.raw[:16] + single.descriptor.raw[24:]
        assert k.code_address % 256 == 0
    with pytest.raises(ValueError, match="named more than once"):
        write_code_object([progs[0], progs[0]])


# ---------------------------------------------------------------------------- the emulator runs both
def _axpy(kernel, n=3000):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    expected = (1.5 * x.double() + y.double()).float()
    kernel.run(x, y, alpha=1.5, backend="emu")
    assert torch.allclose(y, expected, rtol=1e-6, atol=1e-6)
    return y


def _gemm(kernel, m=256, n=256, k=64):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(m, k, generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, generator=g).to(torch.bfloat16)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    kernel.run(a, b, c, backend="emu")
    ref = a.double() @ b.double().T
    assert torch.allclose(c.double(), ref, rtol=2e-2, atol=2e-2)
    return c


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("spec, run", [("axpy_f32", _axpy), ("gemm_bf16", _gemm)])
def test_emulator_runs_the_in_process_code_object_like_llvms(target, spec, run):
    ours = api.build(spec, target, assembler="isagen", use_cache=False)
    theirs = api.build(spec, target, assembler="llvm", use_cache=False)
    assert ours.code_object != theirs.code_object          # really two producers (the .comment differs)
    assert torch.equal(run(ours), run(theirs))


# ---------------------------------------------------------------------------- the switch
def test_a_kernel_the_encoder_cannot_encode_goes_through_llvm_with_one_warning(monkeypatch):
    program = next(s for s in load_specs([bundled_specs_dir()]) if s.name == "axpy_f32").build("gfx942")

    def refuse(items):
        raise EncodeError("v_made_up: not in the table")
    monkeypatch.setattr(elf_writer, "encode_items", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        co, made_by = code_object(program)
    fallbacks = [w for w in caught if issubclass(w.category, AssemblerFallbackWarning)]
    assert made_by == "llvm" and len(fallbacks) == 1
    assert "axpy_f32" in str(fallbacks[0].message) and "v_made_up" in str(fallbacks[0].message)
    assert co == assemble(render_assembly(program), "gfx942", name="axpy_f32")


def test_assembler_choice_is_checked_and_keyed(monkeypatch, tmp_path):
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(ToolchainError, match="choose isagen or llvm"):
        api.build("axpy_f32", "gfx942", assembler="gas")
    monkeypatch.setenv("ISAGEN_ASSEMBLER", "nasm")
    with pytest.raises(ToolchainError, match="ISAGEN_ASSEMBLER='nasm'"):
        api.build("axpy_f32", "gfx942")
    monkeypatch.delenv("ISAGEN_ASSEMBLER")
    a = api.build("axpy_f32", "gfx942")
    b = api.build("axpy_f32", "gfx942", assembler="llvm")
    assert a.key != b.key and a.path != b.path
    assert read_code_object(a.code_object).text == read_code_object(b.code_object).text
    assert api.build("axpy_f32", "gfx942").code_object == a.code_object     # from the cache


def test_no_llvm_and_no_zig_still_builds_and_runs(monkeypatch, tmp_path):
    """The default path needs no LLVM, ROCm or ziglang: with none to be found (empty PATH, no ROCm, no
    ziglang, no ISAGEN_LLVM_DIR) and no subprocess allowed, a kernel is built and runs in the emulator."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    monkeypatch.delenv("ISAGEN_LLVM_DIR", raising=False)
    monkeypatch.delenv("ISAGEN_ASSEMBLER", raising=False)
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(toolchain, "_zig_binary", lambda: None)
    toolchain._FIND_CACHE.clear()
    with pytest.raises(ToolchainError, match="no assembler for gfx950 found"):
        toolchain.find_toolchain("gfx950")

    def no_subprocess(*a, **k):
        raise AssertionError(f"a subprocess was started: {a[0] if a else k}")
    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    for target in ("gfx942", "gfx950"):
        kernel = api.build("axpy_f32", target)
        assert read_code_object(kernel.code_object).target_id == f"{target}:sramecc+:xnack-"
        _axpy(kernel)
