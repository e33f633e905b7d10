"""Live progress: worker count files, the expected total, and the launcher's display (its
terminal output replayed through a VT100 emulator, pyte, to see what a person sees)."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable

import pyte
import pytest

from beam_pipeline.launch import progress
from beam_pipeline.runtime.progress_counts import Reporter, entries_done


def test_reporter_counts_are_summed_across_processes(tmp_path):
    temp = str(tmp_path)
    first, second = Reporter(temp), Reporter(temp)
    for _ in range(7):
        first.add()
    second.add(5)
    first.flush()
    second.flush()
    assert entries_done(temp) == 12
    assert entries_done(str(tmp_path / "missing")) == 0


def test_format_progress():
    assert progress.format_progress(50, 200, 2.0) == "50/200 entries  25%  25/s  ETA 6 s"
    assert progress.format_progress(0, 200, 0.0) == "0/200 entries   0%  0/s  ETA --"


class _Looks:
    """A count the monitor reads, recording every value it saw so a test can wait for a look
    (the frame or log line of a look is written before the monitor's block can end)."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count
        self.seen: list[int] = []
        self._changed = threading.Condition()

    def __call__(self) -> int:
        value = self._count()
        with self._changed:
            self.seen.append(value)
            self._changed.notify_all()
        return value

    def wait(self, reached: Callable[[list[int]], bool], what: str) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: reached(self.seen), timeout=60), what


def _counting(reporter: Reporter, looks: _Looks, entries: int) -> None:
    """Count `entries` one at a time, each seen by the monitor before the next."""
    for done in range(1, entries + 1):
        reporter.add()
        reporter.flush()
        looks.wait(lambda seen, done=done: done in seen, f"a look at {done}")


def test_monitor_writes_log_lines_when_not_a_terminal(tmp_path):
    """Seven of ten entries reach a writer (three were rejected before writing): the log
    still ends at 10/10 once the job is done."""
    temp = str(tmp_path)
    reporter = Reporter(temp)
    stream = io.StringIO()
    looks = _Looks(lambda: entries_done(temp))
    with progress.Monitor(looks, 10, stream, interval=0.05):
        _counting(reporter, looks, 7)
    lines = stream.getvalue().splitlines()
    assert len(lines) > 2 and all(line.startswith("progress: ") for line in lines)
    assert lines[-2].startswith("progress: 7/10 entries  70%")
    assert lines[-1].startswith("progress: 10/10 entries 100%")
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_monitor_log_of_a_failed_run_stops_at_the_last_count():
    stream = io.StringIO()
    looks = _Looks(lambda: 3)
    with pytest.raises(RuntimeError), progress.Monitor(looks, 10, stream, interval=0.05):
        looks.wait(bool, "a first look")
        raise RuntimeError("job failed")
    lines = stream.getvalue().splitlines()
    assert lines[-1].startswith("progress: stopped at 3/10 entries  30%")
    assert not any("100%" in line for line in lines)


def test_monitor_writes_nothing_for_a_short_run_off_a_terminal():
    stream = io.StringIO()
    looks = _Looks(lambda: 3)
    with progress.Monitor(looks, 10, stream):  # default interval: 10 s
        pass
    assert stream.getvalue() == "" and looks.seen == []


def test_monitor_rate_is_over_the_run_not_the_first_instant():
    """All 500 entries seen at the first look (a burst, or a slow first interval): the rate
    must be over the time since the monitor started, not over microseconds. Each look comes at
    least one interval after the start, so no honest rate exceeds 500 per interval."""
    stream = io.StringIO()
    looks = _Looks(lambda: 500)
    with progress.Monitor(looks, 1000, stream, interval=0.1):
        looks.wait(lambda seen: len(seen) >= 3, "three looks")
    rates = [
        int(re.search(r" ([\d,]+)/s ", line)[1].replace(",", ""))
        for line in stream.getvalue().splitlines()
    ]
    assert rates and all(rate <= 500 / 0.1 for rate in rates), rates


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _screen(output: str, columns: int = 160) -> list[str]:
    """What a VT100 terminal shows after `output`: cursor moves and erases applied."""
    screen = pyte.Screen(columns, 10)
    pyte.Stream(screen).feed(output.replace("\n", "\r\n"))  # a tty's onlcr
    return [line.rstrip() for line in screen.display if line.strip()]


RUNNING = r"^{} +[━╸╺]+ {}/300 entries +{}% +(--|[\d,]+)/s +elapsed \d:\d\d:\d\d +ETA \S+$"
ENDED = r"^{} +[━╸╺]+ {}/300 entries +{}% +elapsed \d:\d\d:\d\d$"  # the summary has the rate


def test_terminal_display_ends_on_a_full_frame_with_nothing_left_over(tmp_path, monkeypatch):
    """A long first frame (wide counts), then many redraws: the screen holds one line, the
    final frame at the discovered total, and not a character of any earlier frame."""
    monkeypatch.setenv("COLUMNS", "160")
    temp = str(tmp_path)
    reporter = Reporter(temp)
    stream = _Terminal()
    looks = _Looks(lambda: entries_done(temp))
    with progress.Monitor(looks, 300, stream, interval=0.02):
        _counting(reporter, looks, 20)
        reporter.add(253)  # 273 of 300 reach a writer, as in the run
        reporter.flush()
        looks.wait(lambda seen: 273 in seen, "a look at 273")
    output = stream.getvalue()
    assert output.count("\r") > 10  # redrawn in place, not one line per update
    last_running = output[: output.rindex("\r", 0, output.index("done"))]
    (running,) = _screen(last_running)
    assert re.match(RUNNING.format("running", 273, 91), running), running
    (line,) = _screen(output)
    assert re.match(ENDED.format("done", 300, 100), line), line


def test_terminal_display_of_a_failed_run_keeps_the_last_count(monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    stream = _Terminal()
    looks = _Looks(lambda: 123)
    with pytest.raises(KeyboardInterrupt), progress.Monitor(looks, 300, stream, 0.02):
        looks.wait(bool, "a first look")
        raise KeyboardInterrupt
    (line,) = _screen(stream.getvalue())
    assert re.match(ENDED.format("stopped", 123, 41), line), line
