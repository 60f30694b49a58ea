"""`isagen disasm` agrees with llvm-objdump, instruction for instruction, on a committed sample of
AITER's hand-written gfx942 and gfx950 kernels (tests/data/aiter/README.md): gfx942 against
llvm-objdump-19, gfx950 against llvm-objdump-22 (issue 13).  Among them the attention backward kernel
whose buffer_atomic_pk_add_bf16 the gfx950 table once lacked, and fp4 GEMMs whose scaled MFMAs select
non-zero scale bytes with op_sel/op_sel_hi."""

from __future__ import annotations

import os

import pytest
from objdump_support import compare, objdump_all, objdump_for, skip_reason

from isagen.isa import decoder as D
from isagen.objects.codeobject import read_code_object

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "aiter")


def _objects(target):
    d = os.path.join(DATA, target)
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".co"))


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_aiter_objects_decode_as_llvm_objdump(target):
    tool = objdump_for(target)
    if tool is None:
        pytest.skip(skip_reason(target))
    paths = _objects(target)
    assert len(paths) >= 10
    ref = objdump_all(tool, paths)
    bad, total, names = [], 0, set()
    for p in paths:
        co = read_code_object(open(p, "rb").read(), os.path.basename(p))
        assert co.mach == target, (p, co.mach)
        b, n = compare(os.path.basename(p), co, ref[p])
        bad += b
        total += n
        names |= {i.name for i in D.decode(co.text, target, base=co.text_address)}
    assert not bad, f"{len(bad)} disagreements:\n" + "\n".join(bad[:40])
    assert total > 10000
    if target == "gfx950":        # what the sample was chosen for
        assert {"buffer_atomic_pk_add_bf16", "v_mfma_scale_f32_16x16x128_f8f6f4",
                "v_permlane32_swap_b32"} <= names


def test_aiter_scaled_mfma_scale_bytes():
    """The scale byte each v_mfma_scale_* of an fp4 GEMM reads is op_sel[i] | op_sel_hi[i] << 1, from
    the bits LLVM prints: the decoded mods agree with objdump-22's text."""
    tool = objdump_for("gfx950")
    if tool is None:
        pytest.skip(skip_reason("gfx950"))
    p = os.path.join(DATA, "gfx950", "f4gemm__f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128.co")
    co = read_code_object(open(p, "rb").read())
    ref = objdump_all(tool, [p])[p]
    seen = set()
    for i in D.decode(co.text, "gfx950", base=co.text_address):
        if not i.name.startswith("v_mfma_scale_"):
            continue
        t = ref[i.pc]
        sel = [int(x) for x in t.split("op_sel:[")[1].split("]")[0].split(",")] if "op_sel:[" in t else [0, 0, 0]
        hi = [int(x) for x in t.split("op_sel_hi:[")[1].split("]")[0].split(",")]
        assert i.mods["scale_byte"] == (sel[0] | hi[0] << 1, sel[1] | hi[1] << 1), (t, i.mods)
        seen.add(i.mods["scale_byte"])
    assert len(seen) > 1 and any(b != (0, 0) for b in seen), seen
