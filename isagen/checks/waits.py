"""The wait checker: every memory result is waited for before it is used, on every CFG path.

Memory instructions finish asynchronously; a wave learns that they have finished only through the
``s_waitcnt`` counters.  The rules modelled here (gfx9 / CDNA3 / CDNA4):

* **vmcnt** counts every VMEM instruction: buffer/global loads, stores (gfx9 has no separate store
  counter) and LDS DMA (``buffer_load ... lds``).  They finish in issue order, so ``vmcnt(N)``
  guarantees all but the N most recent are done.
* **lgkmcnt** counts LDS (DS) and scalar-memory (SMEM) instructions.  DS instructions finish in order
  among themselves; SMEM may finish in any order, relative to DS and to each other.  So after
  ``lgkmcnt(N)`` a DS instruction is done when at least N DS instructions were issued after it, and
  an SMEM result is guaranteed only by ``lgkmcnt(0)``.  (LLVM's SIInsertWaitcnts is more conservative:
  with both kinds pending it waits for 0.)
* FLAT instructions count on both and are treated as done only after ``vmcnt(0)`` and ``lgkmcnt(0)``.
* A field ``s_waitcnt`` does not name leaves that counter unconstrained.  A counter cannot exceed
  its maximum (``target.max_vmcnt``, ``target.max_lgkmcnt``): issue stalls there, so an instruction
  with more than that many younger ones on its counter is done.
* Reading a register an outstanding load will write is a violation (RAW), and so is writing it
  (WAW), except for a VMEM load overwriting the destination of an older VMEM load: those write back
  in issue order (SIInsertWaitcnts makes the same exception).
* Store data needs no wait before it is overwritten: on gfx9 a VMEM or DS store reads its data VGPRs
  when it issues (SIInsertWaitcnts only tracks the store-data lock, ``VMW_GPR_LOCK``, for targets
  before Sea Islands, ``vmemWriteNeedsExpWaitcnt``).  The one or two wait states a wide store needs
  before its data is overwritten are a hazard, handled by ``isagen.checks.hazards``.
* LDS DMA writes LDS, not registers: a ``ds_read`` (or ``ds_write``) of LDS that an outstanding DMA of
  this wave writes is a violation.  An instruction may carry the LDS byte range it touches as an
  ``lds`` attribute (an ``LdsRegion`` or a ``(start, end)`` pair); without one it may touch any of LDS.
  Other waves' DMA needs a barrier as well; that is the emulator's race checker's job.

Across branches and loops the state (the set of outstanding operations and, for each, the fewest
younger operations on its counter over all paths that reach a point) is a dataflow fixpoint over the
CFG, so a load issued at the bottom of a loop and used at the top is caught.
"""

from __future__ import annotations

from dataclasses import dataclass

from isagen.checks.cfg import CFG, Violation, format_keys
from isagen.isa.instruction import Instruction
from isagen.targets import get_target


@dataclass(frozen=True)
class _Op:
    """One memory instruction that may still be outstanding."""

    pos: int
    kind: str                       # vmem | ds | smem | flat
    dest: frozenset                 # register keys it writes when it finishes
    lds: tuple | None               # LDS byte range it writes (LDS DMA); None = unknown
    is_dma: bool
    is_vmem_load: bool


def lds_range(inst: Instruction) -> tuple[int, int] | None:
    """The LDS bytes ``inst`` touches, if the builder said (``lds`` attribute); None when unknown."""
    region = getattr(inst, "lds", None)
    if region is None:
        return None
    if isinstance(region, tuple):
        return (int(region[0]), int(region[1]))
    return (int(region.offset), int(region.offset) + int(region.size))


def _overlaps(a, b) -> bool:
    if a is None or b is None:
        return True
    return a[0] < b[1] and b[0] < a[1]


def _kind(inst: Instruction) -> str | None:
    if inst.counter is None:
        return None
    if inst.unit == "flat":
        return "flat"
    if inst.unit == "smem":
        return "smem"
    if inst.unit == "ds":
        return "ds"
    if inst.counter == "vmcnt":
        return "vmem"
    return "ds" if inst.counter == "lgkmcnt" else None


