"""Liveness of the register report on programs with known answers.

* Small hand-built isagen programs (straight line, a loop-carried accumulator, an if/else diamond,
  nested loops, code after s_endpgm) against live sets worked out by hand, instruction by instruction.
* Random control-flow graphs against an independent oracle: a register is live into instruction i
  when some path from i reaches a read of it before any write (a search per register and
  instruction, not the fixed-point iteration the report uses).
* The same hand-built programs assembled by LLVM and reported from the code object (decoded machine
  code, CFG rebuilt from branch addresses) give the same liveness and loops as the Program.
"""

from __future__ import annotations

import random

import pytest

from isagen.builders.program import KernelBuilder
from isagen.report import report_code_object, report_program
from isagen.report.flow import CLASSES, Step, StepCFG, finish_flow, key_mask, liveness, mask_keys
from isagen.report.sources import from_program


def _live_sets(program):
    flow = from_program(program).flow
    live = liveness(flow)
    return [set(mask_keys(m)) for m in live.live], flow


def V(*idx):
    return {("v", i) for i in idx}


def S(*idx):
    return {("s", i) for i in idx}


def _builder(name):
    k = KernelBuilder(name, "gfx942", workgroup_size=64)
    k.free(k.tid)           # v0 stays out of the picture: the programs below never read it
    return k


# --------------------------------------------------------------------------- hand-built programs
def straight_line():
    k = _builder("t_line")
    a, b, c = k.vgpr(1, "a"), k.vgpr(1, "b"), k.vgpr(1, "c")      # v0, v1, v2 (tid freed)
    s = k.sgpr(1, "s")                                            # s3
    k.v_mov_b32(a, 1)                # 0
    k.s_mov_b32(s, 5)                # 1
    k.v_mov_b32(b, 2)                # 2
    k.v_add_u32(c, a, b)             # 3  a, b die here
    k.v_add_u32(a, s, c)             # 4  a redefined from s and c (both die)
    k.v_add_u32(b, a, a)             # 5  a dies; b is written and never read
    prog = k.finish(check=False)     # 6  s_endpgm
    a_, b_, c_ = 0, 1, 2
    expect = [V(a_), V(a_) | S(3), V(a_, b_) | S(3), V(a_, b_, c_) | S(3), V(a_, c_) | S(3), V(a_, b_), set()]
    return prog, expect


def loop_carried():
    k = _builder("t_loop")
    acc, x, t = k.vgpr(1, "acc"), k.vgpr(1, "x"), k.vgpr(1, "t")  # v0, v1, v2
    cnt = k.sgpr(1, "cnt")                                        # s3
    top = k.label("top")
    k.v_mov_b32(acc, 0)              # 0
    k.v_mov_b32(x, 3)                # 1
    k.s_mov_b32(cnt, 8)              # 2
    k.place(top)
    k.v_mul_lo_u32(t, x, x)          # 3  t: defined and used inside the body only
    k.v_add_u32(acc, acc, t)         # 4
    k.s_sub_u32(cnt, cnt, 1)         # 5
    k.s_cmp_lg_u32(cnt, 0)           # 6
    k.s_cbranch_scc1(top)            # 7  x and cnt are read again in the next iteration
    k.v_mov_b32(x, acc)              # 8
    prog = k.finish(check=False)     # 9
    A, X, T, C = 0, 1, 2, 3
    expect = [V(A), V(A, X), V(A, X) | S(C), V(A, X, T) | S(C), V(A, X, T) | S(C), V(A, X) | S(C),
              V(A, X) | S(C), V(A, X) | S(C), V(A, X), set()]
    return prog, expect


def diamond():
    k = _builder("t_diamond")
    p, q, r = k.vgpr(1, "p"), k.vgpr(1, "q"), k.vgpr(1, "r")      # v0, v1, v2
    s = k.sgpr(1, "s")                                            # s3
    other, join = k.label("else"), k.label("join")
    k.v_mov_b32(p, 1)                # 0  p: read on the else path only
    k.v_mov_b32(q, 2)                # 1  q: read on the then path only
    k.s_mov_b32(s, 0)                # 2
    k.s_cmp_eq_u32(s, 0)             # 3
    k.s_cbranch_scc1(other)          # 4
    k.v_add_u32(r, q, q)             # 5  then
    k.s_branch(join)                 # 6
    k.place(other)
    k.v_add_u32(r, p, p)             # 7  else
    k.place(join)
    k.v_mov_b32(q, r)                # 8
    prog = k.finish(check=False)     # 9
    P, Q, R = 0, 1, 2
    expect = [V(P), V(P, Q), V(P, Q) | S(3), V(P, Q) | S(3), V(P, Q), V(Q, R), V(R), V(P, R), V(Q, R), set()]
    return prog, expect


