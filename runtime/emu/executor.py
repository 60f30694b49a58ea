"""Compile a kernel's decoded instructions once into handlers, and run batches of waves through them.

Each instruction becomes a :class:`CompiledStep` whose ``fn(st, ws)`` executes it for the waves ``ws`` of the
batch ``st`` (see wave.py).  Steps are grouped into basic blocks (from a branch target or the
instruction after a terminator to the next terminator or target); the scheduler repeatedly picks the
waves standing at the lowest PC, runs that block for all of them as one group, and lets the block's
terminator move their PCs.  Waves of all workgroups of a batch that stand at the same PC therefore
execute together as one numpy operation over ``[waves, 64]``; waves that diverge (per-wave scalar
branches) run as smaller groups and merge again at the next common PC.  ``s_barrier`` parks a wave
until every wave of its workgroup that has not ended is parked, then releases them together.
"""

from __future__ import annotations

import dataclasses
import gc
import re
import warnings

import numpy as np

from isagen.errors import IsagenError
from isagen.runtime.emu import cgen, cuda_graph
from isagen.runtime.emu import report as R
from isagen.runtime.emu import xp as X
from isagen.runtime.emu.access import CompileError, Ctx
from isagen.runtime.emu.compile import compile_step
from isagen.runtime.emu.report import EmulatorError, Report
from isagen.runtime.emu.san_cgen import SanPlan
from isagen.runtime.emu.san_memo import ChecksMemo
from isagen.runtime.emu.sanitizer import instrument
from isagen.runtime.emu.steps import CompiledBlock, CompiledStep
from isagen.runtime.emu.wave import ALL, BARRIER, DONE, M0, RUN, Batch

# the instruction categories (``CompiledStep.cat``) the launch statistics count executions of
INSTRUCTION_CATEGORIES = ("salu", "branch", "smem", "valu", "trans", "mfma", "ds", "vmem", "flat", "lds_dma",
                          "nop", "waitcnt", "barrier", "other")

_TERMINATORS = {"s_branch", "s_endpgm", "s_endpgm_saved", "s_endpgm_ordered_ps_done", "s_barrier",
                "s_setpc_b64", "s_swappc_b64", "s_call_b64"}


def is_terminator(inst) -> bool:
    """Whether the instruction ends a basic block (moves the PC itself or parks/ends the wave)."""
    return inst.name in _TERMINATORS or inst.name.startswith("s_cbranch_")


