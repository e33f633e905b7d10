"""Parse options, check inputs and output before anything runs, then run the job."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)

from beam_pipeline.errors import UsageError
from beam_pipeline.job.pipeline import JobConfig, build_pipeline
from beam_pipeline.launch import cloud, job_monitor, preflight, progress
from beam_pipeline.launch.options import (
    DEFAULT_RUNNER,
    DEFAULT_SHARD_SIZE_MB,
    LOCAL_RUNNERS,
    add_prepare_arguments,
)
from beam_pipeline.runtime import storage, writer_pool
from segcore.naming import METADATA_FILE, is_output_file
from segcore.splits import SplitFractions

# Every plan has at least MIN_SHARDS shards: a multiple of 1, 2, 4 and 8 writer processes, so
# small datasets keep every core busy, yet the plan never depends on the machine. Beam's
# multi-worker local modes ask for SHARDS_PER_LOCAL_WORKER per worker (see plan_num_shards).
MIN_SHARDS = 8
SHARDS_PER_LOCAL_WORKER = 4


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    metadata: dict[str, Any]
    counters: dict[str, int]
    seconds: float
    # Set instead of metadata when the job was only built, templated or submitted (cloud.py).
    submission: dict[str, Any] | None = None


def config_from_args(args: argparse.Namespace) -> JobConfig:
    try:
        fractions = SplitFractions(args.train_size, args.validation_size)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.num_shards is not None and args.num_shards < 1:
        raise UsageError(f"--num_shards must be at least 1, got {args.num_shards}")
    if not 0.0 <= args.max_reject_fraction <= 1.0:
        raise UsageError(
            f"--max_reject_fraction must be between 0 and 1, got {args.max_reject_fraction}"
        )
    if args.threads_per_shard < 0:
        raise UsageError(f"--threads_per_shard must be 0 or more, got {args.threads_per_shard}")
    if args.writer_processes < 0:
        raise UsageError(f"--writer_processes must be 0 or more, got {args.writer_processes}")
    if args.shard_size_mb is not None and args.shard_size_mb <= 0:
        raise UsageError(f"--shard_size_mb must be positive, got {args.shard_size_mb}")
    shard_size = args.shard_size_mb
    if args.num_shards is None and shard_size is None:
        shard_size = DEFAULT_SHARD_SIZE_MB
    return JobConfig(
        image_dir=storage.normalize_dir(args.image_dir),
        mask_dir=storage.normalize_dir(args.mask_dir),
        output_dir=storage.normalize_dir(args.output_dir),
        fractions=fractions,
        num_shards=args.num_shards,
        shard_size_mb=shard_size,
        mask_format=args.mask_format,
        mask_key=args.mask_key,
        max_reject_fraction=args.max_reject_fraction,
        threads_per_shard=args.threads_per_shard,
        writer_processes=args.writer_processes,
    )


def prepare_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuse to mix two runs in one directory.

    An unfinished earlier run (segprep files but no metadata.json) is cleared without asking:
    it was never published. A finished one needs --overwrite. Files segprep did not write
    are never deleted.
    """
    existing = storage.list_dir(output_dir)
    if not existing:
        return
    foreign = [
        path for path in existing if not is_output_file(path[len(output_dir) :].split("/", 1)[0])
    ]
    if foreign:
        raise UsageError(
            f"--output_dir {output_dir} holds files segprep did not write "
            f"(e.g. {foreign[0]}): choose a new folder"
        )
    marker = FileSystems.join(output_dir, METADATA_FILE)
    if marker in existing and not overwrite:
        raise UsageError(
            f"--output_dir {output_dir} already holds a finished segprep output: "
            "choose a new folder or pass --overwrite"
        )
    # The commit marker goes first: a crash while deleting never leaves a "complete" mix.
    storage.delete_paths([marker] if marker in existing else [])
    storage.delete_paths([path for path in existing if path != marker])


def pipeline_options(beam_args: list[str], *, no_wait: bool = False) -> PipelineOptions:
    """Beam options; with no --runner, the fastest local mode measured (benchmarks/writer.py):
    the FnApiRunner in this process, handing shards to one writer process per core."""
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if no_wait:
        standard.no_wait_until_finish = True
    if standard.runner is None:
        standard.runner = DEFAULT_RUNNER
    return options


