"""The sanitizer: finds what hand-written assembly gets wrong and the hardware does not report.

Categories (see report.py):

* ``missing-wait`` — a register read (or overwritten) before the memory instruction that writes it
  has been waited for.  A per-wave scoreboard follows the counters as the hardware keeps them: VMEM
  results (and LDS DMA) retire in order on ``vmcnt``; LDS results retire in order on ``lgkmcnt``; SMEM
  results may return out of order, so they are ready only after ``lgkmcnt(0)``.  The emulator writes
  every result at issue, so a kernel that passes here reads nothing the hardware could deliver late.
* ``hazard`` — too few wait states between an instruction and a dependent one where the hardware has
  no interlock (MFMA results, VALU writes read by MFMA/DPP/VMEM, transcendental results, M0 before LDS
  DMA, VCC before v_div_fmas).  The wait-state counts are ``isagen.checks.hazards.WAIT_STATES`` (LLVM's
  GCNHazardRecognizer); each instruction is one wait state, ``s_nop N`` is N+1.
* ``lds-race`` — one wave reads LDS words another wave of its workgroup wrote, or writes words another
  wave read or wrote, with no ``s_barrier`` between (per-workgroup barrier generations).  An access
  still outstanding when its wave passes a barrier (no ``s_waitcnt`` covering it) counts as made after
  the barrier too: a write, because it may land after the barrier; a DS read, because the LDS words it
  reads may be sampled at any time until the ``lgkmcnt`` wait that covers it, so another wave's write
  after the barrier can change what it returns (write-after-read).
* ``uninitialized`` — a read of a VGPR lane or SGPR that neither the hardware's initial state nor any
  instruction has written.
* ``oob-global`` / ``oob-lds`` are checked by the memory instructions themselves (always on).
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from isagen.checks import hazards as HZ
from isagen.runtime.emu import report as R
from isagen.runtime.emu import san_memo
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.wave import ALL, EXEC_LO, M0, VCC_LO
from isagen.targets import get_target

NEVER = -(1 << 40)


class MfmaKind:
    """What the hazard rules need of an MFMA: its passes and whether it runs on the XDL pipe, from the
    ISA layer's MFMA table (``Target.mfma`` raises a TargetError naming the target and the mnemonic for
    an MFMA the table does not have)."""

    __slots__ = ("name", "passes", "xdl")

    def __init__(self, name: str, target: str, cbsz: int = 0, blgp: int = 0):
        info = get_target(target).mfma(name)
        self.name = name
        self.passes = info.passes_for(cbsz, blgp)     # f8f6f4 with fp6/fp4 A and B: half the passes
        self.xdl = info.xdl


# ============================================================================ per-instruction metadata

_SERIALS = itertools.count()


def _reg_keys(reg, ctx) -> list[int]:
    """Sanitizer keys of a register operand: unified VGPR index, or nregs + scalar code."""
    if reg.file in ("v", "a"):
        try:
            i = ctx.vindex(reg)
        except Exception:
            return []
        return list(range(i, i + reg.count))
    if reg.file in ("s", "ttmp") or (reg.file == "special" and reg.index < 128):
        c = reg.code
        return [ctx.nregs + c + k for k in range(reg.count) if c + k < 128]
    return []


def instrument(step, ctx) -> None:
    """Wrap ``step.fn`` with the sanitizer's checks (called once per instruction at compile time)."""
    inst = step.inst
    if step.error:
        return
    name = inst.name
    fam = inst.family
    nregs = ctx.nregs
    is_valu = fam in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P") and not inst.mai
    is_mfma = bool(inst.mai)
    is_mem = fam in ("MUBUF", "MTBUF", "GLOBAL", "FLAT", "SCRATCH", "DS")
    is_trans = step.cat == "trans"
    if is_mfma:
        step.mfma = MfmaKind(name, ctx.target, inst.mods.get("cbsz", 0), inst.mods.get("blgp", 0))
    accumulate = name in ("v_fmac_f32", "v_mac_f32", "v_fmac_f16", "v_mac_f16", "v_fmac_f64") or \
        name.startswith(("v_dot2c", "v_dot4c", "v_dot8c")) or "_atomic_" in name or name.startswith("ds_")
    reads, writes = [], []
    uninit_reads = []
    # a spill may save a register nothing wrote (callee-saved registers in a function prologue, LLVM's
    # SGPR-to-VGPR-lane spills with v_writelane): the data of scratch stores and of v_writelane is not
    # checked for initialisation (copying an undefined value is legal; using it is the bug)
    spill = (fam == "SCRATCH" and "_store_" in name) or name == "v_writelane_b32"
    for o in inst.operands:
        if o.kind != "reg" or o.reg is None:
            continue
        keys = _reg_keys(o.reg, ctx)
        if o.read:
            reads += keys
            if not (o.write and not accumulate) and not (spill and o.role in ("data", "src0")):
                uninit_reads += keys
        if o.write:
            writes += keys
    # implicit reads the decoder does not list
    if step.cat == "lds_dma" or name in ("ds_read_addtid_b32", "ds_write_addtid_b32") or name.startswith("s_movrel"):
        reads.append(nregs + M0)
        uninit_reads.append(nregs + M0)
    if name in ("s_set_gpr_idx_on", "s_set_gpr_idx_idx", "s_set_gpr_idx_mode"):
        # VGPR index mode keeps its index and operand mask in M0 (the other bits are kept: a read too)
        reads.append(nregs + M0)
        writes.append(nregs + M0)
    if name in ("v_div_fmas_f32", "v_div_fmas_f64"):
        reads += [nregs + VCC_LO, nregs + VCC_LO + 1]
        uninit_reads += [nregs + VCC_LO, nregs + VCC_LO + 1]
    step.reads = tuple(dict.fromkeys(reads))
    step.writes = tuple(dict.fromkeys(writes))
    uninit_v = tuple(k for k in dict.fromkeys(uninit_reads) if k < nregs)
    uninit_s = tuple(k for k in dict.fromkeys(uninit_reads) if k >= nregs)
    wv = tuple(k for k in step.writes if k < nregs)
    wsc = tuple(k for k in step.writes if k >= nregs)
    src_c: set[int] = set()
    src_ab: set[int] = set()
    if is_mfma:
        for o in inst.operands:
            if o.kind == "reg" and o.read:
                ks = _reg_keys(o.reg, ctx)
                (src_c if o.role == "src2" else src_ab).update(ks)
    is_dpp = inst.variant == "dpp"
    dpp_src: set[int] = set()
    if is_dpp:
        o = next((o for o in inst.operands if o.role == "src0" and o.kind == "reg"), None)
        if o is not None:
            dpp_src = set(_reg_keys(o.reg, ctx))
    vmem_sreads = (tuple(k for k in step.reads if k >= nregs)
                   if fam in ("MUBUF", "MTBUF", "GLOBAL", "FLAT", "SCRATCH") else ())
    counter, result = step.counter, step.result
    also_lgkm = bool(step.flags.get("also_lgkm")) if isinstance(step.flags, dict) else False
    waitcnt = name == "s_waitcnt"
    wflags = step.flags if waitcnt else None
    nop_slots = step.nop_slots
    base = step.fn
    target = ctx.target
    cls = "mfma" if is_mfma else "valu" if is_valu else "mem" if is_mem else "salu" if fam.startswith("SOP") else "smem"
    writes_exec = any(k in (nregs + EXEC_LO, nregs + EXEC_LO + 1) for k in step.writes) or name.startswith("v_cmpx")
    writes_m0 = (nregs + M0) in step.writes and fam.startswith("SOP")
    rules = HZ.WAIT_STATES[get_target(target).name]
    # instructions whose implicit M0 read matters for the LDS-DMA hazard
    reads_m0_dma = step.cat == "lds_dma"
    is_div_fmas = name in ("v_div_fmas_f32", "v_div_fmas_f64")
    hz = _HazInfo()
    hz.cls, hz.rules, hz.src_c, hz.src_ab, hz.dpp_src = cls, rules, src_c, src_ab, dpp_src
    hz.src_c_sorted, hz.wv_sorted = tuple(sorted(src_c)), tuple(sorted(wv))
    hz.vmem_sreads, hz.is_trans, hz.reads_m0_dma, hz.is_div_fmas = vmem_sreads, is_trans, reads_m0_dma, is_div_fmas
    hz.writes_exec, hz.writes_m0, hz.is_dpp = writes_exec and is_valu, writes_m0, is_dpp
    # SGPR operands of a VALU: the explicit ones, and VCC however it is read (LLVM checkVALUHazards:
    # explicit_uses() plus readsRegister(VCC))
    hz.valu_sreads = tuple(dict.fromkeys(
        k for o in inst.operands if is_valu and o.kind == "reg" and o.read
        and o.reg.file in ("s", "ttmp", "special") and (not o.implicit or o.reg.code in (VCC_LO, VCC_LO + 1))
        for k in _reg_keys(o.reg, ctx)))
    hz.rwlane = name in ("v_readlane_b32", "v_readfirstlane_b32", "v_writelane_b32")
    src0 = next((o for o in inst.operands if o.role == "src0"), None)
    src1 = next((o for o in inst.operands if o.role == "src1"), None)
    hz.readlane_src = tuple(_reg_keys(src0.reg, ctx)) if (name in ("v_readlane_b32", "v_readfirstlane_b32")
                                                          and src0 is not None and src0.kind == "reg") else ()
    hz.lane_sel = tuple(_reg_keys(src1.reg, ctx)) if (name in ("v_readlane_b32", "v_writelane_b32")
                                                      and src1 is not None and src1.kind == "reg") else ()

    # scalar ALU and SMEM instructions read and write no VGPR and are none of the instructions the hazard
    # rules name as the second of a pair (MFMA, VALU, DPP, VMEM, LDS DMA, v_readlane...), so the hazard
    # checks cannot find anything in them; their history update only matters when an SALU writes M0
    scalar = cls == "salu" or fam == "SMEM"
    haz_check = not (scalar and not reads_m0_dma and not is_div_fmas and not any(k < nregs for k in step.reads))
    haz_record = haz_check or hz.writes_m0 or bool(wv)

    def checked(st, ws, execute=True):
        san = st.san
        # ------------------------------------------------------------ before
        if waitcnt:
            san.waitcnt(st, ws, wflags)
        else:
            if san.any_pending:
                san.check_pending(st, ws, inst, step.reads, step.writes, result)
            if uninit_v:
                san.check_uninit_v(st, ws, inst, uninit_v, is_mfma)
            if uninit_s:
                san.check_uninit_s(st, ws, inst, uninit_s)
            if haz_check and san.haz:
                san.check_hazards(st, ws, inst, step, hz)
        # ------------------------------------------------------------ execute
        if execute:
            base(st, ws)
        # ------------------------------------------------------------ after
        if wv:
            san.mark_v(st, ws, wv, is_mfma)
        if wsc:
            san.mark_s(st, ws, wsc)
        if counter is not None:
            san.issue(st, ws, counter, result, step.writes, step.idx, also_lgkm)
        if haz_record and san.haz:
            san.record(st, ws, step, hz, wv, wsc)
        san.advance(ws, nop_slots)
    # the checks alone, and the instruction alone: a fused run of MFMAs (executor._mfma_run) or a native
    # run of VALU/SALU instructions that write no EXEC (san_cgen.py) makes each instruction's checks in
    # program order, then runs the run's arithmetic in one native call (the checks read no register
    # value but EXEC)
    checked.san_checks = lambda st, ws: checked(st, ws, False)      # type: ignore[attr-defined]
    checked.san_base = base                                         # type: ignore[attr-defined]
    # what a native run's fused checks (san_cgen.py) need of this instruction
    checked.san_info = _StepChecks(step, inst, hz, uninit_v, uninit_s, wv, wsc, haz_check,  # type: ignore[attr-defined]
                                   haz_record, nop_slots, waitcnt or counter is not None)
    step.fn = checked


