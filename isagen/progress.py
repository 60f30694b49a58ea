"""Progress bars for the command line's long work, drawn with click's bar on stderr.

A bar is drawn only when stderr is a terminal: piped or captured output (files, CI logs, the tests)
gets nothing extra, so what a script reads is the same with or without one.

The CLI opens a :class:`Progress` around long work.  Work it drives itself reports to that object
(``isagen gen`` advances it once per build); work deep inside a library loop that takes no UI
argument reports through :func:`report_progress`, which goes to the innermost open ``Progress`` of
the current context and does nothing when none is open (the emulator reports its batches of
workgroups this way, so ``isagen run`` on the emulator shows how far a launch has got).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import time
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar  # what click.progressbar returns; click exports no name for it

# work that is often quick (an emulator run) shows its bar only once it has taken this long: a bar
# that appears and fills at once tells nothing
SLOW_WORK_S = 2.0

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


def report_progress(done: int, total: int) -> None:
    """``done`` of ``total`` units of the current work are finished: tell the open Progress, if any."""
    progress = _current.get()
    if progress is not None:
        progress.update(done, total)


class Progress:
    """A bar counting ``total`` steps under ``label``, shown once ``delay`` seconds have passed.

    ``delay`` keeps often-quick work free of a bar that would only flash: the bar appears at the first
    update after it, unless that update finishes the work.  It counts from entering when ``total`` is
    given, else from the work's first report (an emulator launch is timed, not the build before it).

    ``clock=True`` is for work whose updates are far apart (an emulator launch is often a single batch
    of workgroups): a thread then redraws the bar twice a second with the time so far, and opens it
    once ``delay`` has passed even between updates.  ``enabled=False`` turns the bar off where the
    caller knows it would tell nothing (a single build).  Use it as a context manager; without a
    terminal on stderr every method is a no-op except :meth:`echo`, which prints.
    """

    TICK_S = 0.5

    def __init__(self, label: str, total: int | None = None, *, delay: float = 0.0, clock: bool = False,
                 enabled: bool = True, stream=None):
        self.label = label
        self.total = total
        self.delay = delay
        self.clock = clock
        self.enabled = enabled
        self._stream = stream
        self._bar: ProgressBar[int] | None = None
        self._bars = contextlib.ExitStack()
        self._done = 0
        self._status: str | None = None
        self._start: float | None = None     # when the work began: entering, or its first report
        self._token: contextvars.Token[Progress | None] | None = None     # set on entering
        self._lock = threading.RLock()          # the clock's thread draws too
        self._stop = threading.Event()
        self._clock_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ context
    def __enter__(self) -> Progress:
        if self._stream is None:
            self._stream = sys.stderr           # looked up now: the tests swap sys.stderr per test
        self.enabled = self.enabled and bar_wanted(self._stream)
        if self.total is not None:
            self._start = time.monotonic()
        self._token = _current.set(self)
        if self.enabled and self.delay <= 0 and self.total:
            self._open()
        if self.enabled and self.clock:
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
            if self._bar is not None and exc[0] is None:
                self._bar.update(max(0, (self.total or 0) - self._bar.pos))     # a finished run ends full
            self._close()

    @property
    def shown(self) -> bool:
        """Whether a bar is on the screen now (callers print whole lines above it then)."""
        return self._bar is not None

    # ------------------------------------------------------------------ updates
    def update(self, done: int, total: int | None = None, status: str | None = None) -> None:
        """``done`` of ``total`` (default: the total so far) steps are finished; ``status`` names the
        current one."""
        if not self.enabled:
            return
        with self._lock:
            if status is not None:
                self._status = status
            if self._bar is not None and done < self._bar.pos:     # the count started over: new work
                self._close()
                self._start = None
            if self._start is None:
                self._start = time.monotonic()
            if total is not None:
                self.total = total
            self._done = done
            bar = self._bar
            if bar is None:
                # without a total nothing is due (``_due`` says so too); a bar that opens full tells nothing
                if self.total is None or not self._due() or done >= self.total:
                    return
                bar = self._open()
            bar.length = self.total
            steps = done - bar.pos
            bar.update(steps)
            if steps == 0:
                bar.render_progress()     # click redraws on steps only; a new status is worth one too

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
            self._bar._last_line = None     # click redraws only a line that changed; this one was erased
            self._bar.render_progress()

    # ------------------------------------------------------------------ the click bar
    def _due(self) -> bool:
        return bool(self.total) and self._start is not None and time.monotonic() - self._start >= self.delay

    def _info(self, _item) -> str | None:
        """What follows the bar: the current step's name, and with the clock the time so far."""
        parts = [self._status] if self._status else []
        if self.clock and self._start is not None:
            parts.append(f"{time.monotonic() - self._start:.0f} s")
        return "  ".join(parts) or None

    def _run_clock(self) -> None:
        while not self._stop.wait(self.TICK_S):
            with self._lock:
                if self._bar is None and self._due():
                    self._open()
                elif self._bar is not None:
                    self._bar.render_progress()

    def _open(self) -> ProgressBar[int]:
        # every caller opens a bar only for work with a total: ``_due`` is False without one
        assert self.total is not None, "a progress bar opened before its work has a total"
        self._bar = bar = self._bars.enter_context(click.progressbar(
            length=self.total, label=self.label, file=self._stream, show_pos=True, show_percent=True,
            show_eta=True, width=24, item_show_func=self._info))
        bar.update(self._done)
        return bar

    def _close(self) -> None:
        self._bars.close()          # click ends the line and shows the cursor again
        self._bar = None
