"""Live progress of a local run, launcher side: a thread sums the writers' count files
(runtime/progress_counts.py) into a display: rich's on a terminal (it redraws whole lines,
so nothing of a longer earlier frame is left), a log line every 10 s otherwise.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


def format_progress(done: int, total: int, seconds: float) -> str:
    """`4,210/8,000 entries  53%  312/s  ETA 12 s`: the log line when stderr is no terminal."""
    rate = done / seconds if seconds > 0 else 0.0
    fraction = min(done / total, 1.0) if total else 0.0
    eta = f"ETA {int((total - done) / rate)} s" if rate > 0 and done < total else "ETA --"
    return f"{done:,}/{total:,} entries {fraction:4.0%}  {rate:,.0f}/s  {eta}"


class _RateColumn(ProgressColumn):
    """Entries per second over rich's recent samples, while running: the summary below the
    last frame gives the rate over the whole run."""

    def render(self, task: Task) -> Text:
        if task.fields["ended"]:
            return Text("")
        return Text(f"{task.speed:,.0f}/s" if task.speed else "--/s", style="progress.data.speed")


class _EtaColumn(TimeRemainingColumn):
    def render(self, task: Task) -> Text:
        return Text("") if task.fields["ended"] else Text("ETA ").append(super().render(task))


def _terminal_display(stream: TextIO) -> Progress:
    return Progress(
        TextColumn("{task.description:<7}"),
        BarColumn(bar_width=40),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} entries"),
        TaskProgressColumn(),
        _RateColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        _EtaColumn(),
        console=Console(file=stream),
        auto_refresh=False,  # the monitor's thread refreshes after each look at the counts
    )


class Monitor:
    """Launcher side: a rich progress bar on a terminal, a log line every 10 s otherwise.

    `total` is every discovered entry, but writers count only what reaches a shard writer:
    when the block ends normally the job is done, so the last frame shows `total`; when it
    raises, the last count stays, marked `stopped`, and nothing claims 100 %.
    """

    def __init__(
        self,
        count: Callable[[], int],
        total: int,
        stream: TextIO | None = None,
        interval: float | None = None,
    ) -> None:
        self._count = count
        self._total = total
        self._stream = sys.stderr if stream is None else stream  # looked up now: it gets swapped
        self._tty = self._stream.isatty()
        self._interval = interval if interval is not None else (0.25 if self._tty else 10.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="segprep-progress", daemon=True)
        self._done = 0
        self.lines_written = 0  # log lines (no terminal)

    def __enter__(self) -> Monitor:
        self._started = time.monotonic()
        if self._tty:
            self._display = _terminal_display(self._stream)
            self._task = self._display.add_task("running", total=self._total, ended=False)
            self._display.start()
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self._stop.set()
        self._thread.join()
        finished = exc_type is None
        if finished:
            self._done = max(self._done, self._total)
        else:
            self._done = max(self._done, self._count())
        if self._tty:
            description = "done" if finished else "stopped"
            self._display.update(
                self._task, completed=self._done, description=description, ended=True
            )
            self._display.refresh()
            self._display.stop()
        elif self.lines_written:  # a log that showed the run going also shows how it ended
            self._log("" if finished else "stopped at ")

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            # Monotonic: the count files vanish when the commit step clears the temp dir.
            self._done = max(self._done, self._count())
            if self._tty:
                self._display.update(self._task, completed=self._done)
                self._display.refresh()
            else:
                self._log()

    def _log(self, prefix: str = "") -> None:
        # The rate is over the whole run so far: never a burst over a few microseconds.
        text = format_progress(self._done, self._total, time.monotonic() - self._started)
        self._stream.write(f"progress: {prefix}{text}\n")
        self._stream.flush()
        self.lines_written += 1
