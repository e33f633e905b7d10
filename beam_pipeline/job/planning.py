"""Assign each pair a split and a shard from its key; the shard plan comes from the listing."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_pipeline.job.settings import PlanningSettings
from segcore.pairing import Pair
from segcore.rejects import Reason, Reject
from segcore.splits import SplitFractions, SplitSize, assign_shard, plan_num_shards, shard_specs

REJECTS = "rejects"


class _AssignSplit(beam.DoFn):
    def __init__(self, fractions: SplitFractions) -> None:
        self._fractions = fractions
        self._left_out = Metrics.counter("segprep", f"rejected_{Reason.NOT_IN_SPLIT.value}")

    def process(self, pair: Pair):
        split = self._fractions.split_of(pair.key)
        if split is None:
            self._left_out.inc()
            detail = (
                f"outside train_size={self._fractions.train} + "
                f"validation_size={self._fractions.validation}"
            )
            yield beam.pvalue.TaggedOutput(
                REJECTS,
                Reject(pair.key, Reason.NOT_IN_SPLIT, detail, pair.image.path, pair.mask.path),
            )
            return
        yield split, pair


def _add_sizes(sizes):
    entries = bytes_ = 0
    for n, b in sizes:
        entries += n
        bytes_ += b
    return entries, bytes_


def _keyed_by_shard(split_and_pair: tuple[str, Pair], plan: dict[str, int]) -> tuple[str, Pair]:
    split, pair = split_and_pair
    return assign_shard(pair.key, split, plan).name, pair


class PlanShards(beam.PTransform):
    """(shard name, pair) for every pair, and (shard name, ShardSpec) for every planned shard.

    Planned shards come from the plan, not from the pairs, so a shard that no key hashes to
    is still written (empty) and `-of-N` names stay true.
    """

    def __init__(self, settings: PlanningSettings) -> None:
        super().__init__()
        self._settings = settings

    def _plan(self, _, sizes: dict) -> dict[str, int]:
        split_sizes = {split: SplitSize(*value) for split, value in sizes.items()}
        return plan_num_shards(
            split_sizes,
            num_shards=self._settings.num_shards,
            shard_size_mb=self._settings.shard_size_mb,
            min_total_shards=self._settings.min_total_shards,
        )

    def expand(self, pairs):
        assigned = pairs | "AssignSplit" >> beam.ParDo(
            _AssignSplit(self._settings.fractions)
        ).with_outputs(REJECTS, main="split")
        sizes = (
            assigned.split
            | "EntrySize"
            >> beam.MapTuple(lambda split, pair: (split, (1, pair.image.size + pair.mask.size)))
            | "SizePerSplit" >> beam.CombinePerKey(_add_sizes)
        )
        plan = (
            assigned.split.pipeline
            | "PlanSeed" >> beam.Create([None])
            | "Plan" >> beam.Map(self._plan, sizes=beam.pvalue.AsDict(sizes))
        )
        specs = plan | "ShardSpecs" >> beam.FlatMap(
            lambda p: [(spec.name, spec) for spec in shard_specs(p)]
        )
        by_shard = assigned.split | "AssignShard" >> beam.Map(
            _keyed_by_shard, plan=beam.pvalue.AsSingleton(plan)
        )
        return {"specs": specs, "assigned": by_shard, REJECTS: assigned[REJECTS]}
