"""Front ends of the register report: an isagen ``Program`` or a kernel of any code object, reduced to
a :class:`KernelInput` (the neutral :class:`~isagen.report.flow.Flow` plus what the descriptor declares,
the registers the hardware initialises, LDS, the workgroup size and the allocations to name).

* isagen kernels: the block graph is ``isagen.checks.cfg.CFG`` over ``Program.items``; defs/uses are the
  instructions' ``defs()``/``uses()``; allocations are the builder's named ``regs.Allocation``s with
  their lifetimes; the declared counts are what ``isagen.objects.emit`` writes into the descriptor.
* code objects: the kernel's machine code is decoded (``isagen.isa.decoder``); blocks are split at
  branch targets (by address) and after branches; defs/uses are the operands' write/read flags; the
  declared counts come from the metadata (exact) and the descriptor (granule-rounded).  Foreign code
  has no names: an "allocation" is a register range, the union of the operand ranges that overlap.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from isagen.checks import occupancy as occ
from isagen.checks.cfg import CFG
from isagen.isa.instruction import Instruction
from isagen.isa.operands import Label
from isagen.isa.table import isa_table
from isagen.report.categories import category, decoded_unit
from isagen.report.flow import Flow, Step, StepCFG, finish_flow, key_mask, range_mask
from isagen.targets import get_target


@dataclass
class Alloc:
    """A register range the report names: an isagen allocation, or a foreign code's operand range."""

    name: str
    cls: str
    index: int
    count: int
    first: int = 0                # lifetime in step indices: first .. end-1
    end: int | None = None        # None: to the end of the kernel
    initialized: bool = False     # set by the hardware at launch

    @property
    def range(self) -> str:
        return (f"{self.cls}{self.index}" if self.count == 1
                else f"{self.cls}[{self.index}:{self.index + self.count - 1}]")

    @property
    def mask(self) -> int:
        return range_mask(self.cls, self.index, self.count)


@dataclass
class KernelInput:
    name: str
    target: object                # isagen.targets.Target
    source: dict                  # kind, path, target_id
    flow: Flow
    declared: dict                # vgpr agpr sgpr unified_vgprs accum_offset sgpr_count
    allocated: dict               # vgprs sgprs as the descriptor's granules give them
    initial: int                  # mask of the registers the hardware sets at launch
    workgroup_size: int
    lds_static: int
    lds_dynamic: int = 0
    lds_regions: list = field(default_factory=list)
    allocations: list = field(default_factory=list)
    named: bool = False           # allocations carry isagen's names
    spills: dict = field(default_factory=dict)
    code_bytes: int = 0


