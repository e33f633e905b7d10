"""One unit of work per shard: read, validate, convert and write its own TFRecord file."""

from __future__ import annotations

import dataclasses
import os

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from beam_pipeline import storage
from beam_pipeline.ordered_pool import ordered_map
from beam_pipeline.progress import Reporter
from transforms.entry import Record, make_record
from transforms.pairing import Pair
from transforms.rejects import Reason, Reject, RejectError
from transforms.splits import ShardSpec

REJECTS = "rejects"


@dataclasses.dataclass(frozen=True)
class ShardResult:
    spec: ShardSpec
    num_examples: int
    bytes: int
    sha256: str
    image_shapes: tuple[tuple[int, int], ...]  # distinct (height, width), sorted
    transcoded_images: int


@dataclasses.dataclass(frozen=True)
class ShardWriterSettings:
    output_dir: str
    temp_dir: str
    mask_format: str = "jpeg"
    mask_key: str | None = None
    threads: int = 0  # 0: one per core of the machine writing the shard


class _WriteShard(beam.DoFn):
    def __init__(self, settings: ShardWriterSettings) -> None:
        self._settings = settings
        self._shards = Metrics.counter("segprep", "shards_written")
        self._transcoded = Metrics.counter("segprep", "images_transcoded")

    def setup(self) -> None:
        import tensorflow as tf  # noqa: F401 - import once per worker, not per bundle

        self._progress = Reporter(self._settings.temp_dir)
        self._threads = self._settings.threads or os.cpu_count() or 1

    def process(self, element):
        import tensorflow as tf

        _, grouped = element
        (spec,) = grouped["spec"]
        pairs: list[Pair] = sorted(grouped["pairs"], key=lambda pair: pair.key)
        final_path = FileSystems.join(self._settings.output_dir, spec.name)
        staging = storage.local_staging_path(final_path, self._settings.temp_dir)
        accepted = Metrics.counter("segprep", f"accepted_{spec.split}")
        shapes: set[tuple[int, int]] = set()
        count = transcoded = 0
        # Records are computed on pool threads; counters and writes stay on this thread,
        # where Beam's metrics context lives.
        outcomes = ordered_map(self._record_or_reject, pairs, self._threads)
        with tf.io.TFRecordWriter(staging) as writer:
            for pair, record in outcomes:
                self._progress.add()
                if isinstance(record, RejectError):
                    error = record
                    Metrics.counter("segprep", f"rejected_{error.reason.value}").inc()
                    yield beam.pvalue.TaggedOutput(
                        REJECTS,
                        Reject(
                            pair.key, error.reason, error.detail, pair.image.path, pair.mask.path
                        ),
                    )
                    continue
                writer.write(record.serialized)
                accepted.inc()
                count += 1
                transcoded += record.image_transcoded
                shapes.add((record.height, record.width))
        self._progress.flush()
        size, digest = storage.publish_file(staging, final_path, self._settings.temp_dir)
        self._shards.inc()
        self._transcoded.inc(transcoded)
        yield ShardResult(spec, count, size, digest, tuple(sorted(shapes)), transcoded)

    def _record_or_reject(self, pair: Pair) -> Record | RejectError:
        try:
            return self._record(pair)
        except RejectError as error:
            return error

    def _record(self, pair: Pair) -> Record:
        try:
            image_bytes = storage.read_bytes(pair.image.path)
            mask_bytes = storage.read_bytes(pair.mask.path)
        except FileNotFoundError as error:
            raise RejectError(Reason.READ_ERROR, f"file vanished after listing: {error}") from error
        return make_record(
            pair.key,
            image_bytes,
            mask_bytes,
            pair.mask.path,
            mask_format=self._settings.mask_format,
            mask_key=self._settings.mask_key,
        )


class WriteShards(beam.PTransform):
    """Group pair *paths* by shard, then write each shard in one DoFn call."""

    def __init__(self, settings: ShardWriterSettings) -> None:
        super().__init__()
        self._dofn = _WriteShard(settings)

    def expand(self, planned):
        return (
            {"spec": planned["specs"], "pairs": planned["assigned"]}
            | "GroupPathsByShard" >> beam.CoGroupByKey()
            | "WriteShard" >> beam.ParDo(self._dofn).with_outputs(REJECTS, main="shards")
        )
