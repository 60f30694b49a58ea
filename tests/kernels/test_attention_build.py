"""The attention forward kernel, built for every target, element type, head dimension and mode: it passes
the project's checks (hazards, waits, registers, LDS banks; run by ``finish()``), LLVM assembles it, no
scratch, the registers and occupancy docs/attention.md states, the hot loop holds exactly the MFMA work
of its two KV tiles, one barrier per tile and no ``s_nop`` and no mask, every LDS instruction carries its
lane addresses and is conflict-free, and impossible parameters are refused."""

import itertools

import pytest

from isagen.builders.spec import bundled_specs_dir, load_specs
from isagen.errors import SpecError
from isagen.isa.operands import Label
from isagen.kernels.attention import BLOCK_KV, hot_loops, make_plan
from isagen.objects.emit import render_assembly
from isagen.objects.toolchain import assemble

SPEC = bundled_specs_dir() / "attention_bf16.yaml"
MODES = [dict(zip(("dtype", "head_dim", "causal", "varlen"), v))
         for v in itertools.product(("bf16", "f16"), (64, 128), (False, True), (False, True))]
CASES = [(t, m) for t in ("gfx942", "gfx950") for m in MODES]


def _spec(**params):
    return load_specs([SPEC], overrides=[f"{k}={str(v).lower()}" for k, v in params.items()])[0]


@pytest.fixture(scope="module")
def programs():
    out = {}
    for target, mode in CASES:
        key = (target, tuple(sorted(mode.items())))
        out[key] = _spec(**mode).build(target)
    return out


def _ids():
    return [f"{t}-{m['dtype']}-d{m['head_dim']}{'-causal' if m['causal'] else ''}{'-varlen' if m['varlen'] else ''}"
            for t, m in CASES]


@pytest.mark.parametrize("target,mode", CASES, ids=_ids())
def test_builds_checks_and_budget(programs, target, mode):
    program = programs[(target, tuple(sorted(mode.items())))]
    spec = _spec(**mode)
    plan = make_plan(spec.params, target)
    assert program.rejected is None
    assert program.lds_bytes == plan.lds_bytes <= program.target.lds_bytes
    assert program.vgprs <= program.target.max_arch_vgprs and program.agprs <= program.target.max_agprs
    assert ".amdhsa_private_segment_fixed_size 0" in render_assembly(program)      # no scratch, no spills
    occ = program.occupancy()["waves_per_simd"]
    # docs/attention.md: gfx950 D=128 keeps two workgroups per CU (V reuses K's AGPRs); D=64 more
    want = {("gfx950", 128): 2, ("gfx950", 64): 3, ("gfx942", 128): 1, ("gfx942", 64): 2}[(target, mode["head_dim"])]
    assert occ == want, (program.vgprs, program.agprs, program.occupancy())


@pytest.mark.parametrize("target,mode", CASES, ids=_ids())
def test_hot_loop_shape(programs, target, mode):
    """The unmasked loop body holds two KV tiles: their MFMAs exactly, one barrier each, no s_nop, and no
    mask (no compare against a key limit); the masked loop exists (twice: starting on either stage)."""
    program = programs[(target, tuple(sorted(mode.items())))]
    plan = make_plan(_spec(**mode).params, target)
    loops = hot_loops(program)
    assert len(loops) == 1
    body = loops[0]
    assert sum(i.unit == "mfma" for i in body) == 2 * plan.mfmas_per_tile
    assert not [i for i in body if i.name == "s_nop"]
    assert sum(i.name == "s_barrier" for i in body) == 2
    assert not [i for i in body if i.name == "v_cmp_gt_i32"], "the hot loop must not mask"
    names = [it.name for it in program.items if isinstance(it, Label)]
    assert sum(n.endswith(("_kvmask", "_kvmask_odd")) for n in names) == 2
    # every copy of a tile: K and V, 64 keys x D, issued once per tile by the 4 waves
    dmas = sum("lds_dma" in i.desc.flags for i in body)
    assert dmas * 4 * 64 * plan.dma_width == 2 * 2 * BLOCK_KV * plan.head_dim * 2


