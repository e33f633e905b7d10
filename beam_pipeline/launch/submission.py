"""What a run submits, described: the record `--dry_run` prints and the one printed after a
template is written or a Dataflow job submitted (runner, steps, packaging, workers, and the
resolved run plan); the dry run's adds the estimate of what the run will take.

The dry run builds the same job the real run would, from the same plan, and stops before
running it; for Dataflow it goes through Beam's own dry run.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.portability.api import beam_runner_api_pb2

    from beam_pipeline.launch.plan import RunPlan


@contextlib.contextmanager
def built_job(plan: RunPlan) -> Iterator[beam.Pipeline]:
    """The job's Beam pipeline, built from the plan. Beam makes a local temp folder for each
    Pipeline and removes it only when the pipeline runs to the end; a dry run, a failed build
    or a failed run would leave it in the system temp folder, so it goes here in every case."""
    import apache_beam as beam

    from beam_pipeline.job.pipeline import build_pipeline

    pipeline = beam.Pipeline(options=plan.pipeline_options())
    try:
        build_pipeline(pipeline, plan.job)
        yield pipeline
    finally:
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)


def dry_run(plan: RunPlan) -> dict[str, Any]:
    """Build the job without running it; for Dataflow through Beam's own dry run.

    Beam's dry run goes through the whole Dataflow translation (environment, packaging,
    artifacts) but stages, uploads and submits nothing, so it needs no credentials.
    """
    with built_job(plan) as pipeline:
        if plan.runner.dataflow:
            pipeline.run()
        return with_estimate(describe_job(pipeline, plan), plan)


def with_estimate(description: dict[str, Any], plan: RunPlan) -> dict[str, Any]:
    """The dry run's record with what the run will take (launch/estimate.py), and its cost
    when the user gave prices."""
    from beam_pipeline.launch import estimate

    description["estimate"] = estimate.estimate(plan)
    priced = estimate.cost(description["estimate"], dict(plan.prices))
    if priced is not None:
        description["estimated_cost"] = priced
    return description


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
