"""A memo of the sanitizer's checks and records of a straight run of instructions (a native run of the
block engine, san_cgen.py, or a fused run of MFMAs, executor._mfma_run).

A run's checks (pending results on the per-wave scoreboard, initialisation, hazards: ``sanitizer.
instrument``'s ``checked``) read only the sanitizer's state and EXEC, never a register value; its
records (``issue``/``waitcnt``, ``mark_v``/``mark_s``, ``record``, the issue slots) write only the
sanitizer's state.  In a loop the same run is entered again and again in an equivalent state, so
whether any of its checks can report is decided by a small *entry signature*, and when none can, what
the checks and records do is a fixed transformation, made here with a few dict and numpy operations
instead of per instruction.  Every report is still made by the per-instruction code: a signature not
yet seen, or a state the signature does not describe, runs the per-instruction checks (and remembers
the signature when they reported nothing).

**When the memo applies** (otherwise :meth:`ChecksMemo.signature` is None): every wave of the batch
executes the run (``ws`` is ``ALL``), the hazard checks are on, every register the run reads as a
value (``uninit_v``/``uninit_s``) and every register it writes is already fully initialised (in
``vfull``/``sfull``) -- or, for a run entered with every lane of every wave active (``exec_all``),
every register it reads before writing it is, and each VGPR it writes that is not is first written by
an MFMA or before the run's first instruction that may change EXEC (``_late_v``) -- and at least ``window`` wait states
have passed, for all waves alike, since the last time only some waves advanced (``clk - sync >
window``).

**The signature** is (a) the hazard records of the last ``window`` wait states, each as (wait states
since, producing step) (the ``trace``, newest first); (b) the producing step (or None) of the
``mfma_w`` entry of each register an MFMA-result check of the run looks up, and of the ``mfma_c``
entry of each register a VALU/memory instruction of the run writes; (c) per counter kind, the number
of results issued and not retired (``issued - done``, the same in every wave), whether its ``maybe``
set is empty, and for each register of the run in it, how many results were issued after its own (the
same in every wave, or retired in every wave); (d) None, or (in the second case above) the run's
registers not yet fully initialised.  Part (a) is computed from the trace, except where no record has
been made since the last memo hit (``Sanitizer.tail_at``, which ``record`` clears): then it is that
hit's tail (kept per entry tail, ``ChecksMemo.tails``) aged by the wait states since (kept per age and
tail, ``ChecksMemo.aged``), the tuple the trace gives.

**Why equal signatures give equal checks** (``window`` is at least every wait-state count any rule
of the program asks for, ``sanitizer._window``):

* initialisation: every register read or written is in ``vfull``/``sfull``, so no check looks at the
  lanes (nor at EXEC) and ``mark_v``/``mark_s`` change nothing; or (d) names the registers that are
  not, none is read before the run writes it, and each one's first write makes it fully initialised
  before any later read -- an SGPR's always (``mark_s`` with a whole-batch ``ws``), a VGPR's when an
  MFMA makes it (every lane) or when every lane is still active (EXEC all lanes at the entry, and not
  changed yet: an ``s_or_b64`` of EXEC into EXEC keeps it so) -- after which its checks look at no
  lane and its marks change nothing: no check reports, and the marks' effect is (d) joining
  ``vfull``/``sfull``;
* pending results: ``check_pending`` tests ``pend > done`` for registers in ``maybe``; with every
  wave's ``issued - done`` equal and each register's ``issued - pend`` equal (or retired everywhere),
  that test has one answer for all waves, a function of (c); the run's ``issue``/``waitcnt`` change
  these relative counts the same way from equal ones (``waitcnt`` clears a ``maybe`` set exactly when
  the count is 0), so every check of the run answers as the first time this signature was seen;
* hazards: a check reports only where ``slot - since - 1 < need <= window``.  Since ``clk - sync >
  window``, every history entry written before ``sync`` is at least ``window`` wait states old in
  every wave (the histories hold slot values, and all waves advanced alike since), and every entry of
  the last ``window`` wait states was written by a record in (a), all waves at once, so its age is the
  same in every wave.  The entries younger than ``window`` are therefore a function of (a) (each the
  last record of (a) that touched the register); older ones cannot report, and what else a check
  reads of them -- whether ``mfma_w``/``mfma_c`` hold the register (the ``break`` after the first one
  a write finds) and its producer (reads of one producer's registers are checked once) -- is (b).
  Entries the run's own records make are the same each time (their age is a difference of the
  run's static slot offsets).  So every hazard check has the same outcome as the first time.

**Why the transformation is fixed**: the scoreboard is updated by the real ``issue``/``waitcnt``
calls, in order (cheap; they also filter the LDS lists exactly as before).  The marks change nothing
(above).  Each record with all waves executing stores ``slot`` at that instruction (the entry slots
plus the run's static offset) for the registers it writes, pops or resets older producers'
entries; the net effect per register is computed once from the run's instructions
(:func:`_net_records`) and replayed with the entry slots (one numpy operation for all the arrays).
The history arrays are never changed in place anywhere, so rows of one array serve as the
per-instruction copies; the order of keys in the history dicts differs from the per-instruction
path's where a key is set twice, which nothing reads (no check iterates a history dict).
``slot``/``clk`` advance by the run's wait states and the run's records join the trace.

**The history records wait** until something reads or writes the five history dicts (``mfma_w``,
``mfma_c``, ``valu_w``, ``trans_w``, ``any_w``): a hit keeps only a copy of the entry slots, per run, its
latest hit replacing the earlier one (``Sanitizer.deferred``); ``Sanitizer.settle``, called first by
``check_hazards`` and ``record`` (the only readers and writers besides this), makes each run's latest
records in the order the hits came.  In a loop whose runs all hit nothing reads the dicts in between
(branches and barriers check and record no hazards), so each run's records are made once, not once per
iteration.  That gives the dicts every hit would have left: a run's net record of a key is the same at
every hit -- set (to the entry slots plus a fixed offset, a fixed payload), reset to NEVER, popped, or
(``never_orig``) an existing entry's slots reset to NEVER, its payload kept.  So a key's last set, reset or
pop over all the hits is one made at the latest hit of its run, the ones after it are ``never_orig``
resets of runs whose latest hit also comes after it, and replaying the latest hits in order makes that
last set, reset or pop and then at least one ``never_orig`` exactly where all the hits did.  The producer
maps (``mfma_p``/``mfma_cp``, which signatures read), the EXEC and M0 records, the scoreboard and the trace
are made at each hit.

**DS instructions** are taken like any other step (their ``issue`` on lgkmcnt, the pending,
initialisation and hazard checks of their registers, their records as memory instructions).  Their
LDS race shadow (``Sanitizer.lds_access``) is execution, not a check: where a DS step runs inside a
native run after the run's checks, the sequence number it stamps must be the lgkmcnt issue count at
that step (the entry count plus the run's earlier ``lgkm`` issues, in ``counting`` order), and the
pending-LDS entries it makes are filtered at the next ``s_waitcnt`` after the run instead of one inside
it (such an entry is then already retired, which ``barrier`` ignores).

``ISAGEN_EMU_SAN_MEMO=0`` turns the memo off (every run's checks made per instruction).
"""