@pytest.mark.parametrize("target,mode", CASES[:: len(MODES) // 2], ids=_ids()[:: len(MODES) // 2])
def test_assembles_and_banks(programs, target, mode):
    program = programs[(target, tuple(sorted(mode.items())))]
    co = assemble(render_assembly(program), target, name="attention_bf16")
    assert co[:4] == b"\x7fELF"
    # every instruction that touches LDS memory (ds_bpermute only crosses lanes)
    lds = [it for it in program.items
           if {"lds_read", "lds_write", "lds_dma"} & set(getattr(getattr(it, "desc", None), "flags", ()))]
    assert lds and all(it.lanes for it in lds), [it.render() for it in lds if not it.lanes][:2]
    assert program.lds_banks and all(r.conflict_free for r in program.lds_banks)


@pytest.mark.parametrize("override,field", [("head_dim=96", "head_dim"), ("dtype=f32", "dtype"),
                                            ("head_dim=256", "head_dim")])
def test_refusals(override, field):
    with pytest.raises(SpecError, match=field):
        load_specs([SPEC], overrides=[override])[0].build("gfx950")


@pytest.mark.parametrize("generator", ["attention", "attention_bwd"])
def test_contract_modes_cover_the_declared_sizes(generator):
    """The fixed-length and varlen contracts together use every size the generator declares, each one
    only declared sizes (tests/builders/test_spec.py checks the bundled specs' subset)."""
    from isagen.builders.registry import load_generators
    gen = load_generators()[generator]
    spec = next(s for s in load_specs([bundled_specs_dir()]) if s.kernel == generator)
    used = set()
    for varlen in (False, True):
        info = load_specs([spec.path], overrides=[f"varlen={str(varlen).lower()}"])[0].launch_info("gfx950")
        assert set(info.size_symbols) <= set(gen.shapes)
        used |= set(info.size_symbols)
    assert used == set(gen.shapes)


# ---------------------------------------------------------------------------------------- backward
BWD_SPEC = bundled_specs_dir() / "attention_bwd_bf16.yaml"
# every part x head_dim x causal in bf16; f16 and varlen change only the packing and the sequence bounds
BWD_MODES = ([dict(part=p, dtype="bf16", head_dim=d, causal=c, varlen=False)
              for p, d, c in itertools.product(("dkdv", "dq"), (64, 128), (False, True))]
             + [dict(part=p, dtype="f16", head_dim=128, causal=False, varlen=False) for p in ("dkdv", "dq")]
             + [dict(part=p, dtype="bf16", head_dim=64, causal=True, varlen=True) for p in ("dkdv", "dq")])
BWD_CASES = [(t, m) for t in ("gfx942", "gfx950") for m in BWD_MODES]


def _bwd_id(t, m):
    return (f"{t}-{m['part']}-{m['dtype']}-d{m['head_dim']}{'-causal' if m['causal'] else ''}"
            f"{'-varlen' if m['varlen'] else ''}")


@pytest.mark.parametrize("target,mode", BWD_CASES, ids=[_bwd_id(t, m) for t, m in BWD_CASES])
def test_backward_builds_with_a_clean_hot_loop(target, mode):
    """Every backward variant passes the checks, has no scratch, and its unmasked loop holds exactly the
    MFMAs of two tiles, one barrier per tile, no s_nop and no mask; every LDS access has lanes and is
    conflict-free."""
    from isagen.kernels.attention_bwd import hot_loops as bwd_loops
    from isagen.kernels.attention_bwd import make_plan as bwd_plan
    spec = load_specs([BWD_SPEC], overrides=[f"{k}={str(v).lower()}" for k, v in mode.items()])[0]
    program = spec.build(target)
    plan = bwd_plan(spec.params, target)
    assert program.rejected is None
    assert ".amdhsa_private_segment_fixed_size 0" in render_assembly(program)
    assert program.lds_bytes == plan.lds_bytes <= program.target.lds_bytes
    loops = bwd_loops(program)
    assert len(loops) == 1          # dkdv causal: bwdloop and bwdloop_odd, the latter named apart
    for body in loops:
        assert sum(i.unit == "mfma" for i in body) == 2 * plan.mfmas_per_tile
        assert not [i for i in body if i.name == "s_nop"]
        assert sum(i.name == "s_barrier" for i in body) == 2
        assert not [i for i in body if i.name in ("v_cmp_gt_i32", "v_cmp_le_i32")], "the hot loop must not mask"
    lds = [it for it in program.items
           if {"lds_read", "lds_write", "lds_dma"} & set(getattr(getattr(it, "desc", None), "flags", ()))]
    assert lds and all(it.lanes for it in lds)
    assert program.lds_banks and all(r.conflict_free for r in program.lds_banks)
    if (target, mode["head_dim"], mode["part"], mode["dtype"]) == ("gfx950", 128, "dkdv", "bf16"):
        co = assemble(render_assembly(program), target, name="attention_bwd_bf16")
        assert co[:4] == b"\x7fELF"
