"""Local writer processes: each shard of a local run is written by its own process.

Python threads share one interpreter lock, and converting an entry is Python-heavy (mask
loading, protobuf building), so threads alone leave part of every extra core idle
(benchmarks/writer.py); Beam's own multi-process mode measured slower still (its SDK
workers start cold and outlive a killed launcher). So on the in-process runner each shard
goes to a process of a pool that belongs to the run: only a small result comes back, never
pixels.

Processes are forked from a fork server that imports the record code (numpy, Pillow, scipy,
protobuf; no TensorFlow) once; warm_up() starts it early so those imports overlap the job's
start-up. The fork server exits
when the launcher does (multiprocessing closes its lifeline pipe), and every writer watches
the launcher through a pidfd: however the launcher dies, SIGKILL included, its writers exit
within a fraction of a second, and they only ever write into the run's staging folder.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import select
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import forkserver

from beam_pipeline.runtime import interrupts

PRELOAD = ("beam_pipeline.runtime.writer_process",)
_CHECK_SECONDS = 0.2

_pools: dict[str, ProcessPoolExecutor] = {}  # run id -> that run's pool


def warm_up() -> None:
    """Start the fork server now (idempotent); its imports run beside the caller's work."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    # Processes started here (the fork server, the resource tracker, and so every writer)
    # keep SIGHUP blocked: a closed terminal hangs up on the whole process group, and only
    # the launcher must take it (it stops the writers, and cleans up); the helpers exit with
    # the launcher. multiprocessing spares them Ctrl-C and SIGTERM the same way.
    with interrupts.blocked({signal.SIGHUP}):
        forkserver.ensure_running()  # and multiprocessing's resource tracker


def usable_cores() -> int:
    """Cores this process may run on (a container's cpuset, not the host's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


@contextlib.contextmanager
def writer_pool(run_id: str, processes: int) -> Iterator[ProcessPoolExecutor]:
    """The run's pool of `processes` writers, registered under `run_id` while the run lasts.

    On any failure (Ctrl-C included) the writers are told to exit at once; shards they were
    writing stay in the staging folder, which the launcher discards.
    """
    warm_up()
    context = multiprocessing.get_context("forkserver")
    with interrupts.blocked({signal.SIGHUP}):  # a fork server or tracker started again
        stop = context.Event()
        pool = ProcessPoolExecutor(
            processes,
            mp_context=context,
            initializer=_watch_launcher,
            initargs=(os.getpid(), stop),
        )
    _pools[run_id] = pool
    try:
        yield pool
    except BaseException:
        stop.set()
        raise
    finally:
        _pools.pop(run_id, None)
        pool.shutdown(wait=True)


def pool_of(run_id: str) -> ProcessPoolExecutor:
    """The pool of a running run; only the launcher's own process has one."""
    try:
        return _pools[run_id]
    except KeyError:
        raise RuntimeError(
            f"no writer pool for run {run_id} in this process: writer processes are for "
            "the in-process local runner only"
        ) from None


def _watch_launcher(launcher_pid: int, stop) -> None:
    """Runs first in every writer: ignore Ctrl-C and a hang-up, which reach the whole
    process group (the launcher reports them in one line and stops the writers), and exit
    as soon as the launcher is gone or the run is cancelled."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        lifeline = os.pidfd_open(launcher_pid)
    except ProcessLookupError:
        os._exit(1)  # the launcher died before this writer started
    threading.Thread(
        target=_exit_with_the_launcher, args=(lifeline, stop), name="segprep-lifeline", daemon=True
    ).start()


def _exit_with_the_launcher(lifeline: int, stop) -> None:
    # A pidfd turns readable when its process has exited.
    while not select.select([lifeline], [], [], _CHECK_SECONDS)[0]:
        if stop.is_set():
            break
    os._exit(1)
