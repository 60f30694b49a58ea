"""The register report on code objects isagen did not make: Triton 3.9 kernels compiled for gfx942
(vector add, row softmax, bf16 tl.dot matmul), compiled once per module.

Independent references: LLVM's own figures for the same kernel (the metadata's ``.vgpr_count``,
``.agpr_count``, ``.sgpr_count`` and the descriptor's granules) and LLVM's loop analysis as Triton's
assembly text prints it (``; in Loop: Header=... Depth=N`` on every block of a loop).
"""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from isagen.objects.codeobject import read_code_object  # noqa: E402
from isagen.report import report_code_object  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_stride + offs, mask=offs < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * out_stride + offs, e / tl.sum(e, axis=0), mask=offs < n_cols)


def _compile(fn, signature, constexprs, num_warps=4):
    sig = dict(signature)
    sig.update({k: "constexpr" for k in constexprs})
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                       target=GPUTarget("hip", "gfx942", 64), options={"num_warps": num_warps})
    return {"hsaco": k.asm["hsaco"], "amdgcn": k.asm["amdgcn"], "shared": int(k.metadata.shared),
            "num_warps": num_warps}


@pytest.fixture(scope="module")
def compiled():
    from tools.triton_kernels import compile_matmul
    mm = compile_matmul("gfx942", 128, 128, 64, num_warps=4, dtype="bf16")
    return {
        "add": _compile(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                        {"BLOCK": 1024}),
        "softmax": _compile(softmax_kernel, {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": "i32",
                                             "out_stride": "i32", "n_cols": "i32"}, {"BLOCK": 1024}),
        "matmul": {"hsaco": mm.hsaco, "amdgcn": mm.amdgcn, "shared": mm.shared, "num_warps": mm.num_warps},
    }


@pytest.fixture(scope="module")
def reports(compiled):
    return {name: report_code_object(c["hsaco"], dynamic_lds=c["shared"], name=f"{name}.hsaco")["kernels"][0]
            for name, c in compiled.items()}


def _round(n, g):
    return -(-n // g) * g


@pytest.mark.parametrize("name", ["add", "softmax", "matmul"])
def test_used_counts_agree_with_llvm(compiled, reports, name):
    k = reports[name]
    kernel = read_code_object(compiled[name]["hsaco"]).kernel()
    md, kd = kernel.metadata, kernel.descriptor
    r = k["registers"]
    v, a, s = r["vgpr"]["used"], r["agpr"]["used"], r["sgpr"]["used"]
    # SGPRs: LLVM counts the highest SGPR (hardware-set ones included) + 6 reserved
    assert s + 6 == md[".sgpr_count"]
    # AGPRs exactly; VGPRs exactly without AGPRs, else accum_offset = arch count rounded up to 4
    assert a == md[".agpr_count"]
    if a:
        assert _round(v, 4) == md[".vgpr_count"] - md[".agpr_count"] == kd.accum_offset
    else:
        assert v == md[".vgpr_count"]
    # the descriptor's granules follow from the used counts alone
    unified = (_round(v, 4) + a) if a else v
    assert _round(unified, 8) == kd.vgpr_count
    assert _round(s + 6, 16) == kd.sgpr_count
    for cls in ("vgpr", "agpr", "sgpr"):
        assert 0 <= r[cls]["peak_live"] <= r[cls]["used"]
        assert r[cls]["declared"] >= r[cls]["used"] or (cls == "vgpr" and a)
    assert not [w for w in k["warnings"] if w.startswith(("VGPRs:", "AGPRs:", "SGPRs:"))]
    assert r["vgpr"]["peak_live"] > 0 and r["sgpr"]["peak_live"] > 0


_BLOCK = re.compile(r"^(\.LBB\d+_\d+:|; %bb\.\d+:)(.*)$")
_DEPTH = re.compile(r"Depth=(\d+)")


def _llvm_listing(amdgcn: str) -> list[tuple[str, int]]:
    """(mnemonic, loop depth) of every instruction of the kernel's text, from LLVM's block comments."""
    body = amdgcn.split("\n.Lfunc_end0:")[0]
    body = body[re.search(r"^\w+:.*$", body, re.M).end():]
    out, depth = [], 0
    for line in body.splitlines():
        m = _BLOCK.match(line.strip())
        if m:
            d = _DEPTH.search(m.group(2))
            depth = int(d.group(1)) if d else 0
            continue
        t = line.strip()
        if not t or t.startswith((".", ";")) or t.endswith(":"):
            continue
        out.append((t.split()[0], depth))
    return out


@pytest.mark.parametrize("name", ["add", "softmax", "matmul"])
def test_listing_and_loops_agree_with_llvm(compiled, reports, name):
    k = reports[name]
    mine = [(i["text"].split()[0], i["loop_depth"]) for i in k["instructions"] if i["reachable"]]
    theirs = _llvm_listing(compiled[name]["amdgcn"])
    assert [m for m, _ in mine] == [m for m, _ in theirs]
    assert [d for _, d in mine] == [d for _, d in theirs]
    # everything else is the assembler's alignment padding of the kernarg-preload prologue
    assert all(i["text"] == "s_nop 0" for i in k["instructions"] if not i["reachable"])
    assert k["mix"].get("mfma", 0) == sum(1 for m, _ in theirs if m.startswith("v_mfma"))
    if name == "matmul":
        assert len(k["loops"]) >= 1
        loop = k["loops"][0]
        assert loop["mix"]["mfma"] >= 1 and loop["peak_live"]["vgpr"] <= k["registers"]["vgpr"]["used"]


def test_dynamic_lds_counts_in_the_occupancy(compiled, reports):
    k = reports["matmul"]
    shared = compiled["matmul"]["shared"]
    assert shared > 0 and k["lds"]["dynamic_bytes"] == shared
    assert k["lds"]["total_bytes"] == k["lds"]["static_bytes"] + shared
    groups = 65536 // _round(k["lds"]["total_bytes"], 512)
    assert k["occupancy"]["limits"]["lds"] == groups * compiled["matmul"]["num_warps"] // 4
    without = report_code_object(compiled["matmul"]["hsaco"])["kernels"][0]
    assert "lds" not in without["occupancy"]["limits"] or without["lds"]["static_bytes"]
