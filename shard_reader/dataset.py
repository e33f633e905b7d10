"""make_dataset: shards listed in metadata.json -> batches of (image, mask[, key])."""

from __future__ import annotations

import math
from collections.abc import Callable

import tensorflow as tf

from shard_reader.decoding import make_decoder
from shard_reader.metadata import load_split

AUTOTUNE = tf.data.AUTOTUNE
DEFAULT_SHUFFLE_BUFFER = 256  # records, not batches: ~256 decoded-size-free serialized records


def steps_per_epoch(
    data_dir: str,
    split: str,
    batch_size: int,
    input_context: tf.distribute.InputContext | None = None,
    drop_remainder: bool = False,
) -> int:
    """Batches in one pass over the split (per input pipeline when distributed)."""
    examples = load_split(data_dir, split).num_examples
    if input_context is not None:
        examples = math.ceil(examples / input_context.num_input_pipelines)
    rounding = math.floor if drop_remainder else math.ceil
    return max(1, rounding(examples / batch_size))


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
    augment: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None,
    with_keys: bool = False,
) -> tf.data.Dataset:
    """A tf.data pipeline over one split.

    Shuffling is per example (shard order plus a record buffer), never per batch. With an
    `input_context` each input pipeline reads a disjoint part of the split.
    """
    info = load_split(data_dir, split)
    if deterministic is None:
        deterministic = not training
    files = tf.data.Dataset.from_tensor_slices(list(info.files))
    shard_records = False
    if input_context is not None and input_context.num_input_pipelines > 1:
        if len(info.files) >= input_context.num_input_pipelines:
            files = files.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        else:
            shard_records = True
    # Record-level sharding needs the same record order in every input pipeline.
    if training and not shard_records:
        files = files.shuffle(len(info.files), seed=seed, reshuffle_each_iteration=True)
    records = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=max(1, min(len(info.files), 8)),
        num_parallel_calls=AUTOTUNE,
        deterministic=deterministic or shard_records,
    )
    if shard_records:
        records = records.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if training and shuffle_buffer > 1:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        records = records.repeat()
    decode = make_decoder(info.mask_format, info.image_shape)

    def to_element(serialized):
        image, mask, key = decode(serialized)
        if augment is not None:
            image, mask = augment(image, mask)
        return (image, mask, key) if with_keys else (image, mask)

    dataset = records.map(to_element, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return dataset.prefetch(AUTOTUNE)
