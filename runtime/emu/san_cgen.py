"""The native block engine (cgen.py) with the sanitizer on.

A native run executes several instructions in one C call, while the sanitizer checks each instruction
before it executes and records what it wrote after.  For a run of VALU and SALU instructions that
writes no EXEC both orders give the same reports and the same sanitizer state: the checks and records
(pending results, initialisation, hazards, issue slots: ``sanitizer.instrument``) read the sanitizer's
own state and EXEC, never a register value, and an instruction of such a run changes neither.  So the
run's handler makes every instruction's checks and records first, in program order, then runs the
run's C function.  LDS instructions (whose race checks read the addresses) and EXEC writers (which
change what the checks of the instructions after them see) end a run here; they and everything else
not covered run through their instrumented numpy handlers as before.
"""

from __future__ import annotations

from isagen.runtime.emu import cgen
from isagen.runtime.emu.steps import CompiledStep


def sanitized_run_ok(step: CompiledStep, ctx) -> bool:
    """Whether a covered step may be part of a native run under the sanitizer."""
    c = cgen._covered(step, ctx)
    return c is not None and c[0] == "wave" and not c[2] and hasattr(step.fn, "san_checks")


class SanPlan(cgen.Plan):
    """cgen.Plan for a sanitized program: runs split at the steps :func:`sanitized_run_ok` refuses; each
    run's handler makes its instructions' sanitizer checks first, then runs its C function."""

    def _block_runs(self, b) -> list:
        out = []
        ctx = self.prog.ctx
        for r in super()._block_runs(b):
            cur: list[CompiledStep] = []
            for s in r.steps + [None]:
                if s is not None and sanitized_run_ok(s, ctx):
                    cur.append(s)
                    continue
                if cur:
                    out.append(cgen._Run(cur[0].idx, cur))
                cur = []
        return out

    def run_handler(self, run):
        # the C handler around the uninstrumented handlers (its fallback when a run cannot go on)
        plain = cgen._Run(run.first, [CompiledStep(s.inst, s.idx, s.fn.san_base, s.cat) for s in run.steps])
        plain.fname, plain.wexec, plain.lds = run.fname, run.wexec, run.lds
        plain.cost = run.cost          # its work: large calls spread over threads (cgen_par) as without it
        native = super().run_handler(plain)
        checks = [s.fn.san_checks for s in run.steps]

        def fn(st, ws):
            for c in checks:
                c(st, ws)
            native(st, ws)
        return fn


__all__ = ["SanPlan", "sanitized_run_ok"]