class _StepChecks:
    """One instruction's sanitizer checks and records, as data (see san_cgen.SanPlan.run_handler)."""
    __slots__ = ("step", "inst", "hz", "uninit_v", "uninit_s", "wv", "wsc", "haz_check", "haz_record",
                 "nop_slots", "counts")

    def __init__(self, step, inst, hz, uninit_v, uninit_s, wv, wsc, haz_check, haz_record, nop_slots, counts):
        self.step, self.inst, self.hz = step, inst, hz
        self.uninit_v, self.uninit_s, self.wv, self.wsc = uninit_v, uninit_s, wv, wsc
        self.haz_check, self.haz_record, self.nop_slots = haz_check, haz_record, nop_slots
        self.counts = counts          # s_waitcnt, or an instruction a counter follows (issue())


class _HazInfo:
    """What the hazard checks need to know about one instruction (computed once)."""
    __slots__ = ("cls", "rules", "src_c", "src_ab", "dpp_src", "vmem_sreads", "is_trans", "reads_m0_dma",
                 "is_div_fmas", "writes_exec", "writes_m0", "is_dpp", "valu_sreads", "rwlane", "readlane_src",
                 "lane_sel", "src_c_sorted", "wv_sorted")

    cls: str                         # 'mfma' | 'valu' | 'mem' | 'salu' | 'smem'
    rules: dict[str, HZ.WaitRule]    # the target's wait-state table
    src_c: set[int]                  # sanitizer keys of an MFMA's accumulator input (src2)
    src_ab: set[int]                 # ... and of its A/B inputs
    dpp_src: set[int]
    vmem_sreads: tuple[int, ...]     # SGPRs a VMEM instruction reads (address, resource)
    is_trans: bool
    reads_m0_dma: bool
    is_div_fmas: bool
    writes_exec: bool
    writes_m0: bool
    is_dpp: bool
    valu_sreads: tuple[int, ...]
    rwlane: bool
    readlane_src: tuple[int, ...]
    lane_sel: tuple[int, ...]
    src_c_sorted: tuple[int, ...]    # src_c in order (an MFMA's accumulator range)
    wv_sorted: tuple[int, ...]       # the VGPRs it writes, in order (an MFMA's result range)


# ============================================================================ per-batch state

_KEEP_GEN_WAVE = np.int64(~0xFFFFFFE0)        # generation bits and wave bits of a stamp
_SAME = np.int64(1 << 30)                     # write stamp: several waves wrote this same value
_MASK = np.int64(0xF << 6)                    # the bytes of the word the access covered
_KEEP_GEN_WAVE_SAME = _KEEP_GEN_WAVE | _SAME
_KEEP_GEN_FLAG_WAVE = np.int64(~0xFFFFFFC0)   # generation, flag and wave bits
_LATE_READ = _SAME                            # read stamp: the read was still outstanding at a barrier
_LOW = np.int64(0xFFFFFFFF)                   # everything of a stamp but its generation
_BIG = np.int64(1 << 62)


class _Words:
    """The words [waves, 64 * nw] an aligned access of nw words per lane covers, kept as their first
    words [waves, 64] until needed."""
    __slots__ = ("w0", "nw")

    def __init__(self, w0: np.ndarray, nw: int):
        self.w0, self.nw = w0, nw


def _words(fl):
    if isinstance(fl, _Words):
        return _expand(fl.w0, fl.nw)
    return fl


def _expand(w0, nw: int):
    """[waves, 64 * nw]: each lane's first word ``w0`` [waves, 64] and the nw - 1 after it, in order
    (as ``(w0[..., None] + arange(nw)).reshape(waves, -1)``, without numpy's slow length-nw inner loop)."""
    if nw == 1:
        return w0
    out = np.empty(w0.shape + (nw,), np.int64)
    for k in range(nw):
        np.add(w0, k, out=out[..., k])
    return out.reshape(w0.shape[0], -1)


def _full(v, shape):
    """``v`` broadcast to ``shape`` as a contiguous array (a fancy-index store of a broadcast value is
    several times slower than of a full one)."""
    return v if v.shape == shape else np.ascontiguousarray(np.broadcast_to(v, shape))


def _spans_overlap(lo, hi) -> bool:
    """Whether two of the word spans [lo[i], hi[i]] meet."""
    o = np.argsort(lo, kind="stable")
    return bool((lo[o[1:]] <= hi[o[:-1]]).any())


