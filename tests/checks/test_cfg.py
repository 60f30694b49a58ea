"""Basic blocks and edges of small programs (isagen.checks.cfg)."""

import pytest

from isagen.builders.program import Comment
from isagen.checks.cfg import CFG, Violation, format_keys
from isagen.errors import CheckError
from isagen.isa.operands import VCC, A, Label, S, V
from isagen.isa.table import isa_table

I = isa_table("gfx942")


def mov(d, s=0):
    return I["v_mov_b32"](V[d], s)


def shape(cfg: CFG):
    """(labels, instruction positions, successors) of every block."""
    return [(b.labels, b.instrs, b.succs) for b in cfg.blocks]


def test_straight_line_is_one_block():
    items = [mov(1), Comment("why"), mov(2), I["s_endpgm"]()]
    cfg = CFG(items)
    assert shape(cfg) == [([], [0, 2, 3], [])]
    assert cfg.rpo() == [0] and cfg.back_edges() == []


def test_counted_loop():
    loop = Label(".Lk_loop")
    items = [I["s_mov_b32"](S[8], 4),            # 0  prologue
             loop,                                # 1
             mov(1),                              # 2
             I["s_sub_u32"](S[8], S[8], 1),       # 3
             I["s_cmp_lg_u32"](S[8], 0),          # 4
             I["s_cbranch_scc1"](loop),           # 5  back edge
             I["s_endpgm"]()]                     # 6
    cfg = CFG(items)
    assert shape(cfg) == [([], [0], [1]),
                          ([".Lk_loop"], [2, 3, 4, 5], [1, 2]),
                          ([], [6], [])]
    assert sorted(cfg.edges()) == [(0, 1), (1, 1), (1, 2)]
    assert cfg.blocks[1].preds == [0, 1]
    assert cfg.back_edges() == [(1, 1)]
    # at the loop top the previous instruction is the prologue's or the latch's branch
    assert sorted(cfg.prev_instructions(2)) == [0, 5]
    assert cfg.prev_instructions(3) == [2]


def test_if_else_diamond():
    other, join = Label(".Lelse"), Label(".Ljoin")
    items = [I["s_cmp_eq_u32"](S[2], 0),          # 0
             I["s_cbranch_scc0"](other),          # 1
             mov(1),                              # 2  then
             I["s_branch"](join),                 # 3
             other,                               # 4
             mov(2),                              # 5  else
             join,                                # 6
             mov(3),                              # 7
             I["s_endpgm"]()]                     # 8
    cfg = CFG(items)
    assert shape(cfg) == [([], [0, 1], [2, 1]),
                          ([], [2, 3], [3]),
                          ([".Lelse"], [5], [3]),
                          ([".Ljoin"], [7, 8], [])]
    assert sorted(cfg.blocks[3].preds) == [1, 2]
    dom = cfg.dominators()
    assert dom[3] == {0, 3} and dom[1] == {0, 1} and dom[2] == {0, 2}
    assert cfg.back_edges() == []
    assert sorted(cfg.prev_instructions(7)) == [3, 5]
    assert cfg.rpo()[0] == 0 and cfg.rpo()[-1] == 3


def test_consecutive_labels_share_a_block_and_empty_blocks_are_looked_through():
    a, b = Label(".La"), Label(".Lb")
    items = [mov(0), I["s_cbranch_vccnz"](b), a, b, Comment("top"), mov(1), I["s_endpgm"]()]
    cfg = CFG(items)
    assert shape(cfg) == [([], [0, 1], [1]), ([".La", ".Lb"], [5, 6], [])]
    assert cfg.label_block == {".La": 1, ".Lb": 1}
    # a label at the very end (a block with no instructions) is looked through
    end = Label(".Lend")
    items = [mov(0), I["s_cbranch_execz"](end), mov(1), end]
    cfg = CFG(items)
    assert sorted(cfg.block_exit_instructions([2])) == [1, 2]     # both ways into .Lend


def test_endpgm_in_the_middle_ends_a_block_without_successors():
    skip = Label(".Lrest")
    items = [I["s_cbranch_execz"](skip), I["s_endpgm"](), skip, mov(1), I["s_endpgm"]()]
    cfg = CFG(items)
    assert shape(cfg) == [([], [0], [2, 1]), ([], [1], []), ([".Lrest"], [3, 4], [])]


def test_bad_labels_are_one_line_errors():
    with pytest.raises(CheckError, match=r"#0 s_branch \.Lnowhere: branch to label \.Lnowhere, which is never placed"):
        CFG([I["s_branch"](Label(".Lnowhere")), I["s_endpgm"]()])
    twice = Label(".Ltwice")
    with pytest.raises(CheckError, match=r"#2 label \.Ltwice placed twice"):
        CFG([twice, mov(1), twice, I["s_endpgm"]()])


def test_violation_prints_one_line_and_keys_print_as_ranges():
    v = Violation(12, I["v_add_f32"](V[4], V[2], V[3]), "v2", "reads v2 loaded by #7 (vmcnt)")
    assert str(v) == "#12 v_add_f32 v4, v2, v3: reads v2 loaded by #7 (vmcnt)"
    assert "\n" not in str(v)
    keys = [("v", 3), ("v", 2), ("a", 0), ("v", 7), ("vcc_lo", 0), ("vcc_hi", 0), ("m0", 0)]
    assert format_keys(keys) == "vcc, a0, m0, v[2:3], v7"
    assert format_keys(A[0:4].keys()) == "a[0:3]"
    assert format_keys(VCC.keys()[:1]) == "vcc_lo"