def local_workers(options: PipelineOptions) -> int:
    """Worker processes or threads of a local run; 1 for remote runners."""
    direct = options.view_as(DirectOptions)
    if cloud.runner_name(options) not in LOCAL_RUNNERS or direct.direct_running_mode == "in_memory":
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1


def writer_processes(config: JobConfig, options: PipelineOptions) -> int:
    """Writer processes this run uses: only a single-process local run on local files.

    Remote runners and Beam's multi-process mode already run a process per core, and gs://
    paths are latency-bound (threads hide that) and need this process's credentials.
    """
    paths = (config.image_dir, config.mask_dir, config.output_dir)
    if (
        cloud.runner_name(options) not in LOCAL_RUNNERS
        or options.view_as(DirectOptions).direct_running_mode != "in_memory"
        or not all(storage.is_local(path) for path in paths)
    ):
        return 1
    return config.writer_processes or writer_pool.usable_cores()


def run(argv: list[str] | None = None) -> PrepareResult:
    """Entry point of the job, callable from tests; Beam flags pass through to the runner."""
    parser = argparse.ArgumentParser(prog="segprep prepare")
    add_prepare_arguments(parser)
    args, beam_args = parser.parse_known_args(argv)
    return run_job(
        config_from_args(args),
        pipeline_options(beam_args, no_wait=args.no_wait),
        overwrite=args.overwrite,
        dry_run=args.dry_run,
    )


def run_job(
    config: JobConfig, options: PipelineOptions, *, overwrite: bool = False, dry_run: bool = False
) -> PrepareResult:
    cloud.prepare_options(config, options)  # emulator fast path; Dataflow checks, before staging
    if dry_run:
        return PrepareResult({}, {}, 0.0, submission=cloud.dry_run(config, options))
    processes = writer_processes(config, options)
    if processes > 1:
        writer_pool.warm_up()  # its imports overlap the listing below
    listing = preflight.list_local_inputs(config.image_dir, config.mask_dir)
    preflight.check_inputs(config.image_dir, config.mask_dir, config.mask_key, listing)
    prepare_output_dir(config.output_dir, overwrite)
    config = dataclasses.replace(
        config,
        writer_processes=processes,
        min_total_shards=max(MIN_SHARDS, SHARDS_PER_LOCAL_WORKER * local_workers(options)),
        started_at=time.time(),
    )
    started = time.monotonic()
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, config)
    with _progress_monitor(config, options, listing):
        result = pipeline.run()
        if cloud.submit_only(options):  # template or no-wait submission: outputs come later
            submission = cloud.describe_job(pipeline, options, config, result=result)
            return PrepareResult({}, {}, time.monotonic() - started, submission=submission)
        if cloud.is_dataflow(options):
            _announce_dataflow_job(result, options)
            job_monitor.watch(result)
        result.wait_until_finish()
    seconds = time.monotonic() - started
    metadata_path = FileSystems.join(config.output_dir, METADATA_FILE)
    info = json.loads(storage.read_bytes(metadata_path))
    return PrepareResult(info, job_monitor.counters(result), seconds)


def _announce_dataflow_job(result, options: PipelineOptions) -> None:
    google = options.view_as(GoogleCloudOptions)
    url = job_monitor.console_url(google.project, google.region, result.job_id())
    print(f"Dataflow job {result.job_id()} submitted: {url}", file=sys.stderr, flush=True)


def _progress_monitor(
    config: JobConfig, options: PipelineOptions, listing: preflight.LocalListing | None
):
    """Live progress for local runs on local files; nothing for remote runners or gs://."""
    if (
        listing is None
        or cloud.runner_name(options) not in LOCAL_RUNNERS
        or not storage.is_local(config.output_dir)
    ):
        return contextlib.nullcontext()
    total = progress.expected_entries(
        listing.image_dir, listing.images, listing.mask_dir, listing.masks, config.fractions
    )
    return progress.Monitor(lambda: progress.entries_done(config.temp_dir), total)