def nested_loops():
    k = _builder("t_nested")
    x, y = k.vgpr(1, "x"), k.vgpr(1, "y")
    i, j = k.sgpr(1, "i"), k.sgpr(1, "j")
    outer, inner = k.label("outer"), k.label("inner")
    k.v_mov_b32(x, 0)                # 0
    k.s_mov_b32(i, 4)                # 1
    k.place(outer)
    k.s_mov_b32(j, 4)                # 2  outer body starts
    k.v_mov_b32(y, 1)                # 3
    k.place(inner)
    k.v_add_u32(x, x, y)             # 4  inner body
    k.s_sub_u32(j, j, 1)             # 5
    k.s_cmp_lg_u32(j, 0)             # 6
    k.s_cbranch_scc1(inner)          # 7
    k.s_sub_u32(i, i, 1)             # 8
    k.s_cmp_lg_u32(i, 0)             # 9
    k.s_cbranch_scc1(outer)          # 10
    k.v_mov_b32(y, x)                # 11
    prog = k.finish(check=False)     # 12
    return prog


def dead_tail():
    k = _builder("t_dead")
    a = k.vgpr(1, "a")
    skip = k.label("skip")
    k.v_mov_b32(a, 1)                # 0
    k.s_branch(skip)                 # 1
    k.v_add_u32(a, a, a)             # 2  never executed
    k.v_add_u32(a, a, a)             # 3  never executed
    k.place(skip)
    k.v_add_u32(a, a, a)             # 4
    return k.finish(check=False)     # 5


HAND_BUILT = [straight_line, loop_carried, diamond]


@pytest.mark.parametrize("make", HAND_BUILT, ids=lambda f: f.__name__)
def test_live_sets_by_hand(make):
    prog, expect = make()
    got, _ = _live_sets(prog)
    assert len(got) == len(expect) == len(prog.instructions())
    for i, (g, e) in enumerate(zip(got, expect)):
        assert g == e, f"#{i} {prog.instructions()[i].render(False)}: live {sorted(g)}, expected {sorted(e)}"


@pytest.mark.parametrize("make", HAND_BUILT, ids=lambda f: f.__name__)
def test_report_counts_and_peaks_by_hand(make):
    prog, expect = make()
    k = report_program(prog)["kernels"][0]
    for cls, key in (("v", "vgpr"), ("s", "sgpr")):
        counts = [sum(1 for c, _ in e if c == cls) for e in expect]
        assert [i["live"][key] for i in k["instructions"]] == counts
        assert k["registers"][key]["peak_live"] == max(counts)
        assert k["registers"][key]["peak_at"] == (counts.index(max(counts)) if max(counts) else None)
        assert k["registers"][key]["peak_live"] <= k["registers"][key]["used"]


def test_loop_carried_values_stay_live_across_the_back_edge():
    prog, _ = loop_carried()
    k = report_program(prog)["kernels"][0]
    assert [(lp["first"], lp["last"], lp["depth"], lp["header"], lp["latches"])
            for lp in k["loops"]] == [(3, 7, 1, 3, [7])]
    assert k["loops"][0]["mix"] == {"valu": 2, "salu": 2, "branch": 1}
    assert [i["loop_depth"] for i in k["instructions"]] == [0, 0, 0, 1, 1, 1, 1, 1, 0, 0]
    # the peak names the allocations live there, with their ranges
    peak = k["peaks"]["vgpr"]
    assert (peak["count"], peak["instruction"]) == (3, 3)
    assert {(x["name"], x["range"]) for x in peak["live"]} == {("acc", "v0"), ("x", "v1"), ("t", "v2")}
    rows = {a["name"]: a for a in k["allocations"]}
    assert (rows["t"]["first_def"], rows["t"]["last_use"], rows["t"]["live_instructions"]) == (3, 4, 2)
    assert (rows["acc"]["first_def"], rows["acc"]["last_use"]) == (0, 8)
    assert (rows["cnt"]["first_def"], rows["cnt"]["last_use"], rows["cnt"]["live_instructions"]) == (2, 6, 6)


