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

from isagen.checks.cfg import CFG, Violation, format_keys
from isagen.checks.hazards import _keys as _mask_keys
from isagen.checks.hazards import _regs
from isagen.isa.instruction import Instruction
from isagen.targets import get_target


class _Op:
    """One memory instruction that may still be outstanding.  (A plain class: a dataclass costs
    ~0.7 ms of every process that imports it, issue 17.)"""

    __slots__ = ("pos", "kind", "dest", "lds", "is_dma", "is_vmem_load")

    def __init__(self, pos: int, kind: str, dest: int, lds: tuple | None, is_dma: bool, is_vmem_load: bool):
        self.pos = pos
        self.kind = kind                # vmem | ds | smem | flat
        self.dest = dest                # registers it writes when it finishes (hazards' bit numbering)
        self.lds = lds                  # LDS byte range it writes (LDS DMA); None = unknown
        self.is_dma = is_dma
        self.is_vmem_load = is_vmem_load


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
    return _facts(inst.desc)[0]


# per table entry (by identity; the entry is kept alive beside its facts):
#   (kind, is_dma, is_vmem_load, touches_lds, lds_read, is_waitcnt)
_DESC_FACTS: dict[int, tuple] = {}


def _facts(desc) -> tuple:
    got = _DESC_FACTS.get(id(desc))
    if got is not None and got[0] is desc:
        return got[1]
    kind: str | None = None
    if desc.counter is not None:
        if desc.unit == "flat":
            kind = "flat"
        elif desc.unit == "smem":
            kind = "smem"
        elif desc.unit == "ds":
            kind = "ds"
        elif desc.counter == "vmcnt":
            kind = "vmem"
        elif desc.counter == "lgkmcnt":
            kind = "ds"
    flags = desc.flags
    dma = "lds_dma" in flags
    facts = (kind, dma, kind == "vmem" and "load" in flags and not dma,
             desc.unit == "ds" and bool({"lds_read", "lds_write"} & flags), "lds_read" in flags,
             desc.name == "s_waitcnt")
    _DESC_FACTS[id(desc)] = (desc, facts)
    return facts


def _touch(x: Instruction) -> tuple[int, bool]:
    """The registers ``x`` reads or writes, as one bit mask (the hazard passes' numbering and
    per-instruction register sets, ``hazards._regs``), and whether it accesses LDS; worked out once
    for equal instructions."""
    r = _regs(x)
    got = x.shared.checks["waits.touch"] = (r.uses | r.defs, _facts(x.desc)[3])
    return got


# state: origin position -> (younger, vm_pending, lgkm_pending)
#   younger: fewest instructions of the same in-order stream issued after it (vmem: VMEM; ds: DS)
#   vm_pending / lgkm_pending: only meaningful for FLAT (both counters must reach 0)
#
# Cost, linear in the program: an instruction that neither issues a memory operation nor waits leaves
# the state alone, so the fixpoint's passes (a few over a loop) step only over each block's memory
# instructions and waits, and an issue is O(1) (``walk``: per-block counter shifts instead of
# incrementing every outstanding entry); the reporting pass keeps the union of the registers the
# outstanding operations write (a bit mask, a superset while entries age out) and whether an LDS DMA
# is among them: an instruction whose registers miss it and that does not access LDS past a DMA costs
# one AND; only the others look at the outstanding operations (bounded by the counters' maxima).

