"""Real processes for tests: start the CLI, find its descendants, kill, measure memory.

Read straight from /proc, so the checks see exactly what the kernel sees: a process that
outlives its run, however it was started (fork server, Beam workers), is found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

SEGPREP = [os.path.join(os.path.dirname(sys.executable), "segprep")]  # the console script


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process, None when it is gone (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":
        return None
    return int(fields[1]), fields[19].decode()


def parent(pid: int) -> int | None:
    """The parent pid of a live process, None when it is gone."""
    found = _stat(pid)
    return found[0] if found else None


def descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live process below `root`."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found:
                parents.setdefault(found[0], []).append(int(entry))
                starts[int(entry)] = found[1]
    result: dict[int, str] = {}
    pending = list(parents.get(root, []))
    while pending:
        pid = pending.pop()
        result[pid] = starts[pid]
        pending.extend(parents.get(pid, []))
    return result


def survivors(processes: dict[int, str]) -> list[int]:
    """The processes of a snapshot that still live (same pid and same start time)."""
    return [pid for pid, start in processes.items() if (_stat(pid) or (0, None))[1] == start]


def holding_open(directory: Path) -> dict[int, list[str]]:
    """pid -> paths under `directory` that the process has open, over every visible process:
    a process that could still write there holds a file (or the folder) open."""
    root = str(Path(directory).resolve())
    found: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if target == root or target.startswith(root + "/"):
                found.setdefault(int(entry), []).append(target)
    return found


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def _as_a_terminal_would() -> None:
    """A foreground job gets Ctrl-C and a hang-up; a test runner started in the background
    (or under nohup) may ignore them, and segprep keeps a hang-up ignored when it is."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def start_cli(args: list[str], **kwargs) -> subprocess.Popen:
    """`segprep ARGS` in its own session, as a shell would start a foreground job."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **kwargs.pop("env", {})}
    return subprocess.Popen(
        [*SEGPREP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_as_a_terminal_would,
        env=env,
        **kwargs,
    )


def kill_and_check(process: subprocess.Popen, sig: int, grace: float = 60.0) -> dict[int, str]:
    """Send `sig` to the CLI alone; its descendants of that moment must all exit (`grace`
    seconds only guards against a hang). Returns the snapshot taken just before the signal."""
    tree = descendants(process.pid)
    os.kill(process.pid, sig)
    process.wait(timeout=60)
    wait_for(lambda: not survivors(tree), grace, f"descendants {survivors(tree)} to exit")
    return tree


def interrupt_group(process: subprocess.Popen) -> None:
    """Ctrl-C at a terminal: SIGINT to the whole foreground process group."""
    os.killpg(process.pid, signal.SIGINT)


def tree_pss(root: int) -> int:
    """Proportional set size, in bytes, of a process and its live descendants: pages shared
    between forked processes count once in total (RSS would count them once per process)."""
    total = 0
    for pid in [root, *descendants(root)]:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return total * 1024


def run_measured(
    command: list[str], *, sample_seconds: float = 0.02, **kwargs
) -> tuple[subprocess.CompletedProcess, int]:
    """Run a command to its end; (result, peak PSS of its process tree, sampled every
    `sample_seconds`). benchmarks/writer.py measures with it too.

    Sampled rather than read from getrusage: a forked child's ru_maxrss starts at its
    parent's size (pytest's, here), and writer processes are not our children to wait for.
    """
    timeout = kwargs.pop("timeout", 600)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_pss(process.pid))
            time.sleep(sample_seconds)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate(timeout=timeout)
    done.set()
    sampler.join()
    return subprocess.CompletedProcess(command, process.returncode, out, err), peak
