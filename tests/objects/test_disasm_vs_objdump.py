"""`isagen disasm` agrees with `llvm-objdump-19 -d` instruction for instruction (gfx942).

Sources (all built here, at test time, by real compilers):
* a broad sample: for every opcode of the gfx942 table, the words llvm-mc-19 accepts (probe words
  and random ones), rendered by isagen, *assembled* by llvm-mc-19 and linked by ld.lld-19 (so the
  rendering is also checked to be valid LLVM syntax for the same encoding);
* OpenCL C kernels compiled by clang-19 (vector add, LDS reduction with barriers, half precision);
* Triton 3.9 kernels compiled for gfx942 (vector add, softmax, layernorm, bf16 matmul with tl.dot),
  compiled once per session and cached in pytest's cache directory.

Normalisation: whitespace only (runs of blanks collapsed) in the text before objdump's `//`
comment; objdump's `<symbol+off>` branch annotations are in that comment and are not compared.
"""

import hashlib
import os
import random
import re
import shutil
import struct
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_opcodes as G  # noqa: E402
from objdump_support import OBJDUMP, objdump_all  # noqa: E402

from isagen.isa import decoder as D  # noqa: E402
from isagen.objects.codeobject import read_code_object  # noqa: E402
from isagen.objects.disasm import disassemble as disasm_text  # noqa: E402

TOOLS = ("llvm-mc-19", "ld.lld-19", "llvm-objdump-19")
missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed "
                                "(apt-get install llvm-19 lld-19)")


def objdump(path):
    """{address: normalised text} of every instruction llvm-objdump-19 prints (objdump_support's parser)."""
    return objdump_all(OBJDUMP["gfx942"], [path])[path]


def compare(path):
    """Decode the whole .text with isagen; return (count, mismatches, instructions)."""
    co = read_code_object(path)
    ref = objdump(path)
    insts = D.decode(co.text, co.mach, base=co.text_address)
    bad = [f"0x{i.pc:x}: objdump '{ref.get(i.pc)}' isagen '{i.text}'"
           for i in insts if ref.get(i.pc) != " ".join(i.text.split())]
    if len(insts) != len(ref):
        bad.append(f"objdump printed {len(ref)} instructions, isagen decoded {len(insts)}")
    return len(insts), bad, insts


def _assemble_link(src_text, tmp, name):
    s = os.path.join(tmp, name + ".s")
    o = os.path.join(tmp, name + ".o")
    co = os.path.join(tmp, name + ".co")
    with open(s, "w") as f:
        f.write(src_text)
    r = subprocess.run(["llvm-mc-19", "-triple", "amdgcn-amd-amdhsa", "-mcpu=gfx942",
                        "-filetype=obj", s, "-o", o], capture_output=True, text=True)
    return r, o, co


# ----------------------------------------------------------------------------- broad sample

@pytest.fixture(scope="module")
def sample_co(tmp_path_factory):
    """Every gfx942 opcode, assembled from isagen's rendering of LLVM-valid words."""
    tmp = str(tmp_path_factory.mktemp("sample"))
    rng = random.Random(7)
    tab = D.opcode_table("gfx942")
    probes = []
    for fam, ops in tab.fam.items():
        for op in ops:
            probes += G.canonical_words(fam, op)
            probes += [G.fuzz_extension(G.fuzz_words(fam, op, rng), rng) for _ in range(3)]
    texts = G.disassemble(probes, "gfx942")
    lines, keys, seen = [], [], set()
    for w, t in zip(probes, texts):
        if t is None or "/*" in t:
            continue
        ins = D.decode_one(struct.pack(f"<{len(w)}I", *w), 0, "gfx942")
        if ins.text in seen:
            continue
        seen.add(ins.text)
        lines.append(ins.text)
        keys.append((ins.family, ins.opcode))
    body = "\n".join(lines)
    r, o, co = _assemble_link(".text\n.globl sample\n.p2align 8\nsample:\n" + body + "\n", tmp,
                              "sample")
    # llvm-mc-19 refuses some texts its own disassembler prints (two SGPRs on the constant bus,
    # misaligned VGPR tuples of random words, offsets out of the assembler's range): drop
    # exactly those lines and assemble again
    rejected = sorted({int(m.group(1)) - 5 for m in re.finditer(r"sample\.s:(\d+):\d+: error",
                                                               r.stderr)})
    if rejected:
        keep = [ln for i, ln in enumerate(lines) if i not in set(rejected)]
        r, o, co = _assemble_link(".text\n.globl sample\n.p2align 8\nsample:\n" + "\n".join(keep)
                                  + "\n", tmp, "sample")
    assert r.returncode == 0, r.stderr[:2000]
    subprocess.run(["ld.lld-19", "-shared", o, "-o", co], check=True)
    return co, len(lines), {keys[i] for i in rejected}