from __future__ import annotations

import os

import numpy as np

from isagen.runtime.emu.wave import ALL, EXEC_LO

_KINDS = ("vm", "lds", "smem")
MAX_SIGNATURES = 64          # signatures kept per run (a loop has a few states; more means it varies)


def enabled() -> bool:
    return os.environ.get("ISAGEN_EMU_SAN_MEMO", "1") != "0"


def _net_records(infos) -> dict:
    """The net effect of the run's hazard records (``Sanitizer.record`` with every wave executing) on
    each history dict: key -> ('set', offset, payload) | ('pop',) | ('never_orig',) (an entry older than
    the run reset to NEVER) | ('set_never', payload) (an entry of the run reset to NEVER)."""
    net: dict[str, dict] = {d: {} for d in ("mfma_w", "mfma_c", "valu_w", "trans_w", "any_w")}
    extra: dict = {"exec": None, "m0": None}
    off = 0
    for i in infos:
        if i.haz_record:
            hz, step = i.hz, i.step
            cls, wv, wsc = hz.cls, i.wv, i.wsc
            if hz.writes_exec:
                extra["exec"] = (off, step.inst)
            if cls == "mfma":
                for k in wv:
                    net["mfma_w"][k] = ("set", off, (step, hz.wv_sorted))
                    net["valu_w"][k] = ("pop",)
                for k in hz.src_c:
                    net["mfma_c"][k] = ("set", off, (step,))
            else:
                for k in wv:
                    cur = net["mfma_w"].get(k)
                    if cur is None:
                        net["mfma_w"][k] = ("never_orig",)
                    elif cur[0] == "set":
                        net["mfma_w"][k] = ("set_never", cur[2])
                if cls == "valu":
                    for k in wv + wsc:
                        net["valu_w"][k] = ("set", off, (step.inst,))
                    for k in wv:
                        net["trans_w"][k] = ("set", off, (step.inst,)) if hz.is_trans else ("pop",)
                if wv and cls != "salu":
                    for k in wv:
                        net["any_w"][k] = ("set", off, (step.inst,))
                if hz.writes_m0:
                    extra["m0"] = off
        off += i.nop_slots
    return {"net": net, **extra}