class CompiledCode:
    """A kernel's code compiled for the emulator.

    ``insts`` may be the whole ``.text`` of the code object (functions the kernel calls included);
    instructions are compiled when the block holding them is first reached, so code that never runs
    costs nothing and an instruction the emulator does not model only matters if it executes.
    """

    def __init__(self, insts: list, ctx: Ctx):
        self.ctx = ctx
        self.insts = insts
        ctx.pc_index = {inst.pc: i for i, inst in enumerate(insts)}
        self.steps: list[CompiledStep | None] = [None] * len(insts)
        self._blocks: dict[int, CompiledBlock] = {}
        leaders = {0}
        for i, inst in enumerate(insts):
            t = inst.branch_target
            if t is not None and t in ctx.pc_index:
                leaders.add(ctx.pc_index[t])
            if is_terminator(inst):
                leaders.add(i + 1)
        self.leaders = leaders
        self.has_mfma = any(inst.mai for inst in insts)
        self._ftz_warned = False
        # the native block engine (cgen.py): straight-line runs as generated C (with the sanitizer on,
        # runs of VALU/SALU instructions that write no EXEC, each instruction's checks first: san_cgen.py)
        self.cgen = ((SanPlan if ctx.sanitize else cgen.Plan)(self, _fuse_mfma_runs) if cgen.mode() != "off"
                     else None)

    def step(self, i: int) -> CompiledStep:
        s = self.steps[i]
        if s is None:
            inst = self.insts[i]
            try:
                s = compile_step(inst, i, self.ctx)
            except CompileError as e:
                s = _error_step(inst, i, str(e), e.category)
            if s.error is None and s.term != is_terminator(inst):
                raise AssertionError(f"emulator bug: {inst.name} terminator flag disagrees")
            if self.ctx.sanitize:
                instrument(s, self.ctx)
            if X.active() == "cuda" and not self._ftz_warned:
                self._warn_ftz(s)
            self.steps[i] = s
        return s

    def _warn_ftz(self, s: CompiledStep) -> None:
        """The cuda engine: CuPy flushes float32 subnormals (xp.py), so float VALU arithmetic of a kernel
        that keeps them (its descriptor's float32 denormal mode) can differ from the CPU engine; say so
        once per program when the first such instruction is compiled."""
        if s.cat in ("valu", "trans") and not self.ctx.flush32 and _FLOAT_VALU.search(s.inst.name) \
                and s.inst.name not in _FTZ_SAFE:
            self._ftz_warned = True
            warnings.warn(f"cuda emulator engine: kernel '{self.ctx.kernel}' runs float VALU instructions "
                          f"({s.inst.name} first) with float32 denormals kept (its descriptor); CuPy flushes "
                          f"float32 subnormals to zero, so where one occurs the results can differ from the CPU "
                          f"engine's: confirm such results with {X.ENV}=cpu", X.FtzWarning, stacklevel=2)

    def block_at(self, i: int, fuse: bool = True) -> CompiledBlock:
        b = self._blocks.get(i)
        if b is None:
            j = i
            n = len(self.insts)
            steps = []
            gpr_idx = 0            # VGPR index mode: the operands it offsets (bits: src0, src1, src2, vdst)
            while j < n:
                inst = self.insts[j]
                s = self._indexed_step(j, gpr_idx) if gpr_idx and inst.family in _VALU else self.step(j)
                steps.append(s)
                gpr_idx = _gpr_idx_after(inst, gpr_idx)
                j += 1
                if s.term or is_terminator(s.inst) or j in self.leaders:
                    break
            if gpr_idx:
                last = steps[-1]
                steps[-1] = _error_step(last.inst, last.idx, "VGPR index mode (s_set_gpr_idx_on) still on at the "
                                        "end of a basic block is not modelled", R.UNSUPPORTED)
            b = self._blocks[i] = CompiledBlock(i, steps)
            if fuse:
                cg = self.cgen
                if cg is not None and cg.pending and cg.mode == "force":
                    cg.build()            # every block, this one included
                b.fns = cg.fuse_block(steps) if cg is not None and cg.lib is not None else _fuse_mfma_runs(steps)
        return b

    def _indexed_step(self, i: int, mask: int) -> CompiledStep:
        """A VALU instruction under VGPR index mode: its VGPR operands that ``mask`` enables are offset by
        M0[7:0], which each wave sets at run time.  Per distinct offset the instruction is rewritten with
        the offset registers and compiled (and sanitized) like any other, so one semantics serves both."""
        inst = self.insts[i]
        if inst.mai:
            return _error_step(inst, i, f"{inst.name} under VGPR index mode is not modelled", R.UNSUPPORTED)
        roles = {r for bit, names in enumerate(_GPR_IDX_ROLES) if (mask >> bit) & 1 for r in names}
        variants: dict[int, CompiledStep] = {}

        def variant(off: int) -> CompiledStep:
            s = variants.get(off)
            if s is None:
                ops = tuple(dataclasses.replace(o, reg=dataclasses.replace(o.reg, index=o.reg.index + off))
                            if o.role in roles and o.reg is not None and o.reg.file == "v" else o
                            for o in inst.operands)
                moved = dataclasses.replace(inst, operands=ops)
                try:
                    s = compile_step(moved, i, self.ctx)
                except CompileError as e:
                    s = _error_step(moved, i, str(e), e.category)
                if self.ctx.sanitize:
                    instrument(s, self.ctx)
                variants[off] = s
            return s

        def fn(st, ws):
            offs = X.to_host(st.S[M0, ws]) & np.uint32(0xFF)       # (the host picks the variants)
            if isinstance(ws, slice):
                ws = np.arange(st.W)[ws]
            for off in np.unique(offs):
                variant(int(off)).fn(st, ws[offs == off])
        return CompiledStep(inst, i, fn, "valu")

    def reset_counts(self) -> None:
        for b in self._blocks.values():
            b.execs = 0

    def category_counts(self) -> dict:
        out = {c: 0 for c in INSTRUCTION_CATEGORIES}
        for b in self._blocks.values():
            if b.execs:
                for c, k in b.cats.items():
                    out[c] = out.get(c, 0) + k * b.execs
        return out


