"""Live progress of a local run: workers write counts to small files, the launcher sums them.

Beam's local runner blocks until the job ends and reports metrics only then, so workers
leave a count file per process under the run's temp dir (at most twice a second) and a
thread in the launcher turns them into a progress line.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import TextIO

from segcore.pairing import image_key, mask_key
from segcore.splits import SplitFractions

_WRITE_INTERVAL = 0.5


class Reporter:
    """Worker side: cumulative entries done by this process, written atomically."""

    def __init__(self, directory: str | None) -> None:
        """`directory`: a local folder the launcher watches; None when nobody watches."""
        self._path = os.path.join(directory, uuid.uuid4().hex) if directory else None
        self._done = 0
        self._written_at = 0.0

    def add(self, entries: int = 1) -> None:
        self._done += entries
        now = time.monotonic()
        if self._path and now - self._written_at >= _WRITE_INTERVAL:
            self._write()
            self._written_at = now

    def flush(self) -> None:
        if self._path:
            self._write()

    def _write(self) -> None:
        temporary = f"{self._path}.tmp"
        with open(temporary, "w") as handle:
            handle.write(str(self._done))
        os.replace(temporary, self._path)


def entries_done(directory: str) -> int:
    total = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.endswith(".tmp"):
            continue
        try:
            with open(os.path.join(directory, name)) as handle:
                total += int(handle.read() or 0)
        except (OSError, ValueError):
            continue
    return total


def expected_entries(
    image_dir: str, images: list[str], mask_dir: str, masks: list[str], fractions: SplitFractions
) -> int:
    """Entries the shard writers will process: paired keys that fall into a split."""
    found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    listed = ((image_dir, images, image_key), (mask_dir, masks, mask_key))
    for index, (root, paths, key_of) in enumerate(listed):
        for path in paths:
            key = key_of(path[len(root) :])
            if key is not None:
                found[key][index] += 1
    return sum(
        1
        for key, (images, masks) in found.items()
        if images == masks == 1 and fractions.split_of(key) is not None
    )


def format_progress(done: int, total: int, seconds: float) -> str:
    """`4,210/8,000 entries  53%  312/s  ETA 12 s`."""
    rate = done / seconds if seconds > 0 else 0.0
    fraction = min(done / total, 1.0) if total else 0.0
    eta = f"ETA {int((total - done) / rate)} s" if rate > 0 and done < total else "ETA --"
    return f"{done:,}/{total:,} entries {fraction:4.0%}  {rate:,.0f}/s  {eta}"


def progress_bar(done: int, total: int, width: int = 24) -> str:
    filled = int(min(done / total, 1.0) * width) if total else 0
    return f"[{'#' * filled:<{width}}]"


class Monitor:
    """Launcher side: a progress bar on a terminal, a log line every 10 s otherwise."""

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
        self.lines_written = 0

    def __enter__(self) -> Monitor:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        if self._tty and self.lines_written:
            self._stream.write("\n")
            self._stream.flush()

    def _loop(self) -> None:
        done = 0
        while not self._stop.wait(self._interval):
            # Monotonic: the count files vanish when the commit step clears the temp dir.
            if self._total and done >= self._total and self.lines_written:
                continue  # finished: keep the final figures on screen
            done = max(done, self._count())
            # The rate is over the whole run so far: never a burst over a few microseconds.
            text = format_progress(done, self._total, time.monotonic() - self._started)
            if self._tty:
                self._stream.write(f"\r{progress_bar(done, self._total)} {text}")
            else:
                self._stream.write(f"progress: {text}\n")
            self._stream.flush()
            self.lines_written += 1
