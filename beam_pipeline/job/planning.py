"""Assign each pair a split and a shard from its key; the shard plan comes from the listing.

Pairs travel in batches (lists, Batch below), split
by split and then shard by shard: Beam's local runner spends microseconds per element and
stage, which on a few cores competes with the writers, so planning moves a few thousand
lists rather than one element per pair."""

from __future__ import annotations

import heapq
import itertools

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from beam_pipeline.job.settings import PlanningSettings
from transforms.pairing import Pair, PairBatch
from transforms.rejects import Reason, Reject
from transforms.splits import (
    ShardAssigner,
    ShardSpec,
    SplitFractions,
    SplitSize,
    plan_num_shards,
    seed_keys,
    shard_hash,
)

REJECTS = "rejects"
_BATCH = 256  # pairs per batch: about 60 KB pickled


class Batch(beam.DoFn):
    """Pairs -> lists of at most _BATCH of them, per bundle."""

    def start_bundle(self) -> None:
        self._batch = PairBatch()

    def process(self, pair: Pair):
        self._batch.append(pair)
        if len(self._batch) >= _BATCH:
            batch, self._batch = self._batch, PairBatch()
            yield batch

    def finish_bundle(self):
        if self._batch:
            batch, self._batch = self._batch, PairBatch()
            yield GlobalWindows.windowed_value(batch)


class _AssignSplit(beam.DoFn):
    def __init__(self, fractions: SplitFractions) -> None:
        self._fractions = fractions
        self._left_out = Metrics.counter("segprep", f"rejected_{Reason.NOT_IN_SPLIT.value}")

    def process(self, batch: list[Pair]):
        """A batch -> (split, its pairs in that split) per split; tagged, (split, (entries,
        bytes)) and (split, keys) of those pairs, what the plan is made of."""
        by_split: dict[str, PairBatch] = {}
        for pair in batch:
            split = self._fractions.split_of(pair.key)
            if split is not None:
                by_split.setdefault(split, PairBatch()).append(pair)
                continue
            self._left_out.inc()
            detail = self._fractions.left_out_detail(pair.key)
            yield beam.pvalue.TaggedOutput(
                REJECTS,
                Reject(pair.key, Reason.NOT_IN_SPLIT, detail, pair.image.path, pair.mask.path),
            )
        for split, pairs in by_split.items():
            yield split, pairs
            size = sum(pair.image.size + pair.mask.size for pair in pairs)
            yield beam.pvalue.TaggedOutput(_SIZES, (split, (len(pairs), size)))
            yield beam.pvalue.TaggedOutput(_KEYS, (split, [pair.key for pair in pairs]))


_SIZES, _KEYS = "sizes", "keys"


def _add_sizes(sizes):
    entries = bytes_ = 0
    for n, b in sizes:
        entries += n
        bytes_ += b
    return entries, bytes_


class _SeedKeys(beam.CombineFn):
    """Per split, the `limit` smallest (shard_hash, key) pairs, then their keys (seed_keys);
    `limit` is the plan's most shards in a split.

    Accumulators never hold more than 2 * limit pairs, so memory is bounded by the plan's
    largest split, not by the dataset.
    """

    def create_accumulator(self, plan: dict[str, int]) -> list[tuple[int, str]]:
        return []

    def add_input(self, accumulator, keys: list[str], plan: dict[str, int]):
        """A batch's keys."""
        accumulator.extend((shard_hash(key), key) for key in keys)
        limit = max(plan.values())
        if len(accumulator) >= 2 * limit:
            accumulator = heapq.nsmallest(limit, accumulator)
        return accumulator

    def merge_accumulators(self, accumulators, plan: dict[str, int]):
        merged = itertools.chain.from_iterable(accumulators)
        return heapq.nsmallest(max(plan.values()), merged)

    def compact(self, accumulator, plan: dict[str, int]):
        return heapq.nsmallest(max(plan.values()), accumulator)

    def extract_output(self, accumulator, plan: dict[str, int]) -> list[str]:
        return seed_keys(accumulator, max(plan.values()))


def _by_shard(split_and_pairs: tuple[str, list[Pair]], assigner: ShardAssigner):
    """(shard name, (its ShardSpec, the batch's pairs in that shard)) per shard the batch
    reaches: each planned shard has a seed key, so every one is reached."""
    split, pairs = split_and_pairs
    by_shard: dict[ShardSpec, PairBatch] = {}
    for pair in pairs:
        by_shard.setdefault(assigner.assign(pair.key, split), PairBatch()).append(pair)
    return [(spec.name, (spec, batch)) for spec, batch in by_shard.items()]


class PlanShards(beam.PTransform):
    """Batches of pairs -> (shard name, (its ShardSpec, a list of its pairs)), and the plan's
    ShardAssigner (the duplicate search's changes find their shards with it,
    job/relocate.py).

    The plan never has more shards in a split than entries, and each shard is opened by one
    of the split's seed keys (ShardAssigner), so no planned shard is left without a pair.
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
        ).with_outputs(REJECTS, _SIZES, _KEYS, main="split")
        sizes = assigned[_SIZES] | "SizePerSplit" >> beam.CombinePerKey(_add_sizes)
        plan = (
            assigned.split.pipeline
            | "PlanSeed" >> beam.Impulse()
            | "Plan" >> beam.Map(self._plan, sizes=beam.pvalue.AsDict(sizes))
        )
        seeds = assigned[_KEYS] | "SeedKeys" >> beam.CombinePerKey(
            _SeedKeys(), beam.pvalue.AsSingleton(plan)
        )
        record_format = self._settings.record_format
        assigner = plan | "Assigner" >> beam.Map(
            ShardAssigner.from_seeds, seeds=beam.pvalue.AsDict(seeds), record_format=record_format
        )
        by_shard = assigned.split | "AssignShard" >> beam.FlatMap(
            _by_shard, assigner=beam.pvalue.AsSingleton(assigner)
        )
        return {
            "assigned": by_shard,
            "assigner": assigner,
            REJECTS: assigned[REJECTS],
        }