_FLOAT_VALU = re.compile(r"_f32(_|$)")    # float32 VALU names (f64 is never flushed; f16 values are normal f32s)
# float32 VALU instructions a flushed subnormal cannot change: integer -> f32 conversions (never a
# subnormal result) and the ordered/unordered compares (a flushed subnormal is still ordered)
_FTZ_SAFE = frozenset({"v_cvt_f32_u32", "v_cvt_f32_i32", "v_cvt_f32_ubyte0", "v_cvt_f32_ubyte1", "v_cvt_f32_ubyte2",
                       "v_cvt_f32_ubyte3", "v_cmp_o_f32", "v_cmp_u_f32", "v_cmpx_o_f32", "v_cmpx_u_f32"})
_VALU = ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P")
_GPR_IDX_ROLES = (("src0",), ("vsrc1", "src1"), ("src2",), ("vdst",))     # M0[15:12]'s bits, in order


def _gpr_idx_after(inst, mask: int) -> int:
    """The VGPR index mode's operand mask after ``inst`` (0: off)."""
    name = inst.name
    if name == "s_set_gpr_idx_on":
        return next(o.value for o in inst.operands if o.role == "ssrc1") & 0xF
    if name == "s_set_gpr_idx_mode":
        return int(inst.mods.get("simm16", 0)) & 0xF
    if name == "s_set_gpr_idx_off":
        return 0
    return mask


# waves per chunk of a fused MFMA run: the accumulators of a run's MFMAs for this many waves stay in
# the caches from one MFMA to the next (4 32x32 f32 tiles x 32 waves: 512 KiB)
MFMA_RUN_CHUNK = 32


def _fuse_mfma_runs(steps: list[CompiledStep]) -> list:
    """The block's handlers, with each run of consecutive MFMAs the native kernel takes as one handler
    that runs the whole run chunk by chunk of waves (all the run's MFMAs for waves 0..31, then for
    32..63, ...; the chunks spread over the kernel's threads, native.py) instead of MFMA by MFMA over
    all waves.  The same results: an MFMA reads and writes only its own wave's registers, and each
    wave still executes the run in program order.  With the sanitizer on, each MFMA's checks
    (``fn.san_checks``: they read no register value) run first, in program order, then the run's
    arithmetic."""
    fns: list = []
    run: list[CompiledStep] = []

    def flush():
        if len(run) >= 2:
            fns.append(_mfma_run(list(run)))
        else:
            fns.extend(s.fn for s in run)
        run.clear()

    for s in steps:
        if s.cat == "mfma" and s.error is None and s.native_call is not None:
            run.append(s)
        else:
            flush()
            fns.append(s.fn)
    flush()
    return fns


def _mfma_run(steps: list[CompiledStep]):
    from isagen.runtime.emu import mfma as M
    hs = [s.fn for s in steps]
    checks = [getattr(h, "san_checks", None) for h in hs]
    checks_ok = all(c is not None for c in checks) if any(c is not None for c in checks) else None
    # the checks from a memo where that is exact (san_memo.py)
    memo = ChecksMemo(steps) if checks_ok else None

    def each_check(st, ws):
        for c in checks:
            c(st, ws)

    def fused(st, ws):
        if ws is ALL:
            plan = st.native_calls.get(id(fused))      # per batch: the calls point into its registers
            if plan is None:
                calls = [s.native_call(st) for s in steps]
                ok = all(c is not None for c in calls)
                plan = st.native_calls[id(fused)] = (M.run_plan(calls) if ok else None, calls)
            if plan[0] is not None and checks_ok is not False:
                if memo is not None:
                    memo.checks(st, ws, each_check)
                M.call_run(plan[0], st.W, MFMA_RUN_CHUNK)
                return
        for h in hs:
            h(st, ws)
    return fused


