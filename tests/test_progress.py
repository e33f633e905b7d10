"""Live progress: worker count files, the launcher's monitor, and the expected total."""

from __future__ import annotations

import io
import time

from beam_pipeline.launch import progress


def test_reporter_counts_are_summed_across_processes(tmp_path):
    temp = str(tmp_path)
    first, second = progress.Reporter(temp), progress.Reporter(temp)
    for _ in range(7):
        first.add()
    second.add(5)
    first.flush()
    second.flush()
    assert progress.entries_done(temp) == 12
    assert progress.entries_done(str(tmp_path / "missing")) == 0


def test_format_progress_and_bar():
    assert progress.format_progress(50, 200, 2.0) == "50/200 entries  25%  25/s  ETA 6 s"
    assert progress.progress_bar(50, 200, width=8) == "[##      ]"


def test_monitor_writes_log_lines_when_not_a_terminal(tmp_path):
    temp = str(tmp_path)
    reporter = progress.Reporter(temp)
    stream = io.StringIO()
    with progress.Monitor(lambda: progress.entries_done(temp), 10, stream, interval=0.05):
        for _ in range(10):
            reporter.add()
            reporter.flush()
            time.sleep(0.03)
        time.sleep(0.2)
    lines = stream.getvalue().splitlines()
    assert lines and all(line.startswith("progress: ") for line in lines)
    assert lines[-1].startswith("progress: 10/10 entries 100%")
    assert "\r" not in stream.getvalue()


def test_monitor_rate_is_over_the_run_not_the_first_instant():
    """All 500 entries seen at the first look (a burst, or a slow first interval): the rate
    must be over the time since the monitor started, not over microseconds."""
    stream = io.StringIO()
    with progress.Monitor(lambda: 500, 1000, stream, interval=0.1):
        time.sleep(0.35)
    rates = [
        int(line.split("  ")[2].removesuffix("/s").replace(",", ""))
        for line in stream.getvalue().splitlines()
    ]
    assert rates and all(rate <= 500 / 0.1 for rate in rates), rates


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_monitor_draws_one_updating_bar_on_a_terminal():
    stream = _Terminal()
    with progress.Monitor(lambda: 3, 4, stream, interval=0.02):
        time.sleep(0.1)
    out = stream.getvalue()
    assert out.startswith("\r[") and out.endswith("\n")
    assert out.count("\n") == 1 and "3/4 entries" in out
