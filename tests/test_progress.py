"""Progress bars: drawn on a terminal only, nothing on pipes or captures; lines printed above a bar;
the delay that keeps quick work bar-free; rate and ETA (a fake clock), the work's estimate between
reports, progress lines for the API's opt-in; the emulator reporting its workgroups to an open bar,
the API's ``progress=True`` and ``isagen run`` showing done/total, rate and ETA."""

import io
import os
import pty
import re
import time

import pytest

from isagen import progress as progress_module
from isagen.progress import Progress, bar_wanted, report_progress


class Terminal(io.StringIO):
    """A captured stream that says it is a terminal, so that the bar is drawn into it."""

    def isatty(self):
        return True


def test_bar_wanted_only_on_a_terminal(tmp_path):
    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as tty:
            assert bar_wanted(tty)
    finally:
        os.close(leader)
        os.close(follower)
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe:
        assert not bar_wanted(pipe)
    os.close(read_end)
    with open(tmp_path / "log", "w") as f:
        assert not bar_wanted(f)
    closed = open(tmp_path / "log")
    closed.close()
    assert not bar_wanted(closed)
    assert not bar_wanted(io.StringIO()) and not bar_wanted(object())


def test_no_terminal_no_output():
    stream = io.StringIO()
    with Progress("building", total=3, stream=stream) as p:
        for _ in range(3):
            p.advance()
            report_progress(2, 3)
        assert not p.shown
    assert stream.getvalue() == ""


def test_bar_counts_and_ends_full():
    stream = Terminal()
    with Progress("building", total=3, stream=stream) as p:
        assert p.shown
        p.advance(status="add_bf16 gfx942")
        assert "1/3" in stream.getvalue() and "add_bf16 gfx942" in stream.getvalue()
    out = stream.getvalue()
    assert "building" in out and "3/3" in out and "100%" in out and out.endswith("\n")


def test_disabled_bar_draws_nothing():
    stream = Terminal()
    with Progress("building", total=1, stream=stream, enabled=False) as p:
        p.advance()
        assert not p.shown
    assert stream.getvalue() == ""


def test_lines_go_above_the_bar(capsys):
    stream = Terminal()
    with Progress("building", total=2, stream=stream) as p:
        p.advance()
        before = len(stream.getvalue())
        p.echo("[1/2] add_bf16 gfx942 … ok")
        after = stream.getvalue()[before:]
    assert capsys.readouterr().out == "[1/2] add_bf16 gfx942 … ok\n"
    erase, redraw = after.split("\r", 2)[1:]               # "\r<spaces>\r<the bar again>"
    assert erase.strip() == "" and "1/2" in redraw


