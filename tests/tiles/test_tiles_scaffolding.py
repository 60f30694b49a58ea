"""The matrix-kernel scaffolding of ``isagen.tiles`` on its own, in the emulator: the buffer windows
(``tiles.window``) aim at the element the formula names and reach exactly to the end of the matrix,
with and without a leading pad and for 1-, 2- and 4-byte elements; the double-buffered loop
(``tiles.kloop``) runs its body once per trip with the stages alternating, odd trip counts included,
and ``loop_bodies`` finds each copy of it by its label."""

import pytest
from test_tiles_primitives import run, store_kernel

from isagen.tiles.buffer import BufferResource
from isagen.tiles.kloop import double_buffered_loop, loop_bodies
from isagen.tiles.window import LeadingPad, column_window, row_window, tile_window

U32 = 1 << 32

# (first_row, first_col, rows, row_elems, pad): the sizes of one workgroup's window
WINDOWS = [(0, 0, 1, 8, 0), (256, 64, 1000, 4096, 24), (3, 8, 5, 40, 7), (1024, 128, 1025, 640, 0)]


def window_kernel(target, shape: str, elem_bytes: int, padded: bool):
    """Outputs per lane: the window's base (from 0) and num_records, for sizes passed as u0..u4."""

    def body(k, lane, us):
        first_row, first_col, rows, row_elems, pad = us
        win = BufferResource(k, "W", tracked=True)
        k.s_mov_b32(win.regs[0], 0)
        k.s_mov_b32(win.regs[1], 0)
        t = k.sgpr(2, "tmp", align=1)
        if shape == "row":
            lead = LeadingPad(k, pad, elem_bytes, t[1]) if padded else None
            row_window(k, win, t, first_row=first_row, rows=rows, row_elems=row_elems, elem_bytes=elem_bytes,
                       pad=lead)
        elif shape == "column":
            row_bytes = k.sgpr(1, "row_bytes")
            k.s_mul_i32(row_bytes, row_elems, elem_bytes)
            column_window(k, win, t, first_col=first_col, rows=rows, row_bytes=row_bytes, elem_bytes=elem_bytes,
                          pad_rows=pad if padded else None)
            k.free(row_bytes)
        else:
            tile_window(k, win, t, first_row=first_row, first_col=first_col, rows=rows, row_elems=row_elems,
                        elem_bytes=elem_bytes)
        k.free(t)
        out = [k.vgpr(1, "base", kernel=True), k.vgpr(1, "records", kernel=True)]
        k.v_mov_b32(out[0], win.regs[0])
        k.v_mov_b32(out[1], win.regs[2])
        return out

    return store_kernel(target, f"window_{shape}", 2, body, nargs=5)


def expected_window(shape, elem_bytes, padded, first_row, first_col, rows, row_elems, pad):
    """(base, num_records) in bytes, from the matrix geometry: where the tile starts, and how far it is
    from there to the end of the matrix."""
    pad = pad if padded else 0
    size = rows * row_elems * elem_bytes
    if shape == "row":            # rows first_row.., back by pad elements along the row
        start = (first_row * row_elems - pad) * elem_bytes
    elif shape == "column":       # columns first_col.., back by pad rows
        start = (first_col - pad * row_elems) * elem_bytes
    else:                         # element (first_row, first_col)
        start = (first_row * row_elems + first_col) * elem_bytes
    return start % U32, size - start


@pytest.mark.parametrize("target", ["gfx950"])       # SALU only: nothing differs between the targets
@pytest.mark.parametrize("shape,padded", [("row", True), ("row", False), ("column", True), ("column", False),
                                          ("tile", False)])
@pytest.mark.parametrize("elem_bytes", [1, 2, 4])
def test_windows_start_at_the_tile_and_end_at_the_matrix(target, shape, padded, elem_bytes):
    program = window_kernel(target, shape, elem_bytes, padded)
    for case in WINDOWS:
        got = run(target, program, 2, args=case)[:, 0]
        assert tuple(int(v) for v in got) == expected_window(shape, elem_bytes, padded, *case), case


def loop_kernel(target, loops: int):
    """``loops`` double-buffered loops over u0 trips, one after the other; each trip adds 1 (stage 0) or
    1000 (stage 1) to an accumulator per loop."""

    def body(k, lane, us):
        outs = []
        for i in range(loops):
            acc = k.vgpr(1, f"count{i}", kernel=True)
            k.v_mov_b32(acc, 0)
            double_buffered_loop(k, us[0], lambda stage, acc=acc: k.v_add_u32(acc, (1, 1000)[stage], acc),
                                 label="kvloop", counter="kv_left", unit="KV tile")
            outs.append(acc)
        return outs

    return store_kernel(target, "loops", loops, body, nargs=1)


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_double_buffered_loop_alternates_stages_and_ends_after_either(target):
    program = loop_kernel(target, 2)
    for trips in range(1, 6):
        got = run(target, program, 2, args=(trips,))[:, 0]
        assert (got == (trips + 1) // 2 + 1000 * (trips // 2)).all(), trips


def test_loop_bodies_finds_every_copy_by_its_label():
    program = loop_kernel("gfx950", 2)
    bodies = loop_bodies(program, "kvloop")
    assert len(bodies) == 2
    for body in bodies:
        assert [i.name for i in body].count("v_add_u32") == 2          # one per stage
        assert [i.name for i in body][-1] == "s_cbranch_scc0"        # back to the top after stage 1
    assert loop_bodies(program, "kloop") == []
    text = "\n".join(str(c) for c in program.items)
    assert "KV tiles left" in text and "an odd number of KV tiles ends here" in text
