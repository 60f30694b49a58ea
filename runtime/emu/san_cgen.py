"""The native block engine (cgen.py) with the sanitizer on.

A native run executes several instructions in one C call, while the sanitizer checks each instruction
before it executes and records what it wrote after.  For a run of VALU, SALU, MFMA, ``s_nop``,
``s_waitcnt`` and global-load instructions that writes no EXEC both orders give the same reports and
the same sanitizer state: the checks and records (pending results, initialisation, hazards, issue
slots, the scoreboard's issue and wait: ``sanitizer.instrument``) read the sanitizer's own state and
EXEC, never a register value, and an instruction of such a run changes neither (nor does anything
but these records change the sanitizer's state).  So the run's handler makes every instruction's
checks and records first, in program order, then runs the run's C function.  A global load may
report an access out of range when it executes; so that its report keeps its place among the checks'
reports, a run holding loads runs its instrumented numpy handlers one by one (checks, execution,
records) unless the memo (below) knows that no check of the run can report.  LDS instructions take part
too: their race shadow is execution, made in the generated C per workgroup (``san_ds.py``), which stops
before an access it cannot decide (the instrumented numpy handler then makes it and its reports); the
reports of such a run are put back in the per-instruction order (:func:`_ds_run_handler`).  EXEC
writers (which change what the checks of the instructions after them see) end such a run; everything
else not covered runs through its instrumented numpy handler as before.  A stretch of runs split only
by EXEC writers is also a run of its own (:meth:`SanPlan._exec_run`), whose C runs the whole stretch
where the memo has its checks (no check then looks at EXEC: every register it touches is fully
initialised, or first written while every lane is active) and which otherwise runs its parts: the runs
and the writers' instrumented handlers.

The checks and records of a run come from a memo where that is exact (``san_memo.ChecksMemo``: an
entry signature the per-instruction checks passed before, then the run's fixed transformation of the
sanitizer state); otherwise they are made once per run where that is exact (:func:`fused_checks`: the
pending-result and initialisation checks from the run's static register sets, the marks once per
register, only the hazard checks and records per instruction), else per instruction.
"""

from __future__ import annotations

from isagen.runtime.emu import cgen, san_ds
from isagen.runtime.emu.san_memo import ChecksMemo, read_before_written
from isagen.runtime.emu.steps import CompiledStep

# the kinds of covered steps (cgen._covered) a sanitized native run may hold: VALU/SALU, MFMAs, s_nop /
# s_waitcnt, global loads and LDS instructions (their race shadow in the C: san_ds.py); not EXEC writers
# (the checks after them see another EXEC)
SAN_KINDS = ("wave", "mfma", "nop", "gmem", "lds")


def sanitized_run_ok(step: CompiledStep, ctx, exec_writers: bool = False) -> bool:
    """Whether a covered step may be part of a native run under the sanitizer (an EXEC writer only where
    ``exec_writers``: in a run whose checks come from the memo, :meth:`SanPlan._exec_run`)."""
    c = cgen._covered(step, ctx)
    return (c is not None and c[0] in SAN_KINDS and (exec_writers or not c[2])
            and hasattr(step.fn, "san_checks"))


