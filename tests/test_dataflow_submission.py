"""DataflowRunner submission, proven offline: the real Dataflow job is built, never sent.

Beam's own dry run translates the pipeline for Dataflow (environment, packaging, artifacts)
without staging; --template_location=LOCAL.json goes further and stages the package and the
pipeline proto to the (emulated) bucket, then writes the job the service would receive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from apache_beam.portability.api import beam_runner_api_pb2

from beam_pipeline.errors import UsageError
from beam_pipeline.launch import launcher
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[1]
SETUP_FILE = str(REPO / "setup.py")
IMAGE = "europe-west1-docker.pkg.dev/segprep-demo/segprep/segprep:0.1.0"
STAGES = ["DiscoverEntries", "PlanShards", "WriteShards", "Commit"]
DATAFLOW = ["--runner", "DataflowRunner", "--project", "segprep-demo", "--region", "europe-west1"]


def _paths(root: str) -> list[str]:
    return [
        "--image_dir",
        f"{root}/raw/images",
        "--mask_dir",
        f"{root}/raw/masks",
        "--output_dir",
        f"{root}/out",
    ]


def _in_order(names: list[str], wanted: list[str]) -> bool:
    positions = [names.index(name) for name in wanted]
    return positions == sorted(positions)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--image_dir": "/data/images"}, "--image_dir /data/images/ is a local path"),
        ({"--output_dir": "out"}, "--output_dir .*/out/ is a local path"),
        (
            {"--mask_dir": "s3://bucket/masks"},
            "--mask_dir s3://bucket/masks/ is not on Cloud Storage",
        ),
        ({"--output_dir": "gs://B/out"}, "--output_dir gs://B/out/ has an invalid bucket"),
        ({"--temp_location": "/tmp/beam"}, "--temp_location /tmp/beam is a local path"),
        ({"--temp_location": None}, "--temp_location gs://BUCKET/FOLDER is missing"),
        ({"--staging_location": "staging"}, "--staging_location staging is a local path"),
        ({"--project": None}, "--project is missing"),
        ({"--region": None}, "--region is missing"),
        ({"--sdk_container_image": None}, "workers need segprep installed"),
        (
            {"--sdk_container_image": None, "--setup_file": "/nowhere/setup.py"},
            "--setup_file /nowhere/setup.py does not exist",
        ),
    ],
)
def test_unusable_dataflow_jobs_are_refused_before_anything_is_staged(
    gcs,  # noqa: F811
    tmp_path,
    change,
    message,
):
    flags = {
        "--image_dir": gcs.url("raw/images"),
        "--mask_dir": gcs.url("raw/masks"),
        "--output_dir": gcs.url("out"),
        "--runner": "DataflowRunner",
        "--project": "segprep-demo",
        "--region": "europe-west1",
        "--temp_location": gcs.url("tmp"),
        "--sdk_container_image": IMAGE,
        "--template_location": str(tmp_path / "job.json"),
    }
    flags.update(change)
    argv = [part for flag, value in flags.items() if value for part in (flag, value)]
    before = gcs.names()
    with pytest.raises(UsageError, match=message):
        launcher.run(argv)
    assert gcs.names() == before
    assert not (tmp_path / "job.json").exists()


def test_every_dataflow_problem_is_named_in_one_message(gcs, tmp_path):  # noqa: F811
    """Four runs to learn four missing options is three too many."""
    argv = [*_paths("gs://MY-DATA"), "--runner", "DataflowRunner", "--dry_run"]
    with pytest.raises(UsageError) as caught:
        launcher.run(argv)
    message = str(caught.value)
    for problem in (
        "--image_dir gs://MY-DATA/raw/images/ has an invalid bucket name",
        "--output_dir gs://MY-DATA/out/ has an invalid bucket name",
        "--project is missing",
        "--region is missing",
        "--temp_location gs://BUCKET/FOLDER is missing",
        "the workers need segprep installed",
    ):
        assert problem in message
    assert len(message.splitlines()) == 1
    assert "use gs://BUCKET/FOLDER" not in message  # the paths already are gs://


def test_dry_run_builds_the_dataflow_job_without_touching_storage(gcs):  # noqa: F811
    """The bucket does not exist on the server: any upload would fail the dry run, and the
    estimate's listing finds nothing to read."""
    result = launcher.run(
        [
            *_paths("gs://segprep-nowhere"),
            *DATAFLOW,
            "--temp_location",
            "gs://segprep-nowhere/tmp",
            "--setup_file",
            SETUP_FILE,
            "--dry_run",
        ]
    )
    job = result.submission
    assert result.metadata == {} and job is not None
    assert job["mode"] == "dry_run" and job["runner"] == "DataflowRunner"
    assert (job["project"], job["region"]) == ("segprep-demo", "europe-west1")
    assert job["temp_location"].startswith("gs://segprep-nowhere/tmp")
    assert job["job_name"].startswith("beamapp-")
    assert job["packaging"] == {"setup_file": SETUP_FILE}
    assert "workflow.tar.gz" in job["staged_artifacts"]
    assert job["worker_images"] == ["gcr.io/cloud-dataflow/v1beta3/beam_python3.11_sdk:2.77.0"]
    assert _in_order(job["steps"], STAGES)
    assert job["parameters"]["output_dir"] == "gs://segprep-nowhere/out/"
    assert "segprep-nowhere" not in {bucket.name for bucket in gcs.client().list_buckets()}
    assert job["estimate"]["entries"] == 0 and job["estimate"]["wall_hours"] == 0


