"""Google Cloud glue: an instant anonymous path to a storage emulator, Dataflow submission checks,
and a description of the job that a dry run or a template would submit.

Kept out of launcher.py so the local path stays short; nothing here contacts a Google service.
Beam is imported where it is used: the run plan calls these checks before Beam is loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
from typing import TYPE_CHECKING, Any

from beam_pipeline.errors import UsageError
from transforms.pairing import Layout

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.portability.api import beam_runner_api_pb2

    from beam_pipeline.launch.plan import RunPlan

EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"
DATAFLOW_RUNNERS = frozenset({"dataflow", "dataflowrunner", "testdataflowrunner"})
# gs://BUCKET[/OBJECT]: bucket names are 3-63 lower-case letters, digits, '-', '_' or '.',
# starting and ending with a letter or digit.
_GCS_PATH = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?$")


def emulator_host() -> str | None:
    """The storage emulator's address when one is configured, else None."""
    return os.environ.get(EMULATOR_VARIABLE) or None


def use_storage_emulator_if_set() -> bool:
    """With STORAGE_EMULATOR_HOST set, make Beam's gs:// client anonymous and instant.

    Beam 2.77 builds every GCS client in gcsio.create_storage_client(), which first asks
    auth.get_service_credentials(). Without Application Default Credentials that call retries
    google.auth.default() with exponential back-off (15-40 s) before it falls back to an
    anonymous client. An emulator needs no credentials, so we settle Beam's once-per-process
    credential cache as "no credentials": create_storage_client() then returns
    storage.Client.create_anonymous_client(), which google-cloud-storage points at the
    emulator. The Dataflow client takes the same cache, so a template build against the
    emulator stays anonymous too. Returns True when the emulator is in use.
    """
    if emulator_host() is None:
        return False
    from apache_beam.internal.gcp import auth

    cache = getattr(auth, "_Credentials", None)
    if cache is None or not hasattr(cache, "_credentials_init"):
        raise RuntimeError(
            "this Beam version keeps GCS credentials elsewhere: update "
            "beam_pipeline/launch/cloud.py"
        )
    with cache._credentials_lock:
        cache._credentials = None
        cache._credentials_init = True
    return True


def runner_name(runner: Any) -> str:
    """The runner's class name, however it was given (name, dotted path, class or instance)."""
    if runner is None:
        return ""
    if isinstance(runner, str):
        return runner.rsplit(".", 1)[-1]
    return runner.__name__ if isinstance(runner, type) else type(runner).__name__


def is_dataflow(name: str) -> bool:
    """Beam accepts 'dataflow', 'DataflowRunner' and the test variant for the same service."""
    return name.lower() in DATAFLOW_RUNNERS


def _gcs_problem(flag: str, path: str | None, *, required: bool = True) -> str | None:
    if path is None:
        return f"{flag} gs://BUCKET/FOLDER is missing" if required else None
    if _GCS_PATH.match(path):
        return None
    if path.startswith("gs://"):
        return f"{flag} {path} has an invalid bucket name (3-63 of a-z 0-9 - _ ., no upper case)"
    if "://" in path:
        return f"{flag} {path} is not on Cloud Storage (use gs://BUCKET/FOLDER)"
    return f"{flag} {path} is a local path (use gs://BUCKET/FOLDER)"


def check_dataflow(layout: Layout, output_dir: str, beam: argparse.Namespace) -> None:
    """Refuse a Dataflow job that would fail on the workers, before anything is staged,
    listing every problem at once.

    Every data path must be on Cloud Storage, the job needs a project, a region and a
    temp_location, and the workers need segprep itself: a custom SDK container
    (--sdk_container_image, see deploy/) or a package built from --setup_file.
    """
    if layout.one_folder:
        folders = [("--data_dir", layout.image_dir)]
    elif layout.mask_dir is None:  # a COCO file is read by the launcher: it may be local
        folders = [("--image_dir", layout.image_dir)]
    else:
        folders = [("--image_dir", layout.image_dir), ("--mask_dir", layout.mask_dir)]
    problems = [_gcs_problem(flag, path) for flag, path in (*folders, ("--output_dir", output_dir))]
    problems += [
        f"{flag} is missing" for flag in ("--project", "--region") if not getattr(beam, flag[2:])
    ]
    problems.append(_gcs_problem("--temp_location", beam.temp_location))
    problems.append(_gcs_problem("--staging_location", beam.staging_location, required=False))
    image = beam.sdk_container_image or beam.worker_harness_container_image
    if beam.setup_file and not os.path.isfile(beam.setup_file):
        problems.append(f"--setup_file {beam.setup_file} does not exist")
    elif not (image or beam.setup_file or beam.extra_packages):
        problems.append(
            "the workers need segprep installed: --sdk_container_image IMAGE (built by "
            "deploy/build_image.sh, recommended) or --setup_file ./setup.py"
        )
    problems = [problem for problem in problems if problem]
    if problems:
        raise UsageError(f"DataflowRunner cannot run this job: {'; '.join(problems)}")


