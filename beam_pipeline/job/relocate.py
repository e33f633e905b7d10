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
from concurrent.futures.process import BrokenProcessPool

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.job.shard_rewrite import Incoming, rewrite_shard
from beam_pipeline.runtime import writer_pool
from transforms.splits import ShardAssigner, ShardSpec

REJECTS = "rejects"
_LEAVE, _COME = "leave", "come"


def _planned(assigner: ShardAssigner, key: str, split: str) -> ShardSpec:
    """The shard `key` has in `split`: the plan's, or the one shard of a split it lacks."""
    if assigner.plan.get(split, 0) > 0:
        return assigner.assign(key, split)
    return ShardSpec(split, 0, 1, assigner.record_format)


def _routed(element, assigner: ShardAssigner, fractions):
    """A key's change -> (shard name, change) for the shard it leaves and, when it moves,
    (shard name, (change, its spec)) for the one it joins. A reject outranks a move."""
    key, joined = element
    verdicts, moves = list(joined["verdicts"]), list(joined["moves"])
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


class _Rewrite(beam.DoFn):
    """(shard name, {shards, changes}) -> the shard as written, or rewritten with its
    changes (collected per bundle and sent to the run's writer pool, largest first)."""

    def __init__(self, settings: ShardWriterSettings) -> None:
        self._settings = settings
        self._rewritten = Metrics.counter("segprep", "shards_rewritten")

    def start_bundle(self) -> None:
        self._pending: list[tuple] = []

    def process(self, element, attempts):
        _, joined = element
        shards, changes = list(joined["shards"]), list(joined["changes"])
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
                incoming.append(Incoming(key, detail, attempts[detail], record_format))
                spec = spec or target
        job = (spec, shard, leaving, incoming)
        if self._settings.pool is None:
            yield from self._emit(shard, *self._run(job))
        else:
            self._pending.append(job)

    def _run(self, job):
        spec, shard, leaving, incoming = job
        attempt = None if shard is None else shard.attempt
        return rewrite_shard(self._settings, spec, attempt, leaving, incoming)

    def finish_bundle(self):
        jobs = sorted(self._pending, key=lambda job: job[0].name)
        self._pending = []
        if not jobs:
            return
        try:
            pool = writer_pool.pool_of(self._settings.pool)
            futures = [
                pool.submit(rewrite_shard, self._settings, spec, shard and shard.attempt, out, in_)
                for spec, shard, out, in_ in jobs
            ]
            for (_, shard, _, _), future in zip(jobs, futures, strict=True):
                for output in self._emit(shard, *future.result()):
                    if isinstance(output, beam.pvalue.TaggedOutput):
                        yield beam.pvalue.TaggedOutput(
                            output.tag, GlobalWindows.windowed_value(output.value)
                        )
                    else:
                        yield GlobalWindows.windowed_value(output)
        except BrokenProcessPool as error:
            raise RuntimeError(
                "a writer process died while rewriting a shard: out of memory? "
                "(try --writer_processes 1)"
            ) from error

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
        by_key = {"moves": inputs["moves"]}
        if "verdicts" in inputs:
            by_key["verdicts"] = inputs["verdicts"]
        else:  # group mode without --leakage_check rejects nothing
            by_key["verdicts"] = shards.pipeline | "NoVerdicts" >> beam.Create([])
        changes = (
            by_key
            | "ChangesByKey" >> beam.CoGroupByKey()
            | "ToShards"
            >> beam.FlatMap(
                _routed, assigner=beam.pvalue.AsSingleton(assigner), fractions=self._fractions
            )
        )
        attempts = (
            shards
            | "ShardAttempt" >> beam.Map(lambda shard: (shard.spec.name, shard.attempt))
            | "FirstAttempt" >> beam.CombinePerKey(min)
        )
        return (
            {
                "shards": shards | "ByName" >> beam.Map(lambda shard: (shard.spec.name, shard)),
                "changes": changes,
            }
            | "ShardAndChanges" >> beam.CoGroupByKey()
            | "Rewrite"
            >> beam.ParDo(
                _Rewrite(self._settings), attempts=beam.pvalue.AsDict(attempts)
            ).with_outputs(REJECTS, main="shards")
        )
