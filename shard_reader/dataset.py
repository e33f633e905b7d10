"""make_dataset: the shards listed in metadata.json -> batches of (image, mask[, key]).

Layout of the pipeline, and why:

  segments of shards (sharding.plan_segments)  -> shuffled shard order per epoch
  parallel interleave of TFRecordDataset readers  (CRC-checked; counts checked vs metadata)
  shuffle of *serialized* records                 (~100 KB each: cheap to hold, per example)
  parallel map: parse, decode to uint8, threshold the mask (fused with batch by tf.data)
  batch, then one float32 conversion per batch    (float32 is 4x the bytes: make it once)
  repeat (after batch: every epoch is one exact pass), prefetch
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from shard_reader import sharding
from shard_reader.decoding import OUTPUT_DTYPES, convert, make_decoder
from shard_reader.metadata import SplitInfo, load_split

AUTOTUNE = tf.data.AUTOTUNE
# Serialized records (an 800x600 record is ~100 KB, so ~100 MB): decoded pixels never wait here.
DEFAULT_SHUFFLE_BUFFER = 1024
# Shards read at once; reading is cheap next to decoding, this only mixes shards.
MAX_OPEN_SHARDS = 8

Augment = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]


def _pipeline(input_context: tf.distribute.InputContext | None) -> tuple[int, int]:
    if input_context is None:
        return 1, 0
    return input_context.num_input_pipelines, input_context.input_pipeline_id


def steps_per_epoch(
    data_dir: str,
    split: str,
    batch_size: int,
    input_context: tf.distribute.InputContext | None = None,
    *,
    drop_remainder: bool = False,
) -> int:
    """Training steps in one exact pass over the split, from metadata.json alone.

    Without `input_context`: batches of `batch_size` in the split. With it, `batch_size` is
    the per-replica size given to make_dataset and the count is of this pipeline's part:
    the parts differ by at most one record and the smallest one counts, so no pipeline runs
    out before the others; a step takes one batch per replica fed by the pipeline.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    info = load_split(data_dir, split)
    num_pipelines, _ = _pipeline(input_context)
    records = min(sharding.part_sizes(info.num_examples, num_pipelines))
    batches = records // batch_size if drop_remainder else -(-records // batch_size)
    replicas = 1
    if input_context is not None:
        replicas = max(1, input_context.num_replicas_in_sync // num_pipelines)
    # drop_remainder promises full batches; with several replicas, full steps too.
    steps = batches // replicas if drop_remainder else -(-batches // replicas)
    if steps == 0:
        raise ValueError(
            f"batch_size {batch_size} x {replicas} replica(s) with drop_remainder leaves no "
            f"full step of the {records} records per input pipeline of split {split!r}"
        )
    return steps


def make_dataset(
    data_dir: str,
    split: str,
    batch_size: int,
    *,
    training: bool = True,
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
    seed: int | None = None,
    repeat: bool = False,
    input_context: tf.distribute.InputContext | None = None,
    deterministic: bool | None = None,
    drop_remainder: bool = False,
    augment: Augment | None = None,
    with_keys: bool = False,
    dtype: tf.DType = tf.float32,
) -> tf.data.Dataset:
    """Batches of (image, mask) or (image, mask, key) from one split of a segprep output.

    image: float32 [B,H,W,3] in 0..255; mask: float32 [B,H,W,1], exactly 0 or 1; key: string
    [B]. H and W are static when metadata.json says every record of the split has one size.
    Errors are never skipped: a corrupt shard or a count that disagrees with metadata.json
    raises (DataLossError, FailedPreconditionError) instead of silently shortening the epoch.

    training: shuffle per example each epoch (shard order and a buffer of `shuffle_buffer`
        serialized records); off, records come in shard order.
    seed: makes the shuffle reproducible; with it (or without training) the order is
        deterministic unless `deterministic=False` says otherwise.
    repeat: repeat after batching, so each epoch of `steps_per_epoch` batches is one exact
        pass (the last batch of a pass may be short unless `drop_remainder`).
    input_context: read only this input pipeline's part; the parts are disjoint, tile the
        split and differ by at most one record (see shard_reader.sharding).
    augment: `f(image, mask) -> (image, mask)` on one example (as above, in `dtype`), applied
        to both together so they stay aligned; runs in the parallel map, in TF ops only.
    dtype: tf.uint8 yields image 0..255 and mask 0/1 as uint8: a quarter of the bytes, for
        models that cast on the accelerator (float32 conversion is ~20% of the decode cost).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    dtype = tf.as_dtype(dtype)
    if dtype not in OUTPUT_DTYPES:
        raise ValueError(f"dtype must be one of {[d.name for d in OUTPUT_DTYPES]}, got {dtype}")
    info = load_split(data_dir, split)
    if info.image_shape is None and augment is None and batch_size > 1:
        raise ValueError(
            f"records of split {split!r} differ in size (metadata image_shape is null): "
            "pass an augment= that resizes or crops to one size, or batch_size=1"
        )
    if deterministic is None:
        deterministic = not training or seed is not None
    records = _records(info, _pipeline(input_context), training, seed, deterministic)
    if training and shuffle_buffer > 1:
        records = records.shuffle(
            shuffle_buffer, seed=None if seed is None else seed + 1, reshuffle_each_iteration=True
        )
    dataset = _decode_and_batch(
        records, info, batch_size, drop_remainder, augment, with_keys, deterministic, dtype
    )
    if repeat:
        dataset = dataset.repeat()
    options = tf.data.Options()
    if input_context is not None:
        # Already sharded above: tf.distribute must not shard a second time.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.prefetch(AUTOTUNE).with_options(options)


def _records(
    info: SplitInfo,
    pipeline: tuple[int, int],
    training: bool,
    seed: int | None,
    deterministic: bool,
) -> tf.data.Dataset:
    """Serialized records of this pipeline's segments, shards read in parallel."""
    segments = sharding.plan_segments(info.shard_sizes, *pipeline)
    table = tf.data.Dataset.from_tensor_slices(
        (
            [info.files[segment.shard] for segment in segments],
            tf.constant([segment.skip for segment in segments], tf.int64),
            # -1 reads to the end of the shard, so a shard longer than metadata says fails.
            tf.constant([-1 if s.to_end else s.take for s in segments], tf.int64),
            tf.constant([segment.take for segment in segments], tf.int64),
        )
    )
    if training:
        table = table.shuffle(len(segments), seed=seed, reshuffle_each_iteration=True)

    def read(path: tf.Tensor, skip: tf.Tensor, take: tf.Tensor, expected: tf.Tensor):
        # CRC of every record is checked by the reader: a corrupt shard raises DataLossError.
        records = tf.data.TFRecordDataset(path).skip(skip).take(take)
        return records.apply(tf.data.experimental.assert_cardinality(expected))

    return table.interleave(
        read,
        cycle_length=min(len(segments), MAX_OPEN_SHARDS),
        num_parallel_calls=AUTOTUNE,
        deterministic=deterministic,
    )


def _decode_and_batch(
    records: tf.data.Dataset,
    info: SplitInfo,
    batch_size: int,
    drop_remainder: bool,
    augment: Augment | None,
    with_keys: bool,
    deterministic: bool,
    dtype: tf.DType,
) -> tf.data.Dataset:
    decode = make_decoder(info.mask_format, info.image_shape, with_keys)

    def pack(image, mask, key):
        return (image, mask, key) if with_keys else (image, mask)

    if augment is None:

        def decode_record(serialized):
            return pack(*decode(serialized))

        def finish(image, mask, *key):
            return (*convert(image, mask, dtype), *key)

        dataset = records.map(decode_record, AUTOTUNE, deterministic=deterministic)
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
        if dtype == tf.uint8:
            return dataset
        return dataset.map(finish, AUTOTUNE, deterministic=deterministic)

    def decode_augment(serialized):
        image, mask, key = decode(serialized)
        image, mask = augment(*convert(image, mask, dtype))
        return pack(image, mask, key)

    dataset = records.map(decode_augment, AUTOTUNE, deterministic=deterministic)
    return dataset.batch(batch_size, drop_remainder=drop_remainder)
