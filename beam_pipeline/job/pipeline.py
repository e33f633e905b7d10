"""The prepare job's graph: discover entries -> shard plan -> per-shard work -> (duplicate
search -> the shards it changed, rewritten) -> commit.

Each stage takes one frozen settings object; the run plan (launch/plan.py) makes them all,
once, and nothing downstream decides anything again.
"""

from __future__ import annotations

import apache_beam as beam

from beam_pipeline.job.commit import CommitOutput
from beam_pipeline.job.duplicates import FindDuplicates
from beam_pipeline.job.existing_keys import SKIPPED, CheckExistingKeys
from beam_pipeline.job.listing import COUNTED, REJECTS, DiscoverEntries
from beam_pipeline.job.planning import Batch, PlanShards
from beam_pipeline.job.relocate import RelocateRecords
from beam_pipeline.job.settings import JobSettings
from beam_pipeline.job.write_shards import HASHES, WriteShards


def build_pipeline(pipeline: beam.Pipeline, job: JobSettings) -> beam.PCollection:
    """Adds the whole job to `pipeline`; returns the commit step's output (the metadata)."""
    discover = DiscoverEntries(job.layout, job.entries, job.staged_images)
    found = pipeline | "DiscoverEntries" >> discover
    discovered = found[COUNTED] | "CountDiscovered" >> beam.CombineGlobally(sum).without_defaults()
    pairs, early = found["pairs"], [found[REJECTS]]
    counts = {"discovered": discovered}
    if job.commit.append is not None:  # `--append`: only keys the output lacks go on
        checked = {"pairs": pairs, REJECTS: found[REJECTS]} | "CheckExistingKeys" >> (
            CheckExistingKeys(
                job.commit.output_dir, job.commit.append, job.planning.fractions, job.writing
            )
        )
        pairs, early = checked["pairs"], [checked[REJECTS]]
        counts["skipped"] = checked[SKIPPED]
    planned = pairs | "Batch" >> beam.ParDo(Batch()) | "PlanShards" >> PlanShards(job.planning)
    written = planned | "WriteShards" >> WriteShards(job.writing)
    shards, late = written.shards, [planned[REJECTS], written[REJECTS]]
    if job.duplicates is not None:  # the search sees the writers' hashes, then fixes shards
        found = written[HASHES] | "Duplicates" >> FindDuplicates(job.duplicates)
        counts["duplicates"] = found["report"]
        changes = {"shards": shards, "assigner": planned["assigner"], "moves": found["moves"]}
        if found["verdicts"] is not None:
            changes["verdicts"] = found["verdicts"]
        relocated = changes | "RelocateRecords" >> RelocateRecords(
            job.writing, job.planning.fractions
        )
        shards = relocated.shards
        late.append(relocated[REJECTS])
    rejects = (*early, *late) | "AllRejects" >> beam.Flatten()
    inputs = {"shards": shards, "rejects": rejects, **counts}
    return inputs | "Commit" >> CommitOutput(job.commit)
