"""Progress bars for long work, drawn on stderr.

A bar is drawn only when stderr is a terminal: piped or captured output (files, CI logs, the tests)
gets nothing extra, so what a script reads is the same with or without one.  The Python API's
opt-in (``kernel.run(..., progress=True)``) asks for more: without a terminal (a notebook, a log) it
prints a plain line every few seconds instead (``lines=True``), since the caller asked to be told.

The CLI opens a :class:`Progress` around long work.  Work it drives itself reports to that object
(``isagen gen`` advances it once per build); work deep inside a library loop that takes no UI
argument reports through :func:`report_progress`, which goes to the innermost open ``Progress`` of
the current context and does nothing when none is open (the emulator reports its batches of
workgroups this way, so ``isagen run`` on the emulator shows how far a launch has got).  Such work
may also hand over an *estimate*, a function the bar's clock calls between reports for the units
done so far (fractions included): the emulator runs most launches in one or a few large batches,
and without it a bar would stand still for the whole of a batch.

What follows a bar with a total: the rate (units per second since the work began) and the ETA
(the units left at that rate), then the current step's name, then (``clock=True``) the time so far.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import sys
import threading
import time
from collections.abc import Callable

# work that is often quick (an emulator run) shows its bar only once it has taken this long: a bar
# that appears and fills at once tells nothing
SLOW_WORK_S = 2.0

# a progress line (``lines=True`` without a terminal) is printed at most this often: a log gets a few
# lines per minute, not one per update
LINE_EVERY_S = 5.0

# the innermost open Progress; a ContextVar so that threads do not report into each other's bars
_current: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("isagen_progress", default=None)


def bar_wanted(stream) -> bool:
    """True when ``stream`` is a terminal (a person watching), False for pipes, files and captures."""
    isatty = getattr(stream, "isatty", None)
    if isatty is None:
        return False
    try:
        return bool(isatty())
    except ValueError:          # a closed stream
        return False


def report_progress(done: int, total: int, estimate: Callable[[], float] | None = None) -> None:
    """``done`` of ``total`` units of the current work are finished: tell the open Progress, if any.

    ``estimate``, when given, is called by the bar's clock until the next report for the units done
    by then (a float between ``done`` and ``total``; it runs on the clock's thread, so it must only
    read)."""
    progress = _current.get()
    if progress is not None:
        progress.update(done, total, estimate=estimate)


def report_note(text: str) -> None:
    """A one-line note about the current work (the emulator's estimate of a launch's length) for the
    innermost open Progress that takes notes (``notes=True``), printed at once as a line of output;
    nothing when none does."""
    progress = _current.get()
    if progress is not None and progress.notes:
        progress.echo(text)


def notes_wanted() -> bool:
    """True when the innermost open Progress prints notes: work may then spend a little to have one
    worth printing (the emulator runs its first workgroup alone to estimate a launch)."""
    progress = _current.get()
    return progress is not None and progress.notes


def progress_wanted() -> bool:
    """True when an open Progress would show reports (a terminal, or the API's ``lines``): work may
    then spend a little to report better (the emulator runs a first workgroup alone to learn how
    long one takes)."""
    progress = _current.get()
    return progress is not None and progress.wanted


def format_duration(seconds: float) -> str:
    """``7 s``, ``2:05``, ``1:02:05``: short enough to follow a bar."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}:{s:02d}"
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


class Progress:
    """A bar counting ``total`` steps under ``label``, shown once ``delay`` seconds have passed.

    ``delay`` keeps often-quick work free of a bar that would only flash: the bar appears at the first
    update after it, unless that update finishes the work.  It counts from entering when ``total`` is
    given, else from the work's first report (an emulator launch is timed, not the build before it).

    ``clock=True`` is for work whose updates are far apart (an emulator launch is often a single batch
    of workgroups): a thread then redraws the bar twice a second with the time so far (and the work's
    estimate, when it gave one), and opens it once ``delay`` has passed even between updates.
    ``unit`` names what is counted in the rate (``workgroups`` -> ``12.5 workgroups/s``).
    ``notes=True``: print the work's notes (:func:`report_note`) as lines of output (stdout), terminal
    or not: what the caller wants said up front whether or not anyone watches a bar.
    ``lines=True``: without a terminal, print a progress line at most every ``LINE_EVERY_S`` seconds
    (and one when the work ends) instead of nothing.  ``enabled=False`` turns it all off where the
    caller knows it would tell nothing (a single build).  Use it as a context manager; with nothing to
    draw every method is a no-op except :meth:`echo`, which prints.
    """

    TICK_S = 0.5
    RATE_WINDOW_S = 5.0

    def __init__(self, label: str, total: int | None = None, *, delay: float = 0.0, clock: bool = False,
                 enabled: bool = True, stream=None, unit: str = "", lines: bool = False, notes: bool = False):
        self.label = label
        self.notes = notes
        self.total = total
        self.delay = delay
        self.clock = clock
        self.enabled = enabled
        self.unit = unit
        self.lines = lines
        self._stream = stream
        self._tty = False                      # set on entering: a bar (terminal) or lines
        self._bar: Bar | None = None
        self._bars = contextlib.ExitStack()
        self._done: float = 0                  # reported, or estimated since the last report
        self._reported: float = 0              # the last report's count (a smaller one starts new work)
        self._estimate: Callable[[], float] | None = None
        self._pace: collections.deque[tuple[float, float]] = collections.deque()   # (time, done) of the window
        self._rate: float | None = None
        self._estimated = False                # whether an estimate came yet (see ``update``)
        self._status: str | None = None
        self._start: float | None = None     # when the work began: entering, or its first report
        self._last_line: float | None = None  # when the last progress line was printed (lines mode)
        self._token: contextvars.Token[Progress | None] | None = None     # set on entering
        self._lock = threading.RLock()          # the clock's thread draws too
        self._stop = threading.Event()
        self._clock_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ context
    def __enter__(self) -> Progress:
        if self._stream is None:
            self._stream = sys.stderr           # looked up now: the tests swap sys.stderr per test
        self._tty = bar_wanted(self._stream)
        self.enabled = self.enabled and (self._tty or self.lines)
        if self.total is not None:
            self._start = time.monotonic()
        self._token = _current.set(self)
        if self.enabled and self._tty and self.delay <= 0 and self.total:
            self._open()
        if self.enabled and (self.clock or not self._tty):     # lines are printed by the clock
            self._clock_thread = threading.Thread(target=self._run_clock, name="isagen-progress", daemon=True)
            self._clock_thread.start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._token is not None, "Progress left without being entered"
        _current.reset(self._token)
        self._stop.set()
        if self._clock_thread is not None:
            self._clock_thread.join()
        with self._lock:
            if exc[0] is None:
                self._done = self.total or self._done                 # a finished run ends full
            if self._bar is not None and exc[0] is None:
                self._bar.update(max(0, (self.total or 0) - self._bar.pos))
            if self._last_line is not None and exc[0] is None:
                self._print_line(final=True)        # lines were printed: say that it ended
            self._close()

    @property
    def shown(self) -> bool:
        """Whether a bar is on the screen now (callers print whole lines above it then)."""
        return self._bar is not None

    @property
    def wanted(self) -> bool:
        """Whether reports will be shown (once due): a terminal, or lines asked for."""
        return self.enabled

    # ------------------------------------------------------------------ updates
    def update(self, done: float, total: int | None = None, status: str | None = None,
               estimate: Callable[[], float] | None = None) -> None:
        """``done`` of ``total`` (default: the total so far) steps are finished; ``status`` names the
        current one; ``estimate`` gives the steps done between now and the next update (see
        :func:`report_progress`)."""
        if not self.enabled:
            return
        with self._lock:
            if status is not None:
                self._status = status
            if done < self._reported:           # the count started over: new work
                self._close()
                self._start = None
                self._last_line = None
                self._pace.clear()
                self._rate = None
                self._estimated = False
            if self._start is None:
                self._start = time.monotonic()
            if total is not None:
                self.total = total
            self._done = self._reported = done
            self._estimate = estimate
            if estimate is not None and not self._estimated:
                # the first report that brings an estimate starts the emulator's batches: their pace,
                # not that of the lone first workgroup before them, is what the rest will go at
                self._estimated = True
                self._pace.clear()
            self._sample()
            if not self._tty:
                return                          # lines: the clock prints them
            bar = self._bar
            if bar is None:
                # without a total nothing is due (``_due`` says so too); a bar that opens full tells nothing
                if self.total is None or not self._due() or done >= self.total:
                    return
                bar = self._open()
            self._draw(bar)

    def advance(self, steps: int = 1, status: str | None = None) -> None:
        self.update(self._done + steps, status=status)

    def echo(self, text: str, file=None) -> None:
        """Print a line of output (stdout by default); with a bar shown, above it, and the bar redrawn."""
        file = file if file is not None else sys.stdout
        with self._lock:
            if self._bar is None:
                print(text, file=file, flush=True)
                return
            self._stream.write("\r" + " " * (self._bar.max_width or 0) + "\r")     # erase the bar's line
            self._stream.flush()
            print(text, file=file, flush=True)
            self._bar.last_line = None      # the bar redraws only a line that changed; this one was erased
            self._bar.render_progress()

    # ------------------------------------------------------------------ what is shown
    def _due(self) -> bool:
        return bool(self.total) and self._start is not None and time.monotonic() - self._start >= self.delay

    def _elapsed(self) -> float:
        return time.monotonic() - self._start if self._start is not None else 0.0

    def _refresh(self) -> None:
        """Take the work's estimate of the steps done by now (never backwards, never past the total)."""
        if self._estimate is None:
            return
        try:
            guess = float(self._estimate())
        except Exception:       # noqa: BLE001 -- an estimate is a nicety: one that fails is dropped
            self._estimate = None
            return
        if guess > self._done:
            self._done = min(guess, float(self.total)) if self.total else guess

    def _sample(self) -> None:
        """Note (now, done) for the rate; samples older than ``RATE_WINDOW_S`` are dropped, the last
        of them kept as the window's start."""
        now = time.monotonic()
        self._pace.append((now, self._done))
        while len(self._pace) > 2 and now - self._pace[1][0] >= self.RATE_WINDOW_S:
            self._pace.popleft()

    def _rate_eta(self) -> str | None:
        """``12.5 workgroups/s, ETA 20 s``: the rate over the last ``RATE_WINDOW_S`` seconds and the
        time left at it.  A recent window, not the whole run: an estimate that ran ahead early on (an
        emulated kernel's cheap prologue) or a slow start stop counting once they are that old."""
        if self._pace and self.total and self._done < self.total:     # once done, the rate stays as it was
            t0, done0 = self._pace[0]
            span = time.monotonic() - t0
            if span >= self.TICK_S and self._done > done0:
                self._rate = (self._done - done0) / span
        rate = self._rate
        if not self.total or not rate:
            return None
        unit = f" {self.unit}" if self.unit else ""
        text = f"{rate:.3g}{unit}/s"
        if self._done < self.total:
            text += f", ETA {format_duration((self.total - self._done) / rate)}"
        return text

    def _info(self, _item=None) -> str | None:
        """What follows the bar: rate and ETA, the current step's name, with the clock the time so far."""
        parts = [p for p in (self._rate_eta(), self._status) if p]
        if self.clock and self._start is not None:
            parts.append(f"{format_duration(self._elapsed())} so far")
        return "  ".join(parts) or None

    def _draw(self, bar: Bar) -> None:
        assert self.total is not None, "a progress bar drawn without a total"
        bar.length = self.total
        steps = int(self._done) - bar.pos
        if steps > 0:
            bar.update(steps)
        else:
            bar.render_progress()     # a new status or rate is worth a redraw too

    def _print_line(self, final: bool = False) -> None:
        """One progress line (lines mode): ``emulating: 37/256 workgroups (14%), 9.8/s, ETA 22 s``."""
        unit = f" {self.unit}" if self.unit else ""
        if final:
            text = f"{self.label}: {self.total}/{self.total}{unit} in {format_duration(self._elapsed())}"
        else:
            total = self.total or 0
            pct = f" ({100 * self._done / total:.0f}%)" if total else ""
            rest = ", ".join(p for p in (self._rate_eta(), self._status, f"{format_duration(self._elapsed())} so far")
                             if p)
            text = f"{self.label}: {int(self._done)}/{total}{unit}{pct}, {rest}"
        print(text, file=self._stream, flush=True)
        self._last_line = time.monotonic()

    def _run_clock(self) -> None:
        while not self._stop.wait(self.TICK_S):
            with self._lock:
                self._refresh()
                self._sample()
                if not self._tty:
                    due_again = self._last_line is None or time.monotonic() - self._last_line >= LINE_EVERY_S
                    if self._due() and due_again and self._done < (self.total or 0):
                        self._print_line()
                elif self._bar is None and self._due() and self._done < (self.total or 0):
                    self._draw(self._open())
                elif self._bar is not None:
                    self._draw(self._bar)

    def _open(self) -> Bar:
        # every caller opens a bar only for work with a total: ``_due`` is False without one
        assert self.total is not None, "a progress bar opened before its work has a total"
        self._bar = bar = self._bars.enter_context(Bar(self.total, self.label, self._stream, info=self._info))
        bar.update(int(self._done))
        return bar

    def _close(self) -> None:
        self._bars.close()          # the bar ends its line and shows the cursor again
        self._bar = None


class Bar:
    """One line on a terminal, redrawn in place: ``label  [#####-------]  5/12   41%  info``
    (``info()``: what follows, or None).  The cursor is hidden while it is drawn; leaving ends the line."""

    HIDE_CURSOR, SHOW_CURSOR = "\033[?25l", "\033[?25h"

    def __init__(self, length: int, label: str, stream, width: int = 24, info: Callable[[], str | None] | None = None):
        self.length = length
        self.label = label
        self.stream = stream
        self.width = width
        self.info = info
        self.pos = 0
        self.max_width: int | None = None        # the longest line drawn: a shorter one is padded over it
        self.last_line: str | None = None       # what was drawn last (not drawn again)

    def __enter__(self) -> Bar:
        self.render_progress()
        return self

    def __exit__(self, *exc) -> None:
        self.stream.write(self.SHOW_CURSOR + "\n")
        self.stream.flush()

    def update(self, steps: int) -> None:
        self.pos += steps
        self.render_progress()

    def line(self) -> str:
        fraction = min(self.pos / (self.length or 1), 1.0)
        filled = int(fraction * self.width)
        bits = [f"{self.pos}/{self.length}", f"{int(fraction * 100):3}%"]
        info = self.info() if self.info is not None else None
        if info:
            bits.append(info)
        return f"{self.label}  [{'#' * filled}{'-' * (self.width - filled)}]  {'  '.join(bits)}".rstrip()

    def render_progress(self) -> None:
        line = self.line()
        clear = self.width if self.max_width is None else self.max_width
        self.max_width = max(self.max_width or 0, len(line))
        text = "\r" + self.HIDE_CURSOR + line + " " * (clear - len(line))
        if text != self.last_line:
            self.last_line = text
            self.stream.write(text)
            self.stream.flush()
