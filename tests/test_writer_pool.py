"""Local writer processes: real processes from the fork server, and when a run uses them."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures.process import BrokenProcessPool

import pytest

from beam_pipeline.errors import UsageError
from beam_pipeline.launch import launcher
from beam_pipeline.launch.plan import make_plan
from beam_pipeline.runtime import writer_pool
from tests.helpers import pool_probe
from tests.helpers.outputs import same_output
from tests.helpers.process_tree import SEGPREP, wait_for
from tests.helpers.runs import job_args
from transforms.format.naming import METADATA_FILE
from transforms.splits import MIN_SHARDS


def test_pool_runs_work_in_other_processes_that_start_warm_without_beam():
    """Writers are forked with the record code loaded, and neither Beam nor TensorFlow."""
    with writer_pool.writer_pool("probe-run", 2) as pool:
        assert writer_pool.pool_of("probe-run") is pool
        results = [pool.submit(pool_probe.whereabouts).result() for _ in range(6)]
        pids = {pid for pid, _ in results}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all(
        loaded == {"apache_beam": False, "tensorflow": False, "beam_pipeline.job.shard_work": True}
        for _, loaded in results
    )
    with pytest.raises(RuntimeError, match="no writer pool"):
        writer_pool.pool_of("probe-run")  # the pool belongs to its run, and ends with it
    for pid in pids:
        wait_for(lambda pid=pid: not _alive(pid), 60, f"writer process {pid} to exit")


def test_a_cancelled_run_stops_its_writers_at_once():
    """An exception (Ctrl-C included) leaving the run's pool tells every writer to exit, even
    one busy with a long shard: its work ends broken, never finished."""
    with pytest.raises(KeyboardInterrupt):
        with writer_pool.writer_pool("cancel-run", 2) as pool:
            busy = pool.submit(pool_probe.sleep_and_report, 600.0)
            pid = pool.submit(pool_probe.whereabouts).result()[0]
            raise KeyboardInterrupt
    # Leaving the block waited for the pool: a writer left to finish would have returned.
    assert busy.done() and isinstance(busy.exception(), BrokenProcessPool)
    wait_for(lambda: not _alive(pid), 60, f"writer process {pid} to exit")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _plan(tmp_path, *extra: str):
    (tmp_path / "images").mkdir(exist_ok=True)
    (tmp_path / "masks").mkdir(exist_ok=True)
    (tmp_path / "images" / "1.jpg").write_bytes(b"x")
    (tmp_path / "masks" / "1_mask.mat").write_bytes(b"x")
    return make_plan(
        ["--image_dir", str(tmp_path / "images"), "--mask_dir", str(tmp_path / "masks")]
        + ["--output_dir", str(tmp_path / "out"), *extra]
    )


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], writer_pool.usable_cores()),  # the default: one per usable core
        (["--writer_processes", "3", "--runner", "FnApiRunner"], 3),
        (["--writer_processes", "1"], 1),
        (["--direct_running_mode", "multi_threading", "--direct_num_workers", "2"], 1),
        (["--dry_run"], writer_pool.usable_cores()),  # the plan the real run executes
    ],
)
def test_writer_processes_only_for_single_process_local_runs_on_local_files(
    tmp_path, extra, expected
):
    plan = _plan(tmp_path, *extra)
    assert plan.writer_processes == expected
    assert (plan.job.writing.pool is not None) == (expected > 1)
    assert plan.job.commit.parameters["writer_processes"] == expected


def test_writer_processes_and_the_runner_process_write_the_same_output(sample_dataset, tmp_path):
    """Same shards (bytes), rejects, metadata splits and counters, whichever writes them."""
    runs = {
        processes: launcher.run(
            job_args(sample_dataset, tmp_path / processes, "--writer_processes", processes)
        )
        for processes in ("1", "2")
    }
    inline, pooled = runs["1"], runs["2"]
    assert pooled.metadata["parameters"]["writer_processes"] == 2
    assert inline.metadata["parameters"]["writer_processes"] == 1
    assert pooled.metadata["splits"] == inline.metadata["splits"]
    # The plan never depends on the writer processes: at least MIN_SHARDS shards.
    shards = sum(split["num_shards"] for split in pooled.metadata["splits"].values())
    assert shards >= MIN_SHARDS
    assert pooled.counters == inline.counters and pooled.counters["shards_written"] >= 2
    same_output(tmp_path / "2", tmp_path / "1")


def test_beams_multi_process_mode_is_refused(tmp_path):
    with pytest.raises(UsageError, match="outlive a killed launcher"):
        _plan(tmp_path, "--direct_running_mode", "multi_processing", "--direct_num_workers", "2")


def test_dry_run_prints_the_plan_the_real_run_executes(sample_dataset, tmp_path):
    """On a 2-core machine (the CLI pinned to two cores) the dry run names the 2 writer
    processes, and the real run's metadata.json records the same resolved parameters.
    Neither leaves anything in the temp folder (Beam's per-pipeline folder included, which
    Beam itself removes only after a run)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores to pin the CLI to")
    two = set(cores[:2])
    temp = tmp_path / "temp"
    temp.mkdir()

    def prepare(*extra: str) -> str:
        done = subprocess.run(
            [*SEGPREP, "prepare", *job_args(sample_dataset, tmp_path / "out", *extra)],
            capture_output=True,
            text=True,
            timeout=600,
            preexec_fn=lambda: os.sched_setaffinity(0, two),
            env={**os.environ, "TMPDIR": str(temp)},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert sorted(os.listdir(temp)) == []
        return done.stdout

    planned = json.loads(prepare("--dry_run"))
    assert planned["plan"]["writer_processes"] == 2
    assert not (tmp_path / "out").exists()
    prepare()
    used = json.loads((tmp_path / "out" / METADATA_FILE).read_text())["parameters"]
    assert used["writer_processes"] == planned["plan"]["writer_processes"] == 2
    assert used["threads_per_shard"] == planned["plan"]["threads_per_shard"] == 1
    assert used == planned["parameters"]
