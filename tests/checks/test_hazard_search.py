"""The hazard verifier's search against an exhaustive reference, and the verifier on its own.

``check_hazards`` looks back a bounded window, walks a block as a plain loop, skips earlier
instructions that share no register with the one it checks, and merges CFG paths that reach the same
instruction with the same exposed registers.  Each of those is a shortcut; the reference below takes
none of them: for every instruction it follows *every* backward path of the CFG (loop back edges
included, no merging), classifies *every* earlier instruction on it, and stops a path only once it
is longer than the longest rule of the table (no pair further apart can need anything).  Both
classify a pair with the same rule function (``hazards._pair``, whose numbers the LLVM vectors of
test_hazards.py pin down), so what is compared here is the search: the same pairs, at the same
shortest distance, with the same requirement.

The random programs are unpadded, so they are full of hazards the s_nop pass would fix; the verifier
runs on them alone (no ``insert_nops`` first) and must report each one.
"""

import random
import re

import pytest

from isagen.checks import hazards
from isagen.checks.cfg import CFG
from isagen.isa.instruction import Instruction
from isagen.isa.operands import EXEC, M0, VCC, A, Label, S, V
from isagen.isa.table import isa_table
from isagen.targets import get_target

G942, G950 = "gfx942", "gfx950"
_MESSAGE = re.compile(r" #(\d+) .* with (\d+) wait states? between; needs (\d+)$")


def reference(items, target):
    """{(consumer, producer, wait states between, wait states needed)} over every backward path."""
    target = get_target(target)
    table = hazards._fixed_rules(target)
    window = hazards.max_window(target)
    cfg = CFG(list(items))
    reachable = cfg.reachable()
    prof = {pos: hazards._Profile(x, table) for pos, x in enumerate(items) if isinstance(x, Instruction)}
    best: dict[tuple[int, int, str], tuple[int, int]] = {}
    for bi in reachable:
        for cpos in cfg.blocks[bi].instrs:
            c = prof[cpos]
            everything = c.reads | c.writes                 # register bit masks
            stack = [(0, q, (everything,) * 5) for q in cfg.prev_instructions(cpos)
                     if cfg.block_of(q).index in reachable]
            while stack:                                    # depth first, every path separately
                dist, ppos, live = stack.pop()
                p = prof[ppos]
                for n, _regs, reason in hazards._pair(target, table, p, c, live):
                    key = (cpos, ppos, reason)
                    if dist < n and (key not in best or best[key][0] > dist):
                        best[key] = (dist, n)
                exposed = list(live)
                kind = (hazards._MFMA if p.mfma is not None else hazards._VALU if p.is_valu
                        else hazards._SALU if p.unit == "salu" else None)
                if kind is not None:
                    exposed[kind] &= ~p.writes
                exposed[hazards._ANY] &= ~p.writes
                nd = dist + p.ws
                if nd < window:
                    stack += [(nd, q, tuple(exposed)) for q in cfg.prev_instructions(ppos)
                              if cfg.block_of(q).index in reachable]
    return {(c, p, d, n) for (c, p, _), (d, n) in best.items()}


def fast(items, target):
    out = set()
    for v in hazards.check_hazards(items, target):
        m = _MESSAGE.search(str(v))
        assert m and int(m.group(1)) == v.source, str(v)
        out.add((v.pos, v.source, int(m.group(2)), int(m.group(3))))
    return out


def _instructions(rng, I, target):
    """A mix of every kind of instruction the table has a rule for, on a few registers so they collide."""
    mfmas = ["v_mfma_f32_16x16x16_bf16", "v_mfma_f32_32x32x8_bf16"] + \
        (["v_mfma_f32_32x32x16_bf16", "v_mfma_f32_32x32x64_f8f6f4"] if target == G950   # 16 passes: the window
         else ["v_mfma_f32_16x16x8_xf32"])
    v = lambda: V[rng.randrange(0, 12)]            # noqa: E731
    choices = [
        lambda: _mfma(rng, I, rng.choice(mfmas)),
        lambda: I["v_accvgpr_read_b32"](V[rng.randrange(8, 12)], A[rng.randrange(0, 20)]),
        lambda: I["v_accvgpr_write_b32"](A[rng.randrange(0, 20)], V[rng.randrange(8, 12)]),
        lambda: I["v_mov_b32"](v(), 0),
        lambda: I["v_add_f32"](v(), v(), v()),
        lambda: I["v_mov_b32"](v(), v(), row_shr=1),                          # DPP
        lambda: I["v_exp_f32"](v(), v()),                                     # transcendental
        lambda: I["v_cvt_pk_fp8_f32"](v(), v(), v(), op_sel=[0, 0, rng.randrange(2)]),
        lambda: I["v_readlane_b32"](S[rng.randrange(6, 8)], v(), rng.choice([S[6], S[7], 5])),
        lambda: I["v_readfirstlane_b32"](S[rng.randrange(6, 8)], v()),
        lambda: I["v_cmp_gt_f32"](rng.choice([VCC, S[10:12], EXEC]), 0, v()),
        lambda: I["v_cndmask_b32"](v(), 0, v(), rng.choice([VCC, S[10:12]])),
        lambda: I["buffer_store_dwordx4"](V[8:12], V[1], S[0:4], rng.choice([0, S[12]]), offen=True),
        lambda: I["global_store_dwordx4"](V[0], V[8:12], S[0:2]),
        lambda: I["buffer_load_dword"](v(), V[1], rng.choice([S[0:4], S[4:8]]), S[12], offen=True),
        lambda: I["s_mov_b32"](rng.choice([M0, S[12], S[6]]), 0),
        lambda: I["buffer_load_dword_lds"](V[1], S[0:4], S[12], offen=True),
        lambda: I["ds_read_b32"](v(), v()),
        lambda: I["s_nop"](rng.randrange(0, 4)),
    ]
    return lambda: rng.choice(choices)()


