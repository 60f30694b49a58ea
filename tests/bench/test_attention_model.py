"""What bench/attention_model.py relies on and must hold (issue 14), checked against independent counts:

- the hot loop (``kvloop``) of every variant the model covers has no ``s_nop``;
- the MFMAs counted per KV tile (``mix``, steady state) equal a direct count of the body's MFMA
  mnemonics and the plan's ``mfmas_per_tile``, and their FLOPs are the step's 4 x 128 x 64 x D;
- the LDS-DMA copies of one tile move exactly the K and V tiles (2 x 64 x D x 2 bytes per workgroup);
- the lazy-rescale block is found between its labels, is what the branch skips, holds the O rescale
  (every O accumulator read, scaled and written back once) and is excluded from the steady state;
- the in-order walk never beats the matrix core or the VALU it models.

No timing: the model's shares are predictions, reported in bench/results/attention_model.md.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from isagen.builders.spec import load_specs
from isagen.isa.operands import Label
from isagen.kernels.attention import BLOCK_KV, BLOCK_Q, WAVES, hot_loops, make_plan

ROOT = Path(__file__).resolve().parents[2]


def _load_model():
    path = ROOT / "bench" / "attention_model.py"
    spec = importlib.util.spec_from_file_location("isagen_bench_attention_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


am = _load_model()
VARIANTS = am.VARIANTS


@functools.cache
def built(target: str, head_dim: int, dtype: str):
    spec = load_specs([str(am.SPEC)], overrides=[f"head_dim={head_dim}", f"dtype={dtype}", "causal=false"])[0]
    program = spec.build(target)
    return program, make_plan(spec.params, target)


def _ids(v):
    return "-".join(map(str, v))


def test_variants_cover_both_targets_and_head_dims():
    assert {(t, d) for t, d, _ in VARIANTS} == {(t, d) for t in ("gfx942", "gfx950") for d in (64, 128)}


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_hot_loop_has_no_nop_and_one_body(variant):
    program, _ = built(*variant)
    bodies = hot_loops(program)
    assert len(bodies) == 1
    body, _ = am.split_hot_loop(program)
    assert [id(i) for i in body] == [id(i) for i in bodies[0]]
    assert [i.render() for i in body if i.name == "s_nop"] == []


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_mfma_count_and_flops_per_tile(variant):
    program, plan = built(*variant)
    body, rescale = am.split_hot_loop(program)
    ids = {id(i) for i in rescale}
    steady = [i for i in body if id(i) not in ids]
    direct = sum(i.name.startswith("v_mfma_") for i in body)
    assert direct == am.TILES_PER_TRIP * plan.mfmas_per_tile
    per = am.mix(steady)
    assert per["mfma"] / am.TILES_PER_TRIP == plan.mfmas_per_tile
    assert per["mfma_cycles"] == direct * plan.mfma.cycles
    flops = sum(i.desc.mfma.flops for i in body if i.name.startswith("v_mfma_")) / am.TILES_PER_TRIP
    assert flops * WAVES == 4 * BLOCK_Q * BLOCK_KV * plan.head_dim


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_copies_move_one_k_and_one_v_tile(variant):
    program, plan = built(*variant)
    body, _ = am.split_hot_loop(program)
    copies = [i for i in body if "lds_dma" in i.desc.flags]
    lane_bytes = [4 * int(re.fullmatch(r"buffer_load_dword(x(\d))?_lds", i.name).group(2) or 1) for i in copies]
    per_workgroup = sum(lane_bytes) / am.TILES_PER_TRIP * 64 * WAVES
    assert per_workgroup == 2 * BLOCK_KV * plan.head_dim * 2


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_rescale_block_found_and_excluded(variant):
    program, plan = built(*variant)
    body, rescale = am.split_hot_loop(program)
    assert rescale
    # independently: what each forward conditional branch of the loop skips (one per LDS stage)
    in_loop = {id(i) for i in body}
    where = {it.name: n for n, it in enumerate(program.items) if isinstance(it, Label)}
    skipped, target = [], None
    for n, it in enumerate(program.items):
        if isinstance(it, Label):
            if target is not None and it.name == target:
                target = None
        elif id(it) in in_loop:
            if target is not None:
                skipped.append(it)
            elif it.name == "s_cbranch_scc0" and where[it.ops[0].name] > n:     # forward: not the loop-back
                target = it.ops[0].name
    assert [id(i) for i in skipped] == [id(i) for i in rescale]
    # the O rescale: every O accumulator register read, multiplied and written back once per tile
    o_regs = 2 * plan.d_frags * 4
    names = [i.name for i in rescale]
    assert names.count("v_accvgpr_read_b32") == am.TILES_PER_TRIP * o_regs
    assert names.count("v_accvgpr_write_b32") == am.TILES_PER_TRIP * o_regs
    assert names.count("v_exp_f32") == am.TILES_PER_TRIP * 2          # alpha, per row fragment
    ids = {id(i) for i in rescale}
    steady = [i for i in body if id(i) not in ids]
    assert not any(i.name.startswith("v_accvgpr_") for i in steady)
    assert len(steady) + len(rescale) == len(body)
    whole, parts = am.mix(body), (am.mix(steady), am.mix(rescale))
    assert all(whole[k] == parts[0][k] + parts[1][k] for k in whole)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v[2] == "bf16"], ids=_ids)
def test_walk_bounds(variant):
    program, _ = built(*variant)
    body, rescale = am.split_hot_loop(program)
    ids = {id(i) for i in rescale}
    steady = [i for i in body if id(i) not in ids]
    per = am.mix(steady)
    valu = sum(am.valu_clocks(i) for i in steady)
    issue = am.walk(steady, throughput=False)
    tp = am.walk(steady, throughput=True)
    assert issue >= per["mfma_cycles"]
    assert tp >= max(per["mfma_cycles"], valu, am.SLOT * len(steady))
    # nothing overlaps the softmax of a single wave: the walk takes longer than the MFMAs plus the
    # VALU work between the last S MFMA and the first PV MFMA
    assert tp > per["mfma_cycles"] + valu / 2
