"""Software wait states: the ``s_nop`` pass and its independent verifier.

CDNA has no interlock for some register dependencies (MFMA results, VALU-written SGPRs and EXEC,
M0 before LDS DMA, wide-store data, ...): the program must put enough *wait states* (issue slots of
this wave) between the two instructions.  Every instruction gives one wait state, ``s_nop N`` gives
N+1; labels and comments give none.

* ``WAIT_STATES`` is the table, one dict per target, with the LLVM source of every entry
  (in the comments above and beside it).  It and the register numbering (``_Regs``: an
  instruction's registers as bit masks, exact and folded; the wait check uses it too) are all the
  two implementations share, besides the control-flow graph the pipeline builds once and hands to
  each (``cfg=``; each builds its own when called alone).
* ``insert_nops(items, target)`` runs a forward dataflow of *pending hazard events* over the CFG
  (merging at labels, iterating loop back edges to a fixpoint) and puts the minimum ``s_nop`` before
  each instruction that needs it, with a comment that names the pair and the count.
* ``check_hazards(items, target)`` verifies a finished program the other way round: for each
  instruction it searches *backwards* over every CFG path (loop back edges included) for the
  instructions within the longest hazard window and classifies each pair on its own.

Cost: a small constant per instruction.  Each pass walks a block keeping, per kind of pair, the
union of the (folded) registers recent instructions can start a hazard on; an instruction whose own
registers of those kinds miss it needs nothing and costs one AND of two ints.  Only the others are
looked at closely, and only as far back as their kind of rule reaches (docs/checks.md).

Both treat a register written again in between *by the same kind of instruction* (MFMA after MFMA,
VALU after VALU) as ending the older instruction's hazard on it, as LLVM's nearest-definition search
does; a read (SrcC, store data) stays a hazard whatever was written since.  Rules not modelled
(isagen emits none of these instructions): DGEMM (f64 MFMA) specials, s_setreg/s_getreg, s_movrel,
GDS, exports, SMEM soft clauses (xnack is off on the targets isagen builds for).  See docs/checks.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from functools import reduce
from operator import or_
from typing import Any, cast

from isagen.checks.cfg import CFG, Block, Violation, format_keys
from isagen.errors import CheckError
from isagen.isa.instruction import Instruction
from isagen.isa.operands import Label, Mod, Reg, Special
from isagen.isa.table import InstrDef, isa_table
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



# =========================================================================== register sets as bit masks
# Both implementations hold a set of register dwords as an int with one bit per dword (v0..v255,
# a0..a255, s0..s127, then the special registers; any other key takes the next free bit), so a set
# operation is one operation on a few hundred bits, whatever the set's size.  Each also keeps a
# *folded* copy of the sets it filters with (v and a registers four to a bit, s registers four to a
# bit, one bit per special register, one for anything else: _FOLD bits), small enough to put seven
# side by side in one int: two folded sets meet whenever the exact ones do, so a folded test that
# finds nothing proves there is nothing (and one that finds something is checked exactly).
# The numbering and the per-instruction register sets (_Regs) are all the two implementations share
# besides the table.

_SPAN = 768                        # bits an exact register set may use
_FOLD = 168                        # bits of a folded register set
_ONE: dict[Key, int] = {}          # register key -> its bit
_FONE: dict[Key, int] = {}         # register key -> its folded bit
_KEY_AT: list[Key] = []            # bit number -> register key
_CLASS: dict[str, int] = {}        # register class -> the bits of its keys
_SPECIAL_FOLD = {"vcc_lo": 160, "vcc_hi": 161, "exec_lo": 162, "exec_hi": 163, "m0": 164, "scc": 165}
_FOTHER = 1 << 166                 # the folded bit of any other key


def _new_key(key: Key) -> int:
    if len(_KEY_AT) >= _SPAN:
        raise CheckError(f"hazard passes: register key {key} is beyond the {_SPAN} registers they number")
    one = 1 << len(_KEY_AT)
    _ONE[key] = one
    _KEY_AT.append(key)
    _CLASS[key[0]] = _CLASS.get(key[0], 0) | one
    cls, i = key
    if (cls in ("v", "a") and i < 256) or (cls == "s" and i < 128):
        _FONE[key] = 1 << ({"v": 0, "a": 64, "s": 128}[cls] + (i >> 2))
    else:
        _FONE[key] = 1 << _SPECIAL_FOLD[cls] if cls in _SPECIAL_FOLD else _FOTHER
    return one


for _cls, _count in (("v", 256), ("a", 256), ("s", 128)):
    for _i in range(_count):
        _new_key((_cls, _i))
for _name in _SPECIAL_FOLD:
    _new_key((_name, 0))

_EXEC_BITS = _ONE[("exec_lo", 0)] | _ONE[("exec_hi", 0)]
_VCC_BITS = _ONE[("vcc_lo", 0)] | _ONE[("vcc_hi", 0)]
_M0_BIT = _ONE[("m0", 0)]
_SCC_BIT = _ONE[("scc", 0)]
# folded classes (the bit of other keys belongs to every class)
_F_V = ((1 << 64) - 1) | _FOTHER
_F_VECTOR = ((1 << 128) - 1) | _FOTHER
_F_S = (((1 << 32) - 1) << 128) | _FOTHER
_F_VCC = _FONE[("vcc_lo", 0)] | _FONE[("vcc_hi", 0)]
_F_EXEC = _FONE[("exec_lo", 0)] | _FONE[("exec_hi", 0)]
_F_M0 = _FONE[("m0", 0)]
_F_SCALAR = _F_S | _F_VCC | _F_EXEC | _F_M0           # anything but v, a and scc


def _mask(keys: Sequence[Key]) -> int:
    """The bit mask of register ``keys``."""
    try:
        return reduce(or_, map(_ONE.__getitem__, keys), 0)
    except KeyError:
        for k in keys:
            if k not in _ONE:
                _new_key(k)
        return reduce(or_, map(_ONE.__getitem__, keys), 0)


def _fold(keys: Sequence[Key]) -> int:
    """The folded bit mask of register ``keys`` (after ``_mask`` has numbered them)."""
    return reduce(or_, map(_FONE.__getitem__, keys), 0)


def _keys(mask: int) -> list[Key]:
    """The register keys of a bit mask (for messages)."""
    out = []
    while mask:
        low = mask & -mask
        out.append(_KEY_AT[low.bit_length() - 1])
        mask ^= low
    return out


def _vector_bits() -> int:
    return _CLASS.get("v", 0) | _CLASS.get("a", 0)


def _operand_keys(value: object) -> list[Key]:
    if isinstance(value, (int, float)):
        return []
    keys = getattr(value, "keys", None)
    return list(keys()) if keys else []


_BASE = {"v": (0, 0, 256), "a": (256, 64, 256), "s": (512, 128, 128)}    # exact bit, folded bit, count
_SPECIAL_BITS = {name: (_mask(Special(name).keys()), _fold(Special(name).keys())) for name in Special._PARTS}
_NO_REGS = (0, 0)


def _value_masks(value: object) -> tuple[int, int]:
    """(exact, folded) registers of one operand value: worked out from a register range's class,
    index and count (the bits ``_mask``/``_fold`` give its ``keys()``)."""
    tp = type(value)
    if tp is Reg:
        reg = cast(Reg, value)
        base, fbase, count = _BASE[reg.cls]
        i, n = reg.index, reg.count
        if i + n <= count:
            lo = i >> 2
            return ((1 << n) - 1) << (base + i), ((2 << (((i + n - 1) >> 2) - lo)) - 1) << (fbase + lo)
    elif tp is Special:
        return _SPECIAL_BITS[cast(Special, value).name]
    elif tp is Mod:
        return _value_masks(cast(Mod, value).reg)
    elif tp is int or tp is float or tp is str or tp is Label:
        return _NO_REGS
    keys = _operand_keys(value)
    return _mask(keys), _fold(keys)


#: per instruction definition: (the definition, (written, read, DPP-read vdst) of each operand,
#: implicit writes, implicit reads, each as (exact, folded), operand name -> index)
_ROLES: dict[int, tuple[object, tuple[tuple[bool, bool, bool], ...], tuple[int, int], tuple[int, int],
                        dict[str, int]]] = {}


def _roles(desc: InstrDef) -> tuple[object, tuple[tuple[bool, bool, bool], ...], tuple[int, int], tuple[int, int],
                                    dict[str, int]]:
    got = _ROLES.get(id(desc))
    if got is None or got[0] is not desc:
        ops = tuple((spec.is_def, spec.is_use, spec.is_def and spec.name == "vdst") for spec in desc.operands)
        idef = iuse = (0, 0)
        for name in desc.implicit_defs:
            m = _SPECIAL_BITS[name]
            idef = (idef[0] | m[0], idef[1] | m[1])
        for name in desc.implicit_uses:
            m = _SPECIAL_BITS[name]
            iuse = (iuse[0] | m[0], iuse[1] | m[1])
        index: dict[str, int] = {}
        for i, spec in enumerate(desc.operands):
            index[spec.name] = i             # (a repeated name: the last, as a dict of them would keep)
        got = _ROLES[id(desc)] = (desc, ops, idef, iuse, index)
    return got


class _Regs:
    """An instruction's registers as bit masks, exact and folded (worked out once for all equal
    instructions, ``Instruction.shared``): what it reads and what it writes, as ``use_keys()`` and
    ``def_keys()`` list them (the operands by their access, a DPP move's destination read as well,
    the implicit registers), and per operand name."""

    __slots__ = ("uses", "defs", "fuses", "fdefs", "dpp", "_ops", "_index")

    def __init__(self, inst: Instruction):
        desc = inst.desc
        _, roles, idef, iuse, self._index = _roles(desc)
        dpp = self.dpp = bool(inst.mods) and desc.is_dpp(inst.mods)
        uses, fuses = iuse
        defs, fdefs = idef
        per_op: list[tuple[int, int]] = []
        for (is_def, is_use, vdst), value in zip(roles, inst.ops):
            tp = type(value)
            if tp is Reg:                    # the common case, inline
                base, fbase, count = _BASE[value.cls]
                j, n = value.index, value.count
                if j + n <= count:
                    lo = j >> 2
                    m, f = ((1 << n) - 1) << (base + j), ((2 << (((j + n - 1) >> 2) - lo)) - 1) << (fbase + lo)
                else:
                    m, f = _value_masks(value)
            elif tp is int:                  # an immediate
                per_op.append(_NO_REGS)
                continue
            else:
                m, f = _value_masks(value)
            per_op.append((m, f))
            if m:
                if is_def:
                    defs |= m
                    fdefs |= f
                if is_use or (dpp and vdst):
                    uses |= m
                    fuses |= f
        self.uses, self.fuses, self.defs, self.fdefs = uses, fuses, defs, fdefs
        self._ops = per_op

    def op(self, name: str) -> tuple[int, int]:
        """(exact, folded) registers of the operand called ``name``; (0, 0) for a constant or no
        such operand."""
        i = self._index.get(name)
        return _NO_REGS if i is None else self._ops[i]


def _regs(inst: Instruction) -> _Regs:
    r = inst.shared.checks.get("hazards.regs")
    if r is None:
        r = inst.shared.checks["hazards.regs"] = _Regs(inst)
    return r


# =========================================================================== the pass
# Implementation A: a forward dataflow of pending hazard events.  An event is what an instruction
# leaves behind for later ones ("these registers were written by a 4-pass XDL MFMA"); each carries
# its age in wait states.  The consumer asks each event how many wait states it needs.

# Newer writes that end an event's hazard on a register (LLVM's getWaitStatesSinceDef looks for the
# nearest write *of the producing kind*: an MFMA result stays a hazard across a VALU write of the
# register and the other way round): by MFMAs, by other VALU, by SALU, by any instruction.  Reads
# (SrcC, store data) are never ended by a write (-1).
_BY_MFMA, _BY_VALU, _BY_SALU, _BY_ANY = range(4)
# Channels: which rules an event can take part in, so that an instruction can tell from one AND of
# folded sets whether any pending event may concern it (a channel is _FOLD bits of that int).
_CH_VALU, _CH_MFMA, _CH_SRCC, _CH_VALU_SPECIAL, _CH_M0, _CH_WIDE, _CH_VGPR = range(7)
_S_VALU, _S_MFMA, _S_SRCC, _S_VALU_SPECIAL, _S_M0, _S_WIDE, _S_VGPR = (ch * _FOLD for ch in range(7))
# the channels whose rules depend on an MFMA's passes (up to the window); the others' rules are fixed
_LONG = tuple(ch in (_CH_MFMA, _CH_SRCC) for ch in range(7))
_LONG_CH = ((1 << 2 * _FOLD) - 1) << _CH_MFMA * _FOLD        # MFMA results and SrcC reads (adjacent channels)
_NOT_MFMA_CH = ((1 << 7 * _FOLD) - 1) & ~(((1 << _FOLD) - 1) << _CH_MFMA * _FOLD)   # every channel but MFMA's
_VERB = {"mfma_write": "writes", "valu_write": "writes", "salu_write_m0": "writes", "vgpr_write": "writes",
         "mfma_srcc_read": "reads as SrcC", "wide_store": "stores"}


class _Template:
    """An event as its instruction leaves it (shared by all equal instructions); ``fmask`` is
    ``mask`` folded."""

    __slots__ = ("kind", "mask", "fmask", "ch", "by", "passes", "xdl", "name", "dst", "need", "trans",
                 "dst_sel", "dot")

    def __init__(self, kind: str, mask: int, fmask: int, ch: int, by: int, name: str, *,
                 passes: int | None = None, xdl: bool = False, dst: int = 0, need: int = 0, trans: bool = False,
                 dst_sel: bool = False, dot: bool = False):
        self.kind, self.mask, self.fmask, self.ch, self.by, self.name = kind, mask, fmask, ch, by, name
        self.passes, self.xdl, self.dst, self.need = passes, xdl, dst, need
        self.trans, self.dst_sel, self.dot = trans, dst_sel, dot


class _Event:
    """A pending event at a block boundary: its template, where it comes from, the registers it still
    holds (a subset of the template's, so the template's folded set covers them) and its age in wait
    states."""

    __slots__ = ("t", "origin", "mask", "age")

    def __init__(self, t: _Template, origin: int, mask: int, age: int):
        self.t, self.origin, self.mask, self.age = t, origin, mask, age


def _wide_store_need(inst: Instruction, regs: _Regs, table: dict[str, int]) -> tuple[int, int, int] | None:
    """(data registers, folded, wait states) when ``inst`` stores more than 64 bits of VGPR data."""
    if "store" not in inst.desc.flags or inst.unit not in ("vmem", "flat"):
        return None
    data = next((value for spec, value in zip(inst.desc.operands, inst.ops)
                 if not spec.is_def and spec.name in ("vdata", "data")), None)
    keys = _operand_keys(data)
    if len(set(keys)) <= 2:
        return None
    if inst.desc.fmt == "MUBUF":
        rule = ("wide_store_sgpr_soffset->valu_write_data" if regs.op("soffset")[0]
                else "wide_store_const_soffset->valu_write_data")
    else:
        rule = "wide_global_store->valu_write_data"
    return _mask(keys), _fold(keys), table[rule]


_RWLANE = ("v_readlane_b32", "v_readfirstlane_b32", "v_writelane_b32")
_NO_HEARD = (0,) * 7


def _dst_sel(mods: dict[str, Any], n_src: int) -> bool:
    """Whether a VOP3 instruction with ``n_src`` sources and modifiers ``mods`` sets an op_sel
    destination bit (the bits after the sources'): the result is shifted into a higher half or byte
    of the register (v_pack_b32_f16, v_cvt_pk_fp8_f32 op_sel[2], v_cvt_sr_fp8_f32 op_sel[3:2])."""
    op_sel = mods.get("op_sel") if mods else None
    return op_sel is not None and bool(op_sel) and any(op_sel[n_src:])


#: per instruction definition (by identity, kept beside its facts): what ``_Facts`` decides from the
#: definition alone
_FACT_INFO: dict[int, tuple[object, tuple[Any, ...]]] = {}


def _fact_info(desc: InstrDef) -> tuple[Any, ...]:
    name, unit, mfma = desc.name, desc.unit, desc.mfma
    valu_unit = unit in ("valu", "trans")
    by = _BY_MFMA if mfma is not None else _BY_VALU if valu_unit else _BY_SALU if unit == "salu" else -1
    # the consumer's class: 0 MFMA, 1 VALU, 2 VMEM/FLAT, 3 DS, None anything else
    cons = (0 if mfma is not None else 1 if valu_unit else 2 if unit in ("vmem", "flat")
            else 3 if unit == "ds" else None)
    lanes_rule = name in _RWLANE or name.startswith(("v_permlane", "v_div_fmas"))
    n_src = (sum(1 for spec in desc.operands if spec.name.startswith("src")) if desc.fmt == "VOP3" else -1)
    info = (valu_unit, unit == "trans", name.startswith("v_dot"), by, cons, lanes_rule,
            name in ("v_readlane_b32", "v_writelane_b32"), name in _RWLANE,
            name in ("v_readlane_b32", "v_readfirstlane_b32"), name.startswith("v_permlane"),
            name.startswith("v_div_fmas"), "lds_dma" in desc.flags,
            "store" in desc.flags and unit in ("vmem", "flat"), n_src)
    _FACT_INFO[id(desc)] = (desc, info)
    return info


class _Facts:
    """What the pass needs to know of one instruction, computed once for all equal instructions
    (``Instruction.shared``): ``inst`` is the first of them (only its definition, operands and
    modifiers are read).  Producer side: the events it leaves (``events``; ``events_dpp`` adds the
    VGPR writes DPP readers care about, in programs that have DPP), the writes that end older events
    (``ends``), the folded channels of its events (``emit``).  Consumer side: per channel, every
    register a rule with it second can name (``heard``), and all of them folded side by side
    (``listen``)."""

    __slots__ = ("inst", "regs", "name", "unit", "mfma", "uses", "defs", "touch", "ws", "dpp", "flags",
                 "events", "events_dpp", "emit", "emit_dpp", "ends", "ends_dpp", "trail", "trail_dpp",
                 "listen", "heard", "step")

    def __init__(self, inst: Instruction, table: dict[str, int]):
        desc = inst.desc
        self.inst = inst
        r = self.regs = _regs(inst)
        got = _FACT_INFO.get(id(desc))
        info = got[1] if got is not None and got[0] is desc else _fact_info(desc)
        (valu_unit, trans, dot, by, cons, lanes_rule, lane_sel, rwlane, readlane_src, permlane, div_fmas,
         lds_dma, wide_unit, n_src) = info
        name = self.name = desc.name
        self.unit = desc.unit
        mfma = self.mfma = desc.mfma
        uses, defs, fuses, fdefs = r.uses, r.defs, r.fuses, r.fdefs
        self.uses, self.defs = uses, defs
        self.touch = uses | defs
        self.ws = int(inst.ops[0]) + 1 if name == "s_nop" else 1
        self.dpp = dpp = r.dpp
        self.flags = desc.flags
        # ---- producer side
        events: list[_Template] = []
        if mfma is not None:
            dst, fdst = r.op("vdst")
            if dst:
                events.append(_Template("mfma_write", dst, fdst, _CH_MFMA, _BY_MFMA, name, passes=mfma.passes,
                                        xdl=mfma.xdl, dst=dst))
            if mfma.xdl:
                srcc, fsrcc = r.op("src2")
                if srcc:
                    events.append(_Template("mfma_srcc_read", srcc, fsrcc, _CH_SRCC, -1, name, passes=mfma.passes))
        elif valu_unit:
            if defs:
                dst_sel = n_src >= 0 and _dst_sel(inst.mods, n_src)
                events.append(_Template("valu_write", defs, fdefs,
                                        _CH_VALU_SPECIAL if trans or dst_sel or dot else _CH_VALU,
                                        _BY_VALU, name, trans=trans, dst_sel=dst_sel, dot=dot))
        elif by == _BY_SALU and defs & _M0_BIT:
            events.append(_Template("salu_write_m0", _M0_BIT, _F_M0, _CH_M0, _BY_SALU, name))
        if wide_unit:
            wide = _wide_store_need(inst, r, table)
            if wide and wide[0]:
                events.append(_Template("wide_store", wide[0], wide[1], _CH_WIDE, -1, name, need=wide[2]))
        emit = 0
        if events:
            self.events = evs = tuple(events)
            for t in evs:
                emit |= t.fmask << t.ch * _FOLD
        else:
            self.events = evs = ()
        self.emit = emit
        ended = defs & _M0_BIT if by == _BY_SALU else defs      # SALU writes end only M0 events
        self.ends = ((by, ended),) if by >= 0 and ended else ()
        self.trail = bool(evs or self.ends)
        self.events_dpp: tuple[_Template, ...] | None = None
        # ---- consumer side: the sets _need meets an event's registers with, per channel (exact),
        # and a folded superset of each, side by side
        listen = 0
        heard: list[int] | None = None
        if cons == 0:                                   # an MFMA
            srcs = r.op("src0")[0] | r.op("src1")[0] | r.op("src2")[0]
            fu = fuses | _F_EXEC
            heard = [srcs | _EXEC_BITS, srcs, 0, srcs | _EXEC_BITS, 0, defs, 0]
            listen = (fu << _S_VALU | fuses << _S_MFMA | fu << _S_VALU_SPECIAL
                      | fdefs << _S_WIDE)
        elif cons:                                      # VALU, VMEM, FLAT, DS
            heard = [0, uses | defs, defs, 0, 0, 0, 0]
            fud = fuses | fdefs
            listen = fud << _S_MFMA | fdefs << _S_SRCC
            if cons == 1:                               # VALU
                valu = uses & (_CLASS["s"] | _VCC_BITS)
                fvalu = fuses & (_F_S | _F_VCC)
                if lanes_rule or dpp:
                    if lane_sel:
                        valu |= r.op("lane")[0]
                    if rwlane or dpp:
                        valu |= _EXEC_BITS
                    if readlane_src:
                        valu |= r.op("src0")[0]
                    if permlane:
                        valu |= uses & _vector_bits()
                    if div_fmas:
                        valu |= _VCC_BITS
                    fvalu = fud | _F_EXEC | _F_VCC
                heard[_CH_VALU] = valu
                # transcendental, op_sel high half and DOT writers: any use
                heard[_CH_VALU_SPECIAL] = valu | uses | defs
                heard[_CH_WIDE] = defs
                listen |= (fvalu << _S_VALU | (fvalu | fud) << _S_VALU_SPECIAL
                           | fdefs << _S_WIDE)
            elif cons == 2:                             # VMEM, FLAT
                heard[_CH_VALU] = heard[_CH_VALU_SPECIAL] = uses & ~(_vector_bits() | _SCC_BIT)
                fs = fuses & _F_SCALAR
                listen |= fs << _S_VALU | fs << _S_VALU_SPECIAL
        if lds_dma or dpp:
            if heard is None:
                heard = [0] * 7
            if lds_dma:
                heard[_CH_M0] = uses
                listen |= fuses << _S_M0
            if dpp:
                heard[_CH_VGPR] = uses & _vector_bits()
                listen |= (fuses & _F_VECTOR) << _S_VGPR
        self.heard = tuple(heard) if heard is not None else _NO_HEARD
        self.listen = listen
        # what the block walk reads, in one tuple: (listen, wait states, MFMA?, on the trail?, folded
        # channels of its events, writes that end older events, those channels split into MFMA
        # results and SrcC reads, and the others)
        self.step: _Step = (listen, self.ws, mfma is not None, self.trail, emit, self.ends, emit & _LONG_CH,
                            emit & ~_LONG_CH)

    def op(self, name: str) -> int:
        """The registers of the operand called ``name`` (0 for a constant or no such operand)."""
        return self.regs.op(name)[0]

    def dpp_step(self) -> _Step:
        """``step`` in a program with DPP (``add_dpp``)."""
        self.add_dpp()
        emit = cast(int, self.emit_dpp)
        return (self.listen, self.ws, self.mfma is not None, self.trail_dpp, emit, self.ends_dpp, emit & _LONG_CH,
                emit & ~_LONG_CH)

    def add_dpp(self) -> None:
        """The ``*_dpp`` view, for programs with DPP: every VGPR write is an event as well (a DPP
        read of the register needs wait states after any writer), which any newer write ends."""
        if self.events_dpp is not None:
            return
        defs, vdefs = self.defs, self.defs & _vector_bits()
        if vdefs:
            fv = self.regs.fdefs & _F_VECTOR
            self.events_dpp = self.events + (_Template("vgpr_write", vdefs, fv, _CH_VGPR, _BY_ANY, self.name),)
            self.emit_dpp = self.emit | fv << _S_VGPR
        else:
            self.events_dpp, self.emit_dpp = self.events, self.emit
        self.ends_dpp = self.ends + (((_BY_ANY, defs),) if defs else ())
        self.trail_dpp = bool(self.events_dpp or self.ends_dpp)


#: what a block walk reads of an instruction (``_Facts.step``)
_Step = tuple[int, int, bool, bool, int, tuple[tuple[int, int], ...], int, int]
_NO_STEP: _Step = (0, 0, False, False, 0, (), 0, 0)

#: pending events at a point of the program, by (origin position, kind), in the order they became pending
_State = dict[tuple[int, str], _Event]
#: one entry of a block walk's trail: clock after the instruction, its position, its folded channels
_Trail = list[tuple[int, int, int]]
#: per kind of writer (_BY_*), the (trail index, registers) of each write that ends older events of that kind
_Ends = tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]


class _Pass:
    """insert_nops' machinery: events, the walk of one block, the fixpoint.

    Inside a walk an instruction's events are not objects: the walk keeps a *trail*, the clock (wait
    states since the block's top, the instruction's own included), position and folded channels of
    each instruction that leaves events or ends them, and the union of the folded channels of the
    events left within the last one or two windows (``heard``: every event younger than the window
    is in it).  An instruction whose ``listen`` misses that union needs no wait states and costs a
    few operations.  One that meets it walks the trail back at most a window, takes the events whose
    channels meet it, works out which of their registers newer writes of the same kind have not
    ended, and classifies those that share a register with it, then the events pending at the
    block's top."""

    def __init__(self, items: list[object], target: Target | str, cfg: CFG | None = None):
        self.items = items
        self.target = get_target(target)
        self.table = _fixed_rules(self.target)
        self.window = max_window(self.target)
        # the longest rule that does not depend on an MFMA's passes: older events of the channels
        # other than MFMA results and SrcC reads need nothing
        self.short = max(self.table.values())
        key = f"hazards.nops.{self.target.name}"
        table = self.table
        facts: list[_Facts | None] = []
        dpp = False
        for i in items:
            if isinstance(i, Instruction):
                f = i.shared.checks.get(key)
                if f is None:
                    f = i.shared.checks[key] = _Facts(i, table)
                facts.append(f)
                dpp = dpp or f.dpp
            else:
                facts.append(None)
        self.facts, self.has_dpp = facts, dpp
        # what the walk reads of each instruction, in one tuple (``_Facts.step``)
        if dpp:
            self.steps = [f.dpp_step() if f is not None else _NO_STEP for f in facts]
        else:
            self.steps = [f.step if f is not None else _NO_STEP for f in facts]
        self.cfg = CFG(items) if cfg is None else cfg
        self.nops = [0] * len(items)              # wait states inserted before each instruction
        self.why = [""] * len(items)
        self.padded: dict[int, list[int]] = {}    # block -> the positions its last walk padded
        self._ws: dict[tuple[str, int | None], int] = {}

    def _wait(self, rule: str, passes: int | None) -> int:
        n = self._ws.get((rule, passes))
        if n is None:
            n = self._ws[(rule, passes)] = wait_states(self.target, rule, passes)
        return n

    # ------------------------------------------------------------------ rules, consumer side
    def _need(self, t: _Template, keys: int, c: _Facts) -> tuple[int, str, int]:
        """Wait states ``c`` needs after an event of template ``t`` still holding ``keys`` (0 if
        none), the rule and the registers."""
        tb, unit = self.table, c.unit
        is_mfma = c.mfma is not None
        uses, defs = c.uses, c.defs
        best: tuple[int, str, int] = (0, "", 0)

        def consider(need: int, rule: str, regs: int) -> None:
            nonlocal best
            if regs and need > best[0]:
                best = (need, rule, regs)

        kind = t.kind
        if kind == "mfma_write":
            p = t.passes
            if c.mfma is not None:
                for opname in ("src0", "src1", "src2"):
                    op = c.op(opname)
                    hit = keys & op
                    if not hit:
                        continue
                    if opname == "src2":
                        if op == t.dst and c.name == t.name:
                            rule, why = "mfma_write->mfma_srcc_exact", "accumulates into the same registers"
                        elif t.xdl:
                            rule = "xdl_write->xdl_srcc_overlap" if c.mfma.xdl else "xdl_write->smfma_srcc_overlap"
                            why = "reads as SrcC (overlapping)"
                        elif not c.mfma.xdl:
                            rule, why = "smfma_write->smfma_srcc_overlap", "reads as SrcC (overlapping)"
                        else:
                            continue                  # an SMFMA result read as SrcC by an XDL MFMA: none
                    else:
                        rule = "xdl_write->mfma_srcab" if t.xdl else "smfma_write->mfma_srcab"
                        why = f"reads as Src{'A' if opname == 'src0' else 'B'}"
                    consider(self._wait(rule, p), why, hit)
            elif unit in ("valu", "trans", "vmem", "flat", "ds"):
                pre = "xdl_write" if t.xdl else "smfma_write"
                consider(self._wait(pre + "->valu_mem_read", p), "reads", keys & uses)
                consider(self._wait(pre + "->valu_mem_write", p), "overwrites", keys & defs)
        elif kind == "mfma_srcc_read":
            if not is_mfma and unit in ("valu", "trans", "vmem", "flat", "ds"):
                consider(self._wait("xdl_srcc_read->valu_mem_write", t.passes), "overwrites", keys & defs)
        elif kind == "valu_write":
            if is_mfma:
                if not t.dot:
                    src = c.op("src0") | c.op("src1") | c.op("src2")
                    consider(tb["valu_write_vgpr->mfma_read"], "reads", keys & src)
                consider(tb["valu_write_exec->mfma"], "runs under", keys & _EXEC_BITS)
            if unit in ("vmem", "flat"):
                consider(tb["valu_write_sgpr->vmem_read"], "reads", keys & uses & ~(_vector_bits() | _SCC_BIT))
            if unit in ("valu", "trans") and not is_mfma:
                consider(tb["valu_write_sgpr->valu_read"], "reads", keys & uses & (_CLASS["s"] | _VCC_BITS))
                name = c.name
                if name in ("v_readlane_b32", "v_writelane_b32"):
                    consider(tb["valu_write_sgpr->lane_select"], "takes its lane select from", keys & c.op("lane"))
                if name in _RWLANE:
                    consider(tb["valu_write_exec->rwlane"], "runs under", keys & _EXEC_BITS)
                if name in ("v_readlane_b32", "v_readfirstlane_b32"):
                    consider(tb["valu_write_vgpr->readlane_src"], "reads", keys & c.op("src0"))
                if t.trans and unit != "trans":
                    consider(tb["trans_write->valu_read"], "reads", keys & uses & _vector_bits())
                if t.dst_sel:
                    consider(tb["dst_sel_write->valu_access"], "uses", keys & (uses | defs))
                if c.dpp:
                    consider(tb["valu_write_exec->dpp"], "runs (DPP) under", keys & _EXEC_BITS)
                if name.startswith("v_permlane") and "valu_write_vgpr->permlane_read" in tb:
                    consider(tb["valu_write_vgpr->permlane_read"], "reads", keys & uses & _vector_bits())
                if name.startswith("v_div_fmas"):
                    consider(tb["valu_write_vcc->div_fmas"], "reads", keys & _VCC_BITS)
                if t.dot:
                    reads = keys & uses
                    if reads and name == t.name:
                        reads = keys & (c.op("src0") | c.op("src1"))
                    consider(tb["dot_write->valu_access"], "reads", reads)
                    if name != t.name:
                        consider(tb["dot_write->valu_access"], "overwrites", keys & defs)
        elif kind == "salu_write_m0":
            if "lds_dma" in c.flags:
                consider(tb["salu_write_m0->lds_dma"], "reads", keys & uses)
        elif kind == "wide_store":
            if unit in ("valu", "trans", "mfma"):
                consider(t.need, "overwrites", keys & defs)
        elif kind == "vgpr_write":
            if c.dpp:
                consider(tb["write_vgpr->dpp_read"], "reads (DPP)", keys & uses & _vector_bits())
        return best

    # ------------------------------------------------------------------ one block
    def _run_block(self, b: Block, state: _State) -> _State:
        """Walk block ``b`` with the pending events ``state`` at its top; return the events at its end.
        The nops each instruction needs are stored (the block's last walk decides).

        Ranks (the order events became pending, which decides between equal requirements): the
        events at the top first, in their order, then the block's own by clock and place.  An
        instruction met again around a loop while its previous event of the same kind is still
        pending refreshes that event in place (it keeps its rank)."""
        window = self.window
        facts = cast("list[_Facts]", self.facts)       # read only at instructions
        nops = self.nops
        for pos in self.padded.pop(b.index, ()):
            nops[pos] = 0
        padded: list[int] = []
        top = list(state.values())
        # the folded channels of the events left within the last one or two generations: MFMA results
        # and SrcC reads for windows, the others (fixed rules) for the longest fixed rule
        long_, short_ = 0, 0
        for ev in top:
            if _LONG[ev.t.ch]:
                long_ |= ev.t.fmask << ev.t.ch * _FOLD
            else:
                short_ |= ev.t.fmask << ev.t.ch * _FOLD
        heard = long_ | short_
        young_long = young_short = 0                 # the channels of the current generations' events
        flip_long, flip_short, short = window, self.short, self.short      # when they end
        clock = 0
        trail: _Trail = []
        ends: _Ends = ([], [], [], [])
        mfmas: list[tuple[int, int]] = []          # (clock after, position) of the block's MFMAs
        origins = {ev.origin for ev in top} if top else None
        renewed: dict[tuple[int, int], int] = {}    # (position, event index) -> index of the top event renewed
        steps = self.steps
        for pos in b.instrs:
            listen, ws, is_mfma, in_trail, emit, ended, emit_long, emit_short = steps[pos]
            hit = listen & heard
            if hit:
                f = facts[pos]
                if hit & _NOT_MFMA_CH or not is_mfma or not self._chain(f, clock, mfmas, top):
                    need = self._consumer(f, pos, clock, hit, trail, ends, top, renewed)
                    if need:
                        clock += need
                        padded.append(pos)
            clock += ws
            if is_mfma:                     # only MFMAs leave events of the long kinds
                mfmas.append((clock, pos))
                long_ |= emit_long
                young_long |= emit_long
            if in_trail:
                for by, m in ended:
                    ends[by].append((len(trail), m))
                trail.append((clock, pos, emit))
                if emit:
                    heard |= emit
                    if emit_short:
                        short_ |= emit_short
                        young_short |= emit_short
                    if origins is not None and pos in origins:
                        self._renew(pos, facts[pos], clock, trail, ends, top, renewed)
            if clock >= flip_short:
                short_, young_short, flip_short = young_short, 0, clock + short
                if clock >= flip_long:
                    long_, young_long, flip_long = young_long, 0, clock + window
                heard = long_ | short_
        self.padded[b.index] = padded
        return self._state_at_end(clock, trail, ends, top, renewed)

    def _chain(self, f: _Facts, clock: int, mfmas: list[tuple[int, int]], top: list[_Event]) -> bool:
        """For an MFMA that only MFMA results may concern: whether none of the MFMAs within the
        window needs wait states before it, because each either shares no register with it or
        writes exactly its SrcC with the same opcode (an accumulation chain) far enough back."""
        src01, src2 = f.op("src0") | f.op("src1"), f.op("src2")
        window = self.window

        def fine(t: _Template, age: int) -> bool:
            m = t.mask
            if m & src01:
                return False
            if m & src2:
                return (src2 == t.dst and f.name == t.name
                        and self._wait("mfma_write->mfma_srcc_exact", t.passes) <= age)
            return True

        facts = cast("list[_Facts]", self.facts)
        for i in range(len(mfmas) - 1, -1, -1):
            stamp, p = mfmas[i]
            age = clock - stamp
            if age >= window:
                return True
            if not fine(facts[p].events[0], age):      # an MFMA's first event: its result
                return False
        return all(fine(ev.t, clock + ev.age) for ev in top
                   if ev.t.kind == "mfma_write" and clock + ev.age < window)

    @staticmethod
    def _unended(m: int, by: int, ends: _Ends, after: int) -> int:
        """``m`` less the registers written by kind ``by`` at trail entries ``after`` and later."""
        writes = ends[by]
        i = len(writes) - 1
        while i >= 0 and m:
            at, e = writes[i]
            if at < after:
                break
            m &= ~e
            i -= 1
        return m

    def _pending(self, clock: int, trail: _Trail, ends: _Ends, top: list[_Event],
                 renewed: dict[tuple[int, int], int]) -> list[tuple[tuple[int, int], _Template, int, int, int]]:
        """Every event pending at ``clock``, as (rank, template, registers still held, age, origin),
        in rank order."""
        window, dpp = self.window, self.has_dpp
        facts = cast("list[_Facts]", self.facts)
        out = []
        i = len(trail) - 1
        while i >= 0:
            stamp, p, _ = trail[i]
            age = clock - stamp
            if age >= window:
                break
            pf = facts[p]
            for k, t in enumerate(pf.events_dpp if dpp and pf.events_dpp is not None else pf.events):
                m = t.mask if t.by < 0 else self._unended(t.mask, t.by, ends, i + 1)
                if m:
                    r = renewed.get((p, k))
                    out.append(((stamp, k) if r is None else (-1, r), t, m, age, p))
            i -= 1
        else:
            out += self._top_pending(clock, ends, top, renewed, None)
        out.sort(key=lambda h: h[0])
        return out

    def _top_pending(self, clock: int, ends: _Ends, top: list[_Event], renewed: dict[tuple[int, int], int],
                     c: _Facts | None) -> list[tuple[tuple[int, int], _Template, int, int, int]]:
        """The events of the block's top still pending at ``clock`` (for ``c``: those that can concern it)."""
        out = []
        dead = set(renewed.values())
        for idx, ev in enumerate(top):
            age = clock + ev.age
            t, m = ev.t, ev.mask
            if age >= (self.window if c is None or _LONG[t.ch] else self.short) or idx in dead:
                continue
            if c is not None and not m & c.heard[t.ch]:
                continue
            if t.by >= 0:
                m = self._unended(m, t.by, ends, 0)
            if m and (c is None or (m & c.heard[t.ch] and m & c.touch)):
                out.append(((-1, idx), t, m, age, ev.origin))
        return out

    def _hits(self, c: _Facts, clock: int, hit: int, trail: _Trail, ends: _Ends, top: list[_Event],
              renewed: dict[tuple[int, int], int]) -> list[tuple[tuple[int, int], _Template, int, int, int]]:
        """The pending events that can make ``c`` wait, in rank order: those of the channels of
        ``hit`` (folded), young enough for their channel's longest rule (MFMA results and SrcC reads:
        the window; the others: the longest fixed rule), on a register ``c`` lists for their channel,
        sharing a register with it."""
        window, dpp = self.window, self.has_dpp
        facts = cast("list[_Facts]", self.facts)
        short = self.short
        limit = window if hit & _LONG_CH else short
        heard, touch = c.heard, c.touch
        out = []
        i = len(trail) - 1
        while i >= 0:
            stamp, p, emit = trail[i]
            age = clock - stamp
            if age >= limit:
                break
            if emit & hit:
                pf = facts[p]
                for k, t in enumerate(pf.events_dpp if dpp and pf.events_dpp is not None else pf.events):
                    ch = t.ch
                    m = t.mask & heard[ch]
                    if not m or (age >= short and not _LONG[ch]):
                        continue
                    if t.by >= 0:
                        m = self._unended(t.mask, t.by, ends, i + 1)
                    if m & heard[ch] and m & touch:
                        r = renewed.get((p, k))
                        out.append(((stamp, k) if r is None else (-1, r), t, m, age, p))
            i -= 1
        else:
            out += self._top_pending(clock, ends, top, renewed, c)
        out.sort(key=lambda h: h[0])
        return out

    def _consumer(self, f: _Facts, pos: int, clock: int, hit: int, trail: _Trail, ends: _Ends,
                  top: list[_Event], renewed: dict[tuple[int, int], int]) -> int:
        """The wait states the instruction at ``pos`` needs (recorded with the reason)."""
        need = 0
        worst = None
        for _, t, m, age, origin in self._hits(f, clock, hit, trail, ends, top, renewed):
            req, rule, regs = self._need(t, m, f)
            if req - age > need:
                need = req - age
                worst = (t, m, req, rule, regs, age, origin)
        if worst is None:
            return 0
        t, m, req, rule, regs, age, origin = worst
        src = self.items[origin]
        assert isinstance(src, Instruction)
        passes = f" ({t.passes} passes)" if t.passes else ""
        already = f", {age} already between" if age else ""
        self.nops[pos] = need
        self.why[pos] = (f"hazard: {src.name}{passes} {_VERB[t.kind]} {format_keys(_keys(m))}, {f.name} {rule} "
                         f"{format_keys(_keys(regs))}: {req} wait state{'s' if req != 1 else ''}{already}")
        return need

    def _renew(self, pos: int, f: _Facts, clock: int, trail: _Trail, ends: _Ends, top: list[_Event],
               renewed: dict[tuple[int, int], int]) -> None:
        """The instruction at ``pos`` leaves its events again (around a loop): one whose previous
        event of the same kind is still pending at the top (young enough, registers left) takes that
        event's place and rank."""
        for k, t in enumerate(cast("tuple[_Template, ...]", f.events_dpp) if self.has_dpp else f.events):
            for idx, ev in enumerate(top):
                if ev.origin != pos or ev.t.kind != t.kind:
                    continue
                if clock + ev.age < self.window:
                    m = ev.mask if t.by < 0 else self._unended(ev.mask, t.by, ends, 0)
                    if m:
                        renewed[(pos, k)] = idx
                break

    def _state_at_end(self, clock: int, trail: _Trail, ends: _Ends, top: list[_Event],
                      renewed: dict[tuple[int, int], int]) -> _State:
        return {(origin, t.kind): _Event(t, origin, m, age)
                for _, t, m, age, origin in self._pending(clock, trail, ends, top, renewed)}

    @staticmethod
    def _merge(states: list[_State]) -> _State:
        out: _State = {}
        for st in states:
            for key, ev in st.items():
                have = out.get(key)
                if have is None:
                    out[key] = _Event(ev.t, ev.origin, ev.mask, ev.age)
                else:
                    have.age = min(have.age, ev.age)
                    have.mask |= ev.mask
        return out

    @staticmethod
    def _same(a: _State, b: _State) -> bool:
        if a.keys() != b.keys():
            return False
        return all(a[k].age == b[k].age and a[k].mask == b[k].mask for k in a)

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
        return self.output_and_insertions()[0]

    def output_and_insertions(self) -> tuple[list[object], list[tuple[int, int]]]:
        """The padded item list, and (position in ``items``, s_nops put before it) in order."""
        padded = sorted(pos for positions in self.padded.values() for pos in positions if self.nops[pos])
        if not padded:
            return list(self.items), []
        s_nop = isa_table(self.target)["s_nop"]
        out: list[object] = []
        inserted: list[tuple[int, int]] = []
        last = 0
        for pos in padded:
            out += self.items[last:pos]
            last = pos
            need = self.nops[pos]
            part = 0
            while need > 0:
                n = min(need, MAX_NOP + 1)
                why = self.why[pos] if part == 0 else "hazard: continued from the s_nop above"
                out.append(s_nop(n - 1, comment=why))
                need -= n
                part += 1
            inserted.append((pos, part))
        out += self.items[last:]
        return out, inserted