class SanPlan(cgen.Plan):
    """cgen.Plan for a sanitized program: runs split at the steps :func:`sanitized_run_ok` refuses; each
    run's handler makes its instructions' sanitizer checks first, then runs its C function.  Where EXEC
    writers split a stretch of such steps, the whole stretch is a run too (its ``parts``: the runs and
    the writers between them), whose C runs when the memo has its checks (:meth:`_exec_run`)."""

    def _block_runs(self, b) -> list:
        out = []
        ctx = self.prog.ctx
        for r in super()._block_runs(b):
            stretch: list[CompiledStep] = []
            for s in r.steps + [None]:
                if s is not None and sanitized_run_ok(s, ctx, exec_writers=True):
                    stretch.append(s)
                    continue
                out += self._stretch_runs(stretch)
                stretch = []
        return out

    def _stretch_runs(self, steps: list[CompiledStep]) -> list:
        """The runs of a stretch of steps a sanitized run may hold but for EXEC writers: the runs between
        the writers and, where there are writers, the whole stretch (first: fuse_block takes the first
        run that starts at a step) with them as its parts."""
        ctx = self.prog.ctx
        runs: list = []
        parts: list = []
        cur: list[CompiledStep] = []
        for s in steps + [None]:
            if s is not None and sanitized_run_ok(s, ctx):
                cur.append(s)
                continue
            if cur and any(c.cat not in ("nop", "waitcnt") for c in cur):     # (a run that does something)
                run = self._new_run(cur)
                runs.append(run)
                parts.append(run)
            else:
                parts += cur                # (nothing worth a call: their handlers)
            if s is not None:
                parts.append(s)             # an EXEC writer
            cur = []
        if len(parts) > len(runs):
            whole = self._new_run(steps)
            whole.parts = parts
            runs.insert(0, whole)
        return runs

    @staticmethod
    def _new_run(steps: list[CompiledStep]):
        run = cgen._Run(steps[0].idx, list(steps))
        if any(x.cat == "ds" for x in steps):
            run.ds_gen = san_ds.DsGen()     # the LDS shadow's common access in the C
        return run

    def extra_source(self) -> str:
        return san_ds.source()

    @staticmethod
    def _plain(run):
        """The run around the uninstrumented handlers (its C handler's fallback when a run cannot go on);
        the numpy handlers of its DS steps see the lgkm counts of their place in the run (san_ds.fallback)."""
        before = san_ds.lgkm_before(run.steps)
        plain = cgen._Run(run.first, [CompiledStep(s.inst, s.idx, s.fn.san_base if s.cat != "ds" else
                                                   san_ds.fallback(s.fn.san_base, before[-1] - before[j]),
                                                   s.cat)
                                      for j, s in enumerate(run.steps)])
        plain.fname, plain.wexec, plain.lds = run.fname, run.wexec, run.lds
        plain.mfmas, plain.gmem = run.mfmas, run.gmem
        plain.cost = run.cost          # its work: large calls spread over threads (cgen_par) as without it
        # (a DS instruction's LDS shadow in the C, about as much again as its access)
        plain.cost += cgen.COST_MEM * sum(s.cat == "ds" for s in run.steps)
        return plain

    def run_handler(self, run):
        if run.parts is not None:
            return self._exec_run(run)
        plain = self._plain(run)
        checks = [s.fn.san_checks for s in run.steps]
        memo = ChecksMemo(run.steps)
        if run.ds_gen is not None and not run.gmem:
            return _ds_run_handler(run, plain, checks, self.par, self.cfns[run.fname], memo)
        fused = fused_checks(run.steps)

        def each_check(st, ws):
            if fused is None or not fused(st, ws):
                for c in checks:
                    c(st, ws)
        if run.ds_gen is not None:
            hook = san_ds.DsHook(run, run.ds_gen)
            native = cgen._handler(self.cfns[run.fname], plain, self.par, hook)
        else:
            hook = None
            native = super().run_handler(plain)
        if not (run.gmem or run.lds):
            def fn(st, ws):
                memo.checks(st, ws, each_check)     # (san_memo.py: from the memo where that is exact)
                native(st, ws)
            return fn
        # a run with global loads (and maybe LDS instructions), which may report as they execute: without
        # the memo every instruction's checks, execution and records in program order (the instrumented
        # numpy handlers), so the reports come in the order of the per-instruction path; from the memo
        # (no check can report) the run's C function
        return _memo_or_each(memo, [s.fn for s in run.steps], native, hook)

    def _exec_run(self, run):
        """The handler of a run with EXEC writers (its ``parts``: runs and the writers between them).
        The checks of the instructions after a writer see the EXEC it wrote, so they cannot be made
        first, in general; but where the memo has the run's entry signature (san_memo.py: every register
        the run reads or writes fully initialised, or first written by it while every lane is active, so
        no check looks at EXEC) its checks and records are
        the memo's and the C runs the whole run, writers included.  Otherwise the parts run as they
        would without this run: each run's handler, each writer's instrumented handler, in order."""
        handlers = [self.run_handler(p) if isinstance(p, cgen._Run) else p.fn for p in run.parts]
        memo = ChecksMemo(run.steps)
        hook = san_ds.DsHook(run, run.ds_gen) if run.ds_gen is not None else None
        native = cgen._handler(self.cfns[run.fname], self._plain(run), self.par, hook)
        fn = _memo_or_each(memo, handlers, native, hook)
        fn.memo = memo                              # type: ignore[attr-defined]  # (its hits: tests)
        return fn


def _memo_or_each(memo, handlers, native, hook):
    """A run's handler that runs its C function ``native`` where the memo has the run's checks and records,
    and otherwise ``handlers`` in order (which make them themselves: instrumented handlers, or runs')."""
    def each(st, ws):
        for h in handlers:
            h(st, ws)

    def fn(st, ws):
        if hook is not None:
            hook.begin(st)                          # (the lgkm counts at the run's entry)
        if memo.checks(st, ws, each):
            native(st, ws)
    return fn


