"""Follow a remote job: where to watch it, and its counters until it ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import apache_beam as beam
from apache_beam.runners.runner import PipelineState

POLL_SECONDS = 30.0
# The counters worth a line while a job runs; all of them end up in metadata.json.
_SHOWN = ("discovered_keys", "accepted_train", "accepted_validation", "shards_written")


def console_url(project: str, region: str, job_id: str) -> str:
    return f"https://console.cloud.google.com/dataflow/jobs/{region}/{job_id}?project={project}"


def counters(result: Any) -> dict[str, int]:
    """segprep's Beam counters, summed over steps (committed values)."""
    query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace("segprep"))
    totals: dict[str, int] = {}
    for counter in query["counters"]:
        name = counter.key.metric.name
        totals[name] = totals.get(name, 0) + (counter.committed or 0)
    return totals


def status_line(state: str, values: dict[str, int]) -> str:
    shown = [f"{name} {values[name]:,}" for name in _SHOWN if name in values]
    rejected = sum(v for name, v in values.items() if name.startswith("rejected_"))
    return f"job {state}: " + ", ".join([*shown, f"rejected {rejected:,}"])


def watch(
    result: Any,
    *,
    stream: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Print the job's state and counters whenever they change, until it ends."""
    stream = sys.stderr if stream is None else stream
    last = None
    while True:
        state = str(result.state)
        try:
            line = status_line(state, counters(result))
        except Exception:  # noqa: BLE001 - metrics can lag behind a starting job
            line = f"job {state}"
        if line != last:
            print(line, file=stream, flush=True)
            last = line
        if PipelineState.is_terminal(result.state):
            return state
        sleep(POLL_SECONDS)
