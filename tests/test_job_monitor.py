"""Following a job: console URL and counter lines, on a real runner's result."""

from __future__ import annotations

import io

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from beam_pipeline.launch import job_monitor
from tests.helpers.runs import RUNNER_ARGS


def test_console_url():
    assert job_monitor.console_url("proj", "europe-west1", "2026-11-29_01") == (
        "https://console.cloud.google.com/dataflow/jobs/europe-west1/2026-11-29_01?project=proj"
    )


def _count(element):
    Metrics.counter("segprep", "accepted_train").inc()
    if element % 3 == 0:
        Metrics.counter("segprep", "rejected_image_empty").inc()
    return element


def test_watch_prints_counters_until_the_job_ends():
    pipeline = beam.Pipeline(options=PipelineOptions(RUNNER_ARGS))
    _ = pipeline | beam.Create(range(10)) | beam.Map(_count)
    result = pipeline.run()
    result.wait_until_finish()
    stream, sleeps = io.StringIO(), []
    state = job_monitor.watch(result, stream=stream, sleep=sleeps.append)
    assert state == PipelineState.DONE
    assert sleeps == []  # a finished job is reported once, without waiting
    assert stream.getvalue() == "job DONE: accepted_train 10, rejected 4\n"
    assert job_monitor.counters(result) == {"accepted_train": 10, "rejected_image_empty": 4}
