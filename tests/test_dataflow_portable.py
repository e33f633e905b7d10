"""The job DataflowRunner submits, run on portable workers: same plan, same options, only the
runner differs.

The plan is made from Dataflow flags (project, region, gs:// temp_location, --setup_file);
the job then runs on Beam's PortableRunner with an embedded job server and an EXTERNAL worker
pool (tests/helpers/portable_workers.py): the transforms go through the Runner API to SDK
workers in other processes, whose virtualenv holds only the package built from setup.py, with
their own TMPDIR and HOME. gs:// in and out is the storage emulator. The output must equal
the in-process run's, shard for shard, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from beam_pipeline.commands.sample_data import write_sample_data
from beam_pipeline.launch import launcher
from beam_pipeline.launch.plan import RunPlan, make_plan
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture
from tests.helpers.portable_workers import REPO, worker_pool, worker_venv  # noqa: F401
from tests.helpers.runs import RUNNER_ARGS
from transforms.format.naming import METADATA_FILE

COUNT = 30
# Differ between any two runs: when and which run, and the runner that ran it.
RUN_FIELDS = ("run",)
PARAMETER_FIELDS = ("output_dir", "runner")


@pytest.fixture(scope="module")
def raw(gcs, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("raw")
    summary = write_sample_data(
        root, count=COUNT, seed=5, broken_fraction=0.1, height=160, width=120
    )
    assert gcs.upload_tree(root, "raw")
    return summary


def _paths(gcs, output: str) -> list[str]:  # noqa: F811
    return [
        "--image_dir", gcs.url("raw/images"),
        "--mask_dir", gcs.url("raw/masks"),
        "--output_dir", gcs.url(output),
        "--num_shards", "3",
    ]  # fmt: skip


def _dataflow_plan(gcs, output: str, setup_file: str) -> RunPlan:  # noqa: F811
    return make_plan(
        [
            *_paths(gcs, output),
            "--runner", "DataflowRunner",
            "--project", "segprep-demo",
            "--region", "europe-west1",
            "--temp_location", gcs.url("tmp"),
            "--setup_file", setup_file,
        ]
    )  # fmt: skip


def on_portable_workers(plan: RunPlan, endpoint: str) -> RunPlan:
    """The Dataflow plan with only the runner changed: PortableRunner, an embedded job
    server, the EXTERNAL pool at `endpoint`.

    `--sdk_worker_parallelism=2` is passed as a Dataflow-like setting, but Beam 2.77's
    embedded job server runs its FnApiRunner through run_via_runner_api, which asks each
    environment for one SDK worker whatever the options say: the job runs in one worker
    process of the pool (checked below), apart from the launcher."""
    args = list(plan.beam_args)
    args[args.index("--runner") + 1] = "PortableRunner"
    args += [
        "--job_endpoint=embed",
        "--environment_type=EXTERNAL",
        f"--environment_config={endpoint}",
        "--sdk_worker_parallelism=2",
    ]
    runner = dataclasses.replace(plan.runner, name="PortableRunner", dataflow=False)
    return dataclasses.replace(plan, beam_args=tuple(args), runner=runner)


def _comparable(metadata: dict) -> dict:
    """metadata.json without what differs between any two runs of the same inputs."""
    kept = {key: value for key, value in metadata.items() if key not in RUN_FIELDS}
    kept["parameters"] = {
        key: value for key, value in metadata["parameters"].items() if key not in PARAMETER_FIELDS
    }
    kept["dataset_versions"] = [
        {key: value for key, value in version.items() if key not in ("run_id", "created_at")}
        for version in metadata["dataset_versions"]
    ]
    return kept


def _published(gcs, prefix: str) -> dict[str, bytes]:  # noqa: F811
    return {name.removeprefix(prefix): gcs.read(name) for name in gcs.names(prefix)}


def test_worker_venv_imports_segprep_from_the_wheel_not_the_checkout(worker_venv):  # noqa: F811
    found = worker_venv.run("-c", "import beam_pipeline; print(beam_pipeline.__file__)")
    assert found.returncode == 0, found.stderr
    path = found.stdout.strip()
    assert path.startswith(str(worker_venv.root) + "/") and "site-packages" in path, path
    assert not path.startswith(str(REPO)), path
    # The launcher's editable install is not there: the checkout's tests are not importable.
    tests = worker_venv.run("-c", "import tests.helpers")
    assert tests.returncode != 0


def test_dataflow_graph_on_portable_workers_equals_the_in_process_run(
    gcs,  # noqa: F811
    raw,
    worker_venv,  # noqa: F811
):
    started = time.monotonic()
    local = launcher.run([*_paths(gcs, "in-process"), *RUNNER_ARGS])
    in_process_seconds = time.monotonic() - started
    plan = _dataflow_plan(gcs, "portable", str(worker_venv.setup_file))
    assert plan.runner.dataflow and plan.job.writing.pool is None
    with worker_pool(worker_venv) as pool:
        started = time.monotonic()
        remote = launcher.execute(on_portable_workers(plan, pool.endpoint))
        portable_seconds = time.monotonic() - started
        assert pool.workers_started() >= 1, "".join(pool.log)[-3000:]
    print(f"in-process {in_process_seconds:.1f} s, portable workers {portable_seconds:.1f} s")
    assert remote.metadata["num_discovered"] == COUNT
    assert _comparable(remote.metadata) == _comparable(local.metadata)
    assert remote.metadata["parameters"]["runner"] == "DataflowRunner"  # the plan's, unchanged
    mine = _published(gcs, "in-process/")
    theirs = _published(gcs, "portable/")
    assert sorted(mine) == sorted(theirs)
    for name, data in mine.items():
        if name != METADATA_FILE and not name.startswith(".segprep/"):
            assert theirs[name] == data, name
    assert json.loads(theirs[METADATA_FILE]) == remote.metadata
    assert not [name for name in theirs if name.startswith(".segprep/runs/")]
    # The workers wrote each gs:// shard through a file in their own TMPDIR, and left none.
    assert list(worker_venv.tmpdir.iterdir()) == []
