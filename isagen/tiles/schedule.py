"""Ops and how a schedule orders them.

A tile primitive does not write instructions directly when a schedule needs to interleave it with
others: it returns ``Op``s, deferred emitters of one instruction each (one MFMA, one ``ds_read``, an M0
update, one LDS-DMA, one SALU step).  A schedule then decides the order::

    emit(ops)                      # one after another
    emit(merge(mfmas, loads))      # loads spread evenly between the MFMAs (HipKittens' interleave)
    emit(merge([], memory_ops))    # a memory cluster: order only as the constraints need

so the shape of the schedule is visible in the kernel, while each primitive keeps its addressing.

Constraints an op carries: ``after`` (an op that must be emitted before it) and ``gap`` (at least one
other instruction between ``after`` and it).  An LDS-DMA is ``after`` its M0 update with a gap (SALU
writes M0 -> LDS-DMA reads it: one wait state); the next M0 update is ``after`` that DMA.  ``merge``
fills such gaps with independent work so the hazard pass has no ``s_nop`` to insert.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from isagen.records import record


@record(eq=False)
class Op:
    """One schedulable step of a loop body: what it emits and what it must come after."""

    kind: str                      # mfma | ds_read | dma | m0 | salu | valu
    emit: Callable[[], object]
    what: str = ""
    after: Op | None = None      # must come after this op
    gap: bool = False              # ... with at least one instruction in between
    extra: dict = field(default_factory=dict)

    def __call__(self):
        return self.emit()


def emit(ops) -> None:
    for op in ops:
        op()


def merge(main: list[Op], side: list[Op]) -> list[Op]:
    """``main`` in order, ``side`` spread evenly between its ops (side ops keep their order among
    themselves where their constraints allow), every ``after``/``gap`` constraint met.  A gap that no
    op can fill is left (the hazard pass fills it); ``gaps_left`` counts them."""
    out: list[Op] = []
    done: set[int] = set()
    n_main, n_side = len(main), len(side)
    mi = 0
    pending = list(side)
    last: Op | None = None

    def eligible(op: Op) -> bool:
        if op.after is not None and id(op.after) not in done:
            return False
        if op.gap and last is op.after:
            return False
        return True

    def take(op: Op):
        nonlocal last
        out.append(op)
        done.add(id(op))
        last = op

    while mi < n_main or pending:
        side_due = n_main == 0 or (n_side - len(pending)) < (n_side * mi + n_main - 1) // max(n_main, 1)
        pick = None
        if pending and (side_due or mi >= n_main):
            pick = next((op for op in pending if eligible(op)), None)
        if pick is not None:
            pending.remove(pick)
            take(pick)
            continue
        if mi < n_main and eligible(main[mi]):
            take(main[mi])
            mi += 1
            continue
        pick = next((op for op in pending if eligible(op)), None)
        if pick is None:
            # only a gap-blocked op is left: let it follow (the hazard pass inserts the wait state)
            pick = next(op for op in pending if op.after is None or id(op.after) in done)
            last = None
        pending.remove(pick)
        take(pick)
    return out


def gaps_left(ops: list[Op]) -> int:
    """Adjacent pairs in ``ops`` that break a ``gap`` constraint (each costs an ``s_nop``)."""
    return sum(1 for a, b in zip(ops, ops[1:]) if b.gap and b.after is a)


def interleave(main: list[Op], side: list[Op]) -> list[Op]:
    """HipKittens' 4-wave interleave: single MFMAs with single loads (``merge``)."""
    return merge(main, side)