def insert_nops(items: Sequence[object], target: Target | str, cfg: CFG | None = None) -> list[object]:
    """``items`` with the minimum ``s_nop``s before each instruction that needs wait states.

    Independent instructions already between the two count (one wait state each; an ``s_nop N``
    already there counts N+1).  At a label the pending hazards of every predecessor (loop back edges
    included) are merged, the youngest winning, so a loop body is padded for the worst way in.
    Each inserted ``s_nop`` carries a comment naming the pair, the registers and the count.
    ``cfg``: the graph of ``items``, if the caller has built it already.
    """
    p = _Pass(list(items), target, cfg)
    p.run()
    return p.output()


def pad(items: Sequence[object], target: Target | str,
        cfg: CFG | None = None) -> tuple[list[object], list[tuple[int, int]]]:
    """``insert_nops``, and where the ``s_nop``s went: (position in ``items``, how many ``s_nop``s were
    put directly before it), in order (``CFG.with_insertions`` and the allocation positions use it)."""
    p = _Pass(list(items), target, cfg)
    p.run()
    return p.output_and_insertions()


# =========================================================================== the verifier
# Implementation B: for each instruction C, walk backwards over every CFG path, at most the longest
# hazard window far, and judge each earlier instruction P on its own: what does the pair (P, C) need?

