"""Progress of a local run, worker side: each process keeps a count file, the launcher sums.

Beam's local runner blocks until the job ends and reports metrics only then, so writers
leave a count file per process in a folder the launcher watches (launch/progress.py), at
most twice a second. No display library here: writer processes import only this.
"""

from __future__ import annotations

import os
import time
import uuid

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
