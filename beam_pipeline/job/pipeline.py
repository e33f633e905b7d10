"""The prepare job's graph: discover entries -> shard plan -> per-shard work -> commit.

Each stage takes one frozen settings object; the run plan (launch/plan.py) makes them all,
once, and nothing downstream decides anything again.
"""

from __future__ import annotations

import apache_beam as beam

from beam_pipeline.job.commit import CommitOutput
from beam_pipeline.job.duplicates import FindDuplicates
from beam_pipeline.job.listing import REJECTS, DiscoverEntries
from beam_pipeline.job.planning import PlanShards
from beam_pipeline.job.settings import JobSettings
from beam_pipeline.job.write_shards import WriteShards


def build_pipeline(pipeline: beam.Pipeline, job: JobSettings) -> beam.PCollection:
    """Adds the whole job to `pipeline`; returns the commit step's output (the metadata)."""
    found = pipeline | "DiscoverEntries" >> DiscoverEntries(job.layout, job.entries, job.coco)
    discovered = (
        (found["pairs"], found[REJECTS])
        | "AllDiscovered" >> beam.Flatten()
        | "CountDiscovered" >> beam.combiners.Count.Globally()
    )
    pairs, anchors, report, early = found["pairs"], None, None, []
    if job.duplicates is not None:
        checked = pairs | "Duplicates" >> FindDuplicates(job.duplicates)
        pairs, anchors, report = checked["pairs"], checked["anchors"], checked["report"]
        if checked[REJECTS] is not None:
            early.append(checked[REJECTS])
    planned = pairs | "PlanShards" >> PlanShards(job.planning, anchors)
    written = planned | "WriteShards" >> WriteShards(job.writing)
    rejects = (
        found[REJECTS],
        *early,
        planned[REJECTS],
        written[REJECTS],
    ) | "AllRejects" >> beam.Flatten()
    inputs = (written.shards, rejects, discovered, *([report] if report is not None else []))
    return inputs | "Commit" >> CommitOutput(job.commit)
