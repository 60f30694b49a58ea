"""Property-based tests of the code-object reader, ``isagen disasm`` and ``isagen report`` (issue 13).

Inputs: real code objects -- isagen-built (gfx942 and gfx950), clang's (OpenCL, when clang-19 is
installed) and Triton's (compiled here, cached by pytest) -- with random bytes changed where a reader
looks (the ELF header, section and program headers, the symbol and string tables, the notes, the
kernel descriptors, the code) or cut short; and the same objects with their metadata note replaced by
random well-formed msgpack of the wrong shape (a field of the real document given another value, a
known field added with any value, a field removed, or a random document).

The property, for every input: the API (``read_code_object``, ``disassemble``, ``report_code_object``
and its text rendering) either works or raises ``CodeObjectError``; the command line (``isagen disasm
FILE``, ``isagen report FILE``) either exits 0 or prints exactly one ``isagen: error:`` line and exits
2 -- never a traceback -- and no example may take longer than ``EXAMPLE_TIMEOUT_S`` (a hang fails it).

Examples and seed come from the suite's profiles (tests/fuzz/conftest.py): 60 derandomized examples
per test in the ``ci`` profile that ``make test`` runs (~20 s here), 50 times as many, random, with
``ISAGEN_FUZZ_PROFILE=long`` (docs/fuzzing.md).
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import shutil
import signal
import subprocess
import sys

import msgpack
import pytest
from co_support import metadata_note, read_metadata, with_metadata
from fuzz_support import examples
from hypothesis import given
from hypothesis import strategies as st

from isagen.errors import CodeObjectError
from isagen.objects.codeobject import read_code_object
from isagen.objects.disasm import disassemble
from isagen.report import render, report_code_object

EXAMPLE_TIMEOUT_S = 20
FUZZ = examples(60)

TRITON_ADD = r'''
import sys, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

k = triton.compile(ASTSource(fn=add_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                                       "n": "i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 256}),
                   target=GPUTarget("hip", "gfx942", 64), options={"num_warps": 4})
open(sys.argv[1], "wb").write(k.asm["hsaco"])
'''

OPENCL = ("__kernel void r(__global float* x, float a) { __local float b[64]; "
          "int i = __builtin_amdgcn_workitem_id_x(); b[i] = x[i] * a; "
          "__builtin_amdgcn_s_barrier(); x[i] = b[63 - i]; }\n")


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """Fail an example that runs past ``seconds`` (SIGALRM: the test runs in the main thread)."""
    def expire(signum, frame):
        raise Hang(f"{what} ran for more than {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _triton(request, tmp_path_factory) -> bytes | None:
    try:
        import triton
    except ImportError:
        return None
    import hashlib
    key = hashlib.sha256((TRITON_ADD + triton.__version__).encode()).hexdigest()[:16]
    cache = getattr(request.config, "cache", None)      # None under -p no:cacheprovider
    folder = cache.mkdir(f"isagen-fuzz-triton-{key}") if cache is not None else tmp_path_factory.mktemp("triton")
    out = folder / "add.co"
    if not out.exists():
        src = folder / "compile_add.py"
        src.write_text(TRITON_ADD)
        r = subprocess.run([sys.executable, str(src), str(out) + ".tmp"], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"Triton could not compile: {r.stderr[-2000:]}")
        os.replace(str(out) + ".tmp", out)
    return out.read_bytes()


def _clang(tmp_path_factory) -> bytes | None:
    clang, lld = shutil.which("clang-19"), shutil.which("ld.lld-19")
    if clang is None or lld is None:
        return None
    d = tmp_path_factory.mktemp("clang")
    (d / "k.cl").write_text(OPENCL)
    subprocess.run([clang, "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx942", "-x", "cl", "-cl-std=CL2.0", "-O3",
                    "-nogpulib", "-c", str(d / "k.cl"), "-o", str(d / "k.o")], check=True, capture_output=True)
    subprocess.run([lld, "-shared", str(d / "k.o"), "-o", str(d / "k.co")], check=True, capture_output=True)
    return (d / "k.co").read_bytes()


class Corpus(dict):
    """The corpus, shown by its names (hypothesis prints the fixture in a falsifying example)."""

    def __repr__(self):
        return f"Corpus({', '.join(self)})"


@pytest.fixture(scope="module")
def corpus(request, tmp_path_factory) -> dict[str, bytes]:
    """name -> bytes of the real code objects the examples start from (each one reads cleanly)."""
    import isagen
    objs = {"isagen axpy_f32 gfx942": isagen.build("axpy_f32", "gfx942", use_cache=False).code_object,
            "isagen rms_norm gfx950": isagen.build("rms_norm_bf16", "gfx950", use_cache=False).code_object}
    for name, data in (("triton add gfx942", _triton(request, tmp_path_factory)),
                       ("clang opencl gfx942", _clang(tmp_path_factory))):
        if data is not None:
            objs[name] = data
    for name, data in objs.items():
        co = read_code_object(data, name)
        assert co.kernels and read_metadata(data)["amdhsa.kernels"], name
    return Corpus(objs)


def _regions(data: bytes) -> list[tuple[int, int]]:
    """[start, end) byte ranges a reader looks at: the ELF header, the program and section header
    tables, and every section with file bytes (symbols, strings, notes, descriptors, code)."""
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(data))
    h = elf.header
    out = [(0, 64)]
    if h["e_phnum"]:
        out.append((h["e_phoff"], h["e_phoff"] + h["e_phnum"] * h["e_phentsize"]))
    out.append((h["e_shoff"], h["e_shoff"] + h["e_shnum"] * h["e_shentsize"]))
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_NOBITS" and sec["sh_size"]:
            out.append((sec["sh_offset"], sec["sh_offset"] + sec["sh_size"]))
    return [(a, min(b, len(data))) for a, b in out if a < min(b, len(data))]


def _disassemble_each(data: bytes, label: str) -> None:
    co = read_code_object(data, label)
    for k in co.kernels:
        disassemble(co, k)


def check_api(data: bytes, label: str) -> None:
    """Disassembly and the report each work, or raise CodeObjectError (one line naming the input);
    each is tried on its own, so a failure of one does not hide the other's."""
    for step in (_disassemble_each, lambda d, lab: render(report_code_object(d, name=lab), "text")):
        try:
            step(data, label)
        except CodeObjectError as e:
            msg = str(e)
            assert "\n" not in msg and msg.startswith(label), msg