def _mfma(rng, I, name):
    if name.endswith("f8f6f4"):
        return I[name](rng.choice([A[0:16], A[4:20]]), V[0:8], V[4:12], rng.choice([A[0:16], A[4:20]]))
    if "32x32" in name:
        wide = name.endswith("x16_bf16")
        return I[name](rng.choice([A[0:16], A[4:20]]), V[0:(4 if wide else 2)], V[4:(8 if wide else 6)],
                       rng.choice([A[0:16], A[4:20]]))
    return I[name](rng.choice([A[0:4], A[4:8], A[2:6]]), rng.choice([V[0:2], A[0:2], A[4:6]]), V[2:4],
                   rng.choice([A[0:4], A[4:8]]))


def _program(rng, target, n, shape):
    I = isa_table(target)
    one = _instructions(rng, I, target)
    body = [one() for _ in range(n)]
    if shape == "line":
        return body + [I["s_endpgm"]()]
    if shape == "loop":
        head = Label(".Ls_loop")
        cut = rng.randrange(1, n)
        return body[:cut] + [head] + body[cut:] + [I["s_cbranch_vccnz"](head), I["s_endpgm"]()]
    # a diamond inside a loop: two ways into the join, and a back edge
    head, other, join = Label(".Ls_head"), Label(".Ls_else"), Label(".Ls_join")
    a, b, c = sorted(rng.sample(range(1, n), 3))
    return (body[:a] + [head] + body[a:b] + [I["s_cbranch_scc0"](other)] + body[b:c] + [I["s_branch"](join)]
            + [other] + [one() for _ in range(rng.randrange(0, 4))] + [join] + body[c:]
            + [I["s_cbranch_vccnz"](head), I["s_endpgm"]()])


@pytest.mark.parametrize("target", [G942, G950])
@pytest.mark.parametrize("shape", ["line", "loop", "diamond"])
def test_verifier_finds_what_the_exhaustive_search_finds(target, shape):
    rng = random.Random(f"{target}-{shape}-20261126")
    planted = 0
    for _ in range(40):
        items = _program(rng, target, rng.randrange(6, 40), shape)
        want = reference(items, target)
        assert fast(items, target) == want, "\n".join(f"{i}: {x}" for i, x in enumerate(items))
        planted += len(want)
        # the nop pass fixes every one of them, by the reference's count too
        out = hazards.insert_nops(items, target)
        assert reference(out, target) == set(), "\n".join(map(str, out))
        assert fast(out, target) == set()
    assert planted > 50           # the programs do exercise the search


def test_verifier_alone_reports_every_hazard_the_nop_pass_would_fix():
    """A hazard planted by hand (no insert_nops run first): each instruction the pass pads is one the
    verifier reports, with the pass's count as what it needs."""
    I = isa_table(G942)
    mfma = I["v_mfma_f32_32x32x8_bf16"](A[0:16], V[0:2], V[2:4], A[0:16])           # 8-pass XDL
    items = [I["v_mov_b32"](V[0], 1),                     # VALU writes SrcA: 2 before the MFMA
             mfma,
             I["v_add_f32"](V[5], V[6], V[7]),
             I["v_accvgpr_read_b32"](V[8], A[3]),         # 11 after the MFMA, 1 already between
             I["s_endpgm"]()]
    found = [(v.pos, v.source) for v in hazards.check_hazards(items, G942)]
    assert found == [(1, 0), (3, 1)]
    assert [str(v).split("; ")[1] for v in hazards.check_hazards(items, G942)] == ["needs 2", "needs 11"]
    padded = hazards.insert_nops(items, G942)
    nops = [int(x.ops[0]) + 1 for x in padded if x.name == "s_nop"]
    assert nops == [2, 10]
    assert hazards.check_hazards(padded, G942) == []


