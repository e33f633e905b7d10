"""Local writer processes: real processes from the fork server, and when a run uses them."""

from __future__ import annotations

import os

import pytest

from beam_pipeline import cli
from beam_pipeline.job.pipeline import JobConfig
from beam_pipeline.launch import launcher
from beam_pipeline.runtime import writer_pool
from segcore.splits import SplitFractions
from tests import pool_probe
from tests.conftest import job_args


def test_pool_runs_work_in_other_processes_that_start_warm_without_beam():
    pool = writer_pool.executor(2)
    futures = [pool.submit(pool_probe.whereabouts) for _ in range(6)]
    results = [future.result() for future in futures]
    pids = {pid for pid, _, _ in results}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all(not beam and tensorflow for _, beam, tensorflow in results)
    assert writer_pool.executor(2) is pool  # one pool per size, reused by every run


def test_discarded_pool_is_replaced():
    pool = writer_pool.executor(2)
    writer_pool.discard(2)
    fresh = writer_pool.executor(2)
    assert fresh is not pool
    assert fresh.submit(os.getpid).result() != os.getpid()


def _config(tmp_path, **overrides) -> JobConfig:
    base = dict(
        image_dir=f"{tmp_path}/images/",
        mask_dir=f"{tmp_path}/masks/",
        output_dir=f"{tmp_path}/out/",
        fractions=SplitFractions(0.9, 0.1),
        num_shards=None,
        shard_size_mb=100.0,
        mask_format="jpeg",
        mask_key=None,
        writer_processes=0,
    )
    return JobConfig(**{**base, **overrides})


@pytest.mark.parametrize(
    ("overrides", "beam_args", "expected"),
    [
        ({}, [], writer_pool.usable_cores()),  # the default: one per usable core
        ({"writer_processes": 3}, ["--runner", "FnApiRunner"], 3),
        ({"writer_processes": 1}, [], 1),
        ({}, ["--runner", "DataflowRunner"], 1),  # Dataflow runs a process per core itself
        ({}, ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"], 1),
        ({}, ["--direct_running_mode", "multi_processing", "--direct_num_workers", "1"], 1),
        ({"output_dir": "gs://bucket/out/"}, [], 1),  # remote I/O stays in this process
    ],
)
def test_writer_processes_only_for_single_process_local_runs_on_local_files(
    tmp_path, overrides, beam_args, expected
):
    options = launcher.pipeline_options(beam_args)
    assert launcher.writer_processes(_config(tmp_path, **overrides), options) == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["prepare", "--image_dir", "i", "--mask_dir", "m", "--output_dir", "o"]
            + ["--writer_processes", "2"],
            True,
        ),
        (
            ["prepare", "--image_dir", "i", "--mask_dir", "m", "--output_dir", "o"],
            writer_pool.usable_cores() > 1,  # one core: nothing to gain from a pool
        ),
        (["prepare", "--image_dir", "i", "--mask_dir", "m", "--output_dir", "gs://b/o"], False),
        (
            ["prepare", "--image_dir", "i", "--mask_dir", "m", "--output_dir", "o", "--dry_run"],
            False,
        ),
        (
            ["prepare", "--image_dir", "i", "--mask_dir", "m", "--output_dir", "o"]
            + ["--writer_processes", "1"],
            False,
        ),
        (
            ["prepare", "--image_dir", "i", "--mask_dir", "m", "--output_dir", "o"]
            + ["--runner=DataflowRunner"],
            False,
        ),
    ],
)
def test_cli_starts_the_pool_early_only_when_the_run_will_use_it(argv, expected):
    args, beam_args = cli.build_parser().parse_known_args(argv)
    assert cli._writes_locally(args, beam_args) is expected


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
    # The plan never depends on the writer processes: at least launcher.MIN_SHARDS shards.
    shards = sum(split["num_shards"] for split in pooled.metadata["splits"].values())
    assert shards >= launcher.MIN_SHARDS
    assert pooled.counters == inline.counters and pooled.counters["shards_written"] >= 2
    names = sorted(path.name for path in (tmp_path / "1").iterdir())
    assert names == sorted(path.name for path in (tmp_path / "2").iterdir())
    for name in names:
        if name != "metadata.json":  # holds the run's parameters and timings
            assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes()