# --------------------------------------------------------------------------- isagen programs
def from_program(program, source: dict | None = None) -> KernelInput:
    items = program.items
    steps: list[Step] = []
    pos_step: dict[int, int] = {}
    labels: list[str] = []
    offset = 0
    for pos, item in enumerate(items):
        if isinstance(item, Label):
            labels.append(str(item))
            continue
        if not isinstance(item, Instruction):
            continue
        i = len(steps)
        pos_step[pos] = i
        steps.append(Step(i, item.render(with_comment=False), key_mask(item.defs()), key_mask(item.uses()),
                          category(item.name, item.unit), offset=offset, pos=pos, comment=item.comment or "",
                          labels=tuple(labels)))
        labels = []
        offset += item.size
    cfg = CFG(items)
    blocks = [[pos_step[p] for p in b.instrs] for b in cfg.blocks]
    flow = finish_flow(steps, cfg, blocks)

    t = program.target
    positions = list(pos_step)     # the steps' item positions, ascending (Step.pos, known to be set here)

    def step_at(position: int | None) -> int | None:
        """First step at or after item position ``position``."""
        return None if position is None else bisect.bisect_left(positions, position)

    allocs = []
    n_init_s = program.user_sgprs + len(program.workgroup_ids)
    for a in program.allocations:
        init = (a.reg.cls == "s" and a.reg.index < n_init_s and a.kernel) or (a.reg.cls == "v" and a.name == "tid"
                                                                          and a.reg.index == 0)
        allocs.append(Alloc(a.name, a.reg.cls, a.reg.index, a.reg.count, step_at(a.allocated_at) or 0,
                            step_at(a.freed_at), init))
    initial = range_mask("s", 0, n_init_s) | range_mask("v", 0, 1)
    sgpr_count = program.sgpr_count
    return KernelInput(
        name=program.name, target=t,
        source=source or {"kind": "program", "path": None, "target_id": t.target_id},
        flow=flow,
        declared={"vgpr": program.vgprs, "agpr": program.agprs, "sgpr": max(program.sgprs, 1),
                  "unified_vgprs": program.next_free_vgpr, "accum_offset": program.accum_offset,
                  "sgpr_count": sgpr_count},
        allocated={"vgprs": program.total_vgprs_allocated, "sgprs": occ.allocated_sgprs(t, sgpr_count)},
        initial=initial, workgroup_size=program.flat_workgroup_size, lds_static=program.lds_bytes,
        lds_regions=[{"name": r.name, "offset": r.offset, "size": r.size} for r in program.lds_regions],
        allocations=allocs, named=True, code_bytes=offset,
    )


# --------------------------------------------------------------------------- code objects
_END = ("s_endpgm", "s_endpgm_saved", "s_endpgm_ordered_ps_done")
_INDIRECT = ("s_setpc_b64", "s_swappc_b64", "s_rfe_b64")


def _partial_write(ins) -> bool:
    """Writes that keep part of the old value: 16-bit halves (d16 loads, op_sel/SDWA-preserve),
    DPP moves (lanes or rows the control disables keep theirs)."""
    if "_d16" in ins.name or ins.variant == "dpp":
        return True
    if ins.variant == "sdwa" and ins.mods.get("dst_unused") == 2:
        return True
    return ins.family == "VOP3" and bool(ins.mods.get("op_sel", 0) & 8)


def _masks(regs) -> int:
    m = 0
    for r in regs:
        m |= range_mask(r.file, r.index, r.count)
    return m