# Registers of the consumer still exposed to an older producer on the path searched, per kind of
# producer: a newer MFMA write hides older MFMA writes of a register, a newer VALU write older VALU
# writes, a newer SALU write older SALU writes, any write hides older writes for DPP; reads (SrcC,
# store data) are hazards whatever was written since.
_MFMA, _VALU, _SALU, _ANY, _READS = range(5)
# The verifier's filter: per kind of pair, the registers a producer can start such a hazard on
# (``_Profile.emit``) and the registers a consumer can be hit on (``_Profile.listen``), each kind a
# folded register set (_FOLD bits), side by side.  MFMA results, XDL SrcC reads, VALU writes (plain, and
# transcendental / op_sel high half / DOT ones), SALU M0 writes, wide-store data, writes a DPP reads.
_K_VALU, _K_MFMA, _K_SRCC, _K_VALU_WIDE, _K_M0, _K_STORE, _K_DPP = range(7)
_K_LONG = ((1 << _FOLD) - 1) << _K_MFMA * _FOLD | ((1 << _FOLD) - 1) << _K_SRCC * _FOLD
_NOT_K_MFMA = ((1 << 7 * _FOLD) - 1) & ~(((1 << _FOLD) - 1) << _K_MFMA * _FOLD)


class _Profile:
    """What one instruction reads and writes, by role, as register bit masks (computed once for all
    equal instructions, ``Instruction.shared``; ``inst`` is the first of them, read for its operands
    only).  ``emit`` and ``listen`` are the filter's folded sets, by kind of pair (_K_*)."""

    __slots__ = ("inst", "regs", "name", "unit", "reads", "writes", "mfma", "srcc", "dst", "ws", "wide",
                 "wide_need", "dpp", "op_sel_hi", "flags", "is_valu", "is_mem", "kind", "touch", "reads_scalar",
                 "reads_sgpr_vcc", "reads_vector", "reads_vgpr", "emit", "emit_long", "emit_short", "listen", "step")

    def __init__(self, inst: Instruction, table: dict[str, int]):
        desc = inst.desc
        self.inst = inst
        r = self.regs = _regs(inst)
        got = _PROFILE_INFO.get(id(desc))
        (is_valu, is_mem, kind, n_src, wide_unit, mubuf, lanes_rule, wide_rule, lds_dma, store_reader,
         vmem) = got[1] if got is not None and got[0] is desc else _profile_info(desc)
        self.name: str = desc.name
        self.unit: str = desc.unit
        self.flags: frozenset[str] = desc.flags
        reads, writes, freads, fwrites = r.uses, r.defs, r.fuses, r.fdefs
        self.reads, self.writes = reads, writes
        mfma = self.mfma = desc.mfma
        fsrcc = fdst = fwide = 0
        self.srcc = self.dst = 0
        if mfma is not None:
            self.srcc, fsrcc = r.op("src2")
            self.dst, fdst = r._ops[0]
        self.ws = int(inst.ops[0]) + 1 if self.name == "s_nop" else 1
        self.dpp: bool = r.dpp
        # op_sel moves the result into a higher half/byte
        self.op_sel_hi = n_src >= 0 and bool(inst.mods) and bool(inst.mods.get("op_sel")) \
            and 1 in list(inst.mods["op_sel"])[n_src:]
        self.wide = 0
        self.wide_need = 0
        if wide_unit:
            (vdata, fvdata), (data, fdata) = r.op("vdata"), r.op("data")
            if bin(vdata | data).count("1") > 2:
                self.wide, fwide = vdata | data, fvdata | fdata
                if not mubuf:
                    self.wide_need = table["wide_global_store->valu_write_data"]
                elif self.src("soffset"):
                    self.wide_need = table["wide_store_sgpr_soffset->valu_write_data"]
                else:
                    self.wide_need = table["wide_store_const_soffset->valu_write_data"]
        # LLVM's "legacy VALU": VALU that is not an MFMA
        self.is_valu = is_valu
        self.is_mem = is_mem
        # which kind of newer write hides this instruction's older writes of a register (None: no kind
        # of its own; its writes still hide older writes from DPP readers)
        self.kind = kind
        # every register a hazard with this instruction first can be on (every rule below needs one
        # of them in the second instruction's reads or writes)
        self.touch = writes | self.srcc | self.wide
        # its reads by register class, as the rules with it second ask for them
        vector = _vector_bits()
        self.reads_scalar = reads & ~(vector | _SCC_BIT)
        self.reads_sgpr_vcc = reads & (_CLASS["s"] | _VCC_BITS)
        self.reads_vector = reads & vector
        self.reads_vgpr = reads & _CLASS.get("v", 0)
        # the filter, by the rules of _pair: what a pair with this instruction first can be on ...
        emit = fwide << _K_STORE * _FOLD | (fwrites & _F_V) << _K_DPP * _FOLD
        if mfma is not None:
            emit |= fdst << _K_MFMA * _FOLD
            if mfma.xdl:
                emit |= fsrcc << _K_SRCC * _FOLD
        elif is_valu:
            wide_rules = wide_rule or self.op_sel_hi
            emit |= fwrites << (_K_VALU_WIDE if wide_rules else _K_VALU) * _FOLD
        elif kind == _SALU and writes & _M0_BIT:
            emit |= _F_M0 << _K_M0 * _FOLD
        self.emit = emit
        self.emit_long, self.emit_short = emit & _K_LONG, emit & ~_K_LONG
        # ... and what a pair with it second can be on
        both = freads | fwrites
        listen = 0
        if mfma is not None:
            listen = freads << _K_MFMA * _FOLD | both << _K_VALU * _FOLD | both << _K_VALU_WIDE * _FOLD
        elif is_valu or is_mem:
            listen = both << _K_MFMA * _FOLD | fwrites << _K_SRCC * _FOLD
        if vmem:
            scalar = freads & _F_SCALAR
            listen |= scalar << _K_VALU * _FOLD | scalar << _K_VALU_WIDE * _FOLD
        if is_valu:
            lanes = self.dpp or lanes_rule
            listen |= (both if lanes else freads & _F_SCALAR) << _K_VALU * _FOLD | both << _K_VALU_WIDE * _FOLD
            if self.dpp:
                listen |= (freads & _F_V) << _K_DPP * _FOLD
        if lds_dma:
            listen |= freads << _K_M0 * _FOLD
        if store_reader:
            listen |= fwrites << _K_STORE * _FOLD
        self.listen = listen
        # what the block walk reads, in one tuple
        self.step = (listen, self.ws, mfma is not None, emit, self.emit_long, self.emit_short)

    def src(self, name: str) -> int:
        """The registers of the operand called ``name`` (0 for a constant or no such operand)."""
        return self.regs.op(name)[0]


