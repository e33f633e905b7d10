"""Runs that die, runs that collide: real CLI processes, real signals, real process trees.

A run's processes die with it however it dies, nothing of a dead run is ever published, a
second run into a folder in use is refused, and the rerun after a kill gives the clean bytes.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from beam_pipeline.cli import main
from beam_pipeline.commands.sample_data import write_sample_data
from beam_pipeline.job.attempts import ATTEMPT_MARK
from tests.helpers.outputs import final_names, same_output
from tests.helpers.process_tree import (
    descendants,
    holding_open,
    interrupt_group,
    kill_and_check,
    parent,
    start_cli,
    survivors,
    wait_for,
)

COUNT = 160  # 800x600 portraits: a few seconds of work for two writer processes


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_sample_data(tmp_path_factory.mktemp("lifecycle"), count=COUNT, seed=3)


def _args(dataset, out: Path, *extra: str) -> list[str]:
    return [
        "prepare",
        "--image_dir",
        str(dataset.image_dir),
        "--mask_dir",
        str(dataset.mask_dir),
        "--output_dir",
        str(out),
        "--writer_processes",
        "2",
        "--runner",
        "FnApiRunner",
        *extra,
    ]


@pytest.fixture(scope="module")
def clean(dataset, tmp_path_factory) -> Path:
    """The reference output of an undisturbed run."""
    out = tmp_path_factory.mktemp("clean") / "out"
    assert main(_args(dataset, out)) == 0
    return out


def _staged(out: Path, complete: bool) -> list[Path]:
    """Staged shards of the run: finished ones wait under their attempt's name
    (job/attempts.py), unfinished ones as `.partial-` files."""
    runs = out / ".segprep" / "runs"
    if complete:
        return [*runs.glob(f"*/*.tfrecord{ATTEMPT_MARK}*"), *runs.glob("*/*.tfrecord")]
    return list(runs.glob("*/*.tfrecord*"))


def _drain(stream) -> threading.Event:
    """Read a pipe to its end in the background: set once every writer has closed it."""
    closed = threading.Event()

    def read() -> None:
        while stream.read(65536):
            pass
        closed.set()

    threading.Thread(target=read, daemon=True).start()
    return closed


POINTS = {
    "locked": lambda out: (out / ".segprep" / "lock").exists(),
    "writing": lambda out: bool(_staged(out, complete=False)),
    "staged": lambda out: bool(_staged(out, complete=True)),
}


@pytest.mark.parametrize("point", sorted(POINTS))
def test_kill_9_leaves_no_process_and_publishes_nothing(dataset, clean, tmp_path, point):
    out = tmp_path / "out"
    process = start_cli(_args(dataset, out))
    stdout_closed = _drain(process.stdout)
    wait_for(lambda: POINTS[point](out) or process.poll() is not None, 120, point)
    assert process.poll() is None, process.stderr.read().decode()
    tree = kill_and_check(process, signal.SIGKILL)  # every descendant gone (a hang guard)
    if point != "locked":
        assert len(tree) >= 2, "the writers should have been running"
    # Nobody holds the run's stdout: `segprep prepare ... | cat` ends.
    assert stdout_closed.wait(60)
    # And nobody holds a file of the run open: no orphan is left that could publish.
    assert holding_open(out) == {}
    assert final_names(out) == []
    assert main(_args(dataset, out)) == 0  # the rerun needs no --overwrite
    same_output(out, clean)
    assert main(["verify", str(out)]) == 0


SIGINT_BIT = 1 << (signal.SIGINT - 1)


def _fork_server_mid_import(process) -> int | None:
    """The writers' fork server while it imports the record code: it has begun to map
    third-party libraries (only its preload loads any) and does not ignore SIGINT yet
    (multiprocessing ignores it once the preload is done)."""
    for pid in descendants(process.pid):
        if parent(pid) != process.pid:
            continue  # writers are forked from the fork server and share its command line
        try:
            if b"forkserver" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            status = Path(f"/proc/{pid}/status").read_text()
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        ignored = int(status.split("SigIgn:")[1].split()[0], 16)
        if "site-packages/" in maps and not ignored & SIGINT_BIT:
            return pid
    return None


def _interrupt_mid_import(process) -> dict[int, str]:
    """Ctrl-C while the fork server imports: stopped there (SIGSTOP) so the moment holds,
    the group interrupted, then let go to take its Ctrl-C. The processes of that moment."""
    pid = None

    def found() -> bool:
        nonlocal pid
        pid = _fork_server_mid_import(process)
        return pid is not None or process.poll() is not None

    wait_for(found, 120, "the fork server importing the record code")
    assert pid is not None, process.stderr.read().decode()
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: _state(pid) in ("T", None), 60, "the fork server to stop")
        # Frozen now: if it is still mid-import, the Ctrl-C lands there.
        assert _fork_server_mid_import(process) == pid, "the imports ended before the stop"
        tree = descendants(process.pid)
        interrupt_group(process)
        return tree
    finally:
        os.kill(pid, signal.SIGCONT)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _interrupt_when(reached):
    def interrupt(process, out) -> dict[int, str]:
        wait_for(lambda: reached(out) or process.poll() is not None, 120, "the moment")
        tree = descendants(process.pid)
        interrupt_group(process)
        return tree

    return interrupt


CTRL_C_MOMENTS = {
    # The writers' fork server starts first and imports the record code (numpy, Pillow,
    # scipy, protobuf): a Ctrl-C then reaches it mid-import, before multiprocessing shields
    # it from Ctrl-C.
    "warming_up": lambda process, out: _interrupt_mid_import(process),
    "writing": _interrupt_when(lambda out: bool(_staged(out, complete=False))),
}


@pytest.mark.parametrize("moment", sorted(CTRL_C_MOMENTS))
def test_ctrl_c_stops_every_process_exits_130_and_publishes_nothing(dataset, tmp_path, moment):
    out = tmp_path / "out"
    process = start_cli(_args(dataset, out))
    tree = CTRL_C_MOMENTS[moment](process, out)  # the processes of that moment
    code = process.wait(timeout=60)
    err = process.stderr.read().decode()
    assert code == 130, err
    assert err.strip() == "segprep: interrupted: nothing was published", err
    wait_for(lambda: not survivors(tree), 60, "every process of the run to exit")
    assert final_names(out) == []
    assert not _staged(out, complete=False)  # the interrupted run's shards are discarded
    assert not (out / ".segprep" / "lock").exists()
    # The run made the folder and its .segprep/ (an empty .segprep/ was left): neither stays.
    assert not out.exists(), sorted(str(p.relative_to(out)) for p in out.rglob("*"))


def test_an_interrupted_run_removes_only_the_empty_folders_it_made(dataset, tmp_path):
    """Into the user's own empty folder: its .segprep/ goes, the folder stays; into an
    output an earlier run left (.segprep/ there before), nothing of segprep's is removed."""
    out = tmp_path / "out"
    out.mkdir()
    writing = CTRL_C_MOMENTS["writing"]
    process = start_cli(_args(dataset, out))
    writing(process, out)
    assert process.wait(timeout=60) == 130, process.stderr.read().decode()
    assert out.is_dir() and list(out.iterdir()) == []

    (out / ".segprep" / "runs").mkdir(parents=True)  # as a run that was killed leaves it
    process = start_cli(_args(dataset, out))
    writing(process, out)
    assert process.wait(timeout=60) == 130, process.stderr.read().decode()
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == [
        Path(".segprep"),
        Path(".segprep/runs"),
    ]


