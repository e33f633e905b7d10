"""The prepare job's graph: listing -> pairing -> shard plan -> per-shard work -> commit."""

from __future__ import annotations

import dataclasses
from typing import Any

import apache_beam as beam

from beam_pipeline.job.commit import CommitOutput, CommitSettings
from beam_pipeline.job.listing import REJECTS, ListAndPair
from beam_pipeline.job.planning import PlanShards
from beam_pipeline.job.shard_work import ShardWriterSettings
from beam_pipeline.job.write_shards import WriteShards
from segcore.naming import TEMP_DIR
from segcore.splits import MIN_SHARDS, SplitFractions


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """Everything the graph needs; directories already normalised (ending in '/')."""

    image_dir: str
    mask_dir: str
    output_dir: str
    fractions: SplitFractions
    num_shards: int | None
    shard_size_mb: float | None
    mask_format: str
    mask_key: str | None
    max_reject_fraction: float = 1.0
    min_total_shards: int = MIN_SHARDS
    threads_per_shard: int = 0  # 0: one per core (or per writer process) where shards are written
    writer_processes: int = 1  # local runs: processes writing shards side by side
    started_at: float | None = None  # for the run figures in metadata.json

    @property
    def temp_dir(self) -> str:
        return self.output_dir + TEMP_DIR + "/"

    def parameters(self) -> dict[str, Any]:
        return {
            "image_dir": self.image_dir,
            "mask_dir": self.mask_dir,
            "output_dir": self.output_dir,
            "train_size": self.fractions.train,
            "validation_size": self.fractions.validation,
            "num_shards": self.num_shards,
            "shard_size_mb": self.shard_size_mb,
            "mask_format": self.mask_format,
            "mask_key": self.mask_key,
            "max_reject_fraction": self.max_reject_fraction,
            "threads_per_shard": self.threads_per_shard,
            "writer_processes": self.writer_processes,
        }


def build_pipeline(pipeline: beam.Pipeline, config: JobConfig) -> beam.PCollection:
    """Adds the whole job to `pipeline`; returns the commit step's output (the metadata)."""
    listed = pipeline | "ListAndPair" >> ListAndPair(config.image_dir, config.mask_dir)
    discovered = (
        (listed["pairs"], listed[REJECTS])
        | "AllDiscovered" >> beam.Flatten()
        | "CountDiscovered" >> beam.combiners.Count.Globally()
    )
    planned = listed["pairs"] | "PlanShards" >> PlanShards(
        config.fractions,
        num_shards=config.num_shards,
        shard_size_mb=config.shard_size_mb,
        min_total_shards=config.min_total_shards,
    )
    written = planned | "WriteShards" >> WriteShards(
        ShardWriterSettings(
            config.output_dir,
            config.temp_dir,
            config.mask_format,
            config.mask_key,
            config.threads_per_shard,
            config.writer_processes,
        )
    )

    rejects = (listed[REJECTS], planned[REJECTS], written[REJECTS]) | "AllRejects" >> beam.Flatten()
    settings = CommitSettings(
        config.output_dir,
        config.temp_dir,
        config.mask_format,
        config.parameters(),
        config.max_reject_fraction,
        config.started_at,
    )
    return (written.shards, rejects, discovered) | "Commit" >> CommitOutput(settings)
