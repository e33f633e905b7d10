"""Which files of a folder were opened, and how often: the kernel's inotify IN_OPEN events.

No inotify package is installed, so the three libc calls go through ctypes; the events are
read with struct (struct inotify_event: int wd; uint32 mask, cookie, len; char name[len]).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import os
import select
import struct
from collections.abc import Iterator
from pathlib import Path

_IN_OPEN = 0x00000020
_IN_ISDIR = 0x40000000
_IN_Q_OVERFLOW = 0x00004000
_IN_NONBLOCK = os.O_NONBLOCK
_HEADER = struct.Struct("iIII")


class FileOpens:
    """Counts of IN_OPEN events per file name in one watched folder (not recursive)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.counts: collections.Counter[str] = collections.Counter()

    def collect(self) -> collections.Counter[str]:
        """Every event queued so far, added to `counts`."""
        while select.select([self._fd], [], [], 0)[0]:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(data):
                _, mask, _, length = _HEADER.unpack_from(data, offset)
                start = offset + _HEADER.size
                name = data[start : start + length].rstrip(b"\0").decode()
                offset = start + length
                if mask & _IN_Q_OVERFLOW:
                    raise AssertionError("inotify queue overflowed: events were lost")
                if mask & _IN_OPEN and not mask & _IN_ISDIR and name:
                    self.counts[name] += 1
        return self.counts


@contextlib.contextmanager
def watched_opens(folder: Path) -> Iterator[FileOpens]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = libc.inotify_init1(_IN_NONBLOCK)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        if libc.inotify_add_watch(fd, os.fsencode(folder), _IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")
        yield FileOpens(fd)
    finally:
        os.close(fd)
