"""The shard-writing stage: group pair paths by shard, then write each shard in one call."""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.job.shard_work import WrittenShard, write_shard
from beam_pipeline.runtime import writer_pool
from transforms.duplicates import ImageHash
from transforms.rejects import Reject

REJECTS = "rejects"
HASHES = "hashes"  # each shard's image hashes, for the duplicate search


def in_global_window(output):
    """An output of finish_bundle, which has no input element's window to take: put in the
    global window (a TaggedOutput's value, inside its tag)."""
    if isinstance(output, beam.pvalue.TaggedOutput):
        return beam.pvalue.TaggedOutput(output.tag, GlobalWindows.windowed_value(output.value))
    return GlobalWindows.windowed_value(output)


class PooledWork(beam.DoFn):
    """A DoFn whose calls, plain Python `work(settings, *args)`, run in this process or, on
    the in-process local runner, in the run's writer pool: collected during the bundle and
    submitted in finish_bundle largest first, so the small ones fill in at the end and no
    core idles long. A subclass sets `work` and `doing` (what the error names) and turns
    each call's result into outputs with `emit(context, result)`."""

    work = None  # staticmethod: the plain-Python call, sent to the pool
    doing = "working"

    def __init__(self, settings: ShardWriterSettings) -> None:
        self._settings = settings

    def start_bundle(self) -> None:
        self._pending: list[tuple] = []

    def submit(self, args: tuple, context, size: int):
        """Run `work(settings, *args)` (now, or queued for the pool); its outputs."""
        if self._settings.pool is None:
            yield from self.emit(context, self.work(self._settings, *args))
        else:
            self._pending.append((size, args, context))

    def emit(self, context, result):
        raise NotImplementedError

    def finish_bundle(self):
        if not self._pending:
            return
        jobs = sorted(self._pending, key=lambda job: job[0], reverse=True)
        self._pending = []
        # On a failure nothing is cancelled here: the run's pool stops every writer when the
        # error leaves it (runtime/writer_pool.py), before the launcher discards the staging
        # folder. (A cancel racing the pool's shutdown fails inside concurrent.futures, 3.11.)
        try:
            pool = writer_pool.pool_of(self._settings.pool)
            futures = [pool.submit(self.work, self._settings, *args) for _, args, _ in jobs]
            for (_, _, context), future in zip(jobs, futures, strict=True):
                yield from map(in_global_window, self.emit(context, future.result()))
        except BrokenProcessPool as error:
            raise RuntimeError(
                f"a writer process died while {self.doing}: out of memory, or a script that "
                "calls launcher.run() without an `if __name__ == '__main__':` guard "
                "(try --writer_processes 1)"
            ) from error


class _WriteShard(PooledWork):
    """Writes each shard (job/shard_work.py), in this process or in the run's writer pool."""

    work = staticmethod(write_shard)
    doing = "writing a shard"

    def __init__(self, settings: ShardWriterSettings) -> None:
        super().__init__(settings)
        self._shards = Metrics.counter("segprep", "shards_written")
        self._transcoded = Metrics.counter("segprep", "images_transcoded")
        # How many times the job read a pair's files: once each.
        self._read = Metrics.counter("segprep", "images_read")

    def process(self, element):
        _, batches = element  # (the shard's ShardSpec, a list of its pairs) per batch
        batches = list(batches)  # a grouped iterable may be read once only (Dataflow)
        spec = batches[0][0]
        pairs = [pair for _, batch in batches for pair in batch]
        yield from self.submit((spec, pairs), None, len(pairs))

    def emit(self, _, result):
        yield from self._emit(*result)

    def _emit(self, shard: WrittenShard, rejects: tuple[Reject, ...], hashes: list[ImageHash]):
        if hashes:
            yield beam.pvalue.TaggedOutput(HASHES, hashes)
        for reject in rejects:
            Metrics.counter("segprep", f"rejected_{reject.reason.value}").inc()
            yield beam.pvalue.TaggedOutput(REJECTS, reject)
        Metrics.counter("segprep", f"accepted_{shard.spec.split}").inc(shard.num_examples)
        self._shards.inc()
        self._transcoded.inc(shard.transcoded_images)
        self._read.inc(shard.images_read)
        yield shard


class WriteShards(beam.PTransform):
    """Group pair *paths* (in lists, job/planning.py) by shard, then write each shard in one
    DoFn call: {"shards", "rejects", "hashes": each shard's image hashes, the duplicate
    search on}."""

    def __init__(self, settings: ShardWriterSettings) -> None:
        super().__init__()
        self._dofn = _WriteShard(settings)

    def expand(self, planned):
        return (
            planned["assigned"]
            | "GroupPathsByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(self._dofn).with_outputs(REJECTS, HASHES, main="shards")
        )
