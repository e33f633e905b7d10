"""glibc's heap kept between records rather than handed back to the kernel after each.

Called once by the launcher (in-process work, the shuffles) and by the writers' fork server
(runtime/writer_process.py), whose forks inherit it.
"""

import ctypes
import ctypes.util


def keep_freed_heap() -> None:
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
