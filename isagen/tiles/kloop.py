"""The loop skeleton of a double-buffered matrix kernel, and how to find its body again.

A kernel that streams tiles through two LDS stages (the GEMM over K-tiles; attention over K/V tiles)
runs the same loop: the body for stage 0, then for stage 1, unrolled by two so that every stage index
is a compile-time constant (LDS offsets, register names), with an exit after each half so that an odd
number of tiles needs no special case (HipKittens PR #65's trap).  ``double_buffered_loop`` writes that
loop; the body is the kernel's schedule for one tile on one stage.

``loop_bodies`` finds the instructions between the loop's labels in a finished program: the hot loop
that tests (no ``s_nop``, the MFMA count per tile) and the performance model (``bench/gemm_model.py``)
look at.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from isagen.isa.instruction import Instruction
from isagen.isa.operands import Label, Reg

STAGES = 2          # LDS stages: the tile being read and the tile being filled


def double_buffered_loop(k, trips: Reg, body: Callable[[int], None], *, label: str = "kloop",
                         counter: str = "k_left", unit: str = "K-tile") -> None:
    """``body(stage)`` for ``trips`` tiles (an SGPR, at least 1), stages alternating 0, 1, 0, ...

    The loop is ``label`` .. ``label_done``; ``counter`` names the SGPR that counts the tiles left and
    ``unit`` what one trip handles, in the listing's comments."""
    left = k.sgpr(1, counter)
    k.s_mov_b32(left, trips, comment=f"{unit}s left")
    top, done = k.label(label), k.label(f"{label}_done")
    k.place(top)
    for stage in range(STAGES):
        k.comment(f"---- {unit} on LDS stage {stage}")
        body(stage)
        k.s_sub_u32(left, left, 1, comment=f"one {unit} done")
        k.s_cmp_eq_u32(left, 0)
        if stage == 0:
            k.s_cbranch_scc1(done, comment=f"an odd number of {unit}s ends here")
        else:
            k.s_cbranch_scc0(top, comment=f"next pair of {unit}s")
    k.place(done)
    k.free(left)


def two_phase_loop(k, first: Reg, second: Reg, body: Callable[[int, int], None], *, labels: tuple[str, str],
                   counter: str = "tiles_left", unit: str = "tile") -> None:
    """Tiles in two double-buffered loops one after the other: ``first`` trips of ``body(stage, 0)``, then
    ``second`` trips of ``body(stage, 1)`` (SGPRs, either may be 0), the second loop going on from the
    LDS stage the first stopped at.  So that the stage stays a compile-time constant, the second loop
    exists twice, from stage 0 (``labels[1]``) and from stage 1 (``labels[1]_odd``), and the parity of
    ``first`` picks one.  Attention runs its unmasked tiles in one phase and the masked ones (the ragged
    end, the causal band) in the other, so the hot loop has no checks."""
    # (no label may end in a loop's own name: loop_bodies finds loops by that ending)
    skip, odd, end = k.label(f"{labels[0]}_none"), k.label(f"{labels[1]}_from_stage1"), k.label(f"{labels[1]}_end")
    k.s_cmp_eq_u32(first, 0)
    k.s_cbranch_scc1(skip, comment=f"no {unit}s in the first phase")
    double_buffered_loop(k, first, lambda st: body(st, 0), label=labels[0], counter=counter, unit=unit)
    k.place(skip)
    k.s_cmp_eq_u32(second, 0)
    k.s_cbranch_scc1(end, comment=f"no {unit}s in the second phase")
    k.s_bitcmp1_b32(first, 0, comment=f"an odd number of {unit}s so far: the second phase starts on stage 1")
    k.s_cbranch_scc1(odd)
    double_buffered_loop(k, second, lambda st: body(st, 1), label=labels[1], counter=counter, unit=unit)
    k.s_branch(end)
    k.place(odd)
    double_buffered_loop(k, second, lambda st: body(1 - st, 1), label=f"{labels[1]}_odd", counter=counter,
                         unit=unit)
    k.place(end)


def loop_bodies(program, label: str = "kloop") -> list[list[Instruction]]:
    """The instructions of every ``double_buffered_loop`` named ``label`` in a finished program, one
    list per loop (a kernel whose wave groups branch to their own copies of the loop has several).
    Labels are kernel-prefixed and numbered when repeated (``.L<kernel>_kloop``, ``.L<kernel>_kloop_2``),
    so they are matched by their ending."""
    out: list[list[Instruction]] = []
    cur: list[Instruction] | None = None       # the loop being collected, None between loops
    start, end = re.compile(rf"_{label}(_\d+)?$"), re.compile(rf"_{label}_done(_\d+)?$")
    for item in program.items:
        if isinstance(item, Label):
            if start.search(item.name):
                cur = []
            elif end.search(item.name) and cur is not None:
                out.append(cur)
                cur = None
        elif isinstance(item, Instruction) and cur is not None:
            cur.append(item)
    return out