def test_cli_dry_run_prints_the_job_as_json(gcs):  # noqa: F811
    """The documented flag, through the real CLI: JSON on stdout, exit 0, bucket untouched."""
    before = gcs.names()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "beam_pipeline",
            *_paths(gcs.url().rstrip("/")),
            *DATAFLOW,
            "--temp_location",
            gcs.url("tmp"),
            "--sdk_container_image",
            IMAGE,
            "--dry_run",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    job = json.loads(completed.stdout)
    assert job["mode"] == "dry_run"
    assert job["packaging"] == {"sdk_container_image": IMAGE}
    assert job["worker_images"] == [IMAGE]
    assert "workflow.tar.gz" not in job["staged_artifacts"]
    assert _in_order(job["steps"], STAGES)
    assert gcs.names() == before


def _template(gcs, tmp_path, name: str, packaging: list[str]):  # noqa: F811
    """Build a classic template: stage to the emulated bucket, write the job to a local file."""
    gcs.put(f"{name}/raw/images/00001.jpg", b"image")
    gcs.put(f"{name}/raw/masks/00001_mask.mat", b"mask")
    template = tmp_path / "job.json"
    result = launcher.run(
        [
            *_paths(gcs.url(name)),
            *DATAFLOW,
            "--temp_location",
            gcs.url(f"{name}/tmp"),
            "--staging_location",
            gcs.url(f"{name}/staging"),
            "--template_location",
            str(template),
            *packaging,
        ]
    )
    return result, json.loads(template.read_text())


def _staged_pipeline(gcs, job: dict) -> beam_runner_api_pb2.Pipeline:  # noqa: F811
    url = job["environment"]["sdkPipelineOptions"]["options"]["pipelineUrl"]
    name = url.removeprefix(gcs.url())
    return beam_runner_api_pb2.Pipeline.FromString(gcs.read(name))


def _top_level_steps(proto: beam_runner_api_pb2.Pipeline) -> list[str]:
    transforms = proto.components.transforms
    return [
        transforms[child].unique_name
        for root in proto.root_transform_ids
        for child in transforms[root].subtransforms
    ]


def test_template_with_setup_file_stages_the_package_and_the_pipeline(gcs, tmp_path):  # noqa: F811
    result, job = _template(gcs, tmp_path, "tpl-setup", ["--setup_file", SETUP_FILE])
    assert result.submission["mode"] == "template"
    options = job["environment"]["sdkPipelineOptions"]["options"]
    assert (options["project"], options["region"]) == ("segprep-demo", "europe-west1")
    assert options["temp_location"].startswith(gcs.url("tpl-setup/tmp/"))
    assert options["setup_file"] == SETUP_FILE
    assert options["save_main_session"] is False
    assert _in_order(_top_level_steps(_staged_pipeline(gcs, job)), STAGES)
    # The package the workers will pip-install: segprep's three packages, from this tree.
    packages = job["environment"]["workerPools"][0]["packages"]
    tarball = next(p for p in packages if p["name"] == "workflow.tar.gz")["location"]
    staged = tarball.removeprefix(f"storage.googleapis.com/{gcs.bucket}/")
    local = tmp_path / "workflow.tar.gz"
    local.write_bytes(gcs.read(staged))
    with tarfile.open(local) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for module in (
        "beam_pipeline/launch/launcher.py",
        "transforms/record.py",
        "shard_reader/dataset.py",
    ):
        assert module in members
    # Submission only: no output was waited for or read, nothing was written there.
    assert gcs.names("tpl-setup/out/") == []


def test_template_with_custom_container_names_the_image(gcs, tmp_path):  # noqa: F811
    result, job = _template(gcs, tmp_path, "tpl-image", ["--sdk_container_image", IMAGE])
    pool = job["environment"]["workerPools"][0]
    assert [image["containerImage"] for image in pool["sdkHarnessContainerImages"]] == [IMAGE]
    assert all(package["name"] != "workflow.tar.gz" for package in pool.get("packages", []))
    options = job["environment"]["sdkPipelineOptions"]["options"]
    assert options["sdk_container_image"] == IMAGE
    assert options["staging_location"].startswith(gcs.url("tpl-image/staging/"))
    assert _in_order(_top_level_steps(_staged_pipeline(gcs, job)), STAGES)
    assert result.submission["worker_images"] == [IMAGE]
    assert gcs.names("tpl-image/out/") == []


def test_dry_run_on_a_local_runner_prints_the_graph_and_runs_nothing(tmp_path):
    output = tmp_path / "out"
    result = launcher.run(
        [
            *_paths(str(tmp_path / "nowhere")),
            "--output_dir",
            str(output),
            "--runner",
            "FnApiRunner",
            "--dry_run",
        ]
    )
    assert result.submission["mode"] == "dry_run"
    assert result.submission["runner"] == "FnApiRunner"
    assert "project" not in result.submission
    assert _in_order(result.submission["steps"], STAGES)
    assert not output.exists() and not (tmp_path / "nowhere").exists()
