"""Control-flow graph of a program's item list, and the one-line ``Violation`` the checkers report.

A basic block is a maximal run of items entered only at its top and left only at its bottom.  Blocks
split before a ``Label`` (a join point: any branch may land there) and after every branch and
``s_endpgm``.  Successors come from the branch target (``s_branch``, ``s_cbranch_*``) and from
falling through to the next block (everything but ``s_branch`` and ``s_endpgm``).  ``Comment`` items
belong to whichever block they sit in and never split one.

Positions are indices into ``Program.items`` (``#12`` is ``items[12]``), so a report points at the
exact object a builder emitted.  The hazard pass, the wait checker and the register-liveness report
all work on this graph; loops are ordinary back edges, found with ``CFG.back_edges()``.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, cast

from isagen.errors import CheckError
from isagen.isa.instruction import Instruction
from isagen.isa.operands import Label
from isagen.records import record, value_methods

if TYPE_CHECKING:
    from isagen.isa.table import InstrDef


def is_branch(inst: Instruction) -> bool:
    return "branch" in inst.desc.flags


def is_conditional_branch(inst: Instruction) -> bool:
    return is_branch(inst) and inst.name.startswith("s_cbranch")


def ends_program(inst: Instruction) -> bool:
    return inst.name.startswith("s_endpgm")


# per table entry (by identity, the entry kept beside its answer): does control leave after it
# (a branch or s_endpgm)?  ``CFG`` asks for every instruction; the answer is the entry's alone.
_CONTROL: dict[int, tuple[object, bool]] = {}


def _control(desc: InstrDef) -> tuple[object, bool]:
    got = (desc, "branch" in desc.flags or desc.name.startswith("s_endpgm"))
    _CONTROL[id(desc)] = got
    return got


def branch_target(inst: Instruction) -> str:
    """The label name a branch jumps to."""
    for spec, value in zip(inst.desc.operands, inst.ops):
        if spec.kind == "label":
            return str(value)
    raise CheckError(f"{inst.render(False)}: branch without a label operand")


@value_methods
@record(repr=False, eq=False)
class Block:
    """Items ``start .. end-1`` of the program; ``instrs`` are the positions of its instructions."""

    index: int
    start: int
    end: int
    labels: list[str] = field(default_factory=list)
    instrs: list[int] = field(default_factory=list)
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.labels[0] if self.labels else f"bb{self.index}"

    def __repr__(self) -> str:
        return f"<Block {self.name} items[{self.start}:{self.end}] -> {self.succs}>"


class CFG:
    """Blocks and edges of one item list.  ``blocks[0]`` is the entry."""

    #: whether ``_block_of``/``_slot`` are filled (a subclass that fills them itself leaves this True)
    _indexed = True

    def __init__(self, items: Sequence[object]):
        self.items = items
        self.blocks: list[Block] = []
        self.label_block: dict[str, int] = {}
        self._block_of: dict[int, int] = {}     # instruction position -> block index
        self._slot: dict[int, int] = {}         # instruction position -> its index in block.instrs
        self._indexed = False                   # (filled on the first position query)
        self._split()
        self._link()

    # ------------------------------------------------------------------ construction
    def _split(self) -> None:
        cur = Block(0, 0, 0)
        placed: set[str] = set()
        blocks = self.blocks
        control = _CONTROL
        for pos, item in enumerate(self.items):
            if isinstance(item, Instruction):
                cur.instrs.append(pos)
                desc = item.desc
                known = control.get(id(desc))
                if known is None or known[0] is not desc:
                    known = _control(desc)
                if known[1]:                                # control leaves here: close the block
                    cur.end = pos + 1
                    blocks.append(cur)
                    cur = Block(len(blocks), pos + 1, pos + 1)
            elif isinstance(item, Label):
                if cur.instrs:                              # a label is a join point: start a new block
                    cur.end = pos
                    blocks.append(cur)
                    cur = Block(len(blocks), pos, pos)
                if item.name in placed:
                    raise CheckError(f"#{pos} label {item.name} placed twice")
                placed.add(item.name)
                cur.labels.append(item.name)
            # comments (and anything else) just ride along in the current block
        cur.end = len(self.items)
        if cur.instrs or cur.labels or not blocks:
            blocks.append(cur)
        for b in blocks:
            for name in b.labels:
                self.label_block[name] = b.index

    def with_insertions(self, items: Sequence[object], inserted: Sequence[tuple[int, int]]) -> CFG:
        """The graph of ``items``: this graph's items with ``n`` instructions that neither branch nor
        end the program put directly before item ``pos`` for each ``(pos, n)`` of ``inserted`` (in
        order; ``pos`` an instruction).  They join the block of that item, as ``CFG(items)`` would
        put them; the blocks, labels and edges are the same."""
        new = CFG.__new__(CFG)
        new.items = items
        new.label_block = dict(self.label_block)
        new._block_of, new._slot, new._indexed = {}, {}, False
        at = [pos for pos, _ in inserted]
        upto = list(itertools.accumulate(n for _, n in inserted))     # insertions at or before at[i]

        def before(x: int) -> int:          # insertions before old position x
            i = bisect.bisect_left(at, x)
            return upto[i - 1] if i else 0

        new.blocks = []
        mi, shift = bisect.bisect_left(at, 0), 0
        for b in self.blocks:
            nb = Block(b.index, b.start + before(b.start), b.end + before(b.end), list(b.labels), [],
                       list(b.succs), list(b.preds))
            instrs = nb.instrs
            for q in b.instrs:
                if mi < len(at) and at[mi] == q:
                    first = q + shift
                    shift = upto[mi]
                    instrs.extend(range(first, q + shift))
                    mi += 1
                instrs.append(q + shift)
            new.blocks.append(nb)
        return new

    def _index(self) -> None:
        """Fill the position -> block and position -> slot maps (only the position queries use them)."""
        block_of, slot = self._block_of, self._slot
        for b in self.blocks:
            block_of.update(dict.fromkeys(b.instrs, b.index))
            slot.update(zip(b.instrs, range(len(b.instrs))))
        self._indexed = True

    def _link(self) -> None:
        for b in self.blocks:
            # the positions in Block.instrs hold Instructions (_split puts only those there)
            last = cast(Instruction, self.items[b.instrs[-1]]) if b.instrs else None
            targets: list[int] = []
            falls_through = True
            if last is not None and ends_program(last):
                falls_through = False
            elif last is not None and is_branch(last):
                name = branch_target(last)
                if name not in self.label_block:
                    raise CheckError(f"#{b.instrs[-1]} {last.render(False)}: branch to label {name}, "
                                     "which is never placed")
                targets.append(self.label_block[name])
                falls_through = is_conditional_branch(last)
            if falls_through and b.index + 1 < len(self.blocks):
                targets.append(b.index + 1)
            for t in targets:
                if t not in b.succs:
                    b.succs.append(t)
                    self.blocks[t].preds.append(b.index)

    # ------------------------------------------------------------------ queries
    def block_of(self, pos: int) -> Block:
        """The block holding the instruction at item position ``pos``."""
        if not self._indexed:
            self._index()
        return self.blocks[self._block_of[pos]]

    def edges(self) -> list[tuple[int, int]]:
        return [(b.index, s) for b in self.blocks for s in b.succs]

    def reachable(self) -> set[int]:
        seen, stack = {0}, [0]
        while stack:
            for s in self.blocks[stack.pop()].succs:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return seen

    def rpo(self) -> list[int]:
        """Reachable blocks in reverse postorder (a good order for forward dataflow)."""
        seen: set[int] = set()
        post: list[int] = []
        stack = [(0, iter(self.blocks[0].succs))]
        seen.add(0)
        while stack:
            node, it = stack[-1]
            for s in it:
                if s not in seen:
                    seen.add(s)
                    stack.append((s, iter(self.blocks[s].succs)))
                    break
            else:
                stack.pop()
                post.append(node)
        return post[::-1]

    def back_edges(self) -> list[tuple[int, int]]:
        """Edges ``(u, v)`` whose target ``v`` dominates ``u``: the loops' latches back to their headers."""
        dom = self.dominators()
        return [(u, v) for u, v in self.edges() if u in dom and v in dom[u]]

    def dominators(self) -> dict[int, set[int]]:
        """For each reachable block, the set of blocks that dominate it (itself included)."""
        order = self.rpo()
        everything = set(order)
        dom = {b: set(everything) for b in order}
        dom[0] = {0}
        changed = True
        while changed:
            changed = False
            for b in order[1:]:
                preds = [p for p in self.blocks[b].preds if p in everything]
                new = set.intersection(*(dom[p] for p in preds)) if preds else set()
                new = new | {b}
                if new != dom[b]:
                    dom[b] = new
                    changed = True
        return dom

    def prev_instructions(self, pos: int) -> list[int]:
        """Positions of the instructions that can execute immediately before the one at ``pos``
        (the previous one in its block, or the last instruction of every predecessor path; blocks
        without instructions are looked through)."""
        b = self.block_of(pos)                  # (fills the maps)
        i = self._slot[pos]
        if i > 0:
            return [b.instrs[i - 1]]
        return self.block_exit_instructions(b.preds)

    def block_exit_instructions(self, block_indices: Iterable[int]) -> list[int]:
        """Last instructions reachable backwards from the ends of the given blocks."""
        out: list[int] = []
        seen: set[int] = set()
        stack = list(block_indices)
        while stack:
            bi = stack.pop()
            if bi in seen:
                continue
            seen.add(bi)
            blk = self.blocks[bi]
            if blk.instrs:
                if blk.instrs[-1] not in out:
                    out.append(blk.instrs[-1])
            else:
                stack.extend(blk.preds)
        return out