def writes_exec(info, ex: int) -> bool:
    """Whether the instruction of ``info`` (``sanitizer._StepChecks``) writes EXEC (``ex``: EXEC_LO's key):
    as a named destination, a VALU compare's (``v_cmpx``), or implicitly (``s_*_saveexec``, ``s_*_wrexec``,
    whose EXEC the decoder does not list among the operands)."""
    name = info.inst.name
    return (info.hz.writes_exec or ex in info.wsc or ex + 1 in info.wsc
            or "saveexec" in name or "_wrexec" in name)


def read_before_written(infos) -> tuple[frozenset, frozenset]:
    """The VGPRs and SGPRs a run of instructions (their ``sanitizer._StepChecks``) reads as values before
    it writes them: the only ones its initialisation checks can find unwritten, EXEC unchanged."""
    first_v: set[int] = set()
    first_s: set[int] = set()
    wrote_v: set[int] = set()
    wrote_s: set[int] = set()
    for i in infos:
        first_v.update(k for k in i.uninit_v if k not in wrote_v)
        first_s.update(k for k in i.uninit_s if k not in wrote_s)
        wrote_v.update(i.wv)
        wrote_s.update(i.wsc)
    return frozenset(first_v), frozenset(first_s)


def _scoreboard_plan(counting) -> list:
    """The run's scoreboard calls (``ChecksMemo.counting``) for all waves at once: (waitcnt flags, None),
    or (None, per counter kind (kind, issues, registers (a slice where consecutive, else [m]), sequence
    offsets[m, 1], producers[m, 1],
    registers)) for each stretch of consecutive issues.  ``Sanitizer.issue`` numbers a result with its
    counter's issue count just after its own increment (an instruction that also counts on lgkm adds
    one there after its own); a register written twice takes the later result."""
    out: list = []
    cur: list = []

    def flush():
        if not cur:
            return
        inc: dict[str, int] = {}
        last: dict[str, dict[int, tuple[int, int]]] = {}
        for step in cur:
            kind = "lds" if step.counter == "lgkm" else step.counter
            inc[kind] = inc.get(kind, 0) + 1
            if step.result is not None:
                regs = last.setdefault(kind, {})
                for k in step.writes:
                    regs.pop(k, None)
                    regs[k] = (inc[kind], step.idx)
            if isinstance(step.flags, dict) and step.flags.get("also_lgkm"):
                inc["lds"] = inc.get("lds", 0) + 1
        issues = []
        for kind, n in inc.items():
            regs = last.get(kind)
            if regs is None:
                issues.append((kind, n, None, None, None, ()))
                continue
            keys = list(regs)
            # (consecutive registers, as a load's usually are: a slice, which numpy assigns faster)
            rows = (slice(keys[0], keys[-1] + 1) if keys == list(range(keys[0], keys[0] + len(keys)))
                    else np.array(keys, np.int64))
            issues.append((kind, n, rows,
                           np.array([v[0] for v in regs.values()], np.int64)[:, None],
                           np.array([v[1] for v in regs.values()], np.int64)[:, None], tuple(regs)))
        out.append((None, issues))
        cur.clear()

    for flags, step in counting:
        if step is None:
            flush()
            out.append((flags, None))
        else:
            cur.append(step)
    flush()
    return out