def test_a_ctrl_c_whose_exception_was_swallowed_still_stops_the_commit(
    dataset, tmp_path, monkeypatch, capsys
):
    """Python drops an exception raised while a finalizer runs, so the KeyboardInterrupt of
    a Ctrl-C can be lost and the run go on: the signal is noted all the same, and the commit
    journal does not start once one is (runtime/interrupts.py)."""
    from beam_pipeline.runtime import commit_journal, interrupts

    hook = commit_journal.hook

    def swallowed(step: str) -> None:
        if step == "staged":  # the handler ran; its exception went nowhere
            interrupts.note(signal.SIGINT)
        hook(step)

    monkeypatch.setattr(commit_journal, "hook", swallowed)
    out = tmp_path / "out"
    assert main(_args(dataset, out)) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "segprep: interrupted: nothing was published"
    )
    assert final_names(out) == []
    assert not (out / ".segprep" / "lock").exists()
    monkeypatch.setattr(commit_journal, "hook", hook)
    assert main(_args(dataset, out)) == 0  # the next run is a run like any other


def test_sigterm_is_handled_like_ctrl_c(dataset, tmp_path):
    out = tmp_path / "out"
    process = start_cli(_args(dataset, out))
    wait_for(lambda: _staged(out, complete=False) or process.poll() is not None, 120, "writing")
    kill_and_check(process, signal.SIGTERM)
    assert process.returncode == 143
    assert "terminated: nothing was published" in process.stderr.read().decode()
    assert final_names(out) == []
    assert not out.exists()  # nor the folder and .segprep/ the run made


@pytest.mark.parametrize("to_group", [False, True], ids=["launcher", "group"])
def test_a_hang_up_is_handled_like_sigterm(dataset, tmp_path, to_group):
    """A closed terminal or a dropped ssh session: SIGHUP to the launcher, or to the whole
    foreground group (writers included). It killed the launcher silently (exit 129), leaving
    its lock and staged shards; now the run cleans up and says so in one line."""
    out = tmp_path / "out"
    process = start_cli(_args(dataset, out))
    wait_for(lambda: _staged(out, complete=False) or process.poll() is not None, 120, "writing")
    tree = descendants(process.pid)
    if to_group:
        os.killpg(process.pid, signal.SIGHUP)
    else:
        os.kill(process.pid, signal.SIGHUP)
    code = process.wait(timeout=60)
    err = process.stderr.read().decode()
    assert code == 129, err
    assert err.strip() == "segprep: hung up: nothing was published", err
    wait_for(lambda: not survivors(tree), 60, "every process of the run to exit")
    assert final_names(out) == []
    assert not _staged(out, complete=False)
    assert not (out / ".segprep" / "lock").exists()


def test_a_second_run_into_a_folder_in_use_is_refused(dataset, clean, tmp_path, capsys):
    out = tmp_path / "out"
    first = start_cli(_args(dataset, out))
    wait_for(lambda: (out / ".segprep" / "lock").exists() or first.poll() is not None, 60, "lock")
    assert main(_args(dataset, out)) == 2
    err = capsys.readouterr().err
    assert "is in use by run " in err and f"pid {first.pid} on " in err, err
    assert main(_args(dataset, out, "--overwrite")) == 2  # --overwrite does not break a lock
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()
    same_output(out, clean)
    assert main(["verify", str(out)]) == 0
    assert main(_args(dataset, out, "--overwrite")) == 0  # free again once the first ended
