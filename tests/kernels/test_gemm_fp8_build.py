"""The FP8 GEMM (``gemm_fp8``), built for every target from the bundled specs and a few parameter
variants: the project's checks pass (hazards, waits, registers, LDS bank check on every DS read and
DMA), LLVM assembles it, the ping-pong kernels keep two waves per SIMD, the hot loop holds exactly its
K-tiles' fp8 MFMAs and no ``s_nop``, the static bank analysis finds no conflict, and what it cannot do
(the other target's fp8 flavour, too much LDS, unaligned shapes) is refused with a reason."""

import re

import pytest

from isagen.builders.contract import evaluate
from isagen.builders.spec import bundled_specs_dir, load_specs, parse_spec
from isagen.errors import LaunchError, SpecError
from isagen.isa.operands import Label
from isagen.kernels.gemm import hot_loops, lds_accesses
from isagen.kernels.gemm_fp8 import make_plan
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.tiles.bank_check import static_report

BUNDLED = [s for s in load_specs([bundled_specs_dir()]) if s.kernel == "gemm_fp8"]
I4 = {"schedule": "interleave4", "block_m": 128, "block_n": 128}
VARIANTS = [("interleave4_128", "gfx942", I4),        # 16x16: ds_read_b64 slices, two per 64-k tile
            ("interleave4_128", "gfx950", I4),     # 16x16x128: two slices, so the default K-tile is 256
            ("interleave4_128_mfma32", "gfx950", {**I4, "mfma": 32}),
            ("mfma32_row_f32", "gfx942", {"mfma": 32, "scaling": "row", "out_dtype": "f32"}),
            ("mfma32_row_f32", "gfx950", {"mfma": 32, "scaling": "row", "out_dtype": "f32"}),
            ("row_f16_192x256", "gfx942", {"scaling": "row", "out_dtype": "f16", "block_m": 192}),
            ("row_f16_192x256", "gfx950", {"scaling": "row", "out_dtype": "f16", "block_m": 192}),
            ("bf8_bf8", "gfx942", {"in_dtype": "bf8"}), ("bf8_bf8", "gfx950", {"in_dtype": "bf8"}),
            ("fp8_bf8", "gfx942", {"b_dtype": "bf8"}), ("fp8_bf8", "gfx950", {"b_dtype": "e5m2"}),
            ("bf8_fp8_mfma32", "gfx942", {"in_dtype": "e5m2fnuz", "b_dtype": "fp8", "mfma": 32}),
            ("bf8_fp8_mfma32", "gfx950", {"in_dtype": "bf8", "b_dtype": "fp8", "mfma": 32})]


def spec_of(name, **params):
    body = ", ".join(f"{k}: {v}" for k, v in params.items())
    return parse_spec(f"kernel: gemm_fp8\nname: {name}\ntargets: [gfx942, gfx950]\nparams: {{{body}}}\n",
                      f"{name}.yaml")


CASES = [(s, t) for s in BUNDLED for t in ("gfx942", "gfx950")] + [(spec_of(n, **kw), t) for n, t, kw in VARIANTS]
IDS = [f"{s.name}-{t}" for s, t in CASES]
def mfma_of(target, size, a, b):
    """The MFMA the kernel must use: gfx950's f8f6f4 (cbsz = B's format, blgp = A's: B is src0), gfx942's
    ``<src0>_<src1>`` form (``bf8_fp8``: B e5m2, A e4m3)."""
    if target == "gfx950":
        return {16: "v_mfma_f32_16x16x128_f8f6f4", 32: "v_mfma_f32_32x32x64_f8f6f4"}[size]
    shape = {16: "16x16x32", 32: "32x32x16"}[size]
    return f"v_mfma_f32_{shape}_{b}_{a}"


FORMAT = {"fp8": 0, "bf8": 1}


@pytest.fixture(scope="module")
def programs():
    return {(s.name, t): s.build(t) for s, t in CASES}


def test_bundled_specs():
    assert {s.name for s in BUNDLED} == {"gemm_fp8", "gemm_fp8_rowwise", "gemm_fp8_decode", "gemm_fp8_blockscale"}
    assert all(set(s.targets) == {"gfx942", "gfx950"} for s in BUNDLED)


