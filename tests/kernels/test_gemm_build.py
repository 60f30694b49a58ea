"""The bundled BF16 GEMM specs, built for every target: they pass the project's checks (hazards,
waits, registers, LDS; run by ``finish()``), LLVM assembles them, the ping-pong kernels keep two waves
per SIMD resident, the hot loop holds exactly the MFMA work of its K-tiles and no ``s_nop``, every LDS
instruction is free of bank conflicts by the static analysis (``isagen.checks.lds_banks`` on the lane
addresses of the layout formulas), and impossible parameters are refused with a reason."""

import pytest

from isagen.builders.registry import params_from
from isagen.builders.spec import bundled_specs_dir, load_specs, parse_spec
from isagen.errors import SpecError
from isagen.kernels.gemm import PARAMS, hot_loops, lds_accesses, make_plan
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble
from isagen.tiles.bank_check import static_report

SPECS = [s for s in load_specs([bundled_specs_dir()]) if s.kernel == "gemm_bf16"]
CASES = [(s, t.name) for s in SPECS for t in s.select_targets("all")]


@pytest.fixture(scope="module")
def programs():
    return {(s.name, t): s.build(t) for s, t in CASES}


def test_every_gemm_spec_lists_both_targets():
    assert len(SPECS) >= 6
    assert all(set(s.targets) == {"gfx942", "gfx950"} for s in SPECS)


@pytest.mark.parametrize("spec,target", CASES, ids=[f"{s.name}-{t}" for s, t in CASES])
def test_builds_checks_and_assembles(programs, spec, target):
    program = programs[(spec.name, target)]
    plan = make_plan(spec.params, target)
    assert program.rejected is None
    assert program.next_free_vgpr <= 512
    assert program.lds_bytes == plan.lds_bytes <= program.target.lds_bytes
    if plan.schedule == "pingpong8":
        assert program.occupancy()["waves_per_simd"] >= 2          # both ping-pong groups on every SIMD
    co = assemble(render_assembly(program), target, name=spec.name)
    assert co[:4] == b"\x7fELF"


@pytest.mark.parametrize("spec,target", CASES, ids=[f"{s.name}-{t}" for s, t in CASES])
def test_hot_loop_shape(programs, spec, target):
    """Per loop body (two K-tiles): the wave's MFMA count is 2 * (tile rows/16...) exactly; no s_nop;
    barriers: 4 per body per ping-pong group, 2 for interleave4."""
    program = programs[(spec.name, target)]
    plan = make_plan(spec.params, target)
    loops = hot_loops(program)
    assert len(loops) == (2 if plan.schedule == "pingpong8" else 1)
    per_wave = plan.frags_m * plan.frags_n * (plan.block_k // plan.mfma.k)
    for body in loops:
        assert sum(i.unit == "mfma" for i in body) == 2 * per_wave
        assert not [i for i in body if i.name == "s_nop"]
        assert sum(i.name == "s_barrier" for i in body) == (4 if plan.schedule == "pingpong8" else 2)
    # the epilogue (after the last label) has no s_nop either: gfx942's bf16 rounding interleaves two
    # values with separate NaN masks so no VALU-writes-mask -> v_cndmask gap is left empty
    from isagen.isa.operands import Label
    last = max(i for i, it in enumerate(program.items) if isinstance(it, Label))
    assert not [it for it in program.items[last:] if getattr(it, "name", "") == "s_nop"]
    # every LDS-DMA copy of a K-tile is issued once per K-tile by the loader waves
    dmas = sum("lds_dma" in i.desc.flags for body in loops for i in body)
    blocks = (plan.layout_a.size + plan.layout_b.size) // (64 * plan.dma_width) // plan.loaders
    assert dmas == 2 * blocks


@pytest.mark.parametrize("spec,target", CASES, ids=[f"{s.name}-{t}" for s, t in CASES])
def test_static_bank_analysis_is_conflict_free(programs, spec, target):
    """The plan's model of every LDS access (all waves) is conflict-free, and so is the project's bank
    check on the program: every DS read and LDS-DMA of the kernel carries its lane addresses for every
    wave variant (the hot loop included), and each is one row of ``Program.lds_banks``."""
    plan = make_plan(spec.params, target)
    rep = static_report(lds_accesses(plan), target)
    assert rep and all(e.conflict_free for e in rep), [e.line() for e in rep if not e.conflict_free][:3]
    program = programs[(spec.name, target)]
    lds = [(i, it) for i, it in enumerate(program.items) if getattr(it, "unit", None) == "ds"
           or "lds_dma" in getattr(getattr(it, "desc", None), "flags", ())]
    assert lds and all(it.lanes for _, it in lds), [it.render() for _, it in lds if not it.lanes][:2]
    rows = {r.position: r for r in program.lds_banks}
    assert sorted(rows) == [i for i, _ in lds] and all(r.conflict_free for r in rows.values())
    waves = {"read": {len(plan.a_envs()), len(plan.b_envs())}, "write": {plan.loaders}}
    assert all(r.variants in waves[r.op] for r in rows.values())
    in_loop = {id(i) for body in hot_loops(program) for i in body}
    assert sum(id(program.items[p]) in in_loop for p in rows) == sum(
        getattr(i, "unit", None) == "ds" or "lds_dma" in i.desc.flags for body in hot_loops(program) for i in body)
    assert "every wave variant: conflict-free" in render_assembly(program)


def params(**kw):
    p = {k: v.default for k, v in PARAMS.items()}
    p.update(kw)
    return params_from(p, "t")


@pytest.mark.parametrize("target,kw,message", [
    ("gfx942", {"block_k": 64}, r"need 131072 bytes; gfx942 has 65536"),
    ("gfx950", {"block_k": 128}, r"need 262144 bytes; gfx950 has 163840"),
    ("gfx950", {"schedule": "interleave4", "block_k": 32}, r"interleave4 splits a K-tile into two halves"),
    ("gfx942", {"layout": "ab", "b_read": "tr16"}, r"gfx942 has no ds_read_b64_tr_b16"),
    ("gfx950", {"layout": "ab", "block_n": 192}, r"must be a power of two"),
    ("gfx950", {"block_m": 96, "mfma": 32}, r"does not split into 2x4 waves of 32-row"),
])
def test_refused_with_a_reason(target, kw, message):
    with pytest.raises(SpecError, match=message):
        make_plan(params(**kw), target)


def test_spec_error_names_the_field():
    spec = parse_spec("kernel: gemm_bf16\nname: g\ntargets: [gfx942]\nparams: {block_k: 64}\n", "g.yaml")
    with pytest.raises(SpecError, match=r"g.yaml:4: params.block_k: two LDS stages"):
        spec.build("gfx942")