def check_cli(path) -> None:
    """`isagen disasm FILE` and `isagen report FILE`: exit 0, or one `isagen: error:` line and exit 2."""
    from isagen.cli import main
    for command in ("disasm", "report"):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([command, str(path)])
        if rc == 0:
            assert out.getvalue() and not err.getvalue(), (command, err.getvalue())
        else:
            text = err.getvalue()
            assert rc == 2 and out.getvalue() == "", (command, rc, text)
            assert text.count("\n") == 1 and text.startswith("isagen: error: "), (command, text)


def _check(data: bytes, tmp_path, what: str) -> None:
    path = tmp_path / "fuzz.co"
    path.write_bytes(data)
    with time_limit(EXAMPLE_TIMEOUT_S, what):
        check_api(data, what)
        check_cli(path)


# ----------------------------------------------------------------------------- byte mutations
@st.composite
def mutations(draw, corpus):
    """(corpus name, [(offset, new bytes)...], length to cut to or None): edits where a reader looks."""
    name = draw(st.sampled_from(sorted(corpus)))
    size = len(corpus[name])
    regions = _regions(corpus[name])
    edits = []
    for _ in range(draw(st.integers(1, 6))):
        lo, hi = draw(st.sampled_from(regions))
        off = draw(st.integers(lo, hi - 1))
        width = min(draw(st.sampled_from([1, 1, 2, 4, 8])), size - off)
        if draw(st.booleans()):
            fill = bytes([draw(st.sampled_from([0, 0xFF, 0x80, 0x7F, 1]) | st.integers(0, 255))]) * width
        else:
            fill = draw(st.binary(min_size=width, max_size=width))
        edits.append((off, fill))
    cut = draw(st.integers(0, size)) if draw(st.integers(0, 4)) == 0 else None
    return name, edits, cut