def test_broad_sample_matches_objdump_and_covers_every_opcode(sample_co):
    path, n_lines, rejected = sample_co
    n, bad, insts = compare(path)
    assert not bad, f"{len(bad)} of {n} differ:\n" + "\n".join(bad[:30])
    assert n > 5000
    # every opcode of the table is in the assembled object, except opcodes whose every sample
    # llvm-mc-19 refused to assemble (it disassembles v_madmk_f16/v_madak_f16 but calls them
    # unsupported on gfx942; the probe registers of 32-register MFMAs overlap C and D)
    tab = D.opcode_table("gfx942")
    have = {(i.family, i.opcode) for i in insts}
    want = {(f, o) for f, ops in tab.fam.items() for o in ops}
    unexplained = want - have - rejected
    assert not unexplained, sorted(unexplained)[:30]
    assert len(want - have) <= 8, sorted(want - have)
    assert len(rejected) < len(want)


# ----------------------------------------------------------------------------- OpenCL

OPENCL = {
    "vadd": r"""
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();
  if (i < n) c[i] = a[i] + b[i];
}""",
    "reduce": r"""
__kernel void reduce(__global const float* x, __global float* out, int n) {
  __local float buf[256];
  int lid = __builtin_amdgcn_workitem_id_x();
  int gid = __builtin_amdgcn_workgroup_id_x() * 256 + lid;
  buf[lid] = gid < n ? x[gid] : 0.0f;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  for (int s = 128; s > 0; s >>= 1) {
    if (lid < s) buf[lid] += buf[lid + s];
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  }
  if (lid == 0) out[__builtin_amdgcn_workgroup_id_x()] = buf[0];
}""",
    "half": r"""
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void hfma(__global const half* a, __global const half2* b, __global half* c,
                   __global float* d, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < n) {
    half2 v = b[i];
    half r = a[i] * v.x + v.y;
    c[i] = r > (half)1.0 ? r : (half)0.5;
    d[i] = (float)r * 3.0f + __builtin_popcount(i);
  }
}""",
}


@pytest.fixture(scope="module")
def opencl_cos(tmp_path_factory):
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    tmp = str(tmp_path_factory.mktemp("ocl"))
    out = {}
    for name, src in OPENCL.items():
        cl, o, co = (os.path.join(tmp, name + ext) for ext in (".cl", ".o", ".co"))
        with open(cl, "w") as f:
            f.write(src)
        subprocess.run(["clang-19", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx942", "-x", "cl",
                        "-cl-std=CL2.0", "-O3", "-nogpulib", "-c", cl, "-o", o], check=True)
        subprocess.run(["ld.lld-19", "-shared", o, "-o", co], check=True)
        out[name] = co
    return out


@pytest.mark.parametrize("name", list(OPENCL))
def test_opencl_kernels_match_objdump(opencl_cos, name):
    n, bad, insts = compare(opencl_cos[name])
    assert not bad, "\n".join(bad[:30])
    assert n > 10
    # the kernel's own range (descriptor entry .. end of symbol) decodes and prints too
    co = read_code_object(opencl_cos[name])
    assert co.mach == "gfx942" and list(co.kernels) == [{"half": "hfma"}.get(name, name)]
    text = disasm_text(co)
    assert "s_endpgm" in text


# ----------------------------------------------------------------------------- Triton

TRITON_SRC = r'''
import triton, triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

@triton.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)

@triton.jit
def layernorm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    d = tl.where(m, x - mean, 0.)
    rstd = 1 / tl.sqrt(tl.sum(d * d, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=m)
    b = tl.load(b_ptr + cols, mask=m)
    tl.store(y_ptr + row * stride + cols, (d * rstd * w + b).to(tl.float16), mask=m)

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BK * sak
        b += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.bfloat16))

def compile_all(arch, out_dir):
    import os
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    i32 = "i32"
    jobs = {
        "add": (add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": i32,
                             "BLOCK": "constexpr"}, {"BLOCK": 1024}),
        "softmax": (softmax_kernel, {"out_ptr": "*fp32", "in_ptr": "*fp32", "stride": i32,
                                     "n_cols": i32, "BLOCK": "constexpr"}, {"BLOCK": 1024}),
        "layernorm": (layernorm_kernel, {"x_ptr": "*fp16", "y_ptr": "*fp16", "w_ptr": "*fp32",
                                         "b_ptr": "*fp32", "stride": i32, "n": i32, "eps": "fp32",
                                         "BLOCK": "constexpr"}, {"BLOCK": 2048}),
        "matmul": (matmul_kernel, dict({"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16"},
                                       **{k: i32 for k in ("M", "N", "K", "sam", "sak", "sbk",
                                                           "sbn", "scm", "scn")},
                                       BM="constexpr", BN="constexpr", BK="constexpr"),
                   {"BM": 128, "BN": 128, "BK": 64}),
    }
    paths = {}
    for name, (fn, sig, const) in jobs.items():
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const),
                           target=GPUTarget("hip", arch, 64), options={"num_warps": 4})
        p = os.path.join(out_dir, f"{name}.{arch}.co")
        with open(p, "wb") as f:
            f.write(k.asm["hsaco"])
        paths[name] = p
    return paths
'''