CREDENTIALS_DEADLINE = 20.0  # seconds; google.auth retries a metadata server that may not exist


def check_credentials() -> None:
    """gs:// needs Application Default Credentials: say so in one line within seconds, instead
    of Beam's minutes of retries. With a storage emulator, nothing is needed."""
    if use_storage_emulator_if_set():
        return
    outcome: list[BaseException | None] = []

    def look() -> None:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            google.auth.default()
            outcome.append(None)
        except DefaultCredentialsError as error:
            outcome.append(error)

    thread = threading.Thread(target=look, name="segprep-credentials", daemon=True)
    thread.start()
    thread.join(CREDENTIALS_DEADLINE)
    if outcome and outcome[0] is None:
        return
    why = "none were found" if outcome else f"none were found within {CREDENTIALS_DEADLINE:g} s"
    raise UsageError(
        f"gs:// paths need Google Cloud credentials and {why}: run `gcloud auth "
        "application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
        "service-account key file"
    )


def dry_run(plan: RunPlan) -> dict[str, Any]:
    """Build the job without running it; for Dataflow through Beam's own dry run.

    Beam's dry run goes through the whole Dataflow translation (environment, packaging,
    artifacts) but stages, uploads and submits nothing, so it needs no credentials.
    """
    import apache_beam as beam

    from beam_pipeline.job.pipeline import build_pipeline

    pipeline = beam.Pipeline(options=plan.pipeline_options())
    build_pipeline(pipeline, plan.job)
    if plan.runner.dataflow:
        pipeline.run()
    return describe_job(pipeline, plan)


def _steps(proto: beam_runner_api_pb2.Pipeline) -> list[str]:
    transforms = proto.components.transforms
    steps = []
    for root_id in proto.root_transform_ids:
        root = transforms[root_id]
        children = root.subtransforms or [root_id]
        steps.extend(transforms[child].unique_name for child in children)
    return steps


def _environments(proto: beam_runner_api_pb2.Pipeline) -> tuple[list[str], list[str]]:
    """(container images, staged artifact names) of the job's environments."""
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    images: list[str] = []
    artifacts: list[str] = []
    for environment in proto.components.environments.values():
        if environment.urn == common_urns.environments.DOCKER.urn:
            payload = beam_runner_api_pb2.DockerPayload.FromString(environment.payload)
            images.append(payload.container_image)
        for dependency in environment.dependencies:
            if dependency.role_urn == common_urns.artifact_roles.STAGING_TO.urn:
                role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
                    dependency.role_payload
                )
                artifacts.append(role.staged_name)
    return sorted(set(images)), artifacts


def describe_job(pipeline: beam.Pipeline, plan: RunPlan, *, result: Any = None) -> dict[str, Any]:
    """What was (or would be) submitted: the record printed by --dry_run and after a template."""
    from apache_beam.options.pipeline_options import (
        GoogleCloudOptions,
        SetupOptions,
        WorkerOptions,
    )

    from beam_pipeline.launch.job_monitor import console_url

    options = pipeline.options
    if plan.dry_run or result is None:
        mode = "dry_run"
    elif plan.runner.template:
        mode = "template"
    else:
        mode = "submitted"
    description: dict[str, Any] = {"mode": mode, "runner": plan.runner.name}
    job = getattr(pipeline.runner, "job", None) if plan.runner.dataflow else None
    proto = job.proto_pipeline if job is not None else pipeline.to_runner_api()
    if job is not None:
        options = job.options  # as submitted: job name and locations filled in by Beam
        cloud = options.view_as(GoogleCloudOptions)
        setup = options.view_as(SetupOptions)
        workers = options.view_as(WorkerOptions)
        images, artifacts = _environments(proto)
        packaging = {
            "sdk_container_image": workers.sdk_container_image
            or workers.worker_harness_container_image,
            "setup_file": setup.setup_file,
            "extra_packages": setup.extra_packages,
        }
        description.update(
            job_name=cloud.job_name,
            project=cloud.project,
            region=cloud.region,
            temp_location=cloud.temp_location,
            staging_location=cloud.staging_location,
            template_location=cloud.template_location,
            service_account_email=cloud.service_account_email,
            packaging={key: value for key, value in packaging.items() if value},
            workers={
                "machine_type": workers.machine_type,
                "num_workers": workers.num_workers,
                "max_num_workers": workers.max_num_workers,
            },
            worker_images=images,
            staged_artifacts=artifacts,
        )
        job_id = result.job_id() if mode == "submitted" else None
        if job_id:
            description["job_id"] = job_id
            description["console"] = console_url(cloud.project, cloud.region, job_id)
    description["steps"] = _steps(proto)
    description["parameters"] = dict(plan.job.commit.parameters)
    description["plan"] = plan.describe()
    return description


def format_description(description: dict[str, Any]) -> str:
    """JSON, so scripts and CI can read what --dry_run would submit."""
    return json.dumps(description, indent=2, sort_keys=False, default=str)