def build_cfg(items: Sequence[object]) -> CFG:
    return CFG(items)


# --------------------------------------------------------------------------- reporting
@value_methods
@record(frozen=True, repr=False, eq=False)
class Violation:
    """A rule a finished program breaks at one position.

    ``str()`` is one line: the position (index into ``Program.items``), the instruction text, and
    what is wrong: the register, the instruction that makes it a problem and what is missing.
    """

    pos: int
    inst: Instruction
    reg: str
    message: str
    source: int | None = None     # position of the other instruction of the pair, when there is one
    kind: str = ""                # "hazard" | "wait"

    def __str__(self) -> str:
        return f"#{self.pos} {self.inst.render(with_comment=False)}: {self.message}"


def format_keys(keys: Iterable[tuple[str, int]]) -> str:
    """Register keys as compact assembler ranges: ``{('v',2),('v',3),('a',0)}`` -> ``a0, v[2:3]``."""
    by_cls: dict[str, list[int]] = {}
    for cls, idx in keys:
        by_cls.setdefault(cls, []).append(idx)
    parts = []
    for pair in ("vcc", "exec"):
        if f"{pair}_lo" in by_cls and f"{pair}_hi" in by_cls:
            del by_cls[f"{pair}_lo"], by_cls[f"{pair}_hi"]
            parts.append(pair)
    for cls in sorted(by_cls):
        idxs = sorted(set(by_cls[cls]))
        if cls not in ("v", "a", "s"):
            parts.append(cls)
            continue
        start = prev = idxs[0]
        for i in idxs[1:] + [None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            parts.append(f"{cls}{start}" if start == prev else f"{cls}[{start}:{prev}]")
            if i is not None:
                start = prev = i
    return ", ".join(parts)