def triton_objects(request, arch):
    """Compile the Triton kernels for ``arch`` once; cached by source and Triton version."""
    triton = pytest.importorskip("triton", reason="triton not installed (pip install triton==3.9.0)")
    key = hashlib.sha256((TRITON_SRC + triton.__version__ + arch).encode()).hexdigest()[:16]
    if getattr(request.config, "cache", None) is not None:
        cache = request.config.cache.mkdir(f"isagen-triton-{key}")
    else:                                   # pytest -p no:cacheprovider: compile into this session's tmp
        cache = request.getfixturevalue("tmp_path_factory").mktemp(f"isagen-triton-{key}")
    names = ("add", "softmax", "layernorm", "matmul")
    paths = {n: os.path.join(str(cache), f"{n}.{arch}.co") for n in names}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    src = os.path.join(str(cache), "triton_kernels.py")
    with open(src, "w") as f:
        f.write(TRITON_SRC)
    env = dict(os.environ, TRITON_DEFAULT_FP_FUSION="1")
    code = (f"import sys; sys.path.insert(0, {str(cache)!r}); import triton_kernels as t; "
            f"t.compile_all({arch!r}, {str(cache)!r})")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        pytest.fail(f"Triton could not compile for {arch}: {r.stderr[-2000:]}")
    return paths


@pytest.fixture(scope="module")
def triton_gfx942(request):
    return triton_objects(request, "gfx942")


@pytest.mark.parametrize("name", ["add", "softmax", "layernorm", "matmul"])
def test_triton_kernels_match_objdump(triton_gfx942, name):
    n, bad, insts = compare(triton_gfx942[name])
    assert not bad, f"{len(bad)} of {n} differ:\n" + "\n".join(bad[:30])
    assert n > 20
    if name == "matmul":
        assert any(i.mai for i in insts), "a bf16 tl.dot must use MFMA"
    co = read_code_object(triton_gfx942[name])
    (k,) = co.kernels.values()
    assert len(k.decode()) > 20 and k.metadata.get(".wavefront_size") == 64


def test_disasm_command_output(triton_gfx942, capsys):
    from isagen.cli import main
    assert main(["disasm", triton_gfx942["matmul"]]) == 0
    out = capsys.readouterr().out
    assert "; kernel matmul_kernel" in out and "v_mfma_f32_" in out
    assert main(["disasm", triton_gfx942["matmul"], "--kernel", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no kernel named 'nope'" in err and "matmul_kernel" in err


# ----------------------------------------------------------------------------- gfx950 (Triton)

def _zig_ok():
    try:
        return G.zig_available()
    except Exception:
        return False


@pytest.fixture(scope="module")
def triton_gfx950(request):
    return triton_objects(request, "gfx950")


@pytest.mark.skipif(not _zig_ok(), reason="ziglang not installed (pip install ziglang)")
@pytest.mark.parametrize("name", ["add", "softmax", "layernorm", "matmul"])
def test_triton_gfx950_round_trip_through_zig(triton_gfx950, name):
    """No gfx950 disassembler exists here: decode Triton's gfx950 code, render it, assemble each
    instruction again with zig's clang 22 and require the original bytes."""
    co = read_code_object(triton_gfx950[name])
    assert co.mach == "gfx950"
    insts = D.decode(co.text, "gfx950", base=co.text_address)
    again = G.zig_assemble([i.text for i in insts], "gfx950")
    bad = []
    for i, (b, err) in zip(insts, again):
        orig = co.text[i.pc - co.text_address:i.pc - co.text_address + i.size]
        if b != orig:
            bad.append(f"0x{i.pc:x} {i.text}: {err or b.hex()} != {orig.hex()}")
    assert not bad, f"{len(bad)} of {len(insts)}:\n" + "\n".join(bad[:30])
    assert len(insts) > 20
    if name == "matmul":
        mf = [i for i in insts if i.mai]
        assert mf and all("16x16x32_bf16" in i.name or "32x32x16_bf16" in i.name for i in mf), \
            {i.name for i in mf}