def _window(prog) -> int:
    """The most wait states any hazard rule can ask for in this program: the target's table, with the
    pass-dependent rules for the passes of every MFMA the program holds (no check looks further back)."""
    w = getattr(prog, "san_window", None)
    if w is None:
        t = get_target(prog.ctx.target)
        rules = HZ.WAIT_STATES[t.name]
        passes = set()
        for inst in prog.insts:
            if inst.mai:
                try:
                    passes.add(t.mfma(inst.name).passes_for(inst.mods.get("cbsz", 0), inst.mods.get("blgp", 0)))
                except Exception:       # (its step is an error step: it never records)
                    pass
        w = HZ.max_window(t)
        for rule, v in rules.items():
            if isinstance(v, dict):
                w = max([w] + [HZ.wait_states(t, rule, p) for p in passes])
        assert w < 200, w              # the trace keeps the last 256 records (Sanitizer.record)
        prog.san_window = w
    return w


def _native_shadow(san, st):
    from isagen.runtime.emu import san_native
    if X.active() != "cpu" or san_native.library() is None:
        return None
    return san_native.LdsShadow(san, st)


class _ShadowPool:
    """The LDS race shadow's large arrays (the stamps, their scratch, the block map), kept per device from
    one batch's sanitizer to the next one of the same shape instead of allocating and filling ~2 x 8
    bytes a word of every workgroup's LDS per launch.  A shadow array is only ever compared with stamps
    of the current generation (the generation bits of a stamp, the block map's entries) or written
    before it is read (the scratch), so a stamp left by an earlier batch is as good as none provided its
    generation is below every generation of the new batch: the new sanitizer's generations start one
    past the largest the last one reached (``base``).  Arrays are handed back when their sanitizer is
    collected or closed (its batch is done: ``Sanitizer.close``), so no two sanitizers share them."""

    _pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    LIMIT = 1 << 30          # generations (int32) start again from 0, with filled arrays, past this

    @classmethod
    def take(cls, device, n: int, nblk: int) -> tuple[tuple, int]:
        pool = cls._pools.get(device) if device is not None else None
        ent = pool.pop((n, nblk), None) if pool is not None else None
        if ent is not None:
            return ent
        return (np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
                np.full(nblk, -1, np.int64)), 0

    @classmethod
    def give_back_later(cls, san, device, arrs, gen):
        """A finalizer of ``san`` that hands its arrays back (called early by ``Sanitizer.close``), or None
        where the device takes no weak reference."""
        try:
            ref = weakref.ref(device)
        except TypeError:
            return None
        return weakref.finalize(san, cls._give_back, ref, arrs, gen)

    @classmethod
    def _give_back(cls, ref, arrs, gen) -> None:
        device = ref()
        if device is None:
            return
        base = int(gen.max()) + 1 if gen.size else 0
        if base >= cls.LIMIT:
            for a in (arrs[0], arrs[1], arrs[4]):
                a.fill(-1)
            base = 0
        cls._pools.setdefault(device, {})[(arrs[0].size, arrs[4].size)] = (arrs, base)