def _error_step(inst, idx: int, message: str, category: str) -> CompiledStep:
    term = is_terminator(inst)

    def fn(st, ws):
        st.run.fault(category, inst, message, ws, None)
        if term:                      # collect mode: a branch that cannot run ends the waves
            st.status[ws] = DONE
    s = CompiledStep(inst, idx, fn, "other", term=term)
    s.error = message
    return s


# ============================================================================ running

class RunContext:
    """Per-launch context shared by the batches: reporting, statistics, options."""

    def __init__(self, kernel: str, program: CompiledCode, device, on_error: str, budget: int):
        self.kernel = kernel
        self.program = program
        self.device = device
        self.memory = device.memory
        self.on_error = on_error
        self.reports: list[Report] = []
        self.faults = 0                   # fault() calls (a report, or one more occurrence of one)
        self._seen: dict = {}
        self.budget = budget
        self.bytes_read = 0
        self.bytes_written = 0
        self.scalar_bytes_read = 0
        self.scalar_bytes_written = 0
        self.lds_bytes_read = 0
        self.lds_bytes_written = 0
        self.global_bytes_by_width: dict[int, int] = {}   # global bytes moved, by the access's bytes per lane
        self.batch: Batch | None = None   # the batch running now (set by run_batch)
        # ``trace(batch, ws, block)`` before each basic block a group of waves runs (``Module.trace``;
        # the timing model's instruction streams); None, the default, costs one test per block
        self.trace = None

    def global_access(self, width: int, nbytes: int, *, write: bool) -> None:
        """Count ``nbytes`` of global memory moved by an instruction accessing ``width`` bytes per lane."""
        if write:
            self.bytes_written += nbytes
        else:
            self.bytes_read += nbytes
        self.global_bytes_by_width[width] = self.global_bytes_by_width.get(width, 0) + nbytes

    def fault(self, category: str, inst, message: str, ws, rows_lanes, address: int | None = None,
              wave: int | None = None) -> None:
        """Report a problem of the waves ``ws`` of the current batch.  ``rows_lanes``: a bool
        [n, 64] mask over (group row, lane) of the lanes concerned, or None for the whole wave."""
        st = self.batch
        assert st is not None, "fault() is called by the steps of a running batch"
        self.faults += 1
        widx = np.arange(st.W)[ws] if not isinstance(ws, slice) else np.arange(st.W)[ws]
        row = 0
        lanes: tuple[int, ...] = ()
        if rows_lanes is not None:
            m = X.to_host(rows_lanes)
            if m.ndim == 1:
                m = m[:, None]
            r, lanes = R.first_bad(m)
            row = r if r is not None else 0
        if wave is None:
            wave = int(widx[row]) if len(widx) else 0
        if rows_lanes is None:
            lanes = tuple(int(x) for x in np.nonzero(X.to_host(st.EXEC[wave]))[0])   # the lanes taking part
        g = int(st.wg[wave])
        rep = Report(category, self.kernel, int(inst.pc), inst.text, message,
                     workgroup=tuple(int(x) for x in st.wg_id[g]), wave=int(st.wave_in_wg[wave]),
                     lanes=tuple(lanes), address=address)
        if self.on_error == "raise":
            raise EmulatorError(rep)
        # collect: the first report of each (category, instruction); later ones only count
        key = (category, int(inst.pc))
        first = self._seen.get(key)
        if first is not None:
            first.extra["occurrences"] = first.extra.get("occurrences", 1) + 1
            return
        self._seen[key] = rep
        self.reports.append(rep)
        if category in (R.BUDGET, R.FAULT, R.UNSUPPORTED):
            raise _Abort(rep)


class _Abort(Exception):
    """Stops a batch after a report that leaves no sensible way to continue (collect mode)."""

    def __init__(self, report):
        self.report = report