class _Checker:
    def __init__(self, items: list, target, cfg: CFG | None = None):
        self.items = items
        self.target = get_target(target)
        self.cap_vm, self.cap_lgkm = self.target.max_vmcnt, self.target.max_lgkmcnt
        self.cfg = CFG(items) if cfg is None else cfg
        self.ops: dict[int, _Op] = {}
        self.kind_of: dict[int, str] = {}          # origin -> kind, for the transfer's inner loop
        # per block: (position, kind or None for s_waitcnt) of the instructions that change the state
        self.actions: list[list[tuple[int, str | None]]] = []
        known = _DESC_FACTS
        for b in self.cfg.blocks:
            acts: list[tuple[int, str | None]] = []
            for pos in b.instrs:
                item = items[pos]
                desc = item.desc
                got = known.get(id(desc))
                kind, dma, vload, _, _, wait = got[1] if got is not None and got[0] is desc else _facts(desc)
                if wait:
                    acts.append((pos, None))
                    continue
                if kind is None:
                    continue
                acts.append((pos, kind))
                self.ops[pos] = _Op(pos, kind, _regs(item).defs, lds_range(item) if dma else None, dma, vload)
                self.kind_of[pos] = kind
            self.actions.append(acts)
        self.dmas = [pos for pos, op in self.ops.items() if op.is_dma]
        self._dma_overlap: dict[tuple[int, int] | None, frozenset[int]] = {}   # LDS range -> DMAs that overlap it
        self.found: dict[tuple, Violation] = {}

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

    def _check(self, pos: int, x: Instruction, live: dict, shift_vm: int, shift_ds: int, touch: int,
               touches_lds: bool, live_regs: int) -> None:
        """Report what ``x`` (registers ``touch``; an LDS access if ``touches_lds``) collides with among
        the outstanding operations ``live`` (whose registers ``live_regs`` covers)."""
        ops = self.ops
        hits = [origin for origin in live if ops[origin].dest & touch] if touch & live_regs else []
        my_lds = None
        if touches_lds:
            my_lds = lds_range(x)
            dmas = self._dma_overlap.get(my_lds)
            if dmas is None:
                dmas = self._dma_overlap[my_lds] = frozenset(
                    origin for origin in self.dmas if _overlaps(ops[origin].lds, my_lds))
            if dmas:
                hits += [origin for origin in live.keys() & dmas if not ops[origin].dest & touch]
        if not hits:
            return
        kind_of = self.kind_of
        younger_of = {}
        for origin in hits:
            kind = kind_of[origin]
            younger = live[origin][0]
            if kind == "vmem":
                younger += shift_vm
                if younger > self.cap_vm:
                    continue                        # done: the counter cannot hold that many
            elif kind == "ds":
                younger += shift_ds
                if younger > self.cap_lgkm:
                    continue
            younger_of[origin] = younger
        r = _regs(x)
        uses, defs = r.uses, r.defs
        lds_read = _facts(x.desc)[4]
        is_vmem_load = pos in ops and ops[pos].is_vmem_load
        for origin in sorted(younger_of, reverse=True):
            younger = younger_of[origin]
            op = ops[origin]
            need = self._needed(op, younger)
            hit = op.dest & uses
            notes = self._notes(pos, op)
            if hit:
                regs = format_keys(_mask_keys(hit))
                self._add(pos, x, origin, regs,
                          f"reads {regs} loaded by {self._describe(op)} with no {need} between{notes}")
            hit = op.dest & defs
            if hit and not (is_vmem_load and op.is_vmem_load):
                regs = format_keys(_mask_keys(hit))
                self._add(pos, x, origin, regs,
                          f"overwrites {regs} that {self._describe(op)} may still write: "
                          f"needs {need} before it{notes}")
            if op.is_dma and touches_lds and _overlaps(op.lds, my_lds):
                what = f"LDS[{op.lds[0]}:{op.lds[1]}]" if op.lds else "LDS"
                verb = "reads" if lds_read else "writes"
                self._add(pos, x, origin, what,
                          f"{verb} {what} that the LDS DMA {self._describe(op)} may still be writing: "
                          f"needs {need} before it (and s_barrier if other waves read it){notes}")

    # ------------------------------------------------------------------ the fixpoint
    @staticmethod
    def merge(states: list[dict]) -> dict:
        if len(states) == 1:
            return states[0]                        # states are never changed in place
        out: dict = {}
        for st in states:
            for origin, (younger, vm, lg) in st.items():
                if origin in out:
                    y0, vm0, lg0 = out[origin]
                    out[origin] = (min(y0, younger), vm0 or vm, lg0 or lg)
                else:
                    out[origin] = (younger, vm, lg)
        return out

    def walk(self, bi: int, state: dict, report: bool = False) -> dict:
        """The state at the end of block ``bi`` entered with ``state``; with ``report``, every
        instruction is checked against the state before it.

        Inside the block an entry holds ``(base, vm, lg)`` with ``younger = base + shift`` of its
        stream (``shift_vm`` VMEM, ``shift_ds`` DS instructions issued so far in the block), so an
        issue costs O(1); an entry past its counter's maximum is done (skipped wherever it is read,
        dropped at the block's end)."""
        items, ops, kind_of = self.items, self.ops, self.kind_of
        cap_vm, cap_lgkm = self.cap_vm, self.cap_lgkm
        live = dict(state)
        shift_vm = shift_ds = 0
        # report: the union of the registers the entries of ``live`` write (a superset while entries
        # age out or are waited for until the next s_waitcnt rebuilds it) and whether one is a DMA
        live_regs, live_dma = 0, False
        if report:
            acts = dict(self.actions[bi])
            steps: list = self.cfg.blocks[bi].instrs
            for origin in live:
                op = ops[origin]
                live_regs |= op.dest
                live_dma = live_dma or op.is_dma
        else:
            steps = self.actions[bi]
        check = self._check
        for step in steps:
            if report:
                pos = step
                if live:
                    x = items[pos]
                    touch, lds = x.shared.checks.get("waits.touch") or _touch(x)
                    if touch & live_regs or (lds and live_dma):
                        check(pos, x, live, shift_vm, shift_ds, touch, lds and live_dma, live_regs)
                if pos not in acts:
                    continue
                kind = acts[pos]
            else:
                pos, kind = step
            if kind is None:                        # s_waitcnt
                mods = items[pos].mods
                vmcnt, lgkmcnt = mods.get("vmcnt"), mods.get("lgkmcnt")
                kept = {}
                for origin, (base, vm, lg) in live.items():
                    k = kind_of[origin]
                    if k == "vmem":
                        younger = base + shift_vm
                        if younger > cap_vm or (vmcnt is not None and younger >= vmcnt):
                            continue
                    elif k == "ds":
                        younger = base + shift_ds
                        if younger > cap_lgkm or (lgkmcnt is not None and younger >= lgkmcnt):
                            continue
                    elif k == "smem":
                        if lgkmcnt == 0:
                            continue
                    else:                           # flat: both counters must reach 0
                        vm = vm and vmcnt != 0
                        lg = lg and lgkmcnt != 0
                        if not vm and not lg:
                            continue
                    kept[origin] = (base, vm, lg)
                live = kept
                if report:
                    live_regs, live_dma = 0, False
                    for origin in live:
                        op = ops[origin]
                        live_regs |= op.dest
                        live_dma = live_dma or op.is_dma
            else:
                op = ops[pos]
                if kind == "vmem":
                    shift_vm += 1
                    if op.dest or op.is_dma:
                        live[pos] = (-shift_vm, True, True)
                elif kind == "ds":
                    shift_ds += 1
                    if op.dest or op.is_dma:
                        live[pos] = (-shift_ds, True, True)
                elif op.dest or op.is_dma:
                    live[pos] = (0, True, True)
                if report:
                    live_regs |= op.dest
                    live_dma = live_dma or op.is_dma
        if not shift_vm and not shift_ds:
            return live
        out = {}
        for origin, (base, vm, lg) in live.items():
            k = kind_of[origin]
            if k == "vmem":
                base += shift_vm
                if base > cap_vm:
                    continue
            elif k == "ds":
                base += shift_ds
                if base > cap_lgkm:
                    continue
            out[origin] = (base, vm, lg)
        return out

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
            new_out = self.walk(bi, new_in)
            if out_state.get(bi) == new_out:
                continue
            out_state[bi] = new_out
            for s in blocks[bi].succs:
                if s not in pending:
                    pending.add(s)
                    work.append(s)
            work.sort(key=lambda block: rank[block])
        for bi in order:
            self.walk(bi, in_state.get(bi, {}), report=True)
        return sorted(self.found.values(), key=lambda v: (v.pos, v.source or 0))


def check_waits(items: list, target, cfg: CFG | None = None) -> list[Violation]:
    """Every register (or LDS range) an outstanding memory instruction writes that is read or
    overwritten before an ``s_waitcnt`` guarantees that instruction is done, on any CFG path.
    An empty list means every load is waited for.  ``cfg``: the graph of ``items``, if the caller
    has built it already."""
    return _Checker(list(items), target, cfg).run()
