"""The neutral program representation the register report works on, and its liveness engine.

Both front ends -- isagen's own ``Program`` (``from_program``) and decoded machine code of any code
object (``from_code_object``) -- reduce a kernel to a :class:`Flow`: one :class:`Step` per
instruction (the registers it defines and uses as bit masks, its successors) plus the block graph
(an :class:`isagen.checks.cfg.CFG`, whose back edges give the loops).  Everything after that -- liveness,
peaks, loops, the instruction mix -- is computed once, here and in ``model``.

Register keys are packed into one Python int per set: VGPR ``v i`` is bit ``i``, AGPR ``a i`` bit
``256 + i``, SGPR ``s i`` bit ``512 + i``.  Only these three files are tracked (VCC, EXEC, M0, SCC and
trap registers do not take from the per-wave allocation the report is about).

Liveness is the classic backward dataflow over the instruction graph::

    live_in(i)  = uses(i) | (live_out(i) & ~defs(i))
    live_out(i) = OR of live_in(s) over the successors s of i

iterated to a fixed point (loops converge in a few passes).  The report's "live at i" is
``live_in(i) | defs(i)``: every register whose value instruction i or a later one still reads, plus
the ones i writes -- the registers that must exist while i executes.  Writes are whole-register
definitions for the wave (a VALU write under a partial EXEC mask still counts as one), except
16-bit partial writes, which the front end also reports as uses.  Unreachable instructions (such as
the padding after a kernarg-preload prologue) are given no live registers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isagen.checks.cfg import CFG, Block

CLASSES = ("v", "a", "s")
CLASS_BASE = {"v": 0, "a": 256, "s": 512}
CLASS_WIDTH = {"v": 256, "a": 256, "s": 128}
CLASS_MASK = {c: ((1 << CLASS_WIDTH[c]) - 1) << CLASS_BASE[c] for c in CLASSES}
CLASS_TITLE = {"v": "VGPR", "a": "AGPR", "s": "SGPR"}


def key_mask(keys) -> int:
    """Bit mask of ``(class, index)`` keys; keys of other register files are ignored."""
    m = 0
    for cls, idx in keys:
        base = CLASS_BASE.get(cls)
        if base is not None and 0 <= idx < CLASS_WIDTH[cls]:
            m |= 1 << (base + idx)
    return m


def range_mask(cls: str, index: int, count: int) -> int:
    if cls not in CLASS_BASE:
        return 0
    return ((1 << count) - 1) << (CLASS_BASE[cls] + index)


def mask_keys(mask: int) -> list[tuple[str, int]]:
    out = []
    for cls in CLASSES:
        bits = (mask & CLASS_MASK[cls]) >> CLASS_BASE[cls]
        i = 0
        while bits:
            if bits & 1:
                out.append((cls, i))
            bits >>= 1
            i += 1
    return out


def count_class(mask: int, cls: str) -> int:
    return (mask & CLASS_MASK[cls]).bit_count()


def high_water(mask: int, cls: str) -> int:
    """One past the highest register of class ``cls`` in ``mask`` (0 if none)."""
    bits = (mask & CLASS_MASK[cls]) >> CLASS_BASE[cls]
    return bits.bit_length()


def format_mask(mask: int) -> str:
    """``v[0:3], v7, s[0:1]``: the registers of a mask as compact assembler ranges."""
    parts = []
    for cls in CLASSES:
        bits = (mask & CLASS_MASK[cls]) >> CLASS_BASE[cls]
        i = 0
        while bits:
            if bits & 1:
                j = i
                while (bits >> (j - i + 1)) & 1:
                    j += 1
                parts.append(f"{cls}{i}" if i == j else f"{cls}[{i}:{j}]")
                bits >>= j - i + 1
                i = j + 1
            else:
                bits >>= 1
                i += 1
    return ", ".join(parts)


@dataclass
class Step:
    """One instruction, as the report sees it."""

    index: int                    # 0.. in program order
    text: str                     # assembler text (isagen's named registers for its own kernels)
    defs: int                     # register bit masks
    uses: int
    category: str                 # instruction-mix class, see ``categories.category``
    offset: int | None = None     # byte offset from the kernel's first instruction
    pos: int | None = None        # index into Program.items (isagen kernels)
    comment: str = ""
    succs: tuple[int, ...] = ()
    reachable: bool = True
    labels: tuple[str, ...] = ()  # branch-target labels placed just before it


@dataclass
class Loop:
    """A natural loop: the blocks of every back edge into one header."""

    header: int                   # instruction index of the header's first instruction
    latches: list[int]            # instruction indices of the branches back to the header
    body: list[int]               # instruction indices, sorted
    depth: int = 1                # 1 = outermost
    parent: int | None = None     # index into Flow.loops of the enclosing loop

    @property
    def runs(self) -> list[tuple[int, int]]:
        """Contiguous runs ``(first, last)`` of body instructions (a loop laid out in pieces has several)."""
        out: list[list[int]] = []
        for i in self.body:
            if out and out[-1][1] == i - 1:
                out[-1][1] = i
            else:
                out.append([i, i])
        return [(first, last) for first, last in out]


@dataclass
class Flow:
    steps: list[Step]
    cfg: CFG                      # blocks whose ``instrs`` are step indices
    loops: list[Loop] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class StepCFG(CFG):
    """A :class:`~isagen.checks.cfg.CFG` over blocks of step indices that a front end has already split
    (decoded machine code: blocks by branch target address).  Inherits the graph queries -- edges,
    reverse postorder, dominators, back edges -- so loops are found the same way for every input."""

    def __init__(self, blocks: list[list[int]], succs: list[list[int]]):
        self.items = []
        self.label_block = {}
        self.blocks = []
        self._block_of = {}
        self._slot = {}
        for bi, instrs in enumerate(blocks):
            b = Block(bi, instrs[0] if instrs else 0, (instrs[-1] + 1) if instrs else 0, instrs=list(instrs))
            self.blocks.append(b)
            for slot, i in enumerate(instrs):
                self._block_of[i] = bi
                self._slot[i] = slot
        for bi, ss in enumerate(succs):
            for s in ss:
                if s not in self.blocks[bi].succs:
                    self.blocks[bi].succs.append(s)
                    self.blocks[s].preds.append(bi)


def finish_flow(steps: list[Step], cfg: CFG, block_instrs: list[list[int]], notes=()) -> Flow:
    """Attach successors, reachability and loops to ``steps`` from a block graph whose block ``b`` holds
    the steps ``block_instrs[b]`` (blocks without instructions are looked through)."""
    firsts: dict[int, list[int]] = {}

    def entry_steps(bi: int) -> list[int]:
        if bi in firsts:
            return firsts[bi]
        out, seen, stack = [], set(), [bi]
        while stack:
            b = stack.pop()
            if b in seen:
                continue
            seen.add(b)
            if block_instrs[b]:
                out.append(block_instrs[b][0])
            else:
                stack.extend(cfg.blocks[b].succs)
        firsts[bi] = sorted(set(out))
        return firsts[bi]

    for bi, instrs in enumerate(block_instrs):
        for a, b in zip(instrs, instrs[1:]):
            steps[a].succs = (b,)
        if instrs:
            succ: list[int] = []
            for s in cfg.blocks[bi].succs:
                succ += entry_steps(s)
            steps[instrs[-1]].succs = tuple(dict.fromkeys(succ))
    reach = cfg.reachable() if cfg.blocks else set()
    for bi, instrs in enumerate(block_instrs):
        for i in instrs:
            steps[i].reachable = bi in reach
    flow = Flow(steps, cfg, [], list(notes))
    flow.loops = _natural_loops(cfg, block_instrs)
    return flow


def _natural_loops(cfg: CFG, block_instrs: list[list[int]]) -> list[Loop]:
    by_header: dict[int, set[int]] = {}
    latches: dict[int, list[int]] = {}
    for u, v in cfg.back_edges():
        body = by_header.setdefault(v, {v})
        latches.setdefault(v, []).append(u)
        stack = [u]
        while stack:
            b = stack.pop()
            if b in body:
                continue
            body.add(b)
            stack.extend(cfg.blocks[b].preds)
    loops = []
    for header, blocks in by_header.items():
        instrs = sorted(i for b in blocks for i in block_instrs[b])
        if not instrs:
            continue
        first = block_instrs[header][0] if block_instrs[header] else instrs[0]
        lat = [block_instrs[b][-1] for b in latches[header] if block_instrs[b]]
        loops.append((blocks, Loop(first, sorted(lat), instrs)))
    loops.sort(key=lambda x: (x[1].body[0], -len(x[1].body)))
    out = [lp for _, lp in loops]
    sets = [bs for bs, _ in loops]
    for i, lp in enumerate(out):
        enclosing = [j for j in range(len(out)) if j != i and sets[i] < sets[j]]
        lp.depth = 1 + len(enclosing)
        if enclosing:
            lp.parent = min(enclosing, key=lambda j: len(sets[j]))
    return out


@dataclass
class Liveness:
    live_in: list[int]
    live: list[int]               # live_in | defs: what instruction i needs to exist (0 if unreachable)
    counts: dict[str, list[int]]  # class -> live count per instruction

    def peak(self, cls: str) -> tuple[int, int | None]:
        """(highest live count of ``cls``, the first instruction index with it)."""
        counts = self.counts[cls]
        if not counts:
            return 0, None
        best = max(counts)
        return best, counts.index(best)


def liveness(flow: Flow) -> Liveness:
    steps = flow.steps
    n = len(steps)
    live_in = [0] * n
    uses = [s.uses for s in steps]
    keep = [~s.defs for s in steps]
    succs = [s.succs for s in steps]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out = 0
            for s in succs[i]:
                out |= live_in[s]
            new = uses[i] | (out & keep[i])
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    live = [(live_in[i] | steps[i].defs) if steps[i].reachable else 0 for i in range(n)]
    counts = {c: [count_class(m, c) for m in live] for c in CLASSES}
    return Liveness(live_in, live, counts)