def _aged(tail: tuple, d: int, win: int) -> tuple:
    """A signature's part (a) ``d`` wait states later, no record made meanwhile: the ages grown by ``d``,
    the records past ``win`` dropped (the oldest last)."""
    out: list = []
    for j in range(0, len(tail), 2):
        age = tail[j] + d
        if age > win:
            break
        out.append(age)
        out.append(tail[j + 1])
    return tuple(out)


def _tail(san) -> tuple:
    """Part (a) of a signature: the trace's records of the last ``window`` wait states, newest first, as
    (wait states since, step) pairs flattened."""
    clk, win = san.clk, san.window
    tail: list = []
    tr = san.trace
    j = len(tr) - 1
    while j >= 0:
        t, s = tr[j]
        if type(s) is ChecksMemo:
            # a memo hit's records (ChecksMemo.apply): (t + o, step) for (o, step) in its trace_add
            for o, step in reversed(s.trace_add):
                if clk - t - o > win:
                    return tuple(tail)
                tail.append(clk - t - o)
                tail.append(step)
            j -= 1
            continue
        if clk - t > win:
            break
        tail.append(clk - t)
        tail.append(s)
        j -= 1
    return tuple(tail)


class ChecksMemo:
    """The checks and records of the steps ``steps`` (instrumented: ``step.fn.san_info``), in program
    order, made from a memo where that is exact (see the module docstring)."""

    def __init__(self, steps):
        infos = [s.fn.san_info for s in steps]
        self.infos = infos
        self.uv = frozenset(k for i in infos for k in i.uninit_v) | frozenset(k for i in infos for k in i.wv)
        self.us = frozenset(k for i in infos for k in i.uninit_s) | frozenset(k for i in infos for k in i.wsc)
        # the registers the run reads before it writes them (its others are written first)
        self.first_v, self.first_s = read_before_written(infos)
        # the VGPRs first written, not by an MFMA (it writes every lane), at or after the run's first
        # instruction that may change EXEC (known once the register numbering is: signature, _late_v)
        self.late_v: frozenset | None = None
        self.full_in = -1           # the sanitizer (serial) in which every register of the run is fully initialised
        keys: dict[int, None] = {}
        lk_w: dict[int, None] = {}
        lk_c: dict[int, None] = {}
        for i in infos:
            keys.update(dict.fromkeys(i.step.reads))
            keys.update(dict.fromkeys(i.step.writes))
            if i.haz_check:
                lk_w.update(dict.fromkeys(i.step.reads))
                if i.hz.cls in ("valu", "mem"):
                    lk_w.update(dict.fromkeys(i.step.writes))
                    lk_c.update(dict.fromkeys(i.step.writes))
        self.run_keys = frozenset(keys)
        self.lk_w, self.lk_c = tuple(lk_w), tuple(lk_c)
        # the scoreboard calls, in order: (waitcnt flags, None) or (None, step)
        self.counting = [(i.step.flags, None) if i.inst.name == "s_waitcnt" else (None, i.step)
                         for i in infos if i.counts]
        self.scoreboard = _scoreboard_plan(self.counting)
        self.total = sum(i.nop_slots for i in infos)
        r = _net_records(infos)
        net = r["net"]
        self.exec_set, self.m0_set = r["exec"], r["m0"]
        offs: dict[int, int] = {}
        off = 0
        self.trace_add: list[tuple[int, object]] = []
        for i in infos:
            if i.haz_record:
                self.trace_add.append((off, i.step))
            off += i.nop_slots
        # the sets grouped by (dict, offset, payload): one tuple per group, shared by its keys
        # (payloads hold instructions, which do not hash: grouped by identity)
        sets: dict[tuple, tuple[str, int, tuple, list[int]]] = {}
        set_never: dict[tuple, tuple[str, tuple, list[int]]] = {}
        never_orig: list[int] = []
        pops: dict[str, list[int]] = {}
        for d, m in net.items():
            for k, a in m.items():
                if a[0] == "set":
                    row = offs.setdefault(a[1], len(offs))
                    sets.setdefault((d, row) + tuple(map(id, a[2])), (d, row, a[2], []))[3].append(k)
                elif a[0] == "set_never":
                    set_never.setdefault((d,) + tuple(map(id, a[1])), (d, a[1], []))[2].append(k)
                elif a[0] == "never_orig":
                    never_orig.append(k)
                else:
                    pops.setdefault(d, []).append(k)
        self.offs = np.array(sorted(offs, key=offs.__getitem__), np.int64)[:, None] if offs else None
        self.never_orig = frozenset(never_orig)
        # the sets as one update per history dict: the entry values, one per (offset, payload) -- a
        # VALU result's valu_w and any_w entries share theirs (entries are never changed in place) --
        # and per dict its keys and the index of each key's value
        vals: dict[tuple, int] = {}
        self.vspec: list[tuple[int, tuple]] = []
        per_dict: dict[str, tuple[list[int], list[int]]] = {}
        for d, row, pay, ks in sets.values():
            j = vals.setdefault((row,) + tuple(map(id, pay)), len(vals))
            if j == len(self.vspec):
                self.vspec.append((row, pay))
            keys, idx = per_dict.setdefault(d, ([], []))
            keys += ks
            idx += [j] * len(ks)
        self.set_plan = [(d, tuple(keys), tuple(idx)) for d, (keys, idx) in per_dict.items()]
        self.set_never = [(d, pay, tuple(ks)) for d, pay, ks in set_never.values()]
        self.pops = [(d, frozenset(ks)) for d, ks in pops.items()]
        self.history = bool(self.vspec or self.set_never or self.never_orig or self.pops)
        self.p_w = {k: a[2][0] if a[0] == "set" else a[1][0] for k, a in net["mfma_w"].items()
                    if a[0] in ("set", "set_never")}
        self.p_c = {k: a[2][0] for k, a in net["mfma_c"].items() if a[0] == "set"}
        self.safe: set = set()
        self.tails: dict = {}           # entry trace tail -> the tail after the run (a memo hit)
        self.aged: dict = {}            # (wait states, id(tail)) -> (tail, the tail that many wait states on)
        self.hits = self.misses = 0

    # ---------------------------------------------------------------- signature
    def signature(self, st, ws):
        """The entry signature of the run for the batch ``st`` (module docstring), or None where the memo
        does not apply."""
        if ws is not ALL and not (isinstance(ws, slice) and ws == ALL):
            return None
        san = st.san
        if not san.haz:
            return None
        if self.full_in == san.serial:
            fresh = None
        elif self.uv <= san.vfull and self.us <= san.sfull:
            self.full_in = san.serial           # (vfull / sfull only grow: so it stays for this sanitizer)
            fresh = None
        else:
            # (d) the run's registers not yet fully initialised, where the run makes them so
            if self.late_v is None:
                self.late_v = self._late_v(san.nregs + EXEC_LO)
            if not st.exec_all or not (self.first_v <= san.vfull and self.first_s <= san.sfull):
                return None
            fresh = (frozenset(self.uv - san.vfull), frozenset(self.us - san.sfull))
            if not self.late_v.isdisjoint(fresh[0]):
                return None
        clk, win = san.clk, san.window
        if clk - san.sync <= win:
            return None
        # (a) the hazard records of the last `window` wait states; where no record was made since the
        # last memo hit (tail_at), that hit's tail aged by the wait states since (kept per age and tail:
        # the same tuple the trace would give, so that signatures stay one per state)
        ta = san.tail_at
        if ta is None:
            tail = _tail(san)
        elif ta[0] == clk:
            tail = ta[1]
        else:
            t = ta[1]
            key = (clk - ta[0], id(t))
            ent = self.aged.get(key)
            if ent is None or ent[0] is not t:
                if len(self.aged) >= MAX_SIGNATURES:
                    self.aged.clear()
                ent = self.aged[key] = (t, _aged(t, clk - ta[0], win))
            tail = ent[1]
        # (b) the producers of the MFMA-result entries the checks look up
        pw = tuple(map(san.mfma_p.get, self.lk_w)) if san.mfma_p else None
        pc = tuple(map(san.mfma_cp.get, self.lk_c)) if san.mfma_cp and self.lk_c else None
        # (c) the scoreboard, relative to each wave's counters; nothing of it where the run neither issues
        # nor waits and none of its registers is in a ``maybe`` set (no pending check can look further)
        maybe = san.maybe
        if not self.counting and (not san.any_pending or (self.run_keys.isdisjoint(maybe["vm"])
                                                          and self.run_keys.isdisjoint(maybe["lds"])
                                                          and self.run_keys.isdisjoint(maybe["smem"]))):
            sb: tuple | None = None
        else:
            o = san.issued_all - san.done_all
            if not (o == o[:, :1]).all():
                return None
            sbl: list = [tuple(o[:, 0].tolist())]
            for n, kind in enumerate(_KINDS):
                m = maybe[kind]
                if not m:
                    sbl.append(None)
                    continue
                inter = self.run_keys.intersection(m)
                if not inter:
                    sbl.append(())
                    continue
                ks = sorted(inter)
                iss = san.issued_all[n]
                rel = iss - san.pend[kind][ks]
                rlo, rhi = rel.min(axis=1), rel.max(axis=1)
                uni = rlo == rhi
                out: list = []
                if not uni.all():
                    retired = (san.pend[kind][ks] <= san.done_all[n]).all(axis=1)
                    for q in range(len(ks)):
                        if uni[q]:
                            out.append(int(rlo[q]))
                        elif retired[q]:
                            out.append(-1)
                        else:
                            return None
                else:
                    out = rlo.tolist()
                sbl.append((tuple(ks), tuple(out)))
            sb = tuple(sbl)
        return (tail, pw, pc, sb, fresh)

    def _late_v(self, ex: int) -> frozenset:
        """The VGPRs the run first writes (in program order) with an instruction other than an MFMA (which
        writes every lane) at or after its first instruction that may change EXEC (``ex``: EXEC_LO's key):
        such a first write may leave lanes unwritten.  ``s_or_b64`` of EXEC with something into EXEC does
        not count as a change: EXEC stays every lane where it was every lane (part (d) asks that at the
        run's entry)."""
        late: set[int] = set()
        written: set[int] = set()
        changed = False
        for i in self.infos:
            if not changed and writes_exec(i, ex):
                reads = i.step.reads
                changed = not (i.inst.name == "s_or_b64" and ex in reads and ex + 1 in reads)
            if changed and i.hz.cls != "mfma":
                late.update(k for k in i.wv if k not in written)
            written.update(i.wv)
        return frozenset(late)

    # ---------------------------------------------------------------- running
    def checks(self, st, ws, slow) -> bool:
        """Make the run's checks and records: from the memo (True) where the entry signature is one the
        per-instruction checks passed before, else by ``slow(st, ws)`` (False), remembering the
        signature when they reported nothing."""
        sig = self.signature(st, ws) if st.san.memo else None
        if sig is not None and sig in self.safe:
            self.hits += 1
            self.apply(st, sig[4])
            # the trace's tail now: a function of the entry's (sig[0]) and the run's records
            san = st.san
            after = self.tails.get(sig[0])
            if after is None:
                if len(self.tails) >= MAX_SIGNATURES:
                    self.tails.clear()
                after = self.tails[sig[0]] = _tail(san)
            san.tail_at = (san.clk, after)
            return True
        self.misses += 1
        rc = st.run
        n0 = rc.faults
        slow(st, ws)
        if sig is not None and rc.faults == n0:
            if len(self.safe) >= MAX_SIGNATURES:
                self.safe.clear()
            self.safe.add(sig)
        return False

    def apply_history(self, san, slot) -> None:
        """The run's records in the hazard-history dicts (mfma_w, mfma_c, valu_w, trans_w, any_w), for
        an entry at the issue slots ``slot`` (Sanitizer.settle)."""
        if self.offs is not None:
            rows = list(slot + self.offs)           # the slots at each recording instruction [W] each
            vals = [(rows[row],) + pay for row, pay in self.vspec]
            for d, keys, idx in self.set_plan:
                getattr(san, d).update(zip(keys, map(vals.__getitem__, idx)))
        for d, pay, ks in self.set_never:
            getattr(san, d).update(dict.fromkeys(ks, (san.never,) + pay))
        # (a dict's keys view & a frozenset looks up the frozenset's keys in the dict, not the reverse)
        if self.never_orig:
            mw = san.mfma_w
            for k in mw.keys() & self.never_orig:
                mw[k] = (san.never,) + mw[k][1:]
        for d, ks in self.pops:
            h = getattr(san, d)
            for k in h.keys() & ks:
                del h[k]

    def apply(self, st, fresh=None) -> None:
        """The run's checks' and records' effect on the sanitizer's state, every wave executing and no
        check reporting (the per-instruction path's, module docstring); ``fresh``: part (d) of the
        signature, the registers the run initialises."""
        san = st.san
        if fresh is not None:                   # (mark_v / mark_s of every lane: vfull / sfull)
            san.vfull.update(fresh[0])
            nr = san.nregs
            for k in fresh[1]:
                san.sinit[k - nr] = True
            san.sfull.update(fresh[1])
        for flags, issues in self.scoreboard:
            if issues is None:
                san.waitcnt(st, ALL, flags)
                continue
            # Sanitizer.issue of consecutive instructions, every wave executing, at once
            for kind, n, rows, seqs, prods, keys in issues:
                iss = san.issued[kind]
                if rows is not None:
                    san.pend[kind][rows] = iss + seqs
                    san.prod[kind][rows] = prods
                    san.maybe[kind].update(keys)
                    san.any_pending = True
                iss += n
        slot = san.slot
        if self.history:
            # the history dicts' records wait for Sanitizer.settle (module docstring): this run's latest
            # hit replaces its earlier one, moved to the end
            d = san.deferred
            if self in d:
                del d[self]
            d[self] = slot.copy()
        if self.p_w:
            san.mfma_p.update(self.p_w)
        if self.p_c:
            san.mfma_cp.update(self.p_c)
        if self.exec_set is not None:
            o, inst = self.exec_set
            np.add(slot, o, out=san.exec_w)
            san.exec_w_any = True
            san.exec_w_inst = inst
        if self.m0_set is not None:
            np.add(slot, self.m0_set, out=san.m0_w)
        clk = san.clk
        tr = san.trace
        if self.trace_add:
            tr.append((clk, self))                  # (its records, expanded where read: _tail)
        if len(tr) > 1024:
            del tr[:-256]
        slot += self.total
        san.clk = clk + self.total


__all__ = ["ChecksMemo", "enabled", "read_before_written"]