def test_delay_keeps_quick_work_free_of_a_bar(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    stream = Terminal()
    with Progress("emulating", delay=2.0, stream=stream) as p:
        report_progress(1, 10)
        now[0] += 1.0
        report_progress(4, 10)
        assert stream.getvalue() == "" and not p.shown
        now[0] += 1.5                                      # past the delay: the next report draws it
        report_progress(5, 10)
        assert p.shown and "5/10" in stream.getvalue()


def test_finishing_update_opens_no_late_bar(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    stream = Terminal()
    with Progress("emulating", delay=2.0, stream=stream) as p:
        report_progress(0, 1)
        now[0] = 5.0
        report_progress(1, 1)                              # done already: a full bar now would tell nothing
        assert not p.shown
    assert stream.getvalue() == ""


def test_clock_opens_the_bar_between_updates_and_shows_the_time():
    stream = Terminal()
    with Progress("emulating", delay=0.2, clock=True, stream=stream) as p:
        report_progress(0, 512)                            # a launch of one batch: no other report until done
        assert not p.shown
        deadline = time.monotonic() + 10
        while not p.shown and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.shown
        time.sleep(2 * Progress.TICK_S)
        assert re.search(r"0/512 .* \d+ s", stream.getvalue())
        report_progress(512, 512)
    assert "512/512" in stream.getvalue()


def test_reports_go_to_the_innermost_open_bar():
    outer, inner = Terminal(), Terminal()
    with Progress("outer", total=4, stream=outer) as p:
        with Progress("inner", stream=inner):
            report_progress(3, 7)
        assert "3/7" in inner.getvalue() and "3/7" not in outer.getvalue()
        report_progress(2, 4)
        assert "2/4" in outer.getvalue() and p.shown
    report_progress(1, 1)                                   # none open: nothing to tell, no error


def test_emulator_reports_its_workgroups(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import isagen
    from isagen.runtime.emu import dispatch

    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(dispatch, "MAX_BATCH_WAVES", 1)        # one workgroup per batch: a report after each
    kernel = isagen.build("axpy_f32", "gfx942")
    n = 3001                                                 # two workgroups (256 lanes x 4 x 2 elements each)
    x, y = torch.ones(n), torch.zeros(n)
    stream = Terminal()
    with Progress("emulating", stream=stream):
        result = kernel.run(x, y, alpha=2.0, backend="emu")
    assert result.grid[0] == 2
    out = stream.getvalue()
    assert "emulating" in out and out.index("0/2") < out.index("1/2") < out.index("2/2")
    assert bool((y == 2.0).all())


class FakeClock:
    def __init__(self, monkeypatch, now=100.0):
        self.now = now
        monkeypatch.setattr(progress_module.time, "monotonic", lambda: self.now)


def test_rate_and_eta_over_a_recent_window(monkeypatch):
    clock = FakeClock(monkeypatch)
    stream = Terminal()
    with Progress("emulating", unit="workgroups", stream=stream) as p:
        report_progress(0, 100)
        clock.now += 2
        report_progress(20, 100)
        assert p.shown and "20/100" in stream.getvalue()
        assert stream.getvalue().rstrip().endswith("10 workgroups/s, ETA 8 s")
        clock.now += 8                                       # 10 s in: only the last 5 s or so count
        report_progress(30, 100)
        assert stream.getvalue().rstrip().endswith("1.25 workgroups/s, ETA 56 s")     # (30-20) / (10-2)
        clock.now += 120
        report_progress(31, 100)
        assert stream.getvalue().rstrip().endswith("0.00833 workgroups/s, ETA 2:18:00")


def test_the_first_estimate_restarts_the_rate(monkeypatch):
    """The emulator's lone first workgroup is slow per workgroup; the batches after it (the first report
    with an estimate) set the pace, and later estimates (one per batch) keep the window."""
    clock = FakeClock(monkeypatch)
    stream = Terminal()
    with Progress("emulating", unit="workgroups", stream=stream):
        report_progress(0, 101)
        clock.now += 10
        report_progress(1, 101, estimate=lambda: 1.0)          # the lone workgroup took 10 s
        clock.now += 2
        report_progress(21, 101, estimate=lambda: 21.0)
        assert stream.getvalue().rstrip().endswith("10 workgroups/s, ETA 8 s")     # (21-1) / 2, not 21 / 12
        clock.now += 2
        report_progress(41, 101)
        assert stream.getvalue().rstrip().endswith("10 workgroups/s, ETA 6 s")     # (41-1) / 4


def test_duration_format():
    assert [progress_module.format_duration(s) for s in (0.4, 7, 59.6, 125, 3725)] == \
        ["0 s", "7 s", "1:00", "2:05", "1:02:05"]


def test_estimate_moves_the_bar_between_reports(monkeypatch):
    monkeypatch.setattr(Progress, "TICK_S", 0.02)
    stream = Terminal()
    guess = [10.0]
    with Progress("emulating", clock=True, unit="workgroups", stream=stream) as p:
        report_progress(10, 100, estimate=lambda: guess[0])
        guess[0] = 40.5
        deadline = time.monotonic() + 10
        while "40/100" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "40/100" in stream.getvalue() and p.shown
        guess[0] = 30.0                                    # an estimate never moves the bar back
        time.sleep(0.1)
        assert "30/100" not in stream.getvalue()
        report_progress(60, 100)                            # a report without one ends the estimate
        guess[0] = 90.0
        time.sleep(0.1)
        assert "90/100" not in stream.getvalue() and "60/100" in stream.getvalue()


def test_lines_without_a_terminal_when_asked(monkeypatch):
    monkeypatch.setattr(Progress, "TICK_S", 0.02)
    monkeypatch.setattr(progress_module, "LINE_EVERY_S", 0.0)
    stream = io.StringIO()
    with Progress("emulating axpy", clock=True, unit="workgroups", lines=True, stream=stream) as p:
        assert p.wanted and not p.shown
        report_progress(0, 10)
        time.sleep(0.1)
        report_progress(5, 10)
        deadline = time.monotonic() + 10
        while "5/10" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = stream.getvalue().splitlines()
    assert re.fullmatch(r"emulating axpy: 5/10 workgroups \(50%\), [\d.]+ workgroups/s, ETA \d+ s, \d+ s so far",
                        next(line for line in lines if "5/10" in line))
    assert re.fullmatch(r"emulating axpy: 10/10 workgroups in \d+ s", lines[-1])
    assert "\r" not in stream.getvalue()                  # plain lines, no bar drawing


def _axpy_workgroups(monkeypatch, tmp_path, wgs):
    """axpy_f32 with one workgroup per emulator batch: ``wgs`` reports in one launch."""
    torch = pytest.importorskip("torch")
    import isagen
    from isagen.runtime.emu import dispatch
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(dispatch, "MAX_BATCH_WAVES", 1)
    kernel = isagen.build("axpy_f32", "gfx942")
    n = 2048 * wgs - 5                                      # 256 lanes x 4 x 2 elements per workgroup
    x, y = torch.randn(n), torch.randn(n)
    return kernel, x, y, 2.0 * x + y


def test_api_progress_opt_in(monkeypatch, tmp_path, capsys):
    import isagen.api
    kernel, x, y, want = _axpy_workgroups(monkeypatch, tmp_path, 6)
    result = kernel.run(x, y, alpha=2.0, backend="emu")          # no opt-in: nothing on stderr
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(isagen.api, "SLOW_WORK_S", 0.0)
    monkeypatch.setattr(Progress, "TICK_S", 0.005)
    monkeypatch.setattr(progress_module, "LINE_EVERY_S", 0.0)
    x, y = x.clone(), want.clone() - 2.0 * x
    result = kernel.run(x, y, alpha=2.0, backend="emu", progress=True)
    assert result.grid[0] == 6 and torch_close(y, want)
    err = capsys.readouterr().err                              # captured: not a terminal, so lines
    # a line before the end; whether it carries a rate depends on whether the clock ticked after the
    # second report (machine load decides), but a rate always comes with its ETA
    assert re.search(r"^emulating axpy_f32: [1-5]/6 workgroups \(\d+%\), ", err, re.M), err
    rated = [line for line in err.splitlines() if "workgroups/s" in line and "/6 workgroups (" in line]
    assert all(re.search(r", [\d.]+ workgroups/s, ETA", line) for line in rated), err
    assert err.splitlines()[-1].startswith("emulating axpy_f32: 6/6 workgroups in ")


def torch_close(a, b):
    import torch
    return bool(torch.allclose(a, b, rtol=1.3e-6, atol=1e-5))


def test_emulator_learns_a_wave_from_one_workgroup_when_watched(monkeypatch, tmp_path):
    """Watched, a launch of many waves runs its first workgroup alone, then hands the bar an estimate
    for the batch after it (instructions executed against the lone workgroup's); the result is the same."""
    from isagen.runtime.emu import dispatch
    kernel, x, y, want = _axpy_workgroups(monkeypatch, tmp_path, 5)
    monkeypatch.setattr(dispatch, "MAX_BATCH_WAVES", 2048)     # all five in one batch but for the probe
    monkeypatch.setattr(dispatch, "PROBE_MIN_WAVES", 1)
    calls = []
    monkeypatch.setattr(dispatch, "report_progress", lambda done, total, estimate=None: calls.append(
        (done, total, estimate)))
    monkeypatch.setattr(dispatch, "progress_wanted", lambda: True)
    kernel.run(x, y, alpha=2.0, backend="emu")
    assert torch_close(y, want)
    assert [(d, t) for d, t, _ in calls] == [(0, 5), (1, 5), (1, 5), (5, 5)]
    estimate = calls[2][2]
    assert estimate is not None and 1 <= estimate() <= 1 + 0.99 * 4 and calls[3][2] is None
    calls.clear()
    monkeypatch.setattr(dispatch, "progress_wanted", lambda: False)     # nobody watching: one batch
    kernel.run(x.clone(), y.clone(), alpha=2.0, backend="emu")
    assert [(d, t, e) for d, t, e in calls] == [(0, 5, None), (5, 5, None)]


def test_cli_run_shows_done_rate_and_eta(monkeypatch, tmp_path, capsys):
    import sys

    from isagen.cli import main as cli_main
    from isagen.runtime import run
    from isagen.runtime.emu import dispatch
    monkeypatch.setenv("ISAGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ISAGEN_BACKEND", raising=False)
    monkeypatch.setattr(dispatch, "MAX_BATCH_WAVES", 1)          # one workgroup per batch
    monkeypatch.setattr(run, "SLOW_WORK_S", 0.0)
    monkeypatch.setattr(Progress, "TICK_S", 0.005)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli_main(["run", "axpy_f32", "--shape", "n=16000"]) == 0      # 8 workgroups
    assert capsys.readouterr().out.splitlines()[-1] == "PASS"
    drawn = terminal.getvalue()
    assert re.search(r"emulating .* [1-7]/8 .* [\d.]+ workgroups/s, ETA \d+ s", drawn), drawn
    assert "8/8" in drawn


def test_notes_go_to_a_progress_that_takes_them(monkeypatch, capsys):
    """``report_note`` prints a line (stdout) through the innermost open Progress made with
    ``notes=True``, terminal or not, above a drawn bar; with none open, or one without notes, nothing."""
    from isagen.progress import notes_wanted, report_note
    monkeypatch.setattr(Progress, "TICK_S", 0.005)
    report_note("lost")
    assert not notes_wanted()
    with Progress("quiet", stream=io.StringIO()):
        assert not notes_wanted()
        report_note("also lost")
    with Progress("noted", stream=io.StringIO(), notes=True):     # not a terminal: no bar, the note still
        assert notes_wanted()
        report_note("estimated ~3 s")
        with Progress("inner", stream=io.StringIO()):             # the innermost decides
            assert not notes_wanted()
            report_note("not this one")
    assert capsys.readouterr().out == "estimated ~3 s\n"
    terminal = Terminal()
    with Progress("drawn", total=4, stream=terminal, notes=True) as p:
        p.update(1)
        assert p.shown
        report_note("above the bar")
    assert capsys.readouterr().out == "above the bar\n" and "drawn" in terminal.getvalue()
