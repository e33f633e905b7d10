"""The signals (Ctrl-C, SIGTERM, SIGHUP) this process has taken, for the commit to check.

The CLI's handler raises KeyboardInterrupt where the main thread is, but Python drops an
exception raised while a finalizer (`__del__`, a weakref callback) runs: a run could then
go on to publish after its Ctrl-C. The handler also notes the signal here, and the commit
journal refuses to start once one is noted.
"""

from __future__ import annotations

_taken: list[int] = []


def note(signum: int) -> None:
    _taken.append(signum)


def taken() -> int | None:
    """The first signal taken since the last clear(), or None."""
    return _taken[0] if _taken else None


def clear() -> None:
    _taken.clear()
