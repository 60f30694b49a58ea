"""Bank-conflict analysis against hand-derived cases of the published phase rules."""

import numpy as np

from isagen.checks.lds_banks import analyse, phases

LANES = np.arange(64)


def test_read_b128_phase_groups_are_the_published_ones():
    groups = phases("gfx942", 16, "read")
    assert groups[0] == (0, 1, 2, 3, 20, 21, 22, 23)
    assert groups[1] == (4, 5, 6, 7, 16, 17, 18, 19)
    assert groups[7] == (44, 45, 46, 47, 56, 57, 58, 59)
    assert sorted(sum(groups, ())) == list(range(64))
    assert phases("gfx942", 16, "write")[1] == tuple(range(8, 16))
    assert len(phases("gfx942", 4, "read")) == 2 and len(phases("gfx942", 8, "read")) == 4


def test_linear_accesses_are_conflict_free():
    for width in (4, 8, 16):
        for op in ("read", "write"):
            assert analyse(LANES * width, width, "gfx942", op).conflict_free


def test_broadcast_is_free():
    assert analyse(np.zeros(64), 4).conflict_free
    assert analyse(np.zeros(64), 16).conflict_free


def test_column_of_a_128_byte_row_tile_conflicts():
    # 16 rows of 128 bytes (64 bf16), every lane reading 16 bytes of column chunk 0 of its row:
    # all 8 lanes of a phase hit banks 0-3 with different dwords -> 8-way.
    addr = (LANES % 16) * 128
    rep = analyse(addr, 16, "gfx942", "read")
    assert rep.cycles == (8,) * 8 and rep.total_cycles == 64 and not rep.conflict_free