def run_batch(prog: CompiledCode, st, rc: RunContext) -> None:
    """Run every wave of the batch ``st`` to s_endpgm."""
    rc.batch = st
    st.run = rc
    W = st.W
    budget = rc.budget
    n_blocks = 0
    block = None
    status, pcs = st.status, st.pc
    trace = rc.trace
    # cuda engine: blocks replayed as CUDA graphs, not with the sanitizer on (its bookkeeping is host-side work
    # of every execution, which a replay would skip)
    graphs = X.active() == "cuda" and cuda_graph.enabled() and st.san is None
    errstate = np.errstate(all="ignore")     # IEEE specials are results here, not warnings
    errstate.__enter__()
    # no cyclic garbage collection while the batch runs (cycles made meanwhile are collected after it):
    # a full collection walks every object of the process, torch's and triton's too (~4% of a GEMM's time)
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        while True:
            running = status == RUN
            nrun = int(np.count_nonzero(running))
            if nrun == 0:
                if not _release_barriers(st, prog, rc):
                    break
                continue
            ws: slice | np.ndarray      # ALL, or the indices of the waves at the lowest PC
            if nrun == W:
                p0 = pcs[0]
                if (pcs == p0).all():
                    ws, pc = ALL, int(p0)
                else:
                    pc = int(pcs.min())
                    ws = np.nonzero(pcs == pc)[0]
            else:
                pc = int(pcs[running].min())
                ws = np.nonzero(running & (pcs == pc))[0]
                if ws.size == W:
                    ws = ALL
            if pc >= len(prog.steps):
                rc.fault(R.FAULT, prog.insts[-1], "execution ran past the end of the kernel's code "
                         "(missing s_endpgm?)", ws, None)
                status[ws] = DONE
                continue
            block = prog.block_at(pc)
            nw = W if isinstance(ws, slice) else ws.size
            block.execs += nw
            if trace is not None:
                trace(st, ws, block)
            if graphs and ws is ALL:
                cuda_graph.run_block(st, block, ws)
            else:
                for fn in block.fns:
                    fn(st, ws)
            if not block.steps[-1].term:
                pcs[ws] = block.end
            st.icount[ws] += len(block.steps)
            n_blocks += 1
            if n_blocks & 255 == 0 and st.icount.max() > budget:
                _budget_exceeded(st, prog, rc)
            elif n_blocks & 31 == 0 and prog.cgen is not None and prog.cgen.pending:
                prog.cgen.maybe_build(st)      # the native block engine: build it, or load it once built
    except _Abort:
        pass
    except Exception as e:
        if X.active() == "cpu" or isinstance(e, IsagenError):
            raise
        # the cuda engine: a handler that mixes host and device arrays, or a CuPy gap -- one clear error
        where = f"the basic block at {block.steps[0].inst.pc:#x} ({block.steps[0].inst.text} ... " \
                f"{block.steps[-1].inst.text})" if block is not None else "the batch set-up"
        raise X.EngineError(f"the cuda emulator engine cannot run {where} of kernel '{rc.kernel}': "
                            f"{type(e).__name__}: {e}; use {X.ENV}=cpu") from e
    finally:
        if gc_was_on:
            gc.enable()
        errstate.__exit__(None, None, None)
        rc.batch = None


def _budget_exceeded(st, prog, rc) -> None:
    w = int(np.argmax(st.icount))
    inst = prog.insts[min(int(st.pc[w]), len(prog.insts) - 1)]
    rc.fault(R.BUDGET, inst, f"instruction budget of {rc.budget} per wave exhausted (an infinite loop or "
             f"a barrier that never completes?); raise Device(max_wave_instructions=...) if the kernel "
             f"really runs this long", np.array([w]), None)
    st.status[:] = DONE


def _release_barriers(st, prog, rc) -> bool:
    """Release every workgroup whose live waves all wait at a barrier.  False when nothing waits."""
    at = st.status == BARRIER
    if not at.any():
        return False
    # with no runnable wave, every live wave of every workgroup waits: release them all
    waiting = np.nonzero(at)[0]
    groups = np.unique(st.wg[waiting])
    if st.san is not None:
        st.san.barrier(st, groups)
    st.status[waiting] = RUN
    return True