def _apply(data: bytes, edits, cut) -> bytes:
    out = bytearray(data)
    for off, fill in edits:
        out[off:off + len(fill)] = fill
    return bytes(out[:cut] if cut is not None else out)


@given(data=st.data())
@FUZZ
def test_mutated_code_objects(corpus, tmp_path, data):
    name, edits, cut = data.draw(mutations(corpus))
    _check(_apply(corpus[name], edits, cut), tmp_path, f"{name} with {edits} cut at {cut}")


# ----------------------------------------------------------------------------- metadata of wrong shapes
MSGPACK_INT = st.integers(-(1 << 63), (1 << 64) - 1)
SCALARS = (st.none() | st.booleans() | MSGPACK_INT | st.sampled_from([0, 1, -1, 3, 64, 65, 256, 1025, 1 << 32])
           | st.floats(allow_nan=True) | st.text(max_size=6) | st.binary(max_size=6))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6) | MSGPACK_INT, inner, max_size=4), max_leaves=8)
# kernel fields of AMDGPUUsage's "Code Object V3+ Metadata" that readers use
KNOWN_KERNEL_FIELDS = [".name", ".symbol", ".args", ".kernarg_segment_size", ".kernarg_segment_align",
                       ".group_segment_fixed_size", ".private_segment_fixed_size", ".wavefront_size",
                       ".sgpr_count", ".vgpr_count", ".agpr_count", ".sgpr_spill_count", ".vgpr_spill_count",
                       ".max_flat_workgroup_size", ".reqd_workgroup_size", ".uses_dynamic_stack"]
KNOWN_ARG_FIELDS = [".offset", ".size", ".value_kind", ".name", ".value_type", ".address_space"]


def _paths(node, path=()):
    """Every path into a document (maps and lists), the root included."""
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


@st.composite
def wrong_metadata(draw, corpus):
    name = draw(st.sampled_from(sorted(corpus)))
    base = corpus[name]
    doc = copy.deepcopy(read_metadata(base))
    how = draw(st.sampled_from(["replace", "replace", "add known field", "remove", "random document"]))
    if how == "random document":
        return name, base, draw(VALUES), how
    if how == "add known field":
        kernel = draw(st.integers(0, len(doc["amdhsa.kernels"]) - 1))
        k = doc["amdhsa.kernels"][kernel]
        if k.get(".args") and draw(st.booleans()):
            target, field = k[".args"][draw(st.integers(0, len(k[".args"]) - 1))], draw(
                st.sampled_from(KNOWN_ARG_FIELDS))
        else:
            target, field = k, draw(st.sampled_from(KNOWN_KERNEL_FIELDS))
        target[field] = draw(VALUES)
        return name, base, doc, f"{how} {field}"
    paths = [p for p in _paths(doc) if p]
    path = draw(st.sampled_from(paths))
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if how == "remove":
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(VALUES)
    return name, base, doc, f"{how} {path}"


@given(data=st.data())
@FUZZ
def test_code_objects_with_metadata_of_wrong_shapes(corpus, tmp_path, data):
    name, base, doc, how = data.draw(wrong_metadata(corpus))
    try:
        packed = msgpack.packb(doc, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return                                    # not representable in msgpack: nothing to write
    _check(with_metadata(base, packed=packed), tmp_path, f"{name}, metadata {how}")


def test_the_corpus_is_real(corpus):
    """The starting objects: each has a metadata note the helpers find, and each reads and reports."""
    for name, data in corpus.items():
        assert metadata_note(data)[2] > 0, name
        check_api(data, name)
