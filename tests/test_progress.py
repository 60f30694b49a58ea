"""Progress bars: drawn on a terminal only, nothing on pipes or captures; lines printed above a bar;
the delay that keeps quick work bar-free; the emulator reporting its workgroups to an open bar."""

import io
import os
import pty
import re
import time

import pytest

from isagen import progress as progress_module
from isagen.progress import Progress, bar_wanted, report_progress


class Terminal(io.StringIO):
    """A captured stream that says it is a terminal, so that click draws its bar into it."""

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