class Sanitizer:
    """Scoreboard, initialisation map, hazard history and LDS race shadow of one batch."""

    def __init__(self, prog, st, device=None):
        ctx = prog.ctx
        self.prog = prog
        self.ctx = ctx
        self.nregs = nregs = ctx.nregs
        W = st.W
        K = nregs + 128
        self.K = K
        # the counters of the three kinds are the rows of one array each (the memo, san_memo.py, compares
        # issued - done of every kind in one operation); every update is made in place
        self.issued_all = np.zeros((3, W), np.int64)
        self.done_all = np.zeros((3, W), np.int64)
        self.issued = {"vm": self.issued_all[0], "lds": self.issued_all[1], "smem": self.issued_all[2]}
        self.done = {"vm": self.done_all[0], "lds": self.done_all[1], "smem": self.done_all[2]}
        self.pend = {k: np.zeros((K, W), np.int64) for k in ("vm", "lds", "smem")}
        # the producer of a pending result; read only where pend > done, i.e. after issue() wrote both
        # (zeros: the pages are only touched where written, unlike a fill with -1)
        self.prod = {k: np.zeros((K, W), np.int64) for k in ("vm", "lds", "smem")}
        self.maybe = {"vm": set(), "lds": set(), "smem": set()}
        self.any_pending = False
        # the lanes each register has been written in; a register in vfull/sfull (written in every lane
        # of every wave) is never looked up here again, so its row is not written (nor its pages touched)
        self.vinit = np.zeros((nregs, W, 64), np.bool_)
        self.sinit = np.zeros((128, W), np.bool_)
        self.vfull: set[int] = set()
        self.serial = next(_SERIALS)         # (which sanitizer: san_memo.ChecksMemo.full_in)
        self.sfull: set[int] = set()
        self.slot = np.zeros(W, np.int64)
        self.haz = True
        # hazard history: key -> (slot[W], producer step, extra)
        self.mfma_w: dict[int, tuple] = {}
        self.mfma_c: dict[int, tuple] = {}      # MFMA SrcC reads (WAR)
        self.valu_w: dict[int, np.ndarray] = {}  # VGPR/SGPR key -> slot of the last VALU write
        self.trans_w: dict[int, np.ndarray] = {}
        self.any_w: dict[int, np.ndarray] = {}   # VGPR key -> slot of the last write (DPP rule)
        # the memo's records of these five dicts not made yet: memo -> the slots at its latest hit
        # (san_memo.ChecksMemo.apply; made by settle() before anything reads or writes the dicts)
        self.deferred: dict = {}
        self.exec_w = np.full(W, NEVER, np.int64)
        self.m0_w = np.full(W, NEVER, np.int64)
        # for the memo of the checks (san_memo.py): the producer of each mfma_w / mfma_c entry; a virtual
        # clock advanced with ``slot`` by every advance of all waves (``clk``) and its value at the last
        # advance of only some (``sync``); the hazard records made, as (clk, step) (``trace``); the
        # longest hazard any rule of the program can have (``window``); a history array of NEVERs
        self.mfma_p: dict[int, object] = {}
        self.mfma_cp: dict[int, object] = {}
        self.clk = 0
        self.sync = NEVER
        self.trace: list[tuple[int, object]] = []
        self.tail_at: tuple | None = None     # (clk, the trace's tail at clk), as a memo hit left it (san_memo)
        self.window = _window(prog)
        self.never = np.full(W, NEVER, np.int64)
        self.memo = san_memo.enabled()          # ISAGEN_EMU_SAN_MEMO=0: every run's checks per instruction
        # LDS race shadow, one generation counter per workgroup
        G = st.G
        self.LW = LW = st.lds.shape[1] // 4
        n = G * LW
        # stamps (int64): generation << 32 | same-value flag << 30 (writes) | instruction index << 10
        # (20 bits) | byte mask << 6 (the bytes of the word accessed) | flag << 5 | wave within the
        # workgroup (< 32); -1: none yet.  Writes: flag = the write was still outstanding when its barrier
        # was passed.  Reads: flag = two or more waves read the word in this generation; bit 30 (the
        # writes' same-value bit, _LATE_READ here) = the read was carried over from an earlier generation
        # because it was still outstanding when its wave passed the barrier.
        # (the large arrays come from the device's last sanitizer of this shape when there is one, see
        # _ShadowPool: its stamps are of generations below this one's first, so they match nothing)
        self.NB = NB = -(-LW // 64)
        arrs, base = _ShadowPool.take(device, n, G * NB)
        self.wr_stamp, self.rd_stamp, self._tmp, self._tmph, self.wblk = arrs
        self.wr_dma = None                       # vm sequence of LDS-DMA writes, made on the first one
        # (_tmp: scratch for same-instruction duplicates, _tmph: ... and their data digests)
        self.gen = np.full(G, base, np.int32)
        self._give_back = _ShadowPool.give_back_later(self, device, arrs, self.gen) if device is not None else None
        # per workgroup: (generation, first word, last word) boxes around the words written / read in that
        # generation (reads included before they are stamped); a check whose words lie outside the box of
        # the current generation cannot find a stamp of it, so it is skipped
        # ... and, per workgroup and block of 64 words, the last generation a write stamped a word of it in
        # (finer than the box: a read whose blocks no write of this generation touched checks nothing)
        self.wbox = (np.full(G, -1, np.int64), np.full(G, _BIG, np.int64), np.full(G, -1, np.int64))
        self.rbox = (np.full(G, -1, np.int64), np.full(G, _BIG, np.int64), np.full(G, -1, np.int64))
        self.single_wave = st.W == G                # every workgroup has one wave
        # LDS writes whose counter has not retired: (kind, waves[u], seq per wave[u], flat words[m], waves[m])
        self.pending_lds: list[tuple] = []
        self.unstamped_reads: list[tuple] = []   # LDS reads not yet stamped (see lds_access): (words, stamps,
        #                                          several waves?)
        # LDS reads whose lgkmcnt may not have retired: (waves[u], seq per wave[u], flat words, stamps,
        # waves[m] or None) as in pending_lds; the barrier carries the live ones into the next generation
        self.inflight_reads: list[tuple] = []
        # the common access in C (san_native.py); None: the numpy path for every access
        self.native = _native_shadow(self, st)

    def close(self) -> None:
        """The batch is done: its LDS shadow's arrays go back to the device now (_ShadowPool), for the
        next batch, rather than when this object is collected (the launch keeps no cycle collection
        running while batches run, so that could be after the next batch has allocated its own)."""
        if self._give_back is not None:
            self._give_back()
            self._give_back = None

    # ------------------------------------------------------------------ issue slots
    def advance(self, ws, n: int) -> None:
        """The waves ``ws`` issued instructions of ``n`` wait states."""
        if ws is ALL or (isinstance(ws, slice) and ws == ALL):
            self.slot += n
            self.clk += n
        else:
            self.slot[ws] += n
            self.sync = self.clk

    # ------------------------------------------------------------------ initial state
    def init_vgprs(self, keys, lanes=None):
        for k in keys:
            if lanes is None:
                self.vfull.add(k)
            else:
                self.vinit[k] |= lanes

    def init_sgprs(self, codes):
        for c in codes:
            self.sinit[c] = True
            self.sfull.add(self.nregs + c)

    # ------------------------------------------------------------------ names
    def _name(self, k: int) -> str:
        if k < self.nregs:
            acc = self.ctx.accum_offset
            return f"v{k}" if k < acc else f"a{k - acc}"
        c = k - self.nregs
        special = {106: "vcc_lo", 107: "vcc_hi", 124: "m0", 126: "exec_lo", 127: "exec_hi", 102: "flat_scratch_lo",
                   103: "flat_scratch_hi"}
        if c in special:
            return special[c]
        if 108 <= c < 124:
            return f"ttmp{c - 108}"
        return f"s{c}"

    def _inst(self, idx: int):
        return self.prog.insts[idx]

    # ------------------------------------------------------------------ pending results
    def check_pending(self, st, ws, inst, reads, writes, result):
        for kind in ("vm", "lds", "smem"):
            maybe = self.maybe[kind]
            if not maybe:
                continue
            done = self.done[kind][ws]
            for k in reads:
                if k in maybe:
                    bad = self.pend[kind][k, ws] > done
                    if bad.any():
                        self._report_pending(st, ws, inst, kind, k, bad, "reads")
            for k in writes:
                if k in maybe:
                    if result == kind and kind != "smem":
                        continue            # an in-order result of the same counter lands later anyway
                    bad = self.pend[kind][k, ws] > done
                    if bad.any():
                        self._report_pending(st, ws, inst, kind, k, bad, "overwrites")

    def _report_pending(self, st, ws, inst, kind, k, bad, verb):
        row = int(np.nonzero(bad)[0][0])
        waves = np.arange(st.W)[ws]
        w = int(waves[row])
        seq = int(self.pend[kind][k, w])
        later = int(self.issued[kind][w]) - seq
        prod = self._inst(int(self.prod[kind][k, w]))
        need = {"vm": f"s_waitcnt vmcnt({later})", "lds": f"s_waitcnt lgkmcnt({later})",
                "smem": "s_waitcnt lgkmcnt(0)"}[kind]
        if kind == "lds" and int(self.issued["smem"][w]) > int(self.done["smem"][w]):
            need = "s_waitcnt lgkmcnt(0)"
        msg = (f"{verb} {self._name(k)} before `{prod.text}` (pc {prod.pc:#x}) that writes it has completed; "
               f"needs {need} or lower in between")
        st.run.fault(R.MISSING_WAIT, inst, msg, ws, None, wave=w)

    def issue(self, st, ws, counter, result, writes, idx, also_lgkm):
        kind = "lds" if counter == "lgkm" else counter
        iss = self.issued[kind]
        iss[ws] += 1
        if also_lgkm:
            self.issued["lds"][ws] += 1
        if result is not None:
            seq = iss[ws]
            for k in writes:
                self.pend[kind][k, ws] = seq
                self.prod[kind][k, ws] = idx
                self.maybe[kind].add(k)
            self.any_pending = True

    def waitcnt(self, st, ws, flags):
        vm, lgkm = flags["vmcnt"], flags["lgkmcnt"]
        d, i = self.done, self.issued
        if ws is ALL:                   # (every wave: in place, the common case in a loop)
            np.maximum(d["vm"], i["vm"] - vm, out=d["vm"])
            np.maximum(d["lds"], i["lds"] - lgkm, out=d["lds"])
        else:
            d["vm"][ws] = np.maximum(d["vm"][ws], i["vm"][ws] - vm)
            d["lds"][ws] = np.maximum(d["lds"][ws], i["lds"][ws] - lgkm)
        if lgkm == 0:
            d["smem"][ws] = i["smem"][ws]
        anyp = False
        for kind in ("vm", "lds", "smem"):
            if self.maybe[kind]:
                if (i[kind] <= d[kind]).all():
                    self.maybe[kind].clear()
                else:
                    anyp = True
        self.any_pending = anyp
        if self.pending_lds:
            self.pending_lds = [e for e in self.pending_lds if (e[2] > d[e[0]][e[1]]).any()]
        if len(self.inflight_reads) >= 16:
            # (short lists wait for the next barrier, which looks at every entry anyway)
            self._retire_reads()

    # ------------------------------------------------------------------ initialisation
    def check_uninit_v(self, st, ws, inst, keys, is_mfma):
        vfull = self.vfull
        for k in keys:
            if k in vfull:
                continue
            e = X.to_host(st.EXEC[ws])          # (on the cuda engine, a device-to-host copy)
            bad = ~self.vinit[k, ws] & e
            if bad.any():
                st.run.fault(R.UNINIT, inst, f"reads {self._name(k)}, which nothing has written in these lanes",
                             ws, bad)

    def check_uninit_s(self, st, ws, inst, keys):
        sfull = self.sfull
        nr = self.nregs
        for k in keys:
            if k in sfull:
                continue
            bad = ~self.sinit[k - nr, ws]
            if bad.any():
                w = int(np.arange(st.W)[ws][int(np.nonzero(bad)[0][0])])
                st.run.fault(R.UNINIT, inst, f"reads {self._name(k)}, which nothing has written", ws, None, wave=w)

    def mark_v(self, st, ws, keys, all_lanes):
        full = isinstance(ws, slice) and (st.exec_all or all_lanes)
        for k in keys:
            if k in self.vfull:
                continue
            if full:
                self.vfull.add(k)
            elif all_lanes:
                self.vinit[k, ws] = True
            else:
                self.vinit[k, ws] |= X.to_host(st.EXEC[ws])

    def mark_s(self, st, ws, keys):
        nr = self.nregs
        for k in keys:
            if k in self.sfull:
                continue
            c = k - nr
            self.sinit[c, ws] = True
            if isinstance(ws, slice):
                self.sfull.add(k)

    # ------------------------------------------------------------------ hazards
    def _need_after(self, st, ws, inst, writes, keys, need, what):
        """_need for each register of ``keys`` that ``writes`` (register -> (slots, producer)) holds."""
        for k in keys:
            since = writes.get(k)
            if since is not None:
                self._need(st, ws, inst, k, since[0], need, what, since[1])

    def _need(self, st, ws, inst, k, since, need, what, producer):
        if since is None:
            return
        gap = self.slot[ws] - since[ws] - 1
        bad = gap < need
        if bad.any():
            row = int(np.nonzero(bad)[0][0])
            got = int(gap[row])
            p = producer
            msg = (f"{what} {self._name(k)} {max(got, 0)} wait state(s) after `{p.text}` (pc {p.pc:#x}); "
                   f"needs {need} (an s_nop {need - 1 - max(got, 0)} more)" if need - max(got, 0) - 1 >= 0 else
                   f"{what} {self._name(k)} too early after `{p.text}` (pc {p.pc:#x}); needs {need} wait states")
            st.run.fault(R.HAZARD, inst, msg, ws, None, wave=int(np.arange(st.W)[ws][row]))

    def settle(self) -> None:
        """Make the hazard-history records the memo deferred (``deferred``): each run's latest, in the
        order they were made (san_memo.py says why that is the state every record would have left)."""
        d = self.deferred
        if d:
            self.deferred = {}
            for memo, slot in d.items():
                memo.apply_history(self, slot)

    def check_hazards(self, st, ws, inst, step, hz):
        if self.deferred:
            self.settle()
        t = self.ctx.target
        nr = self.nregs
        cls, rules, src_c, dpp_src, vmem_sreads = hz.cls, hz.rules, hz.src_c, hz.dpp_src, hz.vmem_sreads
        reads_m0_dma, is_div_fmas = hz.reads_m0_dma, hz.is_div_fmas
        # MFMA results
        if self.mfma_w:
            seen = set()
            for k in step.reads:
                ent = self.mfma_w.get(k)
                if ent is None:
                    continue
                since, pstep, prange = ent
                pk = id(pstep)
                if (pk, "r", k in src_c) in seen:
                    continue
                seen.add((pk, "r", k in src_c))
                p = pstep.mfma
                if cls == "mfma":
                    if k in src_c:
                        exact = prange == hz.src_c_sorted and pstep.inst.name == inst.name
                        if exact:
                            need = HZ.wait_states(t, "mfma_write->mfma_srcc_exact", p.passes)
                        elif p.xdl:
                            rule = "xdl_write->xdl_srcc_overlap" if step.mfma.xdl else "xdl_write->smfma_srcc_overlap"
                            need = HZ.wait_states(t, rule, p.passes)
                        else:
                            need = (HZ.wait_states(t, "smfma_write->smfma_srcc_overlap", p.passes)
                                    if not step.mfma.xdl else 0)
                        what = "reads (as SrcC)"
                    else:
                        rule = "xdl_write->mfma_srcab" if p.xdl else "smfma_write->mfma_srcab"
                        need = HZ.wait_states(t, rule, p.passes)
                        what = "reads (as SrcA/B)"
                else:
                    rule = "xdl_write->valu_mem_read" if p.xdl else "smfma_write->valu_mem_read"
                    need = HZ.wait_states(t, rule, p.passes)
                    what = "reads"
                if need:
                    self._need(st, ws, inst, k, since, need, what, pstep.inst)
            if cls in ("valu", "mem"):
                for k in step.writes:
                    ent = self.mfma_w.get(k)
                    if ent is None:
                        continue
                    since, pstep, _ = ent
                    p = pstep.mfma
                    rule = "xdl_write->valu_mem_write" if p.xdl else "smfma_write->valu_mem_write"
                    self._need(st, ws, inst, k, since, HZ.wait_states(t, rule, p.passes), "overwrites", pstep.inst)
                    break
        if self.mfma_c and cls in ("valu", "mem"):
            for k in step.writes:
                ent = self.mfma_c.get(k)
                if ent is None:
                    continue
                since, pstep = ent
                if pstep.mfma.xdl:
                    self._need(st, ws, inst, k, since,
                               HZ.wait_states(t, "xdl_srcc_read->valu_mem_write", pstep.mfma.passes),
                               "overwrites (SrcC still being read)", pstep.inst)
                break
        # VALU writes read by MFMA
        if cls == "mfma" and self.valu_w:
            need = rules["valu_write_vgpr->mfma_read"]
            self._need_after(st, ws, inst, self.valu_w, (k for k in step.reads if k < nr), need, "reads")
        # DPP source written shortly before
        if dpp_src and self.any_w:
            need = rules["write_vgpr->dpp_read"]
            self._need_after(st, ws, inst, self.any_w, dpp_src, need, "reads (DPP)")
        # transcendental result read by VALU
        if cls == "valu" and self.trans_w and "valu_write_sgpr->valu_read" in rules:
            need = rules["trans_write->valu_read"]
            self._need_after(st, ws, inst, self.trans_w, step.reads, need, "reads")
        # VALU-written SGPR read by VMEM
        if vmem_sreads and self.valu_w:
            need = rules["valu_write_sgpr->vmem_read"]
            self._need_after(st, ws, inst, self.valu_w, vmem_sreads, need, "reads")
        if self.valu_w:
            # VALU-written SGPRs read by a VALU as an explicit operand (gfx940 VDecCoExec hazard)
            if hz.valu_sreads and "valu_write_sgpr->valu_read" in rules:
                need = rules["valu_write_sgpr->valu_read"]
                self._need_after(st, ws, inst, self.valu_w, hz.valu_sreads, need, "reads")
            if hz.lane_sel:
                need = rules["valu_write_sgpr->lane_select"]
                self._need_after(st, ws, inst, self.valu_w, hz.lane_sel, need, "reads (as the lane select)")
            if hz.readlane_src:
                need = rules["valu_write_vgpr->readlane_src"]
                self._need_after(st, ws, inst, self.valu_w, hz.readlane_src, need, "reads")
        if self.exec_w_any and (hz.rwlane or cls == "mfma" or hz.is_dpp):
            rule = ("valu_write_exec->rwlane" if hz.rwlane else "valu_write_exec->mfma" if cls == "mfma"
                    else "valu_write_exec->dpp")
            need = rules[rule]
            gap = self.slot[ws] - self.exec_w[ws] - 1
            if (gap < need).any():
                row = int(np.nonzero(gap < need)[0][0])
                st.run.fault(R.HAZARD, inst, f"reads exec {max(int(gap[row]), 0)} wait state(s) after a VALU "
                             f"wrote it (`{self.exec_w_inst.text}`, pc {self.exec_w_inst.pc:#x}); needs {need}",
                             ws, None, wave=int(np.arange(st.W)[ws][row]))
        if reads_m0_dma and self.m0_w[ws].max() > NEVER:
            gap = self.slot[ws] - self.m0_w[ws] - 1
            need = rules["salu_write_m0->lds_dma"]
            if (gap < need).any():
                st.run.fault(R.HAZARD, inst, f"reads m0 as the LDS-DMA base {int(gap.min())} wait states after "
                             f"an SALU wrote it; needs {need}", ws, None)
        if is_div_fmas and self.valu_w:
            need = rules["valu_write_vcc->div_fmas"]
            self._need_after(st, ws, inst, self.valu_w, (nr + VCC_LO, nr + VCC_LO + 1), need, "reads")

    exec_w_any = False
    exec_w_inst = None

    def record(self, st, ws, step, hz, wv, wsc):
        if self.deferred:
            self.settle()
        cls, src_c, is_trans, writes_exec, writes_m0 = hz.cls, hz.src_c, hz.is_trans, hz.writes_exec, hz.writes_m0
        slot = self.slot
        # the history arrays are never changed in place (each update makes a new one), so when every wave
        # of the batch executes, one copy of the slot counters serves every register the instruction writes
        snap = slot.copy() if isinstance(ws, slice) and ws == ALL else None
        W = st.W
        tr = self.trace
        tr.append((self.clk, step))
        self.tail_at = None           # (the memo's trace tail is not the trace's any more)
        if len(tr) > 1024:
            del tr[:-256]             # (a memo signature looks back window < 256 records at most)

        def stamped(ent):
            if snap is not None:
                return snap
            arr = ent[0].copy() if ent is not None else np.full(W, NEVER, np.int64)
            arr[ws] = slot[ws]
            return arr
        if writes_exec:
            self.exec_w[ws] = slot[ws]
            self.exec_w_any = True
            self.exec_w_inst = step.inst
        if cls == "mfma":
            rng = hz.wv_sorted
            mfma_w, valu_w, mfma_c = self.mfma_w, self.valu_w, self.mfma_c
            for k in wv:
                mfma_w[k] = (stamped(mfma_w.get(k)), step, rng)
                valu_w.pop(k, None)
            for k in src_c:
                mfma_c[k] = (stamped(mfma_c.get(k)), step)
            self.mfma_p.update(dict.fromkeys(wv, step))
            self.mfma_cp.update(dict.fromkeys(src_c, step))
            return
        if wv or wsc:
            # a newer write ends older producers' hazards on these registers
            for k in wv:
                if k in self.mfma_w:
                    arr = self.mfma_w[k][0].copy()
                    arr[ws] = NEVER
                    self.mfma_w[k] = (arr,) + self.mfma_w[k][1:]
        if cls == "valu":
            for k in wv + wsc:
                self.valu_w[k] = (stamped(self.valu_w.get(k)), step.inst)
            if is_trans:
                for k in wv:
                    self.trans_w[k] = (stamped(self.trans_w.get(k)), step.inst)
            elif self.trans_w:
                for k in wv:
                    self.trans_w.pop(k, None)
        if wv and cls != "salu":
            for k in wv:
                self.any_w[k] = (stamped(self.any_w.get(k)), step.inst)
        if writes_m0:
            self.m0_w[ws] = slot[ws]

    # ------------------------------------------------------------------ LDS races
    def lds_access(self, st, ws, inst, addr, act, nbytes, write, dma=False, atomic=False, data=None,
                   vgpr: int = -1) -> bool:
        """Check one LDS access of the waves ``ws`` against the race shadow and record it.  ``data``:
        the bytes a write stores (uint8 [waves, 64, nbytes]): a write that leaves the memory as it was
        (a wave storing the value another wave already stored, as compilers do for replicated data) is
        not a race.  ``vgpr``: for an access of whole words (and a write's data all in VGPRs), its first
        data VGPR (a read's destination, a write's source): True when the C path (san_native.py) has
        also made the access (moved the words into the VGPRs or into LDS), which the caller then skips."""
        if X.active() != "cpu":
            # the cuda engine: the shadow is host-side numpy; the addresses and lanes come from the device
            # (the data of a write only when it is looked at, _write_effect)
            addr, act = X.to_host(addr), X.to_host(act)
        observer = st.run.device.lds_observer
        if observer is not None:
            observer(inst, np.asarray(addr, np.int64), np.asarray(act, bool), nbytes, write, dma)
        if self.single_wave and not dma and self.wr_dma is None:
            return False                # one wave per workgroup: no other wave to race with
        full = bool(act.all())
        if atomic or not (full or act.any()):
            return False
        LW = self.LW
        idx = st.run.program.ctx.pc_index.get(inst.pc, 0) & 0xFFFFF
        if full and not dma and self.wr_dma is None and nbytes % 4 == 0 and self.native is not None:
            done = self._native_access(st, ws, addr, nbytes, write, idx, vgpr)
            if done:
                return done == 2
        waves = np.arange(st.W)[ws]
        a = np.asarray(addr, np.int64)
        g = st.wg[waves]
        me_w = (self.gen[g].astype(np.int64) << 32) | (idx << 10) | st.wave_in_wg[waves]   # per wave
        if full and nbytes % 4 == 0 and not (a & 3).any():
            # the common case: [waves, words] arrays, the wave's stamp broadcast along the words
            nw = nbytes // 4
            base_w = g * LW
            # each wave's span of words, for the per-workgroup bounding boxes (see _may_hit)
            gb = g
            lo = (a.min(1) >> 2) + base_w
            hi = (a.max(1) >> 2) + (nw - 1) + base_w
            gen_w = self.gen[g][:, None]
            blk = None
            if not write and self.wr_dma is None and (not self._may_hit(self.wbox, g, lo, hi)
                                                      or not (self.wblk[blk := self._lane_blocks(a, g, nbytes)]
                                                              == gen_w).any()):
                # no word of this read's spans was written in this generation: nothing to check, the
                # read is only recorded (as below)
                w0 = (a >> 2) + base_w[:, None]
                # (the words of nw > 1 made only if the read is ever stamped or carried)
                words: np.ndarray | _Words = w0 if nw == 1 else _Words(w0, nw)
                me = (me_w | (0xF << 6))[:, None]
                self._box_add(self.rbox, g, lo, hi, self.gen[g])
                self.unstamped_reads.append((words, me, waves.size > 1, g))
                self.inflight_reads.append((waves, self.issued["lds"][waves] + 1, words, me, None))
                return False
            if blk is None:
                blk = self._lane_blocks(a, g, nbytes)
            fl = _expand((a >> 2) + base_w[:, None], nw)
            per = fl.shape[1]
            me = (me_w | (0xF << 6))[:, None]          # every byte of each word
            wv_glob = None
            fullmask = True                             # overlaps whatever any stamp covers

            def per_element(lane_vals):
                return lane_vals if nw == 1 else np.repeat(lane_vals, nw, axis=1)
        else:
            w0 = a >> 2
            nw = (nbytes + 3) // 4 + 1
            words = w0[..., None] + np.arange(nw)
            last = (a + nbytes - 1) >> 2
            valid = act[..., None] & (words <= last[..., None]) & (words < LW)
            fl = ((g * LW)[:, None, None] + words)[valid]
            wv_glob = np.broadcast_to(waves[:, None, None], valid.shape)[valid]
            # the bytes of each word the access covers: [a, a+n) within [4w, 4w+4)
            lo = np.maximum(a[..., None], 4 * words) - 4 * words
            hi = np.minimum(a[..., None] + nbytes, 4 * words + 4) - 4 * words
            bmask = ((1 << np.clip(hi, 0, 4)) - (1 << np.clip(lo, 0, 4))).astype(np.int64)
            me = (np.broadcast_to(me_w[:, None, None], valid.shape) | (bmask << 6))[valid]
            per = None
            fullmask = False

            def per_element(lane_vals):
                return np.broadcast_to(lane_vals[..., None], valid.shape)[valid]
            gb, lo, hi = st.wg[wv_glob], fl, fl
            blk = gb * self.NB + ((fl - gb * LW) >> 6)
            gen_w = self.gen[gb]
        multi_wave = waves.size > 1
        if not write:
            wr = self.wr_stamp[fl]
            # another wave of the workgroup wrote bytes this read touches, in this barrier generation:
            # same generation bits, different wave bits  <=>  1 <= (wr ^ me) & M <= 31; a word several
            # waves wrote with the same value (the SAME bit, kept in the mask) reads the same anyway
            other_w = (((wr ^ me) & _KEEP_GEN_WAVE_SAME) - 1).view(np.uint64) < 31
            if not fullmask:
                other_w &= (wr & me & _MASK) != 0
            if other_w.any():
                self._race(st, inst, fl, wv_glob, waves, per, other_w, "reads", "wrote")
            if self.wr_dma is not None:
                wvg = wv_glob if wv_glob is not None else np.repeat(waves, per).reshape(fl.shape)
                own = (((wr ^ me) & _KEEP_GEN_WAVE) == 0) & (wr >= 0)
                own_dma = own & (self.wr_dma[fl] > self.done["vm"][wvg])
                if own_dma.any():
                    j = int(np.flatnonzero(own_dma)[0])
                    word = int(fl.reshape(-1)[j])
                    p = self._inst((int(self.wr_stamp[word]) >> 10) & 0xFFFFF)
                    wa = int(wvg.reshape(-1)[j])
                    st.run.fault(R.MISSING_WAIT, inst, f"reads LDS word {(word % LW) * 4:#x} before the LDS "
                                 f"DMA `{p.text}` (pc {p.pc:#x}) that writes it has completed; needs s_waitcnt "
                                 f"vmcnt", np.array([wa]), None, address=(word % LW) * 4, wave=wa)
            # reads are recorded lazily: they matter only to a write of the same generation, and the
            # common pattern (write, barrier, read, barrier, write) never needs them stamped
            self._box_add(self.rbox, gb, lo, hi, self.gen[gb])
            self.unstamped_reads.append((fl, me, multi_wave, gb))
            # ... and kept until their lgkmcnt retires: one still outstanding at a barrier is carried
            # past it (see barrier()).  The sequence number is the one issue() gives this instruction.
            self.inflight_reads.append((waves, self.issued["lds"][waves] + 1, fl, me, wv_glob))
            return False
        # ------------------------------------------------------------ writes
        # Candidates first (cheap): another wave's write or read of these bytes in this generation,
        # another wave writing them in this instruction.  Only when there is one is the data looked
        # at: a write that leaves LDS as it was (replicated data stored by several waves) is benign.
        # Which checks can find anything: stamps of this generation can lie only in the boxes, and two
        # waves of this instruction can write one word only where their spans meet
        if per is not None:
            chk_w = self._may_hit(self.wbox, gb, lo, hi) and bool((self.wblk[blk] == gen_w).any())
            chk_r = self._may_hit(self.rbox, gb, lo, hi)
            chk_dup = multi_wave and _spans_overlap(lo, hi)
        else:
            chk_w = chk_r = True
            chk_dup = multi_wave
        if not (chk_w or chk_r or chk_dup):
            # none can: the write is only stamped (the pending reads stay unstamped)
            self.wr_stamp[fl] = _full(me, fl.shape)
        else:
            self._checked_write(st, inst, fl, wv_glob, waves, per, me, fullmask, chk_w, chk_r, chk_dup, g, a,
                                act, nbytes, data, dma, per_element)
        self._box_add(self.wbox, gb, lo, hi, self.gen[gb])
        gv = gen_w.reshape(-1)
        self.wblk[blk] = gv[0] if gv.size and (gv == gv[0]).all() else gen_w
        kind = "vm" if dma else "lds"
        if dma:
            if self.wr_dma is None:
                self.wr_dma = np.zeros(self.wr_stamp.size, np.int64)
            seq_w = self.issued["vm"][waves] + 1
            self.wr_dma[fl] = seq_w[:, None] if per else self.issued["vm"][wv_glob] + 1
        elif self.wr_dma is not None:
            self.wr_dma[fl] = 0
        self.pending_lds.append((kind, waves, self.issued[kind][waves] + 1, fl, wv_glob))
        return False

    def _native_access(self, st, ws, addr, nbytes, write, idx, vgpr) -> int:
        """The common access (every lane active, whole aligned words, no LDS DMA) in one C call
        (san_native.py), doing what lds_access does when it finds nothing to check: 1 when it is done
        (2: and the access made, see lds_access), 0 when lds_access must look (the shadow is then as it
        was)."""
        nat = self.native
        waves = nat.all_waves if isinstance(ws, slice) and ws == ALL else np.arange(st.W)[ws]
        code, g, lo, hi, me, w0 = nat.access(waves, addr, nbytes, idx, write, st, vgpr)
        if code != 0:
            return 0
        nw = nbytes // 4
        words: np.ndarray | _Words = w0 if nw == 1 else _Words(w0, nw)
        me2 = me[:, None]
        if write:
            self.pending_lds.append(("lds", waves, self.issued["lds"][waves] + 1, words, None))
        else:
            self.unstamped_reads.append((words, me2, waves.size > 1, g))
            self.inflight_reads.append((waves, self.issued["lds"][waves] + 1, words, me2, None))
        return 2 if vgpr >= 0 else 1

    def _checked_write(self, st, inst, fl, wv_glob, waves, per, me, fullmask, chk_w, chk_r, chk_dup, g, a, act,
                       nbytes, data, dma, per_element):
        """The race checks of an LDS write, and its stamps.  ``chk_w``: another wave's write of this
        generation may lie in these words; ``chk_r``: a read of this generation may; ``chk_dup``: two waves
        of this instruction may write one word (each false only where it cannot)."""
        LW = self.LW
        tmp = self._tmp
        wr = self.wr_stamp[fl]          # (also what the reports name)
        if chk_w:
            other_w = (((wr ^ me) & _KEEP_GEN_WAVE) - 1).view(np.uint64) < 31
            if not fullmask:
                other_w &= (wr & me & _MASK) != 0
        else:
            other_w = np.zeros(fl.shape, np.bool_)
        if chk_r:
            if self.unstamped_reads:
                self._settle_reads()
            rd = self.rd_stamp[fl]
            # read this generation by another wave (or by several): 1 <= (rd ^ me) & M' <= 63
            by_other = (((rd ^ me) & _KEEP_GEN_FLAG_WAVE) - 1).view(np.uint64) < 63
            if not fullmask:
                by_other &= (rd & me & _MASK) != 0
        else:
            by_other = np.zeros(fl.shape, np.bool_)
        other_wave = None
        if chk_dup:
            tmp[fl] = _full(me, fl.shape)
            last = tmp[fl]
            other_wave = last != me
            if not fullmask:
                other_wave &= (last & me & _MASK) != 0
        suspect = other_w.any() or by_other.any() or (other_wave is not None and other_wave.any())
        if not suspect:
            self.wr_stamp[fl] = _full(me, fl.shape)
        else:
            if data is not None and not dma:
                noop_lane, hash_lane = self._write_effect(st, g, a, act, nbytes, data)
                noop, hsh = per_element(noop_lane), per_element(hash_lane)
            else:
                noop, hsh = np.zeros(fl.shape, np.bool_), None
            changes = ~noop
            if (other_w & changes).any():
                self._race(st, inst, fl, wv_glob, waves, per, other_w & changes, "writes", "wrote")
            if (by_other & changes).any():
                self._race(st, inst, fl, wv_glob, waves, per, by_other & changes, "writes", "read")
            same_dup = None
            if other_wave is not None and other_wave.any():
                # two waves of one workgroup writing one word in this very instruction: a race unless
                # they store the same value
                if hsh is not None:
                    th = self._tmph
                    th[fl] = hsh
                    differ = th[fl] != hsh
                    dup = other_wave & differ
                    same_dup = other_wave & ~differ
                else:
                    dup = other_wave
                if dup.any():
                    j = int(np.flatnonzero(dup)[0])
                    wa = self._wave_of(j, wv_glob, waves, per)
                    word = int(fl.reshape(-1)[j])
                    st.run.fault(R.LDS_RACE, inst, f"waves {int(st.wave_in_wg[wa])} and {int(tmp[word]) & 31} of "
                                 f"the workgroup write different values to LDS word {(word % LW) * 4:#x} in the "
                                 f"same instruction with no barrier between", np.array([wa]), None,
                                 address=(word % LW) * 4, wave=wa)
            if noop.any():
                # a no-op write over another wave's write of this generation: both wrote this value
                shared = noop & other_w
                if changes.any():
                    self.wr_stamp[fl[changes]] = np.broadcast_to(me, fl.shape)[changes]
                if shared.any():
                    f = fl[shared]
                    self.wr_stamp[f] = self.wr_stamp[f] | _SAME
            else:
                self.wr_stamp[fl] = _full(me, fl.shape)
            if same_dup is not None and same_dup.any():
                f = fl[same_dup]
                self.wr_stamp[f] = self.wr_stamp[f] | _SAME

    def _lane_blocks(self, a, g, nbytes):
        """The 64-word blocks (indices into ``wblk``) of the words each lane of an aligned access at
        byte addresses ``a`` [waves, 64] of the workgroups ``g`` covers (its last word may lie in the next
        block)."""
        blk = a >> 8
        if nbytes > 4:
            blk = np.concatenate([blk, (a + (nbytes - 1)) >> 8], axis=1)
        blk += (g * self.NB)[:, None]
        return blk

    def _may_hit(self, box, g, lo, hi) -> bool:
        """Whether a stamp of the current generation of workgroup ``g`` may lie in [lo, hi] (per wave, or
        per word): a per-workgroup bounding box of the words stamped (or to be stamped: unstamped reads)
        in the generation it names; false only when none can."""
        bgen, blo, bhi = box
        return bool(((bgen[g] == self.gen[g]) & (lo <= bhi[g]) & (hi >= blo[g])).any())

    @staticmethod
    def _box_add(box, g, lo, hi, gval) -> None:
        """Grow the bounding boxes of the workgroups ``g`` in generation ``gval`` by [lo, hi] (a box of an
        older generation starts again)."""
        bgen, blo, bhi = box
        stale = bgen[g] != gval
        if stale.any():
            gi = g[stale]
            bgen[gi] = gval[stale]
            blo[gi] = _BIG
            bhi[gi] = -1
        np.minimum.at(blo, g, lo)
        np.maximum.at(bhi, g, hi)

    def _write_effect(self, st, g, a, act, nbytes, data):
        """(lanes whose write leaves LDS unchanged, a 64-bit digest of each lane's data)."""
        L = st.lds.shape[1]
        aa = np.where(act, a, 0)
        idx = ((g * L)[:, None] + aa)[..., None] + np.arange(nbytes)
        idx = np.minimum(idx, st.lds.size - 1)
        if X.active() == "cpu":
            cur = np.take(st.lds.reshape(-1), idx)
        else:                   # the cuda engine: the bytes gathered on the device, then copied to the host
            cur = X.to_host(X.np.take(st.lds.reshape(-1), X.from_host(idx)))
            data = X.to_host(data)
        d = np.broadcast_to(np.asarray(data, np.uint8), cur.shape)
        noop = (cur == d).all(-1) & act
        pad = (-nbytes) % 8
        dd = np.ascontiguousarray(d)
        if pad:
            dd = np.concatenate([dd, np.zeros(dd.shape[:-1] + (pad,), np.uint8)], -1)
        q = dd.view(np.uint64)
        h = q[..., 0].copy()
        for k in range(1, q.shape[-1]):
            h = (h * np.uint64(0x9E3779B97F4A7C15)) ^ q[..., k]
        return noop, h.view(np.int64)

    def _settle_reads(self):
        """Stamp the recorded reads into the read shadow (in order; a word read by two waves in one
        generation gets the 'several readers' flag)."""
        tmp = self._tmp
        for fl, me, multi_wave, _ in self.unstamped_reads:
            fl = _words(fl)
            rd = self.rd_stamp[fl]
            multi = ((((rd ^ me) & _KEEP_GEN_FLAG_WAVE) - 1).view(np.uint64) < 63) & ((rd >> 32) == (me >> 32))
            if multi_wave:
                tmp[fl] = _full(me, fl.shape)
                multi = multi | ((tmp[fl] ^ me) & _KEEP_GEN_WAVE != 0)
            self.rd_stamp[fl] = _full(me, fl.shape)
            if multi.any():
                self.rd_stamp[fl[multi]] = np.broadcast_to(me, fl.shape)[multi] | 32
        self.unstamped_reads = []

    def _retire_reads(self):
        """Forget the in-flight reads an lgkmcnt wait has covered in every wave that made them."""
        done = self.done["lds"]
        self.inflight_reads = [e for e in self.inflight_reads if (e[1] > done[e[0]]).any()]

    @staticmethod
    def _wave_of(j, wv_glob, waves, per):
        return int(wv_glob[j]) if wv_glob is not None else int(waves[j // per])

    def _race(self, st, inst, fl, wv_glob, waves, per, conflict, verb, other_verb):
        j = int(np.flatnonzero(conflict)[0])
        word = int(fl.reshape(-1)[j])
        LW = self.LW
        w = self._wave_of(j, wv_glob, waves, per)
        me = int(st.wave_in_wg[w])
        if other_verb == "wrote":
            stamp = int(self.wr_stamp[word])
            other = f"wave {stamp & 31}"
            p = self._inst((stamp >> 10) & 0xFFFFF)
            late = bool(stamp & 32)
        else:
            stamp = int(self.rd_stamp[word])
            rw = stamp & 31
            other = f"wave {rw}" if rw != me else "another wave"
            p = self._inst((stamp >> 10) & 0xFFFFF)
            late = bool(stamp & _LATE_READ)
        if not late:
            why = "with no s_barrier between"
        elif other_verb == "wrote":
            why = "the write was still outstanding at the s_barrier (missing s_waitcnt before it)"
        else:
            why = ("while that read was still outstanding at the s_barrier (missing s_waitcnt lgkmcnt before it): "
                   "the read may return the new value")
        st.run.fault(R.LDS_RACE, inst, f"wave {me} {verb} LDS word {(word % LW) * 4:#x} that {other} "
                     f"{other_verb} (`{p.text}`, pc {p.pc:#x}) {why}", np.array([w]), None,
                     address=(word % LW) * 4, wave=w)

    def barrier(self, st, groups):
        """Release of the workgroups ``groups`` from a barrier: writes and reads still outstanding move
        to the next generation, then the generation advances.  (A parked wave executes nothing, so its
        counters now are what they were when it reached the barrier.)"""
        gs = np.zeros(st.G, bool)
        gs[groups] = True
        if self.pending_lds:
            for kind, wu, seq_u, fl, waves in self.pending_lds:
                live_u = seq_u > self.done[kind][wu]
                if not live_u.any():
                    continue
                fl = _words(fl)
                if waves is None:             # fl is [len(wu), words]
                    waves = np.broadcast_to(wu[:, None], fl.shape)
                live_w = np.zeros(st.W, bool)
                live_w[wu[live_u]] = True
                live = live_w[waves] & gs[st.wg[waves]]
                if live.any():
                    f = fl[live]
                    gl = st.wg[waves[live]]
                    nxt = (self.gen[gl].astype(np.int64) + 1) << 32
                    self.wr_stamp[f] = nxt | 32 | (self.wr_stamp[f] & 0xFFFFFFDF)
                    self._box_add(self.wbox, gl, f, f, self.gen[gl] + 1)
                    self.wblk[gl * self.NB + ((f - gl * self.LW) >> 6)] = self.gen[gl] + 1
        if self.unstamped_reads:
            if gs.all():                  # (every workgroup released, as in a batch of one kernel's loop)
                self.unstamped_reads = []
            else:
                self.unstamped_reads = [ent for ent in self.unstamped_reads if not gs[ent[3]].all()]
        if self.inflight_reads:
            self._carry_reads(st, gs)
        self.gen[groups] += 1

    def _carry_reads(self, st, gs):
        """DS reads still outstanding in the released workgroups are read again in the next generation
        (stamped with _LATE_READ): until the lgkmcnt wait that covers it, a read may sample its words
        after the barrier, so another wave's write there after the barrier is a race."""
        done = self.done["lds"]
        keep = []
        for ent in self.inflight_reads:
            wu, seq_u, fl, me, waves = ent
            live_u = seq_u > done[wu]
            if not live_u.any():
                continue                    # waited for: it can be forgotten
            fl = _words(fl)
            keep.append(ent)
            live_w = np.zeros(st.W, bool)
            live_w[wu[live_u]] = True
            live_w &= gs[st.wg]
            if waves is None:               # fl is [len(wu), words], me [len(wu), 1]
                rows = live_w[wu]
                if not rows.any():
                    continue
                gr = st.wg[wu[rows]]
                nxt = (self.gen[gr].astype(np.int64) + 1) << 32
                f = fl[rows]
                gg = np.repeat(gr, f.shape[1])
                self._box_add(self.rbox, gg, f.reshape(-1), f.reshape(-1), self.gen[gg] + 1)
                self.unstamped_reads.append((f, nxt[:, None] | _LATE_READ | (me[rows] & _LOW),
                                             int(rows.sum()) > 1, gr))
            else:                           # fl, me and waves are flat, one entry per word
                sel = live_w[waves]
                if not sel.any():
                    continue
                gr = st.wg[waves[sel]]
                nxt = (self.gen[gr].astype(np.int64) + 1) << 32
                self._box_add(self.rbox, gr, fl[sel], fl[sel], self.gen[gr] + 1)
                self.unstamped_reads.append((fl[sel], nxt | _LATE_READ | (me[sel] & _LOW), True, gr))
        self.inflight_reads = keep


__all__ = ["instrument", "Sanitizer"]