#: per instruction definition (by identity, kept beside its answer): what ``_Profile`` decides from
#: the definition alone
_PROFILE_INFO: dict[int, tuple[object, tuple[Any, ...]]] = {}


def _profile_info(desc: InstrDef) -> tuple[Any, ...]:
    name, unit, mfma = desc.name, desc.unit, desc.mfma
    is_valu = unit in ("valu", "trans") and mfma is None
    kind = _MFMA if mfma is not None else _VALU if is_valu else _SALU if unit == "salu" else None
    n_src = len({spec.name for spec in desc.operands if spec.name.startswith("src")}) if desc.fmt == "VOP3" else -1
    info = (is_valu, unit in ("vmem", "flat", "ds"), kind, n_src, "store" in desc.flags and unit in ("vmem", "flat"),
            desc.fmt == "MUBUF", name in _RWLANE or name.startswith(("v_permlane", "v_div_fmas")),
            unit == "trans" or name.startswith("v_dot"), "lds_dma" in desc.flags, unit in ("valu", "trans", "mfma"),
            unit in ("vmem", "flat"))
    _PROFILE_INFO[id(desc)] = (desc, info)
    return info


#: the registers still exposed per producer kind, indexed by the five constants above
_Live = tuple[int, int, int, int, int]


def _pair(target: Target, t: dict[str, int], p: _Profile, c: _Profile,
          live: _Live) -> list[tuple[int, int, str]]:
    """Every (wait states, registers, reason) the pair needs, for the registers still ``live``.
    A reason is a phrase with ``{regs}`` in it, completed by the producer."""
    found: list[tuple[int, int, str]] = []
    name = target.name
    cls = _READS if p.kind is None else p.kind

    def need(n: int, regs: int, reason: str, exposed: int | None = None) -> None:
        regs &= live[cls if exposed is None else exposed]
        if regs and n > 0:
            found.append((n, regs, reason))

    if p.mfma is not None:
        P, xdl = p.mfma.passes, p.mfma.xdl
        dst = p.dst
        if c.mfma is not None:
            for opname in ("src0", "src1"):
                regs = c.src(opname) & dst
                if regs:
                    rule = "xdl_write->mfma_srcab" if xdl else "smfma_write->mfma_srcab"
                    need(wait_states(name, rule, P), regs,
                         f"reads {{regs}} as Src{'AB'[opname == 'src1']}, written by")
            regs = c.srcc & dst
            if regs:
                if c.srcc == p.dst and c.name == p.name:
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
                ops = c.src("src0") | c.src("src1") | c.srcc
                need(t["valu_write_vgpr->mfma_read"], w & ops, "reads {regs} written by")
            need(t["valu_write_exec->mfma"], w & _EXEC_BITS, "runs under EXEC written by")
        if c.unit in ("vmem", "flat"):
            need(t["valu_write_sgpr->vmem_read"], w & c.reads_scalar, "reads {regs} written by")
        if c.is_valu:
            need(t["valu_write_sgpr->valu_read"], w & c.reads_sgpr_vcc, "reads {regs} written by")
            if c.name in ("v_readlane_b32", "v_writelane_b32"):
                need(t["valu_write_sgpr->lane_select"], w & c.src("lane"), "takes its lane select {regs} from")
            if c.name in ("v_readlane_b32", "v_readfirstlane_b32", "v_writelane_b32"):
                need(t["valu_write_exec->rwlane"], w & _EXEC_BITS, "runs under {regs} written by")
            if c.name in ("v_readlane_b32", "v_readfirstlane_b32"):
                need(t["valu_write_vgpr->readlane_src"], w & c.src("src0"), "reads {regs} written by")
            if p.unit == "trans" and c.unit != "trans":
                need(t["trans_write->valu_read"], w & c.reads_vector,
                     "reads {regs} written by the transcendental")
            if p.op_sel_hi:
                need(t["dst_sel_write->valu_access"], w & (c.reads | c.writes),
                     "uses {regs}, written (op_sel high half) by")
            if c.dpp:
                need(t["valu_write_exec->dpp"], w & _EXEC_BITS, "runs (DPP) under {regs} written by")
            if "valu_write_vgpr->permlane_read" in t and c.name.startswith("v_permlane"):
                need(t["valu_write_vgpr->permlane_read"], w & c.reads_vgpr,
                     "reads {regs} written by")
            if c.name.startswith("v_div_fmas"):
                need(t["valu_write_vcc->div_fmas"], w & _VCC_BITS, "reads {regs} written by")
            if p.name.startswith("v_dot"):
                if c.name == p.name:
                    ab = c.src("src0") | c.src("src1")
                    need(t["dot_write->valu_access"], w & ab, "reads {regs} as SrcA/B, written by")
                else:
                    need(t["dot_write->valu_access"], w & (c.reads | c.writes), "uses {regs} written by")
    elif p.unit == "salu":
        if "lds_dma" in c.flags:
            need(t["salu_write_m0->lds_dma"], p.writes & c.reads & _M0_BIT, "reads {regs} written by")
    if p.wide and c.unit in ("valu", "trans", "mfma"):
        need(p.wide_need, p.wide & c.writes, "overwrites {regs} still being read by the store", _READS)
    if c.dpp and c.is_valu:
        need(t["write_vgpr->dpp_read"], p.writes & c.reads_vgpr,
             "reads {regs} (DPP) written by", _ANY)
    return found