def _ds_run_handler(run, plain, checks, par, cfn, memo):
    """The handler of a sanitized run with DS instructions (san_ds.py): the checks and records first,
    in program order (from the memo where that is exact, san_memo.py), then the C with the LDS shadow,
    its records, the numpy handlers of what it stopped before.  The reports are put back in the
    per-instruction order: the checks of a step (made first) and its numpy handler's (made after the C)
    before the next step's."""
    hook = san_ds.DsHook(run, run.ds_gen)
    pos = [0, 0]                          # (step, 0: its checks / 1: its handler) while reports are kept
    held: list = []
    steps = plain.steps

    def keep(*a, **k):
        held.append((pos[0], pos[1], len(held), a, k))
        st_run[0].faults += 1             # (a report: the memo must not learn this entry signature)
    st_run: list = [None]

    def each_check(st, ws):
        for j, c in enumerate(checks):
            pos[0], pos[1] = j, 0
            c(st, ws)

    def tagged(j, f):
        def g(st, ws):
            pos[0], pos[1] = j, 1
            f(st, ws)
        return g
    for j, s in enumerate(steps):
        s.fn = tagged(j, s.fn)
    native = cgen._handler(cfn, plain, par, hook)

    def fn(st, ws):
        hook.begin(st)
        rc = st.run
        held.clear()
        st_run[0] = rc
        rc.fault = keep                   # (an instance attribute over the method, removed below)
        try:
            memo.checks(st, ws, each_check)
            if not held:
                del rc.fault                  # no check reported: the handlers' reports come in order
            native(st, ws)
        finally:
            if "fault" in rc.__dict__:
                del rc.fault
        if held:
            for _, _, _, a, k in sorted(held, key=lambda h: h[:3]):
                rc.fault(*a, **k)
    return fn


def fused_checks(steps: list[CompiledStep]):
    """The sanitizer checks and records of a run's instructions made once per run where that is exact, or
    None where the run holds an instruction this does not take (one a counter follows: a load).

    The returned ``f(st, ws)`` answers False, having changed nothing, when a pending-result or
    initialisation check could find something (the caller then makes each instruction's checks as
    before); otherwise it makes what the per-instruction checks would and answers True:

    * pending results: ``check_pending`` looks only at registers in the scoreboard's ``maybe`` sets,
      which nothing in such a run adds to (no ``issue``; an ``s_waitcnt`` only removes), so when no
      register the run reads or writes is in them no instruction's check can find anything;
    * initialisation: a register the run reads after an earlier instruction of the run wrote it is
      initialised in every executing lane (``mark_v``/``mark_s``; EXEC does not change in the run), so
      only the registers read before the run writes them can be reported, and none is where each is
      fully initialised (``vfull``/``sfull``, which only grow); the marks themselves are made once per
      register at the end (nothing else reads them in between);
    * hazards: ``check_hazards`` and ``record`` per instruction in program order as before (they read
      the issue-slot counters, whose increments are made just before each such call and at the end).
    """
    infos = [s.fn.san_info for s in steps]
    if any(i.counts and i.inst.name != "s_waitcnt" for i in infos):
        return None
    # s_waitcnt only retires results (``maybe`` only shrinks), so what the entry test below finds holds
    # for every instruction of the run; the waits are made in order after the hazard work (they touch
    # only the scoreboard, which nothing else of the run reads or writes)
    waits = [i.step.flags for i in infos if i.counts]
    keys: set[int] = set()
    for i in infos:
        keys.update(i.step.reads)
        keys.update(i.step.writes)
    run_keys = frozenset(keys)
    need_v, need_s = read_before_written(infos)
    # (an MFMA's results count as written in every lane, mark_v's all_lanes; marks only add, in any order)
    marks_mfma = tuple(dict.fromkeys(k for i in infos if i.hz.cls == "mfma" for k in i.wv))
    marks_v, marks_s = tuple(dict.fromkeys(k for i in infos if i.hz.cls != "mfma" for k in i.wv)), \
        tuple(dict.fromkeys(k for i in infos for k in i.wsc))
    # the hazard work: (slots to add first, info) for each instruction that checks or records, then the rest
    haz: list = []
    pend = 0
    for i in infos:
        if i.haz_check or i.haz_record:
            haz.append((pend, i))
            pend = 0
        else:
            pend += i.nop_slots
    tail = pend
    total = sum(i.nop_slots for i in infos)

    def f(st, ws) -> bool:
        san = st.san
        if san.any_pending:
            m = san.maybe
            if not (run_keys.isdisjoint(m["vm"]) and run_keys.isdisjoint(m["lds"])
                    and run_keys.isdisjoint(m["smem"])):
                return False
        if not (need_v <= san.vfull and need_s <= san.sfull):
            return False
        if san.haz:
            for add, i in haz:
                if add:
                    san.advance(ws, add)
                if i.haz_check:
                    san.check_hazards(st, ws, i.inst, i.step, i.hz)
                if i.haz_record:
                    san.record(st, ws, i.step, i.hz, i.wv, i.wsc)
                san.advance(ws, i.nop_slots)
            if tail:
                san.advance(ws, tail)
        else:
            san.advance(ws, total)
        for flags in waits:
            san.waitcnt(st, ws, flags)
        if marks_v:
            san.mark_v(st, ws, marks_v, False)
        if marks_mfma:
            san.mark_v(st, ws, marks_mfma, True)
        if marks_s:
            san.mark_s(st, ws, marks_s)
        return True
    return f


__all__ = ["SanPlan", "fused_checks", "sanitized_run_ok"]