def from_kernel(co, kernel, dynamic_lds: int = 0) -> KernelInput:
    """``kernel``: an ``isagen.objects.codeobject.CodeObjectKernel`` of the code object ``co``."""
    # decode first: a processor without a decoder is then a CodeObjectError naming the file and its
    # e_flags, and every processor the decoder knows is a target get_target knows
    insts = kernel.decode()
    t = get_target(kernel.target)
    try:
        table = isa_table(t)
    except Exception:            # the table is a refinement of the mix only
        table = None
    base = kernel.code_address
    by_pc = {ins.pc: i for i, ins in enumerate(insts)}
    notes: list[str] = []
    steps: list[Step] = []
    targets: dict[int, int | None] = {}
    for i, ins in enumerate(insts):
        defs = _masks(ins.writes)
        uses = _masks(ins.reads) | (defs if _partial_write(ins) else 0)
        steps.append(Step(i, ins.text, defs, uses, category(ins.name, decoded_unit(ins, table)),
                          offset=ins.pc - base))
        tgt = ins.branch_target
        if tgt is not None:
            targets[i] = by_pc.get(tgt)
            if targets[i] is None:
                notes.append(f"#{i} {ins.text}: branch target 0x{tgt - base:x} is not an instruction of "
                             f"{kernel.name}; the path is not followed")
        elif ins.name in _INDIRECT:
            notes.append(f"#{i} {ins.text}: indirect jump; liveness does not follow it")
    labels: dict[int, list[str]] = {}
    for j in targets.values():
        if j is not None:
            labels.setdefault(j, []).append(f"+0x{steps[j].offset:x}")
    for j, names in labels.items():
        steps[j].labels = tuple(dict.fromkeys(names))

    # blocks: leaders at the entry, every branch target, and after every control transfer
    n = len(insts)
    leaders = {0} | {j for j in targets.values() if j is not None}
    for i, ins in enumerate(insts):
        if (i in targets or ins.name in _END or ins.name in _INDIRECT) and i + 1 < n:
            leaders.add(i + 1)
    starts = sorted(x for x in leaders if x < n)
    blocks = [list(range(s, e)) for s, e in zip(starts, starts[1:] + [n])]
    block_of = {s: b for b, s in enumerate(starts)}
    succs = []
    for b, instrs in enumerate(blocks):
        last = insts[instrs[-1]]
        out = []
        if last.name in _END or last.name in _INDIRECT:
            pass
        elif instrs[-1] in targets:
            j = targets[instrs[-1]]
            if j is not None:
                out.append(block_of[j])
            if last.name != "s_branch" and b + 1 < len(blocks):
                out.append(b + 1)
        elif b + 1 < len(blocks):
            out.append(b + 1)
        succs.append(out)
    cfg = StepCFG(blocks, succs)
    flow = finish_flow(steps, cfg, blocks, notes)

    kd = kernel.descriptor
    md = kernel.metadata or {}
    n_init_s = (kd.user_sgpr_count + sum(kd.workgroup_id_enabled) + int(kd.workgroup_info_enabled)
                + int(kd.private_segment_enabled))
    initial = range_mask("s", 0, n_init_s) | range_mask("v", 0, 1)
    agpr = md.get(".agpr_count")
    unified = md.get(".vgpr_count")
    if unified is None:                      # no metadata: the descriptor's granule-rounded figures
        unified = kd.vgpr_count
    if agpr is None:
        agpr = max(0, unified - kd.accum_offset)
    arch = (unified - agpr) if agpr else unified
    sgpr_count = md.get(".sgpr_count", kd.sgpr_count)
    wg = md.get(".reqd_workgroup_size")
    flat = (wg[0] * wg[1] * wg[2]) if wg else md.get(".max_flat_workgroup_size", 1024)
    return KernelInput(
        name=kernel.name, target=t,
        source={"kind": "code_object", "path": co.source, "target_id": co.target_id},
        flow=flow,
        declared={"vgpr": arch, "agpr": agpr, "sgpr": max(sgpr_count - occ.EXTRA_SGPRS, 0),
                  "unified_vgprs": unified, "accum_offset": kd.accum_offset, "sgpr_count": sgpr_count},
        allocated={"vgprs": kd.vgpr_count, "sgprs": kd.sgpr_count},
        initial=initial, workgroup_size=flat,
        lds_static=md.get(".group_segment_fixed_size", kd.group_segment_fixed_size), lds_dynamic=dynamic_lds,
        allocations=_operand_ranges(insts, initial), named=False,
        spills={k: md.get(f".{k}", 0) for k in ("vgpr_spill_count", "sgpr_spill_count")}
        | {"private_segment_bytes": md.get(".private_segment_fixed_size", kd.private_segment_fixed_size)},
        code_bytes=len(kernel.code),
    )


def _operand_ranges(insts, initial: int) -> list[Alloc]:
    """Register ranges of foreign code: operand ranges of each file merged where they overlap
    (``v[4:7]`` loaded as one and read as ``v4``...``v7`` stays one range)."""
    spans: dict[str, list[list[int]]] = {"v": [], "a": [], "s": []}
    for ins in insts:
        for r in ins.reads + ins.writes:
            if r.file in spans:
                spans[r.file].append([r.index, r.index + r.count])
    out = []
    for cls, lst in spans.items():
        lst.sort()
        merged: list[list[int]] = []
        for lo, hi in lst:
            if merged and lo < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        for lo, hi in merged:
            a = Alloc("", cls, lo, hi - lo)
            a.name = a.range
            a.initialized = bool(a.mask & initial)
            out.append(a)
    return out