def _what(p: _Profile) -> str:
    if p.mfma is not None:
        return f"{'XDL' if p.mfma.xdl else 'non-XDL'} MFMA, {p.mfma.passes} passes"
    return p.unit.upper()


def check_hazards(items: Sequence[object], target: Target | str, cfg: CFG | None = None) -> list[Violation]:
    """Every pair of instructions with fewer wait states between them than the hazard table asks,
    on any path of the CFG (loop back edges included).  An empty list means the program is clean.

    Cost: a walk over each block keeps the union of what the producers of the last one or two
    windows (``max_window``: 19 or 20 wait states) can start a hazard on, by kind of pair
    (``_Profile.emit``; at a block's top, what can come in from its predecessors); an instruction
    whose ``listen`` misses it cannot be the second of any pair and costs a few operations.  Any
    other instruction is searched: it looks back at most the window (so at most that many
    instructions on a path), and only an earlier instruction that writes or holds one of the
    registers it touches is classified; the walk within a block is a plain loop, and only a walk that
    reaches the top of its block inside the window goes on over the CFG (a shortest-distance-first
    search over the predecessors).  ``cfg``: the graph of ``items``, if the caller has built it
    already."""
    target = get_target(target)
    t = _fixed_rules(target)
    window = max_window(target)
    short = max(t.values())                  # the longest rule that does not depend on an MFMA's passes
    if cfg is None:
        cfg = CFG(list(items))
    key = f"hazards.verifier.{target.name}"
    profiles: list[_Profile | None] = []
    for item in items:
        if isinstance(item, Instruction):
            p = item.shared.checks.get(key)
            if p is None:
                p = item.shared.checks[key] = _Profile(item, t)
            profiles.append(p)
        else:
            profiles.append(None)
    reachable = cfg.reachable()
    entry = _entry_filters(cfg, profiles, reachable, window)

    def prev(pos: int) -> list[int]:    # instructions that can run just before, on paths the kernel can take
        return [q for q in cfg.prev_instructions(pos) if cfg.block_of(q).index in reachable]

    found: dict[tuple[int, int, str], tuple[int, Violation]] = {}

    def visit(dist: int, ppos: int, p: _Profile, c: _Profile, cpos: int, live: _Live, interest: int) -> _Live:
        """Judge the pair (p, c) ``dist`` wait states apart; return what stays exposed behind p."""
        for n, regs, reason in _pair(target, t, p, c, live):
            if dist < n:
                key = (cpos, ppos, reason)
                if key not in found or found[key][0] > dist:
                    text = format_keys(_keys(regs))
                    found[key] = (dist, Violation(
                        cpos, cast(Instruction, items[cpos]), text,
                        f"{reason.format(regs=text)} #{ppos} {cast(Instruction, items[ppos]).render(False)} "
                        f"({_what(p)}) with {dist} wait state{'s' if dist != 1 else ''} between; "
                        f"needs {n}", source=ppos, kind="hazard"))
        if p.writes & interest:
            exposed = list(live)
            if p.kind is not None:
                exposed[p.kind] &= ~p.writes
            exposed[_ANY] &= ~p.writes
            live = (exposed[0], exposed[1], exposed[2], exposed[3], exposed[4])
        return live

    def search(instrs: list[int], block: list[_Profile], slot: int, window: int) -> None:
        """Every pair with the instruction at ``slot`` second, less than ``window`` wait states apart."""
        cpos, c = instrs[slot], block[slot]
        interest = c.reads | c.writes
        # (distance, producer position, registers still exposed on this path, per producer kind)
        live: _Live = (interest,) * 5
        # within the block: one path, distances only grow
        dist = 0
        for j in range(slot - 1, -1, -1):
            p = block[j]
            if p.touch & interest:
                live = visit(dist, instrs[j], p, c, cpos, live, interest)
            dist += p.ws
            if dist >= window:
                return
        # the top of the block inside the window: every way in, shortest distance first.  (An
        # instruction of this block met again through a loop with the same registers exposed is
        # judged again, farther away: it can only repeat what was found.)
        heap = [(dist, ppos, live) for ppos in prev(instrs[0])]
        heapq.heapify(heap)
        seen: set[tuple[int, _Live]] = set()
        while heap:
            dist, ppos, live = heapq.heappop(heap)
            if (ppos, live) in seen:
                continue
            seen.add((ppos, live))
            p = cast(_Profile, profiles[ppos])
            if p.touch & interest:
                live = visit(dist, ppos, p, c, cpos, live, interest)
            nd = dist + p.ws
            if nd >= window:
                continue
            for rpos in prev(ppos):
                heapq.heappush(heap, (nd, rpos, live))

    def chain(c: _Profile, clock: int, mfmas: list[tuple[int, int]]) -> bool:
        """For an MFMA only MFMA results may concern, far enough into its block that the window stays
        in it: whether every MFMA of the window either shares no register with it or writes exactly its
        SrcC with the same opcode (an accumulation chain) at least the chain's count before."""
        src01 = c.src("src0") | c.src("src1")
        for i in range(len(mfmas) - 1, -1, -1):
            after, j = mfmas[i]
            dist = clock - after
            if dist >= window:
                return True
            p = block[j]
            if p.dst & src01:
                return False
            if p.dst & c.srcc:
                passes = cast(MfmaInfo, p.mfma).passes
                if not (c.srcc == p.dst and c.name == p.name
                        and dist >= wait_states(target, "mfma_write->mfma_srcc_exact", passes)):
                    return False
        return True

    for bi in sorted(reachable):
        instrs = cfg.blocks[bi].instrs
        block = cast("list[_Profile]", [profiles[pos] for pos in instrs])
        # what the producers of the last one or two windows can start (a superset of the last window)
        # what the producers of the last one or two generations can start: on MFMA results and SrcC
        # reads, generations of a window; on the others (fixed rules), of the longest fixed rule
        heard, clock = entry[bi], 0
        long_, short_ = heard & _K_LONG, heard & ~_K_LONG
        young_long = young_short = 0
        flip_long, flip_short = window, short
        mfmas: list[tuple[int, int]] = []          # (wait states from the top to just after, slot) of its MFMAs
        for slot, c in enumerate(block):
            listen, ws, is_mfma, emit, emit_long, emit_short = c.step
            hit = listen & heard
            if hit and (hit & _NOT_K_MFMA or not is_mfma or clock < window or not chain(c, clock, mfmas)):
                # a pair on MFMA results or SrcC reads can need up to the window; any other, the
                # longest fixed rule
                search(instrs, block, slot, window if hit & _K_LONG else short)
            clock += ws
            if is_mfma:                     # only MFMAs start pairs of the long kinds
                mfmas.append((clock, slot))
                long_ |= emit_long
                young_long |= emit_long
            if emit:
                heard |= emit
                if emit_short:
                    short_ |= emit_short
                    young_short |= emit_short
            if clock >= flip_short:
                short_, young_short, flip_short = young_short, 0, clock + short
                if clock >= flip_long:
                    long_, young_long, flip_long = young_long, 0, clock + window
                heard = long_ | short_
    return sorted((v for _, v in found.values()), key=lambda v: (v.pos, v.source or 0))


def _entry_filters(cfg: CFG, profiles: Sequence[_Profile | None], reachable: AbstractSet[int],
                   window: int) -> dict[int, int]:
    """For each block, the union of ``emit`` of every instruction that can run less than a window
    before its top: the last window of each predecessor, and through a predecessor shorter than the
    window, what comes into that one (to a fixpoint)."""
    tail: dict[int, int] = {}
    short: dict[int, bool] = {}
    known = cast("Sequence[_Profile]", profiles)
    for bi, b in enumerate(cfg.blocks):
        m, dist = 0, 0
        for pos in reversed(b.instrs):
            p = known[pos]
            m |= p.emit
            dist += p.ws
            if dist >= window:
                break
        tail[bi], short[bi] = m, dist < window
    entry = {bi: 0 for bi in range(len(cfg.blocks))}
    changed = True
    while changed:
        changed = False
        for bi in sorted(reachable):
            m = 0
            for q in cfg.blocks[bi].preds:
                m |= tail[q] | (entry[q] if short[q] else 0)
            if m != entry[bi]:
                entry[bi] = m
                changed = True
    return entry
