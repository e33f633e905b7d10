"""The signals (Ctrl-C, SIGTERM, SIGHUP) this process has taken, for the commit to check.

The CLI's handler raises KeyboardInterrupt where the main thread is, but Python drops an
exception raised while a finalizer (`__del__`, a weakref callback) runs: a run could then
go on to publish after its Ctrl-C. The handler also notes the signal here, and the commit
journal refuses to start once one is noted.

`blocked` holds signals back for a step that must not be cut short (a roll-back) or
processes that must not take them (the writer pool's helpers).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_taken: list[int] = []


def note(signum: int) -> None:
    _taken.append(signum)


def taken() -> int | None:
    """The first signal taken since the last clear(), or None."""
    return _taken[0] if _taken else None


def clear() -> None:
    _taken.clear()


@contextlib.contextmanager
def blocked(signals: set[signal.Signals]) -> Iterator[None]:
    """`signals` wait while the block runs and arrive after it (in the main thread only;
    elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
