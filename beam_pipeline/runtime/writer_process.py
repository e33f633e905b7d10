"""Imported once by the writer pool's fork server, so every writer process starts warm.

The fork server only forks; when the job ends it has nothing to flush, so it leaves at
once instead of tearing its imports down.
"""

import atexit
import ctypes
import ctypes.util
import os
import signal

# multiprocessing's fork server shields itself from Ctrl-C only after its preload; during
# the record code's import a Ctrl-C (sent to the whole foreground group) would print a
# traceback. Leave quietly instead: the launcher reports the interruption.
signal.signal(signal.SIGINT, lambda *_: os._exit(130))


def _keep_freed_heap() -> None:
    """Keep up to 128 MB of freed heap instead of handing it back after every record.

    Each record decodes an image and a mask into arrays of a few hundred KB to a few MB
    that are freed a moment later; glibc's defaults trim the heap top whenever 128 KB
    (rising slowly) are free, so the next record faults the same pages in again and the
    kernel zeroes them: measured, a quarter of the writers' CPU in system time and 30 %
    of the whole run at 8,000 entries (docs/benchmarks.md). The processes' peak is that
    of the largest records either way. No glibc (musl, macOS): nothing to tune.
    """
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return
    m_trim_threshold, m_top_pad = -1, -2  # glibc's malloc.h
    mallopt(m_trim_threshold, 128 << 20)
    mallopt(m_top_pad, 64 << 20)


_keep_freed_heap()  # in the fork server: every writer it forks inherits the setting

import beam_pipeline.job.image_hashes  # noqa: E402, F401
import beam_pipeline.job.shard_work  # noqa: E402, F401

atexit.register(os._exit, 0)
