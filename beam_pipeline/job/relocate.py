"""RelocateRecords: the written shards the duplicate search changed, written again.

Shards are written from the listing's plan (each key in its own key's split), and the
search runs on the hashes their writers made in the same decode. What it decides about a
few keys (a group's split, --duplicates drop, a leak) reaches only the shards that hold or
receive those keys: each change is routed to its shard by the plan's own ShardAssigner,
and a changed shard is rewritten (job/shard_rewrite.py) in the run's writer pool; every
other shard goes on as written. A record that follows its group into a split that this
run's plan has no shard for (an append's near copy of an older image) starts that split's
one shard.
"""

from __future__ import annotations

import collections

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.job.shard_rewrite import Incoming, rewrite_shard
from beam_pipeline.job.write_shards import PooledWork
from transforms.splits import ShardAssigner, ShardSpec

REJECTS = "rejects"
_LEAVE, _COME, _WRITTEN = "leave", "come", "written"


def _planned(assigner: ShardAssigner, key: str, split: str) -> ShardSpec:
    """The shard `key` has in `split`: the plan's, or the one shard of a split it lacks."""
    if assigner.plan.get(split, 0) > 0:
        return assigner.assign(key, split)
    return ShardSpec(split, 0, 1, assigner.record_format)


def _routed(element, assigner: ShardAssigner, fractions):
    """A key's changes -> (shard name, change) for the shard it leaves and, when it moves,
    (shard name, change) for the one it joins. A reject outranks a move."""
    key, joined = element
    return _changes(key, list(joined["verdicts"]), list(joined["moves"]), assigner, fractions)


def _moved(move, assigner: ShardAssigner, fractions):
    """A move with no verdict to weigh (group mode without --leakage_check)."""
    key, split = move
    return _changes(key, [], [split], assigner, fractions)


def _changes(key: str, verdicts, moves, assigner: ShardAssigner, fractions):
    source = assigner.assign(key, fractions.split_of(key))
    if verdicts:
        _, reason, detail = min(verdicts)
        yield source.name, (_LEAVE, key, (reason, detail), None)
        return
    (split,) = set(moves)
    target = _planned(assigner, key, split)
    if target.name != source.name:
        yield source.name, (_LEAVE, key, None, None)
        yield target.name, (_COME, key, source.name, target)


class _Rewrite(PooledWork):
    """(shard name, its written attempts and changes) -> the shard as written, or rewritten
    with its changes (job/shard_rewrite.py), in this process or in the run's writer pool.
    `attempts`: shard name -> the attempts delivered for it (the first one is read)."""

    work = staticmethod(rewrite_shard)
    doing = "rewriting a shard"

    def __init__(self, settings: ShardWriterSettings) -> None:
        super().__init__(settings)
        self._rewritten = Metrics.counter("segprep", "shards_rewritten")

    def process(self, element, attempts):
        _, joined = element
        shards, changes = [], []
        for value in joined:
            if value[0] == _WRITTEN:
                shards.append(value[1])
            else:
                changes.append(value)
        if not changes:
            yield from shards  # every delivered attempt: the commit settles one
            return
        shard = min(shards, key=lambda written: written.attempt) if shards else None
        leaving, incoming, spec = {}, [], shard.spec if shard else None
        for kind, key, detail, target in changes:
            if kind == _LEAVE:
                leaving[key] = detail
            else:
                record_format = target.record_format
                incoming.append(Incoming(key, detail, min(attempts[detail]), record_format))
                spec = spec or target
        attempt = None if shard is None else shard.attempt
        size = (shard.num_examples if shard else 0) + len(incoming)
        yield from self.submit((spec, attempt, leaving, incoming), shard, size)

    def emit(self, before, result):
        yield from self._emit(before, *result)

    def _emit(self, before, written, rejects):
        self._rewritten.inc()
        change = written.num_examples - (before.num_examples if before else 0)
        Metrics.counter("segprep", f"accepted_{written.spec.split}").inc(change)
        reasons = collections.Counter(reject.reason.value for reject in rejects)
        for reason, count in reasons.items():
            Metrics.counter("segprep", f"rejected_{reason}").inc(count)
        for reject in rejects:
            yield beam.pvalue.TaggedOutput(REJECTS, reject)
        yield written


class RelocateRecords(beam.PTransform):
    """{shards, moves: (key, split), verdicts (if any can be): (key, (rank, reason, detail)),
    assigner} -> {"shards": every shard as the commit takes them, "rejects"}."""

    def __init__(self, settings: ShardWriterSettings, fractions) -> None:
        super().__init__()
        self._settings = settings
        self._fractions = fractions

    def expand(self, inputs):
        shards, assigner = inputs["shards"], inputs["assigner"]
        side = {"assigner": beam.pvalue.AsSingleton(assigner), "fractions": self._fractions}
        if "verdicts" in inputs:  # a key may both move and be rejected: weigh them per key
            changes = (
                {"moves": inputs["moves"], "verdicts": inputs["verdicts"]}
                | "ChangesByKey" >> beam.CoGroupByKey()
                | "ToShards" >> beam.FlatMap(_routed, **side)
            )
        else:  # group mode without --leakage_check rejects nothing
            changes = inputs["moves"] | "ToShards" >> beam.FlatMap(_moved, **side)
        attempts = shards | "ShardAttempt" >> beam.Map(
            lambda shard: (shard.spec.name, shard.attempt)
        )
        written = shards | "ByName" >> beam.Map(lambda shard: (shard.spec.name, (_WRITTEN, shard)))
        return (
            (written, changes)
            | "ShardsAndChanges" >> beam.Flatten()
            | "ByShard" >> beam.GroupByKey()
            | "Rewrite"
            >> beam.ParDo(
                _Rewrite(self._settings), attempts=beam.pvalue.AsMultiMap(attempts)
            ).with_outputs(REJECTS, main="shards")
        )
