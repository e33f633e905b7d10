"""The dry run's estimate (launch/estimate.py, docs/estimate.md): the exact `estimate` object
in the printed JSON, for Dataflow (machine type and workers given) and for this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from beam_pipeline.commands.sample_data import write_sample_data
from beam_pipeline.errors import UsageError
from beam_pipeline.launch import launcher
from beam_pipeline.launch.estimate import machine_type
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture

FIELDS = [
    "entries",
    "input_bytes",
    "cpu_seconds_per_entry",
    "vcpu_hours",
    "memory_gb_hours",
    "shuffle_gb",
    "workers",
    "wall_hours",
]
COUNT = 20
DATAFLOW = [
    "--runner", "DataflowRunner",
    "--project", "segprep-demo",
    "--region", "europe-west1",
    "--sdk_container_image", "europe-west1-docker.pkg.dev/segprep-demo/segprep/segprep:0.1.0",
]  # fmt: skip


@pytest.fixture(scope="module")
def raw(gcs, tmp_path_factory):  # noqa: F811
    """20 whole entries at 160x120 in gs://BUCKET/raw/; their bytes."""
    root = tmp_path_factory.mktemp("raw")
    write_sample_data(root, count=COUNT, seed=4, broken_fraction=0.0, height=160, width=120)
    assert gcs.upload_tree(root, "raw")
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,  # a hang guard only
    )


def test_local_dry_run_prints_the_estimate_for_this_machine(sample_dataset, tmp_path):
    output = tmp_path / "out"
    completed = _cli(
        [
            "--image_dir", str(sample_dataset.image_dir),
            "--mask_dir", str(sample_dataset.mask_dir),
            "--output_dir", str(output),
            "--runner", "FnApiRunner",
            "--dry_run",
        ]
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    estimate = json.loads(completed.stdout)["estimate"]
    assert list(estimate) == FIELDS
    assert estimate["entries"] == sample_dataset.count
    on_disk = sum(
        path.stat().st_size
        for folder in (sample_dataset.image_dir, sample_dataset.mask_dir)
        for path in folder.iterdir()
    )
    assert 0 < estimate["input_bytes"] <= on_disk  # only paired files are read
    assert estimate["cpu_seconds_per_entry"] > 0
    assert estimate["workers"] == 1 and estimate["wall_hours"] > 0
    assert "estimated_cost" not in json.loads(completed.stdout)  # no prices, no cost
    assert not output.exists()


def test_dataflow_dry_run_estimates_for_the_workers_and_machine_type_given(gcs, raw):  # noqa: F811
    before = gcs.names()
    result = launcher.run(
        [
            "--image_dir", gcs.url("raw/images"),
            "--mask_dir", gcs.url("raw/masks"),
            "--output_dir", gcs.url("out"),
            *DATAFLOW,
            "--temp_location", gcs.url("tmp"),
            "--max_num_workers", "10",
            "--worker_machine_type", "n1-standard-4",
            "--price_vcpu_hour", "0.05",
            "--price_gb_hour", "0.005",
            "--dry_run",
        ]
    )  # fmt: skip
    estimate = result.submission["estimate"]
    assert list(estimate) == FIELDS
    assert (estimate["entries"], estimate["input_bytes"]) == (COUNT, raw)
    assert estimate["workers"] == 10
    wall = estimate["wall_hours"]
    assert wall > 4 / 60  # Dataflow's worker start and stop, at least
    assert estimate["vcpu_hours"] == pytest.approx(10 * 4 * wall, rel=1e-3)
    assert estimate["memory_gb_hours"] == pytest.approx(10 * 15 * wall, rel=1e-3)
    assert estimate["shuffle_gb"] > 0
    cost = result.submission["estimated_cost"]
    assert cost["parts"] == {
        "price_vcpu_hour": pytest.approx(estimate["vcpu_hours"] * 0.05, abs=1e-4),
        "price_gb_hour": pytest.approx(estimate["memory_gb_hours"] * 0.005, abs=1e-4),
    }
    assert cost["total"] == pytest.approx(sum(cost["parts"].values()), abs=1e-4)
    assert gcs.names() == before  # read, never written


def test_an_unknown_machine_type_is_a_usage_error_naming_the_flag(gcs, raw):  # noqa: F811
    with pytest.raises(UsageError, match="--worker_machine_type m9-mega-3: not a machine type"):
        launcher.run(
            [
                "--image_dir", gcs.url("raw/images"),
                "--mask_dir", gcs.url("raw/masks"),
                "--output_dir", gcs.url("out"),
                *DATAFLOW,
                "--temp_location", gcs.url("tmp"),
                "--worker_machine_type", "m9-mega-3",
                "--dry_run",
            ]
        )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "vcpus", "memory"),
    [("n1-standard-1", 1, 3.75), ("n1-highmem-8", 8, 52.0), ("n2-standard-32", 32, 128.0)],
)
def test_machine_types_from_the_table_or_their_family(name, vcpus, memory):
    machine = machine_type(name)
    assert (machine.vcpus, machine.memory_gb) == (vcpus, memory)


def test_a_negative_price_is_refused_naming_the_flag(tmp_path):
    completed = _cli(
        [
            "--image_dir", str(tmp_path / "i"),
            "--mask_dir", str(tmp_path / "m"),
            "--output_dir", str(tmp_path / "o"),
            "--dry_run",
            "--price_vcpu_hour", "-1",
        ]
    )  # fmt: skip
    assert completed.returncode == 2
    (line,) = completed.stderr.strip().splitlines()
    assert "--price_vcpu_hour" in line
