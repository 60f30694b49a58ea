"""Software wait states: the ``s_nop`` pass and its independent verifier.

CDNA has no interlock for some register dependencies (MFMA results, VALU-written SGPRs and EXEC,
M0 before LDS DMA, wide-store data, ...): the program must put enough *wait states* (issue slots of
this wave) between the two instructions.  Every instruction gives one wait state, ``s_nop N`` gives
N+1; labels and comments give none.

* ``WAIT_STATES`` is the table, one dict per target, with the LLVM source of every entry
  (in the comments above and beside it).  It is the only thing the two implementations below share.
* ``insert_nops(items, target)`` runs a forward dataflow of *pending hazard events* over the CFG
  (merging at labels, iterating loop back edges to a fixpoint) and puts the minimum ``s_nop`` before
  each instruction that needs it, with a comment that names the pair and the count.
* ``check_hazards(items, target)`` verifies a finished program the other way round: for each
  instruction it searches *backwards* over every CFG path (loop back edges included) for the
  instructions within the longest hazard window and classifies each pair on its own.

Both treat a register written again in between *by the same kind of instruction* (MFMA after MFMA,
VALU after VALU) as ending the older instruction's hazard on it, as LLVM's nearest-definition search
does; a read (SrcC, store data) stays a hazard whatever was written since.  Rules not modelled
(isagen emits none of these instructions): DGEMM (f64 MFMA) specials, s_setreg/s_getreg, s_movrel,
GDS, exports, SMEM soft clauses (xnack is off on the targets isagen builds for).  See docs/checks.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from isagen.checks.cfg import CFG, Block, Violation, format_keys
from isagen.isa.instruction import Instruction
from isagen.isa.table import isa_table
from isagen.targets import GFX942, GFX950, MfmaInfo, Target, get_target

#: a register dword as the dataflow passes name it: ("v", 3), ("vcc_lo", 0), ("m0", 0)
Key = tuple[str, int]
#: a rule's wait states: fixed, or per pass count of the producing MFMA
WaitRule = int | dict[int, int]

# --------------------------------------------------------------------------- the table
# Values are wait states; a dict maps the producing MFMA's passes (LLVM's unit: 4 cycles) to wait states.
# Names read "<first instruction> -> <second instruction>".

_GFX942: dict[str, WaitRule] = {
    # checkMAIHazards90A: LegacyVALUNotDotWritesVGPRWaitStates (VALU incl. v_accvgpr_write/mov, not DOT)
    "valu_write_vgpr->mfma_read": 2,
    # checkMAIHazards90A: VALUWritesExecWaitStates
    "valu_write_exec->mfma": 4,
    # checkMAIHazards90A FullReg: GFX940_SMFMA4x4WritesVGPRFullSrcCWaitStates (any 2-pass producer);
    # longer producers chaining into the same accumulator need 0
    "mfma_write->mfma_srcc_exact": {2: 2, 4: 0, 8: 0, 16: 0},
    # GFX940_XDL_N_PassWritesVGPROverlappedXDLOrSMFMASrcCWaitStates = P + 1 (+1 gfx950)
    "xdl_write->xdl_srcc_overlap": {2: 3, 4: 5, 8: 9, 16: 17},
    # GFX940_XDL_N_PassWritesVGPROverlappedSGEMMDGEMMSrcCWaitStates = P + 1 (+ (P != 2) gfx950)
    "xdl_write->smfma_srcc_overlap": {2: 3, 4: 5, 8: 9, 16: 17},
    # GFX940_SMFMA_N_PassWritesVGPROverlappedSMFMASrcCWaitStates = P
    "smfma_write->smfma_srcc_overlap": {2: 2, 4: 4, 8: 8, 16: 16},
    # (an SMFMA result read as SrcC by an XDL MFMA needs none: checkMAIHazards90A breaks out)
    # GFX940_XDL_N_PassWritesVGPROverlappedSrcABWaitStates = P + 3 (+ (P != 2) gfx950)
    "xdl_write->mfma_srcab": {2: 5, 4: 7, 8: 11, 16: 19},
    # GFX940_SMFMA_N_PassWritesVGPROverlappedSrcABWaitStates = P + 2
    "smfma_write->mfma_srcab": {2: 4, 4: 6, 8: 10, 16: 18},
    # checkMAIVALUHazards: GFX940_XDL_N_PassWriteVgprVALUMemExpReadWaitStates = P + 3 (+ (P != 2) gfx950);
    # readers: VALU (incl. v_accvgpr_read), VMEM, FLAT, DS
    "xdl_write->valu_mem_read": {2: 5, 4: 7, 8: 11, 16: 19},
    "smfma_write->valu_mem_read": {2: 4, 4: 6, 8: 10, 16: 18},
    # checkMAIVALUHazards: GFX940_XDL_N_PassWriteVgprVALUWawWaitStates (VALU or memory writes the register)
    "xdl_write->valu_mem_write": {2: 5, 4: 7, 8: 11, 16: 19},
    "smfma_write->valu_mem_write": {2: 4, 4: 6, 8: 10, 16: 18},
    # checkMAIVALUHazards WAR: SMFMA4x4ReadVgprVALUWarWaitStates=1, GFX940_XDL4PassReadVgprVALUWarWaitStates=3,
    # SMFMA16x16ReadVgprVALUWarWaitStates=7, SMFMA32x32ReadVgprVALUWarWaitStates=15 (XDL readers only on gfx940+)
    "xdl_srcc_read->valu_mem_write": {2: 1, 4: 3, 8: 7, 16: 15},
    # checkReadM0Hazards (hasReadM0LdsDmaHazard, GFX9): SALU writes M0, LDS DMA reads it
    "salu_write_m0->lds_dma": 1,
    # checkVMEMHazards (hasVMEMReadSGPRVALUDefHazard, VI+): VmemSgprWaitStates; any non-vector operand
    "valu_write_sgpr->vmem_read": 5,
    # checkVALUHazards, hasVDecCoExecHazard (gfx940+): VALUWriteSGPRVALUReadWaitstates (SGPR operands and VCC)
    "valu_write_sgpr->valu_read": 2,
    # checkRWLaneHazards: RWLaneWaitStates (lane-select SGPR of v_readlane/v_writelane)
    "valu_write_sgpr->lane_select": 4,
    # checkVALUHazards, hasVDecCoExecHazard: VALUWriteEXECRWLane (v_readlane, v_readfirstlane, v_writelane)
    "valu_write_exec->rwlane": 4,
    # checkVALUHazards, hasVDecCoExecHazard: VALUWriteVGPRReadlaneRead (src0 of v_readlane/v_readfirstlane)
    "valu_write_vgpr->readlane_src": 1,
    # checkVALUHazards, hasTransForwardingHazard (gfx940+): TransDefWaitstates
    "trans_write->valu_read": 1,
    # checkVALUHazards, hasDstSelForwardingHazard (gfx940+): Shift16DefWaitstates (op_sel writes the high half)
    "dst_sel_write->valu_access": 1,
    # checkDPPHazards: DppVgprWaitStates (any writer), DppExecWaitStates (VALU writes EXEC)
    "write_vgpr->dpp_read": 2,
    "valu_write_exec->dpp": 5,
    # checkDivFMasHazards: DivFMasWaitStates
    "valu_write_vcc->div_fmas": 4,
    # checkMAIVALUHazards: DotWriteSameDotReadSrcAB / DotWriteDifferentVALURead / DotWriteDifferentVALUWrite
    "dot_write->valu_access": 3,
    # checkVALUHazardsHelper / createsVALUHazard, gfx940 family after llvm #197267: a MUBUF store of more
    # than 64 bits of data, then a VALU overwriting that data: 1 with an SGPR soffset, 2 with a
    # constant soffset; FLAT/GLOBAL stores of more than 64 bits: 2
    "wide_store_sgpr_soffset->valu_write_data": 1,
    "wide_store_const_soffset->valu_write_data": 2,
    "wide_global_store->valu_write_data": 2,
}

_GFX950_DELTAS: dict[str, WaitRule] = {
    # llvm #117263: "an additional wait state compared to gfx940"
    "xdl_write->xdl_srcc_overlap": {2: 4, 4: 6, 8: 10, 16: 18},
    # llvm #117285: 2-pass XDL read by a non-XDL consumer keeps 3
    "xdl_write->smfma_srcc_overlap": {2: 3, 4: 6, 8: 10, 16: 18},
    # llvm #126732
    "xdl_write->mfma_srcab": {2: 5, 4: 8, 8: 12, 16: 20},
    # llvm #126727 (confirmed by llvm.amdgcn.mfma.gfx950.bf16.ll: 8-pass 32x32x16 -> v_accvgpr_read: s_nop 11)
    "xdl_write->valu_mem_read": {2: 5, 4: 8, 8: 12, 16: 20},
    # llvm #126132
    "xdl_write->valu_mem_write": {2: 5, 4: 8, 8: 12, 16: 20},
    # llvm #117287 / checkPermlaneHazards: VALUWritesVDstWaitStates (v_permlane16_swap, v_permlane32_swap)
    "valu_write_vgpr->permlane_read": 2,
}

# Sources: LLVM llvm/lib/Target/AMDGPU/GCNHazardRecognizer.cpp (checkMAIHazards90A, checkMAIVALUHazards,
# checkVALUHazards, checkVMEMHazards, checkRWLaneHazards, checkReadM0Hazards, checkDPPHazards,
# checkPermlaneHazards and the GFX940_*_N_Pass* helpers) as of 2026, and GCNSubtarget.h for which
# hazards gfx940-family targets have; test vectors: llvm/test/CodeGen/AMDGPU/mai-hazards-gfx940.mir
# and llvm.amdgcn.mfma.gfx950.bf16.ll.
WAIT_STATES: dict[str, dict[str, WaitRule]] = {
    GFX942.name: dict(_GFX942),
    GFX950.name: {**_GFX942, **_GFX950_DELTAS},
}


def wait_states(target: Target | str, rule: str, passes: int | None = None) -> int:
    """The table entry ``rule`` for ``target`` (for the producing MFMA's ``passes`` when it depends on them)."""
    value = WAIT_STATES[get_target(target).name][rule]
    if not isinstance(value, dict):
        return value
    if passes in value:
        return value[passes]
    # a pass count outside LLVM's table: the next larger entry (the counts grow with passes), or the
    # largest one extended by the extra passes
    larger = [p for p in sorted(value) if p >= (passes or 0)]
    if larger:
        return value[larger[0]]
    top = max(value)
    return value[top] + ((passes or 0) - top)


def _fixed_rules(target: Target) -> dict[str, int]:
    """The target's rules that do not depend on pass counts (the ones the passes look up directly)."""
    return {rule: value for rule, value in WAIT_STATES[target.name].items() if isinstance(value, int)}


def max_window(target: Target | str) -> int:
    """The longest hazard any rule of the target has (no hazard reaches further back)."""
    longest = 0
    for value in WAIT_STATES[get_target(target).name].values():
        longest = max(longest, max(value.values()) if isinstance(value, dict) else value)
    return longest


def nop_wait_states(inst: Instruction) -> int:
    """Wait states one item gives: ``s_nop N`` gives N+1, any other instruction 1."""
    if inst.name == "s_nop":
        return int(inst.ops[0]) + 1
    return 1


# s_nop's count field: 4 bits on gfx8 and later (GCNSubtarget::getSNopBits), so one s_nop gives at
# most 16 wait states; LLVM's insertNoops splits at 1 << getSNopBits() (older LLVMs split at 8).
MAX_NOP = 15


# =========================================================================== the pass
# Implementation A: a forward dataflow of pending hazard events.  An event is what an instruction
# leaves behind for later ones ("these registers were written by a 4-pass XDL MFMA"); each carries
# its age in wait states.  The consumer asks each event how many wait states it needs.

class _Event:
    __slots__ = ("kind", "origin", "keys", "age", "passes", "xdl", "name", "dst", "need", "trans",
                 "dst_sel", "dot")

    def __init__(self, kind: str, origin: int, keys: Iterable[Key], *, passes: int | None = None,
                 xdl: bool = False, name: str = "", dst: tuple[Key, ...] = (), need: int = 0, trans: bool = False,
                 dst_sel: bool = False, dot: bool = False):
        self.kind = kind
        self.origin = origin
        self.keys = frozenset(keys)
        self.age = 0
        self.passes = passes
        self.xdl = xdl
        self.name = name
        self.dst = dst
        self.need = need
        self.trans = trans
        self.dst_sel = dst_sel
        self.dot = dot

    def copy(self) -> _Event:
        e = _Event.__new__(_Event)
        e.kind, e.origin, e.keys, e.age = self.kind, self.origin, self.keys, self.age
        e.passes, e.xdl, e.name, e.dst = self.passes, self.xdl, self.name, self.dst
        e.need, e.trans, e.dst_sel, e.dot = self.need, self.trans, self.dst_sel, self.dot
        return e


def _keys_of(value: object) -> list[Key]:
    if isinstance(value, (int, float)):
        return []
    keys = getattr(value, "keys", None)
    return list(keys()) if keys else []


def _operand_keys(inst: Instruction, name: str) -> tuple[Key, ...]:
    for spec, value in zip(inst.desc.operands, inst.ops):
        if spec.name == name:
            return tuple(_keys_of(value))
    return ()


def _vector(keys: Iterable[Key]) -> set[Key]:
    return {k for k in keys if k[0] in ("v", "a")}


def _scalar_like(keys: Iterable[Key]) -> set[Key]:
    """Non-vector register keys an instruction can name: SGPRs, VCC, EXEC, M0."""
    return {k for k in keys if k[0] not in ("v", "a", "scc")}


def _sgpr_or_vcc(keys: Iterable[Key]) -> set[Key]:
    return {k for k in keys if k[0] == "s" or k[0].startswith("vcc")}


_EXEC = frozenset({("exec_lo", 0), ("exec_hi", 0)})
_VCC = frozenset({("vcc_lo", 0), ("vcc_hi", 0)})


def _writes_dst_high_half(inst: Instruction) -> bool:
    """VOP3 op_sel with a destination bit set (the bits after the sources'): the result is shifted
    into a higher half or byte of the register (v_pack_b32_f16, v_cvt_pk_fp8_f32 op_sel[2],
    v_cvt_sr_fp8_f32 op_sel[3:2])."""
    if inst.desc.fmt != "VOP3":
        return False
    op_sel = inst.mods.get("op_sel")
    if not op_sel:
        return False
    n_src = sum(1 for spec in inst.desc.operands if spec.name.startswith("src"))
    return any(op_sel[n_src:])


def _wide_store_need(inst: Instruction, table: dict[str, int]) -> tuple[tuple[Key, ...], int] | None:
    """(data keys, wait states) when ``inst`` stores more than 64 bits of VGPR data."""
    if "store" not in inst.desc.flags or inst.unit not in ("vmem", "flat"):
        return None
    data = next((value for spec, value in zip(inst.desc.operands, inst.ops)
                 if not spec.is_def and spec.name in ("vdata", "data")), None)
    keys = tuple(_keys_of(data))
    if len(keys) <= 2:
        return None
    if inst.desc.fmt == "MUBUF":
        soffset = _operand_keys(inst, "soffset")
        rule = "wide_store_sgpr_soffset->valu_write_data" if soffset else "wide_store_const_soffset->valu_write_data"
    else:
        rule = "wide_global_store->valu_write_data"
    return keys, table[rule]


# Which newer write ends an event's hazard on a register (LLVM's getWaitStatesSinceDef looks for the
# nearest write *of the producing kind*: an MFMA result stays a hazard across a VALU write of the
# register and the other way round).  Reads (SrcC, store data) are never ended by a write.
_SUPERSEDED_BY = {"mfma_write": "mfma", "valu_write": "valu", "salu_write_m0": "salu", "vgpr_write": "any"}


class _Facts:
    """What the pass needs to know of one instruction, computed once for all equal instructions
    (``Instruction.shared``): ``inst`` is the first of them (only its definition, operands and
    modifiers are read)."""

    __slots__ = ("inst", "name", "unit", "mfma", "uses", "defs", "touch", "_ops", "dpp", "flags", "mods", "ws",
                 "xclass")

    @staticmethod
    def of(inst: Instruction) -> _Facts:
        f = inst.shared.checks.get("hazards.facts")
        if f is None:
            f = inst.shared.checks["hazards.facts"] = _Facts(inst)
        return f

    def __init__(self, inst: Instruction):
        self.inst = inst
        self.name: str = inst.name
        self.unit: str = inst.unit
        self.mfma: MfmaInfo | None = inst.desc.mfma
        self.uses = frozenset(inst.use_keys())
        self.defs = frozenset(inst.def_keys())
        self.touch = self.uses | self.defs        # every rule needs a register the event shares with these
        self._ops: dict[str, tuple[Key, ...]] | None = None
        self.dpp: bool = bool(inst.mods) and inst.desc.is_dpp(inst.mods)
        self.flags: frozenset[str] = inst.desc.flags
        self.mods: dict[str, Any] = inst.mods
        self.ws = nop_wait_states(inst)
        # the kind of writer this is, for ending older hazards of the same kind (_SUPERSEDED_BY)
        self.xclass = "mfma" if self.mfma is not None else ("valu" if self.unit in ("valu", "trans") else self.unit)

    def op(self, name: str) -> tuple[Key, ...]:
        if self._ops is None:
            self._ops = {spec.name: tuple(_keys_of(value)) for spec, value in zip(self.inst.desc.operands,
                                                                                   self.inst.ops)}
        return self._ops.get(name, ())


#: pending events at a point of the program, by (origin position, kind)
_State = dict[tuple[int, str], _Event]


class _Pass:
    """insert_nops' machinery: events, the transfer of one block, the fixpoint."""

    def __init__(self, items: list[object], target: Target | str):
        self.items = items
        self.target = get_target(target)
        self.table = _fixed_rules(self.target)
        self.window = max_window(self.target)
        self.facts = {pos: _Facts.of(i) for pos, i in enumerate(items) if isinstance(i, Instruction)}
        self.events: dict[int, list[_Event]] = {}   # what each instruction leaves behind (worked out once)
        self.has_dpp = any(f.dpp for f in self.facts.values())
        self.cfg = CFG(items)
        self.nops: dict[int, int] = {}             # instruction position -> wait states inserted before it
        self.why: dict[int, str] = {}

    # ------------------------------------------------------------------ rules, consumer side
    def _need(self, ev: _Event, c: _Facts) -> tuple[int, str, set[Key]]:
        """Wait states ``c`` needs after event ``ev`` (0 if none), the rule and the registers."""
        t, unit = self.table, c.unit
        is_mfma = c.mfma is not None
        uses, defs = c.uses, c.defs
        best: tuple[int, str, set[Key]] = (0, "", set())

        def consider(need: int, rule: str, regs: set[Key] | frozenset[Key]) -> None:
            nonlocal best
            if regs and need > best[0]:
                best = (need, rule, set(regs))

        if ev.kind == "mfma_write":
            p = ev.passes
            if c.mfma is not None:
                for opname in ("src0", "src1", "src2"):
                    op = c.op(opname)
                    hit = ev.keys & set(op)
                    if not hit:
                        continue
                    if opname == "src2":
                        if op == ev.dst and c.name == ev.name:
                            rule, why = "mfma_write->mfma_srcc_exact", "accumulates into the same registers"
                        elif ev.xdl:
                            rule = "xdl_write->xdl_srcc_overlap" if c.mfma.xdl else "xdl_write->smfma_srcc_overlap"
                            why = "reads as SrcC (overlapping)"
                        elif not c.mfma.xdl:
                            rule, why = "smfma_write->smfma_srcc_overlap", "reads as SrcC (overlapping)"
                        else:
                            continue                  # an SMFMA result read as SrcC by an XDL MFMA: none
                    else:
                        rule = "xdl_write->mfma_srcab" if ev.xdl else "smfma_write->mfma_srcab"
                        why = f"reads as Src{'A' if opname == 'src0' else 'B'}"
                    consider(wait_states(self.target, rule, p), why, hit)
            elif unit in ("valu", "trans", "vmem", "flat", "ds"):
                kind = "xdl_write" if ev.xdl else "smfma_write"
                consider(wait_states(self.target, f"{kind}->valu_mem_read", p), "reads", ev.keys & uses)
                consider(wait_states(self.target, f"{kind}->valu_mem_write", p), "overwrites", ev.keys & defs)
        elif ev.kind == "mfma_srcc_read":
            if not is_mfma and unit in ("valu", "trans", "vmem", "flat", "ds"):
                consider(wait_states(self.target, "xdl_srcc_read->valu_mem_write", ev.passes),
                         "overwrites", ev.keys & defs)
        elif ev.kind == "valu_write":
            if is_mfma:
                if not ev.dot:
                    src = set(c.op("src0")) | set(c.op("src1")) | set(c.op("src2"))
                    consider(t["valu_write_vgpr->mfma_read"], "reads", ev.keys & src)
                consider(t["valu_write_exec->mfma"], "runs under", ev.keys & _EXEC)
            if unit in ("vmem", "flat"):
                consider(t["valu_write_sgpr->vmem_read"], "reads", ev.keys & _scalar_like(uses))
            if unit in ("valu", "trans") and not is_mfma:
                consider(t["valu_write_sgpr->valu_read"], "reads", ev.keys & _sgpr_or_vcc(uses))
                if c.name in ("v_readlane_b32", "v_writelane_b32"):
                    consider(t["valu_write_sgpr->lane_select"], "takes its lane select from",
                             ev.keys & set(c.op("lane")))
                if c.name in ("v_readlane_b32", "v_readfirstlane_b32", "v_writelane_b32"):
                    consider(t["valu_write_exec->rwlane"], "runs under", ev.keys & _EXEC)
                if c.name in ("v_readlane_b32", "v_readfirstlane_b32"):
                    consider(t["valu_write_vgpr->readlane_src"], "reads", ev.keys & set(c.op("src0")))
                if ev.trans and unit != "trans":
                    consider(t["trans_write->valu_read"], "reads", ev.keys & _vector(uses))
                if ev.dst_sel:
                    consider(t["dst_sel_write->valu_access"], "uses", ev.keys & (uses | defs))
                if c.dpp:
                    consider(t["valu_write_exec->dpp"], "runs (DPP) under", ev.keys & _EXEC)
                if c.name.startswith("v_permlane") and "valu_write_vgpr->permlane_read" in t:
                    consider(t["valu_write_vgpr->permlane_read"], "reads", ev.keys & _vector(uses))
                if c.name.startswith("v_div_fmas"):
                    consider(t["valu_write_vcc->div_fmas"], "reads", ev.keys & _VCC)
                if ev.dot:
                    reads = ev.keys & uses
                    if reads and c.name == ev.name:
                        reads = ev.keys & (set(c.op("src0")) | set(c.op("src1")))
                    consider(t["dot_write->valu_access"], "reads", reads)
                    if c.name != ev.name:
                        consider(t["dot_write->valu_access"], "overwrites", ev.keys & defs)
        elif ev.kind == "salu_write_m0":
            if "lds_dma" in c.flags:
                consider(t["salu_write_m0->lds_dma"], "reads", ev.keys & uses)
        elif ev.kind == "wide_store":
            if unit in ("valu", "trans", "mfma"):
                consider(ev.need, "overwrites", ev.keys & defs)
        elif ev.kind == "vgpr_write":
            if c.dpp:
                consider(t["write_vgpr->dpp_read"], "reads (DPP)", ev.keys & _vector(uses))
        return best

    # ------------------------------------------------------------------ rules, producer side
    def _events_of(self, pos: int, x: Instruction) -> list[_Event]:
        out = []
        defs = x.def_keys()
        if x.desc.mfma is not None:
            info = x.desc.mfma
            dst = _operand_keys(x, "vdst")
            out.append(_Event("mfma_write", pos, dst, passes=info.passes, xdl=info.xdl, name=x.name, dst=dst))
            srcc = _operand_keys(x, "src2")
            if info.xdl and srcc:
                out.append(_Event("mfma_srcc_read", pos, srcc, passes=info.passes, name=x.name))
        elif x.unit in ("valu", "trans"):
            if defs:
                out.append(_Event("valu_write", pos, defs, name=x.name, trans=x.unit == "trans",
                                  dst_sel=_writes_dst_high_half(x), dot=x.name.startswith("v_dot")))
        elif x.unit == "salu" and ("m0", 0) in defs:
            out.append(_Event("salu_write_m0", pos, [("m0", 0)], name=x.name))
        wide = _wide_store_need(x, self.table) if "store" in x.desc.flags else None
        if wide:
            out.append(_Event("wide_store", pos, wide[0], need=wide[1], name=x.name))
        if self.has_dpp and _vector(defs):
            out.append(_Event("vgpr_write", pos, _vector(defs), name=x.name))
        return out

    # ------------------------------------------------------------------ one block
    def _run_block(self, b: Block, state: _State) -> _State:
        """Walk block ``b`` with the pending events ``state`` at its top; return the events at its end.
        The nops each instruction needs are stored (the block's last walk decides).

        Inside the walk an event's ``age`` field holds a time stamp: the clock (wait states since the
        block's top) it would have had age 0 at, so nothing is touched per event as time passes (its
        age is ``clock - stamp``).  A per-register table lists the events on each register, so an
        instruction looks only at the events that share a register with it (or, when fewer events
        are pending than it has registers, tests each event); they are taken in the order they became
        pending (``rank``, the order of ``live``), which decides between equal requirements.  Entries
        of events that expired or lost the register are dropped when met, so a table never holds more
        than the window's worth."""
        window = self.window
        live: _State = {}
        rank: dict[tuple[int, str], int] = {}                 # event -> order it became pending in
        table: dict[Key, list[tuple[int, str]]] = {}          # register -> events that may hold it
        for k, e in state.items():
            e = e.copy()
            e.age = -e.age                          # age a at the top: stamped a wait states before 0
            live[k] = e
            rank[k] = len(rank)
            for r in e.keys:
                table.setdefault(r, []).append(k)
        added = len(rank)
        clock = 0
        for pos in b.instrs:
            f = self.facts[pos]
            touch = f.touch
            hits: list[tuple[int, str]]
            if len(live) <= len(touch):
                # fewer events than registers (an MFMA's 30-odd): look at each event instead
                hits, expired = [], []
                for key, ev in live.items():
                    if clock - ev.age >= window:
                        expired.append(key)
                    elif not ev.keys.isdisjoint(touch):
                        hits.append(key)
                for key in expired:
                    del live[key], rank[key]
            else:
                found: set[tuple[int, str]] = set()
                for r in touch:
                    entries = table.get(r)
                    if not entries:
                        continue
                    keep = []
                    for key in entries:
                        held = live.get(key)
                        if held is None or r not in held.keys or key in keep:
                            continue
                        if clock - held.age >= window:
                            del live[key], rank[key]
                            continue
                        keep.append(key)
                    table[r] = keep
                    found.update(keep)
                hits = sorted(found, key=rank.__getitem__)
            need, why = 0, ""
            worst: tuple[_Event, int, str, set[Key], int] | None = None
            for key in hits:
                ev = live[key]
                age = clock - ev.age
                req, rule, regs = self._need(ev, f)
                if req - age > need:
                    need = req - age
                    worst = (ev, req, rule, regs, age)
            if worst is not None:
                ev, req, rule, regs, age = worst
                src = self.facts[ev.origin].inst          # events originate at instructions
                passes = f" ({ev.passes} passes)" if ev.passes else ""
                already = f", {age} already between" if age else ""
                why = (f"hazard: {src.name}{passes} {self._verb(ev)} {format_keys(ev.keys)}, "
                       f"{f.name} {rule} {format_keys(regs)}: {req} wait state{'s' if req != 1 else ''}{already}")
            self.nops[pos] = need
            self.why[pos] = why
            clock += need + f.ws
            defs = f.defs
            if defs:
                xclass = f.xclass
                for key in hits:
                    ev = live[key]
                    if not ev.keys.isdisjoint(defs) and _SUPERSEDED_BY.get(ev.kind) in (xclass, "any"):
                        ev.keys = ev.keys - defs      # a newer write of the same kind ends the older hazard
                        if not ev.keys:
                            del live[key], rank[key]
            for template in self._events(pos):
                key = (template.origin, template.kind)
                old = live.get(key)
                if old is not None and clock - old.age >= window:
                    del live[key], rank[key]          # expired before this one is left behind: a new entry
                ev = template.copy()
                ev.age = clock
                live[key] = ev
                if key not in rank:
                    rank[key] = added
                    added += 1
                for r in ev.keys:
                    table.setdefault(r, []).append(key)
        out: _State = {}
        for key, ev in live.items():
            age = clock - ev.age
            if age < window:
                ev.age = age
                out[key] = ev
        return out

    def _events(self, pos: int) -> list[_Event]:
        """The events the instruction at ``pos`` leaves behind (worked out once; walks copy them)."""
        events = self.events.get(pos)
        if events is None:
            inst = self.items[pos]
            assert isinstance(inst, Instruction)
            events = self.events[pos] = [ev for ev in self._events_of(pos, inst) if ev.keys]
        return events

    @staticmethod
    def _verb(ev: _Event) -> str:
        return {"mfma_write": "writes", "valu_write": "writes", "salu_write_m0": "writes", "vgpr_write": "writes",
                "mfma_srcc_read": "reads as SrcC", "wide_store": "stores"}[ev.kind]

    @staticmethod
    def _merge(states: list[_State]) -> _State:
        out: _State = {}
        for st in states:
            for key, ev in st.items():
                have = out.get(key)
                if have is None:
                    out[key] = ev.copy()
                else:
                    have.age = min(have.age, ev.age)
                    have.keys = have.keys | ev.keys
        return out

    @staticmethod
    def _same(a: _State, b: _State) -> bool:
        if a.keys() != b.keys():
            return False
        return all(a[k].age == b[k].age and a[k].keys == b[k].keys for k in a)

    def run(self) -> None:
        blocks = self.cfg.blocks
        order = self.cfg.rpo()
        rank = {b: i for i, b in enumerate(order)}
        out_state: dict[int, _State] = {}
        in_state: dict[int, _State] = {}
        visits: dict[int, int] = {}
        work = sorted(order, key=lambda block: rank[block])
        pending = set(work)
        while work:
            bi = work.pop(0)
            pending.discard(bi)
            preds = [out_state[p] for p in blocks[bi].preds if p in out_state]
            new_in = self._merge(preds)
            visits[bi] = visits.get(bi, 0) + 1
            if visits[bi] > 64 and bi in in_state:
                # a pathological oscillation: only ever add events from now on (always terminates, stays sound)
                new_in = self._merge([in_state[bi], new_in])
            if bi in in_state and self._same(in_state[bi], new_in) and bi in out_state:
                continue
            in_state[bi] = new_in
            # every walk records its nops: a block's last walk is the one with its final in-state
            new_out = self._run_block(blocks[bi], new_in)
            if bi in out_state and self._same(out_state[bi], new_out):
                continue
            out_state[bi] = new_out
            for s in blocks[bi].succs:
                if s not in pending:
                    pending.add(s)
                    work.append(s)
                    work.sort(key=lambda block: rank[block])

    def output(self) -> list[object]:
        s_nop = isa_table(self.target)["s_nop"]
        out: list[object] = []
        for pos, item in enumerate(self.items):
            need = self.nops.get(pos, 0)
            part = 0
            while need > 0:
                n = min(need, MAX_NOP + 1)
                why = self.why[pos] if part == 0 else "hazard: continued from the s_nop above"
                out.append(s_nop(n - 1, comment=why))
                need -= n
                part += 1
            out.append(item)
        return out


def insert_nops(items: Sequence[object], target: Target | str) -> list[object]:
    """``items`` with the minimum ``s_nop``s before each instruction that needs wait states.

    Independent instructions already between the two count (one wait state each; an ``s_nop N``
    already there counts N+1).  At a label the pending hazards of every predecessor (loop back edges
    included) are merged, the youngest winning, so a loop body is padded for the worst way in.
    Each inserted ``s_nop`` carries a comment naming the pair, the registers and the count.
    """
    p = _Pass(list(items), target)
    p.run()
    return p.output()


# =========================================================================== the verifier
# Implementation B: for each instruction C, walk backwards over every CFG path, at most the longest
# hazard window far, and judge each earlier instruction P on its own: what does the pair (P, C) need?

def _regs(value: object) -> set[Key]:
    if isinstance(value, (int, float)):
        return set()
    k = getattr(value, "keys", None)
    return set(k()) if k else set()


# Registers of the consumer still exposed to an older producer on the path searched, per kind of
# producer: a newer MFMA write hides older MFMA writes of a register, a newer VALU write older VALU
# writes, a newer SALU write older SALU writes, any write hides older writes for DPP; reads (SrcC,
# store data) are hazards whatever was written since.
_MFMA, _VALU, _SALU, _ANY, _READS = range(5)


class _Profile:
    """What one instruction reads and writes, by role (computed once for all equal instructions,
    ``Instruction.shared``; ``inst`` is the first of them, read for its operands only)."""

    __slots__ = ("inst", "name", "unit", "reads", "writes", "mfma", "srcc", "dst", "ws", "wide",
                 "wide_need", "dpp", "op_sel_hi", "flags", "is_valu", "is_mem", "kind", "touch", "reads_scalar",
                 "reads_sgpr_vcc", "reads_vector", "reads_vgpr", "_src")

    def __init__(self, inst: Instruction, table: dict[str, int]):
        desc = inst.desc
        self.inst = inst
        self.name: str = desc.name
        self.unit: str = desc.unit
        self.flags: frozenset[str] = desc.flags
        self.reads = frozenset(inst.use_keys())
        self.writes = frozenset(inst.def_keys())
        self.mfma: MfmaInfo | None = desc.mfma
        self._src: dict[str, tuple[Key, ...]] | None = None
        self.srcc = frozenset(self.src("src2")) if self.mfma else frozenset()
        self.dst: tuple[Key, ...] = tuple(sorted(_regs(inst.ops[0]))) if self.mfma else ()
        self.ws = int(inst.ops[0]) + 1 if self.name == "s_nop" else 1
        self.dpp: bool = bool(inst.mods) and desc.is_dpp(inst.mods)
        self.op_sel_hi = False             # op_sel moves the result into a higher half/byte
        if desc.fmt == "VOP3" and inst.mods.get("op_sel"):
            n_src = len({spec.name for spec in desc.operands if spec.name.startswith("src")})
            self.op_sel_hi = 1 in list(inst.mods["op_sel"])[n_src:]
        self.wide: frozenset[Key] = frozenset()
        self.wide_need = 0
        if "store" in self.flags and self.unit in ("vmem", "flat"):
            data = set(self.src("vdata")) | set(self.src("data"))
            if len(data) > 2:
                self.wide = frozenset(data)
                if desc.fmt != "MUBUF":
                    self.wide_need = table["wide_global_store->valu_write_data"]
                elif self.src("soffset"):
                    self.wide_need = table["wide_store_sgpr_soffset->valu_write_data"]
                else:
                    self.wide_need = table["wide_store_const_soffset->valu_write_data"]
        # LLVM's "legacy VALU": VALU that is not an MFMA
        self.is_valu = self.unit in ("valu", "trans") and self.mfma is None
        self.is_mem = self.unit in ("vmem", "flat", "ds")
        # which kind of newer write hides this instruction's older writes of a register (None: no kind
        # of its own; its writes still hide older writes from DPP readers)
        self.kind = (_MFMA if self.mfma is not None else _VALU if self.is_valu
                     else _SALU if self.unit == "salu" else None)
        # every register a hazard with this instruction first can be on (every rule below needs one
        # of them in the second instruction's reads or writes)
        self.touch = self.writes | self.srcc | self.wide
        # its reads by register class, as the rules with it second ask for them
        self.reads_scalar = frozenset(k for k in self.reads if k[0] not in ("v", "a", "scc"))
        self.reads_sgpr_vcc = frozenset(k for k in self.reads if k[0] == "s" or k[0] in ("vcc_lo", "vcc_hi"))
        self.reads_vector = frozenset(k for k in self.reads if k[0] in ("v", "a"))
        self.reads_vgpr = frozenset(k for k in self.reads if k[0] == "v")

    def src(self, name: str) -> tuple[Key, ...]:
        """The registers of the operand called ``name`` (sorted; empty for a constant or no such operand);
        worked out for the few instructions a rule asks."""
        if self._src is None:
            self._src = {spec.name: tuple(sorted(_regs(value)))
                         for spec, value in zip(self.inst.desc.operands, self.inst.ops)}
        return self._src.get(name, ())


#: the registers still exposed per producer kind, indexed by the five constants above
_Live = tuple[frozenset[Key], frozenset[Key], frozenset[Key], frozenset[Key], frozenset[Key]]


def _pair(target: Target, t: dict[str, int], p: _Profile, c: _Profile,
          live: _Live) -> list[tuple[int, AbstractSet[Key], str]]:
    """Every (wait states, registers, reason) the pair needs, for the registers still ``live``.
    A reason is a phrase with ``{regs}`` in it, completed by the producer."""
    found: list[tuple[int, AbstractSet[Key], str]] = []
    name = target.name
    cls = _READS if p.kind is None else p.kind

    def need(n: int, regs: AbstractSet[Key], reason: str, exposed: int | None = None) -> None:
        regs = regs & live[cls if exposed is None else exposed]
        if regs and n > 0:
            found.append((n, regs, reason))

    if p.mfma is not None:
        P, xdl = p.mfma.passes, p.mfma.xdl
        dst = set(p.dst)
        regs: AbstractSet[Key]
        if c.mfma is not None:
            for opname in ("src0", "src1"):
                regs = set(c.src(opname)) & dst
                if regs:
                    rule = "xdl_write->mfma_srcab" if xdl else "smfma_write->mfma_srcab"
                    need(wait_states(name, rule, P), regs,
                         f"reads {{regs}} as Src{'AB'[opname == 'src1']}, written by")
            regs = c.srcc & dst
            if regs:
                if c.src("src2") == p.dst and c.name == p.name:
                    n = wait_states(name, "mfma_write->mfma_srcc_exact", P)
                    why = "accumulates into {regs} right after"
                else:
                    why = "reads {regs} as SrcC (overlapping, not the same accumulator chain), written by"
                    if xdl:
                        rule = "xdl_write->xdl_srcc_overlap" if c.mfma.xdl else "xdl_write->smfma_srcc_overlap"
                        n = wait_states(name, rule, P)
                    else:
                        n = 0 if c.mfma.xdl else wait_states(name, "smfma_write->smfma_srcc_overlap", P)
                need(n, regs, why)
        elif c.is_valu or c.is_mem:
            pre = "xdl_write" if xdl else "smfma_write"
            need(wait_states(name, pre + "->valu_mem_read", P), c.reads & dst, "reads {regs} written by")
            need(wait_states(name, pre + "->valu_mem_write", P), c.writes & dst, "overwrites {regs} written by")
            if xdl:
                need(wait_states(name, "xdl_srcc_read->valu_mem_write", P), c.writes & p.srcc,
                     "overwrites {regs} read as SrcC by", _READS)
    elif p.is_valu:
        w = p.writes
        if c.mfma is not None:
            if not p.name.startswith("v_dot"):
                ops = set(c.src("src0")) | set(c.src("src1")) | c.srcc
                need(t["valu_write_vgpr->mfma_read"], w & ops, "reads {regs} written by")
            need(t["valu_write_exec->mfma"], w & _EXEC, "runs under EXEC written by")
        if c.unit in ("vmem", "flat"):
            scalar = c.reads_scalar
            need(t["valu_write_sgpr->vmem_read"], w & scalar, "reads {regs} written by")
        if c.is_valu:
            sregs = c.reads_sgpr_vcc
            need(t["valu_write_sgpr->valu_read"], w & sregs, "reads {regs} written by")
            if c.name in ("v_readlane_b32", "v_writelane_b32"):
                need(t["valu_write_sgpr->lane_select"], w & set(c.src("lane")),
                     "takes its lane select {regs} from")
            if c.name in ("v_readlane_b32", "v_readfirstlane_b32", "v_writelane_b32"):
                need(t["valu_write_exec->rwlane"], w & _EXEC, "runs under {regs} written by")
            if c.name in ("v_readlane_b32", "v_readfirstlane_b32"):
                need(t["valu_write_vgpr->readlane_src"], w & set(c.src("src0")), "reads {regs} written by")
            if p.unit == "trans" and c.unit != "trans":
                need(t["trans_write->valu_read"], w & c.reads_vector,
                     "reads {regs} written by the transcendental")
            if p.op_sel_hi:
                need(t["dst_sel_write->valu_access"], w & (c.reads | c.writes),
                     "uses {regs}, written (op_sel high half) by")
            if c.dpp:
                need(t["valu_write_exec->dpp"], w & _EXEC, "runs (DPP) under {regs} written by")
            if "valu_write_vgpr->permlane_read" in t and c.name.startswith("v_permlane"):
                need(t["valu_write_vgpr->permlane_read"], w & c.reads_vgpr,
                     "reads {regs} written by")
            if c.name.startswith("v_div_fmas"):
                need(t["valu_write_vcc->div_fmas"], w & _VCC, "reads {regs} written by")
            if p.name.startswith("v_dot"):
                if c.name == p.name:
                    ab = set(c.src("src0")) | set(c.src("src1"))
                    need(t["dot_write->valu_access"], w & ab, "reads {regs} as SrcA/B, written by")
                else:
                    need(t["dot_write->valu_access"], w & (c.reads | c.writes), "uses {regs} written by")
    elif p.unit == "salu":
        if "lds_dma" in c.flags:
            need(t["salu_write_m0->lds_dma"], p.writes & c.reads & {("m0", 0)}, "reads {regs} written by")
    if p.wide and c.unit in ("valu", "trans", "mfma"):
        need(p.wide_need, p.wide & c.writes, "overwrites {regs} still being read by the store", _READS)
    if c.dpp and c.is_valu:
        need(t["write_vgpr->dpp_read"], p.writes & c.reads_vgpr,
             "reads {regs} (DPP) written by", _ANY)
    return found


def _profile(inst: Instruction, table: dict[str, int], target: Target) -> _Profile:
    key = f"hazards.profile.{target.name}"
    p = inst.shared.checks.get(key)
    if p is None:
        p = inst.shared.checks[key] = _Profile(inst, table)
    return p


def _what(p: _Profile) -> str:
    if p.mfma is not None:
        return f"{'XDL' if p.mfma.xdl else 'non-XDL'} MFMA, {p.mfma.passes} passes"
    return p.unit.upper()


def check_hazards(items: Sequence[object], target: Target | str) -> list[Violation]:
    """Every pair of instructions with fewer wait states between them than the hazard table asks,
    on any path of the CFG (loop back edges included).  An empty list means the program is clean.

    Cost: each instruction looks back at most the longest hazard window (``max_window``: 19 or 20
    wait states, so at most that many instructions on a path), and only an earlier instruction that
    writes or holds one of the registers it touches is classified; the walk within a block is a
    plain loop, and only a walk that reaches the top of its block inside the window goes on over the
    CFG (a shortest-distance-first search over the predecessors)."""
    target = get_target(target)
    t = _fixed_rules(target)
    window = max_window(target)
    cfg = CFG(list(items))
    insts = {pos: item for pos, item in enumerate(items) if isinstance(item, Instruction)}
    profiles = {pos: _profile(item, t, target) for pos, item in insts.items()}
    any_dpp = any(p.dpp for p in profiles.values())
    # registers some instruction of the program can start a hazard on; only those need a search
    hazardous: set[Key] = set()
    for p in profiles.values():
        if p.mfma is not None:
            hazardous |= set(p.dst) | p.srcc
        elif p.is_valu or any_dpp:
            hazardous |= p.writes
        elif p.unit == "salu":
            hazardous |= p.writes & {("m0", 0)}
        hazardous |= p.wide
    reachable = cfg.reachable()

    def prev(pos: int) -> list[int]:    # instructions that can run just before, on paths the kernel can take
        return [q for q in cfg.prev_instructions(pos) if cfg.block_of(q).index in reachable]

    found: dict[tuple[int, int, str], tuple[int, Violation]] = {}

    def visit(dist: int, ppos: int, p: _Profile, c: _Profile, cpos: int, live: _Live,
              interest: frozenset[Key]) -> _Live:
        """Judge the pair (p, c) ``dist`` wait states apart; return what stays exposed behind p."""
        for n, regs, reason in _pair(target, t, p, c, live):
            if dist < n:
                key = (cpos, ppos, reason)
                if key not in found or found[key][0] > dist:
                    found[key] = (dist, Violation(
                        cpos, insts[cpos], format_keys(regs),
                        f"{reason.format(regs=format_keys(regs))} #{ppos} {insts[ppos].render(False)} "
                        f"({_what(p)}) with {dist} wait state{'s' if dist != 1 else ''} between; "
                        f"needs {n}", source=ppos, kind="hazard"))
        if not p.writes.isdisjoint(interest):
            exposed = list(live)
            if p.kind is not None:
                exposed[p.kind] = exposed[p.kind] - p.writes
            exposed[_ANY] = exposed[_ANY] - p.writes
            live = (exposed[0], exposed[1], exposed[2], exposed[3], exposed[4])
        return live

    for bi in sorted(reachable):
        instrs = cfg.blocks[bi].instrs
        block = [profiles[pos] for pos in instrs]
        for slot, cpos in enumerate(instrs):
            c = block[slot]
            if c.unit in ("salu", "sopp", "smem"):
                continue                     # no rule has a scalar instruction second
            interest = (c.reads | c.writes) & hazardous
            if not interest:
                continue
            # (distance, producer position, registers still exposed on this path, per producer kind)
            live: _Live = (interest,) * 5
            # within the block: one path, distances only grow
            dist = 0
            for j in range(slot - 1, -1, -1):
                p = block[j]
                if not p.touch.isdisjoint(interest):
                    live = visit(dist, instrs[j], p, c, cpos, live, interest)
                dist += p.ws
                if dist >= window:
                    break
            else:
                # the top of the block inside the window: every way in, shortest distance first.  (An
                # instruction of this block met again through a loop with the same registers exposed
                # is judged again, farther away: it can only repeat what was found.)
                heap = [(dist, ppos, live) for ppos in prev(instrs[0])]
                if not heap:
                    continue
                heapq.heapify(heap)
                seen: set[tuple[int, _Live]] = set()
                while heap:
                    dist, ppos, live = heapq.heappop(heap)
                    if (ppos, live) in seen:
                        continue
                    seen.add((ppos, live))
                    p = profiles[ppos]
                    if not p.touch.isdisjoint(interest):
                        live = visit(dist, ppos, p, c, cpos, live, interest)
                    nd = dist + p.ws
                    if nd >= window:
                        continue
                    for rpos in prev(ppos):
                        heapq.heappush(heap, (nd, rpos, live))
    return sorted((v for _, v in found.values()), key=lambda v: (v.pos, v.source or 0))
