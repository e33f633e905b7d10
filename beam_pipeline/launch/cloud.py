"""Google Cloud glue: an instant anonymous path to a storage emulator, Dataflow submission checks,
and a description of the job that a dry run or a template would submit.

Kept out of launcher.py so the local path stays short; nothing here contacts a Google service.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
    WorkerOptions,
)
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2

from beam_pipeline.errors import UsageError
from beam_pipeline.launch.job_monitor import console_url

if TYPE_CHECKING:
    from beam_pipeline.job.pipeline import JobConfig

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


def runner_name(options: PipelineOptions) -> str:
    """The runner's class name, however it was given (name, dotted path, class or instance)."""
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return ""
    if isinstance(runner, str):
        return runner.rsplit(".", 1)[-1]
    return runner.__name__ if isinstance(runner, type) else type(runner).__name__


def is_dataflow(options: PipelineOptions) -> bool:
    """Beam accepts 'dataflow', 'DataflowRunner' and the test variant for the same service."""
    return runner_name(options).lower() in DATAFLOW_RUNNERS


def _check_gcs(flag: str, path: str | None, *, required: bool = True) -> None:
    if path is None:
        if required:
            raise UsageError(f"DataflowRunner needs {flag} gs://BUCKET/FOLDER")
        return
    if _GCS_PATH.match(path):
        return
    if path.startswith("gs://"):
        problem = "has an invalid bucket name (3-63 of a-z 0-9 - _ ., no upper case)"
    elif "://" in path:
        problem = "is not on Cloud Storage"
    else:
        problem = "is a local path"
    raise UsageError(
        f"{flag} {path} {problem}: DataflowRunner workers read and write only Cloud Storage, "
        "use gs://BUCKET/FOLDER"
    )


def check_dataflow_submission(config: JobConfig, options: PipelineOptions) -> None:
    """Refuse a Dataflow job that would fail on the workers, before anything is staged.

    Every data path must be on Cloud Storage, the job needs a project, a region and a
    temp_location, and the workers need segprep itself: a custom SDK container
    (--sdk_container_image, see deploy/) or a package built from --setup_file.
    """
    for flag, path in (
        ("--image_dir", config.image_dir),
        ("--mask_dir", config.mask_dir),
        ("--output_dir", config.output_dir),
    ):
        _check_gcs(flag, path)
    cloud = options.view_as(GoogleCloudOptions)
    for flag, value in (("--project", cloud.project), ("--region", cloud.region)):
        if not value:
            raise UsageError(f"DataflowRunner needs {flag}")
    _check_gcs("--temp_location", cloud.temp_location)
    _check_gcs("--staging_location", cloud.staging_location, required=False)
    setup = options.view_as(SetupOptions)
    workers = options.view_as(WorkerOptions)
    image = workers.sdk_container_image or workers.worker_harness_container_image
    if setup.setup_file and not os.path.isfile(setup.setup_file):
        raise UsageError(f"--setup_file {setup.setup_file} does not exist")
    if not (image or setup.setup_file or setup.extra_packages):
        raise UsageError(
            "DataflowRunner workers need segprep installed: pass --sdk_container_image IMAGE "
            "(built by deploy/build_image.sh, recommended) or --setup_file ./setup.py"
        )


def apply_dataflow_defaults(options: PipelineOptions) -> None:
    """segprep's code lives in installed modules, so the main session is never pickled."""
    setup = options.view_as(SetupOptions)
    if setup.save_main_session is None:
        setup.save_main_session = False


def prepare_options(config: JobConfig, options: PipelineOptions) -> None:
    """Called by the launcher before it touches storage or builds the pipeline.

    With an emulator, local workers run as threads of this process so they share its
    anonymous client: the FnApiRunner's worker processes get no pipeline options and no hook,
    and each would first spend 15-40 s looking for credentials. For Dataflow, a job that
    cannot work is refused here, before anything is staged.
    """
    if use_storage_emulator_if_set():
        direct = options.view_as(DirectOptions)
        if direct.direct_running_mode == "multi_processing":
            direct.direct_running_mode = "multi_threading"
    if is_dataflow(options):
        check_dataflow_submission(config, options)
        apply_dataflow_defaults(options)


def submit_only(options: PipelineOptions) -> bool:
    """True when DataflowRunner.run() only builds, stages or submits: the job runs later.

    A template (--template_location, also how a Flex Template launcher runs segprep), Beam's
    dry run or --no_wait_until_finish: nothing to wait for, and no metadata.json to read yet.
    Local runners ignore these options and finish inside run().
    """
    return is_dataflow(options) and bool(
        options.view_as(GoogleCloudOptions).template_location
        or options.view_as(TestOptions).dry_run
        or options.view_as(StandardOptions).no_wait_until_finish
    )


def dry_run(config: JobConfig, options: PipelineOptions) -> dict[str, Any]:
    """Build the job without running it; for Dataflow through Beam's own dry run.

    Beam's dry run goes through the whole Dataflow translation (environment, packaging,
    artifacts) but stages, uploads and submits nothing, so it needs no credentials.
    """
    from beam_pipeline.job.pipeline import build_pipeline

    dataflow = is_dataflow(options)
    if dataflow:
        options.view_as(TestOptions).dry_run = True  # before Pipeline(): skips bucket look-ups
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, config)
    if dataflow:
        pipeline.run()
    return describe_job(pipeline, options, config)


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


def describe_job(
    pipeline: beam.Pipeline,
    options: PipelineOptions,
    config: JobConfig,
    *,
    result: Any = None,
) -> dict[str, Any]:
    """What was (or would be) submitted: the record printed by --dry_run and after a template."""
    if options.view_as(TestOptions).dry_run or result is None:
        mode = "dry_run"
    elif options.view_as(GoogleCloudOptions).template_location:
        mode = "template"
    else:
        mode = "submitted"
    description: dict[str, Any] = {"mode": mode, "runner": runner_name(options)}
    job = getattr(pipeline.runner, "job", None) if is_dataflow(options) else None
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
    description["parameters"] = config.parameters()
    return description


def format_description(description: dict[str, Any]) -> str:
    """JSON, so scripts and CI can read what --dry_run would submit."""
    return json.dumps(description, indent=2, sort_keys=False, default=str)
