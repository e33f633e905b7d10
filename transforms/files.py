"""The one file layer: bounded, regular-file-only reads of local paths and gs:// objects.

Every read of a file segprep did not just write (metadata, index files, key tables, shards,
caches, class files, inputs) goes through here, so a FIFO never blocks a reader, a link to
/dev/zero is never read until memory runs out, and a file over its cap is refused by its
size before a byte is read.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO


class NotAFileError(OSError):
    """The path is a FIFO, device, socket or folder: never read (a FIFO would block)."""


class TooLargeError(OSError):
    """The file is larger than the caller's limit: refused before it is read."""


def is_remote(path: str | os.PathLike) -> bool:
    return "://" in str(path)


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """A local regular file opened for reading, never blocking on a FIFO or device.

    The check is made with fstat on the open descriptor, so a file swapped for a FIFO or a
    link to a device after any earlier check is still refused.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise NotAFileError(f"{path}: not a regular file (FIFO, device, socket or folder)")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_bounded_local(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of a local regular file of at most `limit` bytes (see open_regular)."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise TooLargeError(f"{path}: {size:,} bytes, more than the {limit:,} allowed")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLargeError(f"{path}: more than the {limit:,} bytes allowed")
    return data