# state: origin position -> (younger, vm_pending, lgkm_pending)
#   younger: fewest instructions of the same in-order stream issued after it (vmem: VMEM; ds: DS)
#   vm_pending / lgkm_pending: only meaningful for FLAT (both counters must reach 0)

class _Checker:
    def __init__(self, items: list, target):
        self.items = items
        self.target = get_target(target)
        self.cfg = CFG(items)
        self.ops: dict[int, _Op] = {}
        for pos, item in enumerate(items):
            if isinstance(item, Instruction):
                kind = _kind(item)
                if kind is None:
                    continue
                dma = "lds_dma" in item.desc.flags
                self.ops[pos] = _Op(pos, kind, frozenset(item.defs()), lds_range(item) if dma else None, dma,
                                    kind == "vmem" and "load" in item.desc.flags and not dma)
        self.found: dict[tuple, Violation] = {}

    # ------------------------------------------------------------------ transfer of one instruction
    def step(self, pos: int, x: Instruction, state: dict, report: bool) -> dict:
        if report:
            self._check(pos, x, state)
        if x.name == "s_waitcnt":
            return self._wait(x, state)
        kind = _kind(x)
        if kind is None:
            return state
        state = dict(state)
        cap_vm, cap_lgkm = self.target.max_vmcnt, self.target.max_lgkmcnt
        if kind in ("vmem", "ds"):
            cap = cap_vm if kind == "vmem" else cap_lgkm
            for origin in list(state):
                if self.ops[origin].kind == kind:
                    younger, vm, lg = state[origin]
                    if younger + 1 > cap:              # more younger ones than the counter can hold: done
                        del state[origin]
                    else:
                        state[origin] = (younger + 1, vm, lg)
        op = self.ops[pos]
        if op.dest or op.is_dma:
            state[pos] = (0, True, True)
        return state

    def _wait(self, x: Instruction, state: dict) -> dict:
        vmcnt = x.mods.get("vmcnt")
        lgkmcnt = x.mods.get("lgkmcnt")
        out = {}
        for origin, (younger, vm, lg) in state.items():
            op = self.ops[origin]
            if op.kind == "vmem" and vmcnt is not None and younger >= vmcnt:
                continue
            if op.kind == "ds" and lgkmcnt is not None and younger >= lgkmcnt:
                continue
            if op.kind == "smem" and lgkmcnt == 0:
                continue
            if op.kind == "flat":
                vm = vm and vmcnt != 0
                lg = lg and lgkmcnt != 0
                if not vm and not lg:
                    continue
            out[origin] = (younger, vm, lg)
        return out

    # ------------------------------------------------------------------ what is missing
    def _needed(self, op: _Op, younger: int) -> str:
        if op.kind == "vmem":
            return f"s_waitcnt vmcnt({younger})" + (" or lower" if younger else "")
        if op.kind == "ds":
            return f"s_waitcnt lgkmcnt({younger})" + (" or lower" if younger else "")
        if op.kind == "smem":
            return "s_waitcnt lgkmcnt(0)"
        return "s_waitcnt vmcnt(0) lgkmcnt(0)"

    def _notes(self, pos: int, op: _Op) -> str:
        notes = []
        if op.kind == "smem":
            notes.append("scalar loads finish out of order")
        if op.kind == "flat":
            notes.append("FLAT counts on both counters")
        if op.pos >= pos:
            notes.append("issued later in the program: reached through a loop back edge")
        return f" ({'; '.join(notes)})" if notes else ""

    def _describe(self, op: _Op) -> str:
        src = self.items[op.pos].render(with_comment=False)
        counter = {"vmem": "vmcnt", "ds": "lgkmcnt", "smem": "lgkmcnt", "flat": "vmcnt+lgkmcnt"}[op.kind]
        return f"#{op.pos} {src} ({counter})"

    def _add(self, pos, x, origin, regs, message):
        key = (pos, origin, message.split(" ", 1)[0])
        if key not in self.found:
            self.found[key] = Violation(pos, x, regs, message, source=origin, kind="wait")

    def _check(self, pos: int, x: Instruction, state: dict) -> None:
        if not state:
            return
        sets = x.shared.checks.get("waits.keys")      # (equal instructions share them)
        if sets is None:
            uses, defs = frozenset(x.use_keys()), frozenset(x.def_keys())
            sets = x.shared.checks["waits.keys"] = (uses, defs, uses | defs)
        uses, defs, touch = sets
        is_vmem_load = pos in self.ops and self.ops[pos].is_vmem_load
        touches_lds = x.unit == "ds" and bool({"lds_read", "lds_write"} & x.desc.flags)
        my_lds = lds_range(x) if touches_lds else None
        # only the outstanding operations this instruction can collide with are looked at closely
        ops = self.ops
        hits = [origin for origin in state
                if not ops[origin].dest.isdisjoint(touch)
                or (touches_lds and ops[origin].is_dma and _overlaps(ops[origin].lds, my_lds))]
        for origin in sorted(hits, reverse=True):
            younger = state[origin][0]
            op = ops[origin]
            need = self._needed(op, younger)
            hit = op.dest & uses
            notes = self._notes(pos, op)
            if hit:
                regs = format_keys(hit)
                self._add(pos, x, origin, regs,
                          f"reads {regs} loaded by {self._describe(op)} with no {need} between{notes}")
            hit = op.dest & defs
            if hit and not (is_vmem_load and op.is_vmem_load):
                regs = format_keys(hit)
                self._add(pos, x, origin, regs,
                          f"overwrites {regs} that {self._describe(op)} may still write: "
                          f"needs {need} before it{notes}")
            if op.is_dma and touches_lds and _overlaps(op.lds, my_lds):
                what = f"LDS[{op.lds[0]}:{op.lds[1]}]" if op.lds else "LDS"
                verb = "reads" if "lds_read" in x.desc.flags else "writes"
                self._add(pos, x, origin, what,
                          f"{verb} {what} that the LDS DMA {self._describe(op)} may still be writing: "
                          f"needs {need} before it (and s_barrier if other waves read it){notes}")

    # ------------------------------------------------------------------ the fixpoint
    @staticmethod
    def merge(states: list[dict]) -> dict:
        out: dict = {}
        for st in states:
            for origin, (younger, vm, lg) in st.items():
                if origin in out:
                    y0, vm0, lg0 = out[origin]
                    out[origin] = (min(y0, younger), vm0 or vm, lg0 or lg)
                else:
                    out[origin] = (younger, vm, lg)
        return out

    def run_block(self, bi: int, state: dict, report: bool) -> dict:
        for pos in self.cfg.blocks[bi].instrs:
            state = self.step(pos, self.items[pos], state, report)
        return state

    def run(self) -> list[Violation]:
        blocks = self.cfg.blocks
        order = self.cfg.rpo()
        rank = {b: i for i, b in enumerate(order)}
        in_state: dict[int, dict] = {}
        out_state: dict[int, dict] = {}
        work, pending = list(order), set(order)
        while work:
            bi = work.pop(0)
            pending.discard(bi)
            new_in = self.merge([out_state[p] for p in blocks[bi].preds if p in out_state])
            if bi in out_state and in_state.get(bi) == new_in:
                continue
            in_state[bi] = new_in
            new_out = self.run_block(bi, new_in, report=False)
            if out_state.get(bi) == new_out:
                continue
            out_state[bi] = new_out
            for s in blocks[bi].succs:
                if s not in pending:
                    pending.add(s)
                    work.append(s)
            work.sort(key=lambda block: rank[block])
        for bi in order:
            self.run_block(bi, in_state.get(bi, {}), report=True)
        return sorted(self.found.values(), key=lambda v: (v.pos, v.source or 0))


def check_waits(items: list, target) -> list[Violation]:
    """Every register (or LDS range) an outstanding memory instruction writes that is read or
    overwritten before an ``s_waitcnt`` guarantees that instruction is done, on any CFG path.
    An empty list means every load is waited for."""
    return _Checker(list(items), target).run()