def test_xor_swizzle_removes_the_conflict():
    # the same reads with the 16-byte chunk index XOR-ed by (row % 8)
    row = LANES % 16
    chunk = (LANES // 16) ^ (row % 8)
    rep = analyse(row * 128 + chunk * 16, 16, "gfx942", "read")
    assert rep.conflict_free, str(rep)


def test_stride_two_dwords_b32_is_two_way():
    rep = analyse(LANES * 8, 4, "gfx942", "read")
    assert rep.cycles == (2, 2)


def test_gfx950_has_twice_the_banks():
    # a 128-byte stride b32 access: dword 32*lane.  gfx942: 2 phases of 32 lanes, all on bank 0
    # (32-way each); gfx950: one phase of 64 lanes over banks 0 and 32 (32-way): half the cycles.
    assert analyse(LANES * 128, 4, "gfx942").cycles == (32, 32)
    assert analyse(LANES * 128, 4, "gfx950").cycles == (32,)
    # a 256-byte row read as b32 by 64 lanes is conflict-free on both
    assert analyse(LANES * 4, 4, "gfx950").conflict_free


def test_inactive_lanes_do_not_count():
    addr = (LANES % 16) * 128
    only_one = np.zeros(64, bool)
    only_one[[0, 4, 8, 12, 32, 36, 40, 44]] = True
    assert analyse(addr, 16, "gfx942", "read", active=only_one).conflict_free


def test_gfx950_b128_reads_go_sixteen_consecutive_lanes_a_phase():
    groups = phases("gfx950", 16, "read")
    assert groups == [tuple(range(s, s + 16)) for s in range(0, 64, 16)]
    assert analyse(LANES * 16, 16, "gfx950", "read").conflict_free
    # a column of a 128-byte-row tile: 16 lanes, rows alternating between banks 0-3 and 32-35: 8-way
    assert analyse((LANES % 16) * 128, 16, "gfx950", "read").cycles == (8,) * 4


def test_all_lanes_path_counts_like_the_per_phase_loop():
    """With every lane active ``analyse`` counts all phases in one numpy pass; an explicit all-true
    mask takes the per-phase loop.  Both must give the same cycles, conflicts or not."""
    rng = np.random.default_rng(20261126)
    conflicted = 0
    for target in ("gfx942", "gfx950"):
        for width in (1, 2, 4, 8, 16):
            for op in ("read", "write"):
                for trial in range(30):
                    if trial % 3 == 0:
                        addr = rng.integers(0, 65536, 64)
                    elif trial % 3 == 1:
                        addr = (np.arange(64) * int(rng.integers(1, 64)) * 4 + int(rng.integers(0, 4096))) % 65536
                    else:
                        addr = rng.integers(0, 16, 64) * 4 * int(rng.integers(1, 40))
                    fast = analyse(addr, width, target, op)
                    assert fast == analyse(addr, width, target, op, active=np.ones(64, bool))
                    conflicted += not fast.conflict_free
    assert conflicted > 100


def test_b96_accesses_cover_each_lane_once():
    # 12 bytes a lane: 10 lanes fill the 32 banks' 128-byte row at most, so the last phase is short;
    # every lane is analysed exactly once and a linear access moves 3 dwords per lane in 30-dword rows
    groups = phases("gfx942", 12, "read")
    assert sorted(sum(groups, ())) == list(range(64))
    rep = analyse(LANES * 12, 12, "gfx942", "read")
    assert rep.conflict_free and len(rep.cycles) == len(groups)


def _reference_cycles(addr, width, target, op, active):
    """The bank model written out directly with numpy: per phase, the active lanes' dwords, distinct,
    counted per bank; the busiest bank's count (0 for a phase with no active lane)."""
    from isagen.targets import get_target
    banks = get_target(target).lds_banks
    out = []
    for group in phases(target, width, op):
        lanes = [lane for lane in group if active[lane]]
        if not lanes:
            out.append(0)
            continue
        dwords = np.unique((addr[lanes, None] // 4 + np.arange((width + 3) // 4)[None, :]).ravel())
        out.append(int(np.bincount(dwords % banks, minlength=banks).max()))
    return tuple(out)


def test_analyse_matches_the_direct_model_on_random_accesses():
    # aligned and unaligned addresses, broadcasts, every width, masks: the fast paths of analyse
    # (whole aligned blocks per bank run) against the dword-by-dword count
    rng = np.random.default_rng(17)
    for trial in range(600):
        width = (1, 2, 4, 8, 12, 16)[trial % 6]
        target = ("gfx942", "gfx950")[trial // 6 % 2]
        op = ("read", "write")[trial // 12 % 2]
        kind = trial // 24 % 4
        if kind == 0:
            addr = rng.integers(0, 1 << 16, 64)
        elif kind == 1:
            addr = rng.integers(0, 64, 64) * max(width, 4)
        elif kind == 2:
            addr = rng.integers(0, 8, 64) * 128 + rng.integers(0, 4, 64) * width
        else:
            addr = rng.integers(0, 16, 64) * 4
        active = rng.random(64) < 0.7 if trial % 3 == 0 else np.ones(64, bool)
        expected = _reference_cycles(addr, width, target, op, active)
        got = analyse(tuple(int(a) for a in addr), width, target, op,
                      active=None if active.all() else active)
        assert got.cycles == expected, (trial, width, target, op)
        assert analyse(addr, width, target, op, active=active).cycles == expected


def test_check_program_rows_equal_analysing_every_variant():
    # check_program analyses a pattern once per shift of whole blocks; shifts by other amounts (and
    # other patterns) must still be analysed on their own
    from types import SimpleNamespace

    from isagen.checks.lds_banks import check_program
    rng = np.random.default_rng(5)
    items = []
    for i in range(40):
        name, width = (("ds_read_b128", 16), ("ds_write_b64", 8), ("ds_read_b32", 4), ("ds_read_b96", 12))[i % 4]
        flags = frozenset({"lds_read"} if "read" in name else {"lds_write"})
        base = rng.integers(0, 32, 64) * (16 if i % 3 else 4)
        shifts = [int(s) for s in rng.choice([0, 4, 8, 16, 128, 256, 1000, 4096], 4)]
        lanes = tuple(tuple(int(a) + s for a in base) for s in shifts)
        items.append(SimpleNamespace(name=name, desc=SimpleNamespace(flags=flags), comment=f"#{i}", lanes=lanes))
    rows, problems = check_program(items, "gfx942")
    assert len(rows) == len(items)
    for row, inst in zip(rows, items):
        width = row.width
        reports = [analyse(np.array(v), width, "gfx942", row.op) for v in inst.lanes]
        assert row.conflicted == sum(not r.conflict_free for r in reports)
        assert row.worst.cycles == max(reports, key=lambda r: r.extra_cycles).cycles
    assert len(problems) == sum(not r.conflict_free for r in rows)
