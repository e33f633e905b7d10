"""The prepare job's graph: discover entries -> shard plan -> per-shard work -> commit.

Each stage takes one frozen settings object; the run plan (launch/plan.py) makes them all,
once, and nothing downstream decides anything again.
"""

from __future__ import annotations

import apache_beam as beam

from beam_pipeline.job.commit import CommitOutput
from beam_pipeline.job.duplicates import FindDuplicates
from beam_pipeline.job.existing_keys import SKIPPED, CheckExistingKeys
from beam_pipeline.job.listing import REJECTS, DiscoverEntries
from beam_pipeline.job.planning import Batch, PlanShards
from beam_pipeline.job.settings import JobSettings
from beam_pipeline.job.write_shards import WriteShards


def build_pipeline(pipeline: beam.Pipeline, job: JobSettings) -> beam.PCollection:
    """Adds the whole job to `pipeline`; returns the commit step's output (the metadata)."""
    discover = DiscoverEntries(job.layout, job.entries, job.staged_images)
    found = pipeline | "DiscoverEntries" >> discover
    discovered = (
        (found["pairs"], found[REJECTS])
        | "AllDiscovered" >> beam.Flatten()
        | "CountDiscovered" >> beam.combiners.Count.Globally()
    )
    pairs, anchors = found["pairs"], None
    early = [found[REJECTS]]
    counts = {"discovered": discovered}
    if job.commit.append is not None:  # `--append`: only keys the output lacks go on
        checked = pairs | "CheckExistingKeys" >> CheckExistingKeys(
            job.commit.output_dir, job.commit.append, job.planning.fractions, job.writing
        )
        pairs = checked["pairs"]
        early.append(checked[REJECTS])
        counts["skipped"] = checked[SKIPPED]
    if job.duplicates is not None:
        grouped = pairs | "Duplicates" >> FindDuplicates(job.duplicates, job.writing)
        pairs, anchors = grouped["pairs"], grouped["anchors"]
        if grouped[REJECTS] is not None:
            early.append(grouped[REJECTS])
        if grouped["report"] is not None:
            counts["duplicates"] = grouped["report"]
    else:  # the search passes its built pairs on in batches; planning takes batches
        pairs = pairs | "Batch" >> beam.ParDo(Batch())
    planned = pairs | "PlanShards" >> PlanShards(job.planning, anchors)
    written = planned | "WriteShards" >> WriteShards(job.writing)
    rejects = (*early, planned[REJECTS], written[REJECTS]) | "AllRejects" >> beam.Flatten()
    inputs = {"shards": written.shards, "rejects": rejects, **counts}
    return inputs | "Commit" >> CommitOutput(job.commit)