@pytest.mark.parametrize("spec,target", CASES, ids=IDS)
def test_builds_checks_and_assembles(programs, spec, target):
    program = programs[(spec.name, target)]
    plan = make_plan(spec.params, target)
    assert program.rejected is None
    mnem = mfma_of(target, plan.mfma.m, plan.in_dtype, plan.b_dtype)
    assert plan.mfma.mnemonic == mnem
    assert plan.elem_bytes == 1
    i4_f8f6f4 = plan.schedule == "interleave4" and "f8f6f4" in plan.mfma.mnemonic and plan.mfma.m == 16
    default = (256 if i4_f8f6f4 else 128) if target == "gfx950" else 64
    assert plan.block_k_bytes == (spec.params.block_k or default)
    assert program.lds_bytes == plan.lds_bytes <= program.target.lds_bytes
    if plan.schedule == "pingpong8":
        assert program.occupancy()["waves_per_simd"] >= 2
    asm = render_assembly(program)
    mfmas = [line for line in asm.splitlines() if line.strip().startswith(mnem)]
    assert mfmas
    if target == "gfx950":               # the formats as LLVM spells them: cbsz:1 (B e5m2), blgp:1 (A e5m2)
        want = {m: str(FORMAT[t]) for m, t in (("cbsz", plan.b_dtype), ("blgp", plan.in_dtype)) if FORMAT[t]}
        assert all(dict(re.findall(r"\b(cbsz|blgp):(\d)", line)) == want for line in mfmas)
    assert assemble(asm, target, name=spec.name)[:4] == b"\x7fELF"


@pytest.mark.parametrize("spec,target", CASES, ids=IDS)
def test_hot_loop_shape(programs, spec, target):
    """Per loop body (two K-tiles): exactly the fp8 MFMAs of two K-tiles, no s_nop, the schedule's
    barriers, one DMA per block; no s_nop in the epilogue (scales and rounding) either."""
    program = programs[(spec.name, target)]
    plan = make_plan(spec.params, target)
    loops = hot_loops(program)
    assert len(loops) == (2 if plan.schedule == "pingpong8" else 1)
    per_wave = plan.frags_m * plan.frags_n * (plan.block_k // plan.mfma.k)
    for body in loops:
        mfmas = [i for i in body if i.unit == "mfma"]
        assert len(mfmas) == 2 * per_wave and {i.name for i in mfmas} == {plan.mfma.mnemonic}
        assert not [i for i in body if i.name == "s_nop"]
        assert sum(i.name == "s_barrier" for i in body) == (4 if plan.schedule == "pingpong8" else 2)
    last = max(i for i, it in enumerate(program.items) if isinstance(it, Label))
    assert not [it for it in program.items[last:] if getattr(it, "name", "") == "s_nop"]
    dmas = sum("lds_dma" in i.desc.flags for body in loops for i in body)
    assert dmas == 2 * (plan.layout_a.size + plan.layout_b.size) // (64 * plan.dma_width) // plan.loaders


@pytest.mark.parametrize("spec,target", CASES, ids=IDS)
def test_static_bank_analysis_is_conflict_free(programs, spec, target):
    plan = make_plan(spec.params, target)
    rep = static_report(lds_accesses(plan), target)
    assert rep and all(e.conflict_free for e in rep), [e.line() for e in rep if not e.conflict_free][:3]
    program = programs[(spec.name, target)]
    assert program.lds_banks and all(r.conflict_free for r in program.lds_banks)
    assert "every wave variant: conflict-free" in render_assembly(program)


@pytest.mark.parametrize("target,params,message", [
    ("gfx942", {"in_dtype": "e4m3fn"}, r"params.in_dtype: e4m3fn is not gfx942's 8-bit float: its MFMAs read FNUZ"),
    ("gfx950", {"in_dtype": "e4m3fnuz"}, r"params.in_dtype: e4m3fnuz is not gfx950's 8-bit float: its MFMAs read OCP"),
    ("gfx950", {"b_dtype": "e5m2fnuz"}, r"params.b_dtype: e5m2fnuz is not gfx950's 8-bit float"),
    ("gfx942", {"in_dtype": "e5m2"}, r"params.in_dtype: e5m2 is not gfx942's 8-bit float"),
    ("gfx942", {"block_k": 128}, r"params.block_k: two LDS stages of 256x128 \+ 256x128 fp8 need 131072 bytes; "
                                 r"gfx942 has 65536"),
    ("gfx950", {"schedule": "interleave4"}, r"two LDS stages of 256x256 \+ 256x256 fp8 need 262144 bytes"),
    ("gfx950", {"schedule": "interleave4", "block_k": 128, "block_m": 128, "block_n": 128},
     r"interleave4 splits a K-tile into two halves .* use block_k 256 or a 32-row MFMA"),
])
def test_refused_with_a_reason(target, params, message):
    with pytest.raises(SpecError, match=message):
        spec_of("g", **params).build(target)


def test_named_flavour_builds_on_its_target():
    assert spec_of("g", in_dtype="e4m3fn").build("gfx950").rejected is None


@pytest.mark.parametrize("sizes,message", [({"m": 64, "n": 64, "k": 40}, "K must be a positive multiple of 16"),
                                           ({"m": 64, "n": 66, "k": 64}, "N must be a multiple of 4")])
def test_launch_contract_refuses_unaligned_shapes(sizes, message):
    info = BUNDLED[0].launch_info("gfx950")
    with pytest.raises(LaunchError, match=message):
        info.grid_for(sizes, "gemm_fp8")
    assert evaluate("k % 16", {"k": 48}) == 0
