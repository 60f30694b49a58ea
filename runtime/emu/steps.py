"""The emulator's compiled code: one :class:`CompiledStep` per instruction, grouped into
:class:`CompiledBlock` basic blocks.

A leaf module: the semantics modules (``ops_*``) build steps and the executor runs them, so both import
it and neither has to import the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:       # for an annotation only: at run time this module stays a leaf
    from isagen.runtime.emu.sanitizer import MfmaKind


class CompiledStep:
    """One compiled instruction."""

    __slots__ = ("inst", "idx", "fn", "cat", "term", "counter", "result", "lds_write", "nop_slots",
                 "mfma", "reads", "writes", "error", "is_load", "flags", "native_call")

    def __init__(self, inst, idx: int, fn, cat: str, *, term: bool = False, counter: str | None = None,
                 result: str | None = None):
        self.inst, self.idx, self.fn, self.cat, self.term = inst, idx, fn, cat, term
        self.counter = counter        # 'vm' | 'lgkm' | 'smem' | None: which counter the instruction increments
        self.result = result          # kind of the register result: 'vm' | 'lds' | 'smem' | 'mfma' | None
        self.lds_write = False        # writes LDS asynchronously (ds store / LDS DMA)
        self.nop_slots = 1            # issue slots it occupies (s_nop N: N+1)
        self.mfma: MfmaKind | None = None     # passes and pipe of an MFMA (set by the sanitizer)
        self.reads: tuple[int, ...] = ()      # register keys read (sanitizer)
        self.writes: tuple[int, ...] = ()
        self.error: str | None = None         # why the instruction cannot run (its fn reports it when reached)
        self.is_load = False
        # s_waitcnt: its counts ('vmcnt', 'lgkmcnt', 'expcnt'); LDS DMA: {'also_lgkm': True}
        self.flags: dict[str, int] = {}
        # MFMA: (batch) -> the native kernel's call over all its waves, or None (mfma.native_call)
        self.native_call: Callable | None = None


class CompiledBlock:
    """A basic block of compiled steps, with how often waves ran it (``execs``) and its instruction mix."""

    __slots__ = ("start", "end", "steps", "fns", "execs", "cats")

    def __init__(self, start: int, steps: list[CompiledStep]):
        self.start = start
        self.steps = steps
        self.end = start + len(steps)
        self.fns = [s.fn for s in steps]
        self.execs = 0                     # sum over executions of the number of waves
        cats: dict[str, int] = {}
        for s in steps:
            cats[s.cat] = cats.get(s.cat, 0) + 1
        self.cats = cats