def test_nested_loops_depth_and_mix():
    k = report_program(nested_loops())["kernels"][0]
    loops = [(lp["first"], lp["last"], lp["depth"]) for lp in k["loops"]]
    assert loops == [(2, 10, 1), (4, 7, 2)]
    assert [i["loop_depth"] for i in k["instructions"]] == [0, 0, 1, 1, 2, 2, 2, 2, 1, 1, 1, 0, 0]
    # y is defined in the outer body and read in the inner one: live through the inner loop, and not
    # at the outer loop's header (redefined at #3 before any read)
    live, _ = _live_sets(nested_loops())
    assert ("v", 1) not in live[2] and all(("v", 1) in live[i] for i in range(3, 8))
    assert all(("v", 0) in live[i] for i in range(0, 12))        # x: accumulated across both loops


def test_unreachable_code_holds_nothing():
    k = report_program(dead_tail())["kernels"][0]
    assert [i["reachable"] for i in k["instructions"]] == [True, True, False, False, True, True]
    assert [i["live"]["vgpr"] for i in k["instructions"]] == [1, 1, 0, 0, 1, 0]
    assert k["unreachable_instructions"] == 2
    assert k["mix"] == {"valu": 2, "branch": 1, "sopp": 1}


# --------------------------------------------------------------------------- random graphs vs an oracle
KEYS = [("v", i) for i in range(5)] + [("a", i) for i in range(2)] + [("s", i) for i in range(4)]


def _random_flow(rng: random.Random):
    n = rng.randint(4, 36)
    starts = sorted({0} | set(rng.sample(range(1, n), rng.randint(0, max(0, n // 4)))))
    blocks = [list(range(s, e)) for s, e in zip(starts, starts[1:] + [n])]
    succs = []
    for b in range(len(blocks)):
        kind = rng.choice(["fall", "fall", "cond", "jump", "end"] if b + 1 < len(blocks) else ["end", "jump"])
        target = rng.randrange(len(blocks))
        succs.append({"fall": [b + 1], "cond": sorted({target, b + 1}), "jump": [target], "end": []}[kind])
    steps = []
    for i in range(n):
        d = rng.sample(KEYS, rng.randint(0, 2))
        u = rng.sample(KEYS, rng.randint(0, 3))
        steps.append(Step(i, f"op{i}", key_mask(d), key_mask(u), "valu"))
    cfg = StepCFG(blocks, succs)
    return finish_flow(steps, cfg, blocks)


def _oracle_live_in(flow, i: int, key) -> bool:
    bit = key_mask([key])
    seen, stack = set(), [i]
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        seen.add(j)
        s = flow.steps[j]
        if s.uses & bit:
            return True
        if s.defs & bit:
            continue
        stack.extend(s.succs)
    return False


def _oracle_reachable(flow) -> set[int]:
    seen, stack = set(), [0]
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(flow.steps[j].succs)
    return seen


def test_random_graphs_match_the_path_oracle():
    rng = random.Random(7)
    checked = 0
    for _ in range(150):
        flow = _random_flow(rng)
        live = liveness(flow)
        reach = _oracle_reachable(flow)
        for i, s in enumerate(flow.steps):
            assert s.reachable == (i in reach)
            want_in = {k for k in KEYS if _oracle_live_in(flow, i, k)}
            assert set(mask_keys(live.live_in[i])) == want_in
            want = (want_in | set(mask_keys(s.defs))) if i in reach else set()
            assert set(mask_keys(live.live[i])) == want
            for c in CLASSES:
                assert live.counts[c][i] == sum(1 for k in want if k[0] == c)
            checked += 1
    assert checked > 1500


# --------------------------------------------------------------------------- the decoded front end agrees
def test_assembled_programs_report_the_same():
    from isagen.errors import ToolchainError
    from isagen.objects.emit import render_assembly
    from isagen.objects.toolchain import assemble

    progs = [make()[0] for make in HAND_BUILT] + [nested_loops(), dead_tail()]
    for prog in progs:
        try:
            co = assemble(render_assembly(prog), prog.target, name=prog.name)
        except ToolchainError as e:          # pragma: no cover - the test machine has LLVM
            pytest.skip(f"no assembler: {e}")
        mine = report_program(prog)["kernels"][0]
        theirs = report_code_object(co)["kernels"][0]
        assert theirs["source"]["kind"] == "code_object"
        assert [i["live"] for i in theirs["instructions"]] == [i["live"] for i in mine["instructions"]], prog.name
        assert [i["offset"] for i in theirs["instructions"]] == [i["offset"] for i in mine["instructions"]]
        assert [(lp["first"], lp["last"], lp["depth"]) for lp in theirs["loops"]] == \
               [(lp["first"], lp["last"], lp["depth"]) for lp in mine["loops"]]
        assert theirs["mix"] == mine["mix"]
        for cls in ("vgpr", "agpr", "sgpr"):
            assert theirs["registers"][cls]["used"] == mine["registers"][cls]["used"]