def test_verifier_follows_a_hazard_across_many_blocks_within_the_window():
    """A producer several small blocks before its consumer (each block one instruction and a branch):
    the walk leaves the consumer's block and keeps counting through the others."""
    I = isa_table(G950)
    labels = [Label(f".Lb{i}") for i in range(4)]
    items = [I["v_mfma_f32_32x32x16_bf16"](A[0:16], V[0:4], V[4:8], A[0:16])]       # 8 passes: 12 on gfx950
    for lab in labels:
        items += [I["s_branch"](lab), lab, I["v_mov_b32"](V[20], 0)]
    items += [I["v_accvgpr_read_b32"](V[8], A[15]), I["s_endpgm"]()]
    assert fast(items, G950) == reference(items, G950) == {(len(items) - 2, 0, 8, 12)}


@pytest.mark.parametrize("blocks", [False, True])
def test_verifier_sees_the_whole_window_and_no_further(blocks):
    """gfx950's longest rule (a 16-pass XDL MFMA, then a VALU reading its result: 20 wait states) is
    its window: with 19 wait states between the pair is a hazard, with 20 it is not, in one block or
    spread over several."""
    I = isa_table(G950)
    mfma = I["v_mfma_f32_32x32x64_f8f6f4"](A[0:16], V[0:8], V[8:16], A[0:16])
    for between in (17, 18, 19, 20, 21):
        items = [mfma]
        for i in range(between):
            if blocks and i % 3 == 0:
                lab = Label(f".Lw{i}")
                items += [I["s_branch"](lab), lab]            # the branch is one of the wait states
            else:
                items.append(I["v_mov_b32"](V[20], i))
        items += [I["v_accvgpr_read_b32"](V[30], A[7]), I["s_endpgm"]()]
        want = {(len(items) - 2, 0, between, 20)} if between < 20 else set()
        assert fast(items, G950) == reference(items, G950) == want


def _blocks(cfg):
    return [(b.index, b.start, b.end, b.labels, b.instrs, b.succs, b.preds) for b in cfg.blocks]


@pytest.mark.parametrize("shape", ["line", "loop", "diamond"])
def test_graph_after_the_nop_pass_is_the_graph_of_the_padded_program(shape):
    """finish() builds the CFG once and moves it past the inserted s_nops (``CFG.with_insertions``):
    it must be the graph ``CFG`` builds from the padded program itself, comments anywhere included,
    and ``pad`` must give ``insert_nops``' program."""
    from isagen.builders.program import Comment
    rng = random.Random(f"{shape}-graph-20261126")
    moved = 0
    for _ in range(40):
        items = _program(rng, G942, rng.randrange(6, 40), shape)
        for _ in range(rng.randrange(0, 4)):
            items.insert(rng.randrange(0, len(items) + 1), Comment("a comment"))
        out, inserted = hazards.pad(items, G942, CFG(items))
        assert out == hazards.insert_nops(items, G942)
        assert sum(n for _, n in inserted) == len(out) - len(items)
        assert _blocks(CFG(items).with_insertions(out, inserted)) == _blocks(CFG(out))
        moved += bool(inserted)
    assert moved > 20               # most programs do get s_nops


def test_allocation_positions_follow_their_instructions_past_the_s_nops():
    """finish() shifts ``Allocation.allocated_at``/``freed_at`` by the insertion list: each old
    position must become the new position of the same item object (the end the new end)."""
    from types import SimpleNamespace

    from isagen.checks.pipeline import _shift_allocation_positions
    rng = random.Random("alloc-positions-20261126")
    checked = 0
    for _ in range(30):
        items = _program(rng, G942, rng.randrange(6, 40), rng.choice(["line", "loop", "diamond"]))
        out, inserted = hazards.pad(items, G942)
        if not inserted:
            continue
        where = {id(x): i for i, x in enumerate(out)}
        want = [where[id(x)] for x in items] + [len(out)]
        olds = [(rng.randrange(0, len(items) + 1), rng.choice([None, rng.randrange(0, len(items) + 1)]))
                for _ in range(10)]
        allocs = [SimpleNamespace(allocated_at=a, freed_at=f) for a, f in olds]
        _shift_allocation_positions(SimpleNamespace(allocations=allocs), len(items), inserted)
        for (a, f), got in zip(olds, allocs):
            assert got.allocated_at == want[a]
            assert got.freed_at == (None if f is None else want[f])
        checked += 1
    assert checked > 10
