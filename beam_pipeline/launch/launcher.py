"""Execute a run plan under the output protocol: lock the output, clear what an unfinished run
left, run the job with the run's writer pool and progress display, and read back what it
published. A failed or interrupted run leaves nothing under a final name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from typing import Any

from beam_pipeline.errors import printable
from beam_pipeline.launch.masks import stage_images
from beam_pipeline.launch.plan import RunPlan, make_plan
from beam_pipeline.runtime import heap, output_protocol, writer_pool
from transforms import files
from transforms.format import dataset_info
from transforms.format.dataset_info import DatasetInfo


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    info: DatasetInfo | None  # the published metadata.json, as its readers load it
    counters: dict[str, int]
    seconds: float
    # Set instead of info when the job was only planned, templated or submitted.
    submission: dict[str, Any] | None = None
    plan: RunPlan | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """metadata.json's JSON value ({} when nothing was published), to compare with files."""
        return {} if self.info is None else self.info.to_json()


class JobFailedError(RuntimeError):
    """A remote job ended in a state other than DONE."""


def run(argv: list[str] | None = None) -> PrepareResult:
    """Entry point of the job, callable from tests: `segprep prepare` flags and Beam flags."""
    return execute(make_plan(sys.argv[1:] if argv is None else argv))


def execute(plan: RunPlan) -> PrepareResult:
    if plan.dry_run:
        from beam_pipeline.launch import submission

        return PrepareResult(None, {}, 0.0, submission=submission.dry_run(plan), plan=plan)
    if plan.runner.template:  # only writes a job description; its runs lock for themselves
        _stage_inputs(plan)  # so an annotated template carries one run's annotations: it runs once
        return _run_job(plan)
    heap.keep_freed_heap()  # the runner's in-process stages, as the writers (runtime/heap.py)
    lock = output_protocol.RunLock(plan.output_dir, plan.run_id, remote=not plan.runner.local)
    with lock:
        recovered = output_protocol.recover(plan.output_dir)
        if recovered is not None:
            print(f"segprep: {printable(recovered)}", file=sys.stderr, flush=True)
        _recheck(plan)
        output_protocol.remove_ended_runs(plan.output_dir)
        output_protocol.make_staging_dir(plan.output_dir, plan.run_id)
        try:
            _stage_inputs(plan)
            result = _run_job(plan)
        except BaseException as error:
            _fail_truthfully(plan, error)
            raise
        if result.submission is not None and plan.runner.submit_only:
            lock.detach()  # the job's commit releases it
        return result


def _fail_truthfully(plan: RunPlan, error: BaseException) -> None:
    """After a failure: drop the run's staged files unless a commit cut short still needs
    them, and say on the error what the folder holds now (the CLI's last line)."""
    gone = files.storage_gone(plan.output_dir)
    if gone:
        outcome = (
            f"Cloud Storage stopped answering, so what {plan.output_dir} holds is unknown: "
            f"once it answers, `segprep verify --repair {plan.output_dir}` completes or undoes "
            "a commit cut short"
        )
    else:
        outcome = output_protocol.outcome_of(plan.output_dir, plan.run_id)
    if not gone and not outcome.startswith("the commit was cut short"):
        output_protocol.discard_staged(plan.output_dir, plan.run_id)
    with contextlib.suppress(AttributeError, TypeError):
        error.segprep_outcome = outcome  # type: ignore[attr-defined]


def _stage_inputs(plan: RunPlan) -> None:
    """What the job reads from the run's staging folder: an export's image records, when
    the job lists the images itself (a local listing's pairs carry them)."""
    if plan.job.staged_images:
        stage_images(plan.masks.dataset, plan.job.staged_images)


def _recheck(plan: RunPlan) -> None:
    """Check the output again now that this run holds the lock (the plan looked before)."""
    state = output_protocol.inspect_output(plan.output_dir, holder=False)
    output_protocol.check_output(
        state, overwrite=plan.overwrite, append=plan.job.commit.append is not None
    )


def _run_job(plan: RunPlan) -> PrepareResult:
    from beam_pipeline.launch import job_monitor, submission

    started = time.monotonic()
    with submission.built_job(plan) as pipeline, _writers(plan), _progress(plan):
        result = pipeline.run()
        if plan.runner.submit_only:  # a template or a no-wait submission: outputs come later
            described = submission.describe_job(pipeline, plan, result=result)
            return PrepareResult(None, {}, time.monotonic() - started, described, plan)
        if plan.runner.dataflow:
            _announce_dataflow_job(result, plan)
            job_monitor.watch(result)
        state = result.wait_until_finish()
        if plan.runner.dataflow and str(state) != "DONE":
            raise JobFailedError(f"Dataflow job {result.job_id()} ended {state}: see its logs")
    info = dataset_info.load(plan.output_dir)
    return PrepareResult(info, job_monitor.counters(result), time.monotonic() - started, plan=plan)


def _writers(plan: RunPlan):
    if plan.job.writing.pool is None:
        return contextlib.nullcontext()
    return writer_pool.writer_pool(plan.job.writing.pool, plan.writer_processes)


def _progress(plan: RunPlan):
    """Live progress for local runs on local files; nothing for remote runners or gs://."""
    directory = plan.job.writing.progress_dir
    if directory is None or plan.discovered is None:
        return contextlib.nullcontext()
    from beam_pipeline.launch.progress import Monitor
    from beam_pipeline.runtime.progress_counts import entries_done

    os.makedirs(directory, exist_ok=True)
    before = plan.decided_before_writing
    return Monitor(lambda: before + entries_done(directory), plan.discovered)


def _announce_dataflow_job(result, plan: RunPlan) -> None:
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    from beam_pipeline.launch import job_monitor

    google = plan.pipeline_options().view_as(GoogleCloudOptions)
    url = job_monitor.console_url(google.project, google.region, result.job_id())
    print(f"Dataflow job {result.job_id()} submitted: {url}", file=sys.stderr, flush=True)
