"""Local writer processes: each shard of a local run is written by its own process.

Python threads share one interpreter lock, and converting an entry is Python-heavy (mask
loading, protobuf building), so threads alone leave part of every extra core idle
(benchmarks/writer.py). On the in-process runner each shard therefore goes to a process of
this pool; only a small ShardOutcome comes back, never pixels. Processes are forked from a
fork server that imports TensorFlow and the record code once; warm_up() starts it early so
those imports overlap the job's own start-up. Dataflow runs one SDK process per core and
never uses this pool.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import forkserver

PRELOAD = ("beam_pipeline.runtime.writer_process",)

_executors: dict[int, ProcessPoolExecutor] = {}


def warm_up() -> None:
    """Start the fork server now (idempotent); its imports run beside the caller's work."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    forkserver.ensure_running()


def usable_cores() -> int:
    """Cores this process may run on (a container's cpuset, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def executor(processes: int) -> ProcessPoolExecutor:
    """The process-wide pool of that size, reused by every shard and every run."""
    pool = _executors.get(processes)
    if pool is None:
        warm_up()
        pool = ProcessPoolExecutor(
            processes,
            mp_context=multiprocessing.get_context("forkserver"),
            initializer=_leave_interrupts_to_the_launcher,
        )
        _executors[processes] = pool
    return pool


def _leave_interrupts_to_the_launcher() -> None:
    """Ctrl-C reaches the whole process group: the launcher reports it in one line, and
    writers must not each print a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def discard(processes: int) -> None:
    """Forget a pool whose process died, so the next run starts a fresh one."""
    pool = _executors.pop(processes, None)
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
