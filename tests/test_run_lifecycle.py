"""Runs that die, runs that collide: real CLI processes, real signals, real process trees.

A run's processes die with it however it dies, nothing of a dead run is ever published, a
second run into a folder in use is refused, and the rerun after a kill gives the clean bytes.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from beam_pipeline.cli import main
from beam_pipeline.commands.sample_data import write_sample_data
from tests.helpers.outputs import final_names, same_output
from tests.helpers.process_tree import (
    descendants,
    interrupt_group,
    kill_and_check,
    start_cli,
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
    pattern = "*.tfrecord" if complete else "*.tfrecord*"
    return list((out / ".segprep" / "runs").glob(f"*/{pattern}"))


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
    tree = kill_and_check(process, signal.SIGKILL)  # every descendant gone within 5 s
    if point != "locked":
        assert len(tree) >= 2, "the writers should have been running"
    # Nobody holds the run's stdout: `segprep prepare ... | cat` ends.
    assert stdout_closed.wait(5)
    time.sleep(1.0)  # an orphan would publish now
    assert final_names(out) == []
    assert main(_args(dataset, out)) == 0  # the rerun needs no --overwrite
    same_output(out, clean)
    assert main(["verify", str(out)]) == 0


def _importing_tensorflow(process) -> bool:
    """A descendant (the writers' fork server) has begun to load TensorFlow's libraries."""
    for pid in descendants(process.pid):
        try:
            if "tensorflow" in Path(f"/proc/{pid}/maps").read_text():
                return True
        except OSError:
            pass
    return False


CTRL_C_MOMENTS = {
    # The writers' fork server starts first and imports TensorFlow for ~2 s: a Ctrl-C then
    # reaches it mid-import, before multiprocessing shields it from Ctrl-C.
    "warming_up": lambda process, out: _importing_tensorflow(process),
    "writing": lambda process, out: bool(_staged(out, complete=False)),
}


@pytest.mark.parametrize("moment", sorted(CTRL_C_MOMENTS))
def test_ctrl_c_stops_every_process_exits_130_and_publishes_nothing(dataset, tmp_path, moment):
    out = tmp_path / "out"
    process = start_cli(_args(dataset, out))
    reached = CTRL_C_MOMENTS[moment]
    wait_for(lambda: reached(process, out) or process.poll() is not None, 120, moment)
    tree = descendants(process.pid)
    interrupt_group(process)
    assert process.wait(timeout=60) == 130
    err = process.stderr.read().decode()
    assert err.strip() == "segprep: interrupted: nothing was published", err
    wait_for(lambda: not [pid for pid in tree if Path(f"/proc/{pid}").exists()], 5, "exit")
    assert final_names(out) == []
    assert not _staged(out, complete=False)  # the interrupted run's shards are discarded
    assert not (out / ".segprep" / "lock").exists()


def test_sigterm_is_handled_like_ctrl_c(dataset, tmp_path):
    out = tmp_path / "out"
    process = start_cli(_args(dataset, out))
    wait_for(lambda: _staged(out, complete=False) or process.poll() is not None, 120, "writing")
    kill_and_check(process, signal.SIGTERM)
    assert process.returncode == 143
    assert "terminated: nothing was published" in process.stderr.read().decode()
    assert final_names(out) == []


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
