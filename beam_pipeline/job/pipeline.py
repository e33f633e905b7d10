"""The prepare job's graph: discover entries -> shard plan -> per-shard work -> commit.

Each stage takes one frozen settings object; the run plan (launch/plan.py) makes them all,
once, and nothing downstream decides anything again.
"""

from __future__ import annotations

import apache_beam as beam

from beam_pipeline.job.commit import CommitOutput
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
    planned = found["pairs"] | "PlanShards" >> PlanShards(job.planning)
    written = planned | "WriteShards" >> WriteShards(job.writing)
    rejects = (found[REJECTS], planned[REJECTS], written[REJECTS]) | "AllRejects" >> beam.Flatten()
    return (written.shards, rejects, discovered) | "Commit" >> CommitOutput(job.commit)
