"""One shard's whole job: read its entries, validate and convert them, write and publish.

Plain Python with no Beam runner context, so the same call runs inside a DoFn (Dataflow)
or in a local writer process (writer_pool.py). Records are written in key order: the same
inputs always give the same bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence

from beam_pipeline.launch.progress import Reporter
from beam_pipeline.runtime import storage
from beam_pipeline.runtime.ordered_pool import ordered_map
from segcore.pairing import Pair
from segcore.record import Record, make_record
from segcore.rejects import Reason, Reject, RejectError
from segcore.splits import ShardSpec


@dataclasses.dataclass(frozen=True)
class ShardWriterSettings:
    output_dir: str
    temp_dir: str
    mask_format: str = "jpeg"
    mask_key: str | None = None
    threads: int = 0  # 0: one per core, or one per process when processes share the cores
    processes: int = 1  # local writer processes (writer_pool.py); 1: write in the runner

    def decode_threads(self) -> int:
        if self.threads:
            return self.threads
        return 1 if self.processes > 1 else os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class ShardResult:
    spec: ShardSpec
    num_examples: int
    bytes: int
    sha256: str
    image_shapes: tuple[tuple[int, int], ...]  # distinct (height, width), sorted
    transcoded_images: int


@dataclasses.dataclass(frozen=True)
class ShardOutcome:
    result: ShardResult
    rejects: tuple[Reject, ...]


def write_shard(
    settings: ShardWriterSettings, spec: ShardSpec, pairs: Sequence[Pair]
) -> ShardOutcome:
    """Stage the shard locally, then publish it under its final name in one rename."""
    import tensorflow as tf  # only a process that writes shards pays for TensorFlow

    final_path = storage.join(settings.output_dir, spec.name)
    staging = storage.local_staging_path(final_path, settings.temp_dir)
    progress = Reporter(settings.temp_dir)
    rejects: list[Reject] = []
    shapes: set[tuple[int, int]] = set()
    count = transcoded = 0
    convert = functools.partial(_record_or_reject, settings)
    ordered = sorted(pairs, key=lambda pair: pair.key)
    with tf.io.TFRecordWriter(staging) as writer:
        for pair, record in ordered_map(convert, ordered, settings.decode_threads()):
            progress.add()
            if isinstance(record, RejectError):
                reject = Reject(
                    pair.key, record.reason, record.detail, pair.image.path, pair.mask.path
                )
                rejects.append(reject)
                continue
            writer.write(record.serialized)
            count += 1
            transcoded += record.image_transcoded
            shapes.add((record.height, record.width))
    progress.flush()
    size, digest = storage.publish_file(staging, final_path, settings.temp_dir)
    result = ShardResult(spec, count, size, digest, tuple(sorted(shapes)), transcoded)
    return ShardOutcome(result, tuple(rejects))


def _record_or_reject(settings: ShardWriterSettings, pair: Pair) -> Record | RejectError:
    try:
        image_bytes = storage.read_bytes(pair.image.path)
        mask_bytes = storage.read_bytes(pair.mask.path)
    except FileNotFoundError as error:
        return RejectError(Reason.READ_ERROR, f"file vanished after listing: {error}")
    try:
        return make_record(
            pair.key,
            image_bytes,
            mask_bytes,
            pair.mask.path,
            mask_format=settings.mask_format,
            mask_key=settings.mask_key,
        )
    except RejectError as error:
        return error
