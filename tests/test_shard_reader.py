"""shard_reader: exact epochs, per-example shuffling, multi-pipeline sharding, loud failures."""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import tensorflow as tf
from PIL import Image

import shard_reader
from shard_reader import sharding
from tests.helpers.handmade import write_mixed_sizes
from tests.helpers.tf_reading import random_flip, read_keys, shard_contents, split_metadata
from transforms.format.naming import METADATA_FILE, shard_name
from transforms.format.tfrecord import CorruptRecordError

BATCH = 4


def key_of(serialized: bytes) -> str:
    example = tf.train.Example.FromString(serialized)
    return example.features.feature["key"].bytes_list.value[0].decode()


def reshard(source: Path, target: Path, split: str, sizes: list[int]) -> Path:
    """A copy of `source` whose `split` is rewritten into shards of the given record counts."""
    shutil.copytree(source, target)
    metadata = json.loads((target / METADATA_FILE).read_text())
    records = [record for shard in shard_contents(source, split) for record in shard]
    assert sum(sizes) == len(records)
    for shard in metadata["splits"][split]["shards"]:
        (target / shard["file"]).unlink()
    shards, start = [], 0
    for index, size in enumerate(sizes):
        name = shard_name(split, index, len(sizes))
        with tf.io.TFRecordWriter(str(target / name)) as writer:
            for record in records[start : start + size]:
                writer.write(record)
        data = (target / name).read_bytes()
        shards.append(
            {
                "file": name,
                "num_examples": size,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
        start += size
    metadata["splits"][split].update(shards=shards, num_shards=len(sizes))
    (target / METADATA_FILE).write_text(json.dumps(metadata, indent=2))
    return target


@pytest.fixture(scope="module")
def data_dir(prepared) -> Path:
    return Path(prepared[0])


@pytest.fixture(scope="module")
def many_shards(data_dir, tmp_path_factory) -> Path:
    """The train split in 7 shards of uneven size, one of them empty."""
    total = split_metadata(data_dir, "train")["num_examples"]
    sizes = [5, 1, 0, 9, 3, 11]
    sizes.append(total - sum(sizes))
    return reshard(data_dir, tmp_path_factory.mktemp("many") / "out", "train", sizes)


@pytest.fixture(scope="module")
def one_shard(data_dir, tmp_path_factory) -> Path:
    total = split_metadata(data_dir, "train")["num_examples"]
    return reshard(data_dir, tmp_path_factory.mktemp("one") / "out", "train", [total])


@pytest.mark.parametrize("split", ["train", "validation"])
@pytest.mark.parametrize("training", [True, False])
def test_one_pass_yields_every_record_exactly_once(data_dir, split, training):
    dataset = shard_reader.make_dataset(
        data_dir, split, BATCH, training=training, with_keys=True, seed=1
    )
    keys = read_keys(dataset)
    assert len(keys) == split_metadata(data_dir, split)["num_examples"]
    assert len(set(keys)) == len(keys)
    batches = list(dataset)
    assert len(batches) == shard_reader.steps_per_epoch(data_dir, split, BATCH)


def test_splits_hold_every_valid_source_entry(data_dir, sample_dataset):
    keys = []
    for split in ("train", "validation"):
        keys += read_keys(shard_reader.make_dataset(data_dir, split, 8, with_keys=True))
    valid = {path.stem for path in sample_dataset.image_dir.iterdir()} - set(sample_dataset.broken)
    assert sorted(keys) == sorted(valid)


def test_repeat_makes_every_epoch_one_exact_pass(data_dir):
    steps = shard_reader.steps_per_epoch(data_dir, "train", BATCH)
    total = split_metadata(data_dir, "train")["num_examples"]
    assert total % BATCH, "the fixture should leave a short last batch"
    dataset = shard_reader.make_dataset(data_dir, "train", BATCH, repeat=True, with_keys=True)
    iterator = dataset.as_numpy_iterator()
    epochs = [[key for _ in range(steps) for key in next(iterator)[2]] for _ in range(3)]
    for epoch in epochs:
        assert len(epoch) == total
        assert len(set(epoch)) == total
    assert epochs[0] != epochs[1], "each epoch should be reshuffled"


def test_drop_remainder_gives_full_static_batches(data_dir):
    dataset = shard_reader.make_dataset(data_dir, "train", BATCH, drop_remainder=True)
    image_spec, mask_spec = dataset.element_spec
    assert image_spec.shape == (BATCH, 160, 120, 3)
    assert mask_spec.shape == (BATCH, 160, 120, 1)
    steps = shard_reader.steps_per_epoch(data_dir, "train", BATCH, drop_remainder=True)
    assert sum(1 for _ in dataset) == steps
    assert steps == split_metadata(data_dir, "train")["num_examples"] // BATCH


def test_shuffle_is_per_example_not_per_batch(many_shards):
    """Batches mix records from different shards and positions; seeds reproduce the order."""
    position = {
        key_of(record): (shard, index)
        for shard, records in enumerate(shard_contents(many_shards, "train"))
        for index, record in enumerate(records)
    }

    def batches(seed):
        dataset = shard_reader.make_dataset(many_shards, "train", BATCH, seed=seed, with_keys=True)
        return [[key.decode() for key in keys] for *_, keys in dataset.as_numpy_iterator()]

    first, again, other = batches(5), batches(5), batches(6)
    assert first == again
    assert first != other
    full = [batch for batch in first if len(batch) == BATCH]

    def is_run(batch):  # consecutive records of one shard, as batch-level shuffling gives
        spots = [position[key] for key in batch]
        return all(b == (a[0], a[1] + 1) for a, b in zip(spots, spots[1:], strict=False))

    assert sum(map(is_run, full)) <= 1
    mixed = sum(len({position[key][0] for key in batch}) > 1 for batch in full)
    assert mixed >= len(full) // 2
    sequential = [key for batch in first for key in batch]
    in_file_order = sorted(sequential, key=position.__getitem__)
    displacement = np.mean([abs(a - b) for a, b in enumerate(map(in_file_order.index, sequential))])
    assert displacement > len(sequential) / 8


def test_evaluation_order_is_fixed(data_dir):
    def keys():
        return read_keys(
            shard_reader.make_dataset(data_dir, "train", BATCH, training=False, with_keys=True)
        )

    assert keys() == keys()


def pipeline_parts(data_dir: Path, num_pipelines: int, training: bool) -> list[list[str]]:
    parts = []
    for pipeline_id in range(num_pipelines):
        context = tf.distribute.InputContext(num_pipelines, pipeline_id)
        dataset = shard_reader.make_dataset(
            data_dir, "train", BATCH, training=training, input_context=context, with_keys=True
        )
        parts.append(read_keys(dataset))
        steps = shard_reader.steps_per_epoch(data_dir, "train", BATCH, context)
        assert sum(1 for _ in dataset) >= steps, "a pipeline would run out before the others"
    return parts


@pytest.mark.parametrize(
    ("layout", "num_pipelines"),
    [("many_shards", 2), ("many_shards", 3), ("data_dir", 2), ("one_shard", 3), ("data_dir", 5)],
)
@pytest.mark.parametrize("training", [True, False])
def test_input_pipelines_get_disjoint_parts_that_tile_the_split(
    request, layout, num_pipelines, training
):
    directory = request.getfixturevalue(layout)
    num_shards = split_metadata(directory, "train")["num_shards"]
    total = split_metadata(directory, "train")["num_examples"]
    parts = pipeline_parts(directory, num_pipelines, training)
    union = [key for part in parts for key in part]
    assert len(union) == total, f"{num_shards} shards, {num_pipelines} pipelines"
    assert len(set(union)) == total
    sizes = sorted(len(part) for part in parts)
    assert sizes[-1] - sizes[0] <= 1, f"unbalanced parts {sizes}"


def test_steps_per_epoch_counts_batches_per_replica_step(data_dir):
    total = split_metadata(data_dir, "train")["num_examples"]
    two_replicas = tf.distribute.InputContext(1, 0, num_replicas_in_sync=2)
    batches = -(-total // BATCH)
    assert shard_reader.steps_per_epoch(data_dir, "train", BATCH, two_replicas) == -(-batches // 2)
    full = shard_reader.steps_per_epoch(data_dir, "train", BATCH, two_replicas, drop_remainder=True)
    assert full == total // BATCH // 2
    with pytest.raises(ValueError, match="no full step"):
        shard_reader.steps_per_epoch(data_dir, "train", total + 1, drop_remainder=True)


@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("num_pipelines", [1, 2])
def test_one_pass_declares_its_batch_count(data_dir, drop_remainder, num_pipelines):
    """Keras reads the cardinality: evaluate() shows n/n and never warns of running out."""
    total = split_metadata(data_dir, "train")["num_examples"]
    for index in range(num_pipelines):
        context = tf.distribute.InputContext(num_pipelines, index, num_pipelines)
        dataset = shard_reader.make_dataset(
            data_dir, "train", BATCH, input_context=context, drop_remainder=drop_remainder
        )
        declared = int(dataset.cardinality())
        assert declared == sum(1 for _ in dataset)  # what is declared is what comes
        part = sharding.part_sizes(total, num_pipelines)[index]
        assert declared == (part // BATCH if drop_remainder else -(-part // BATCH))
    endless = shard_reader.make_dataset(data_dir, "train", BATCH, repeat=True)
    assert endless.cardinality() == tf.data.INFINITE_CARDINALITY


def test_more_pipelines_than_records_is_refused(data_dir):
    total = split_metadata(data_dir, "validation")["num_examples"]
    context = tf.distribute.InputContext(total + 1, 0)
    with pytest.raises(ValueError, match="no data"):
        shard_reader.make_dataset(data_dir, "validation", 2, input_context=context)


@pytest.mark.parametrize(
    ("sizes", "num_pipelines"),
    [([10], 3), ([3, 0, 4, 5], 2), ([1, 1, 1, 1, 1], 5), ([7, 2], 4), ([4, 4, 4, 4], 3)],
)
def test_plan_segments_tiles_the_records(sizes, num_pipelines):
    seen = collections.Counter()
    for pipeline_id in range(num_pipelines):
        for segment in sharding.plan_segments(sizes, num_pipelines, pipeline_id):
            assert 0 < segment.take and segment.skip + segment.take <= sizes[segment.shard]
            assert segment.to_end == (segment.skip + segment.take == sizes[segment.shard])
            seen.update(
                (segment.shard, index) for index in range(segment.skip, segment.skip + segment.take)
            )
    expected = {(shard, index) for shard, size in enumerate(sizes) for index in range(size)}
    assert set(seen) == expected and max(seen.values()) == 1


def flip_one_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def consume(dataset: tf.data.Dataset) -> None:
    for _ in dataset:
        pass


@pytest.mark.parametrize("where", [0.5, 0.02])
def test_corrupt_shard_fails_loudly(data_dir, tmp_path, where):
    copy = Path(shutil.copytree(data_dir, tmp_path / "copy"))
    shard = copy / split_metadata(copy, "train")["shards"][-1]["file"]
    flip_one_byte(shard, int(shard.stat().st_size * where))
    dataset = shard_reader.make_dataset(copy, "train", BATCH)
    with pytest.raises(tf.errors.DataLossError):
        consume(dataset)


def test_shard_with_fewer_or_more_records_than_metadata_fails(data_dir, tmp_path):
    for name, change in (("fewer", +1), ("more", -1)):
        copy = Path(shutil.copytree(data_dir, tmp_path / name))
        metadata = json.loads((copy / METADATA_FILE).read_text())
        train = metadata["splits"]["train"]
        train["shards"][0]["num_examples"] += change
        train["num_examples"] += change
        (copy / METADATA_FILE).write_text(json.dumps(metadata))
        # The frame headers are walked before tf.data opens a shard: the count is refused there.
        with pytest.raises(CorruptRecordError, match="metadata.json says"):
            consume(shard_reader.make_dataset(copy, "train", BATCH, training=False))


def test_directory_without_metadata_is_refused(data_dir, tmp_path):
    copy = Path(shutil.copytree(data_dir, tmp_path / "unfinished"))
    (copy / METADATA_FILE).unlink()
    with pytest.raises(shard_reader.IncompleteOutputError, match="metadata.json not found"):
        shard_reader.make_dataset(copy, "train", BATCH)
    with pytest.raises(shard_reader.IncompleteOutputError, match="segprep prepare"):
        shard_reader.steps_per_epoch(copy, "train", BATCH)


def test_unknown_split_is_refused(data_dir):
    with pytest.raises(ValueError, match="unknown split 'test'"):
        shard_reader.make_dataset(data_dir, "test", BATCH)


def test_pixels_equal_the_decoded_source_files(data_dir, sample_dataset):
    dataset = shard_reader.make_dataset(data_dir, "validation", 8, training=False, with_keys=True)
    checked = 0
    for images, masks, keys in dataset.as_numpy_iterator():
        assert images.dtype == np.float32 and masks.dtype == np.float32
        for image, mask, key in zip(images, masks, keys, strict=True):
            source = (sample_dataset.image_dir / f"{key.decode()}.jpg").read_bytes()
            np.testing.assert_array_equal(image, tf.io.decode_jpeg(source, channels=3).numpy())
            # Pillow (its own libjpeg) agrees up to chroma upsampling: catches swapped channels.
            pillow = np.asarray(Image.open(io.BytesIO(source)).convert("RGB"), np.float32)
            assert np.abs(image - pillow).mean() < 3.0
            stored = scipy.io.loadmat(sample_dataset.mask_dir / f"{key.decode()}_mask.mat")
            np.testing.assert_array_equal(mask[..., 0], stored["mask"].astype(np.float32))
            checked += 1
    assert checked == split_metadata(data_dir, "validation")["num_examples"]


def test_values_and_static_shapes(data_dir):
    dataset = shard_reader.make_dataset(data_dir, "train", BATCH, with_keys=True)
    image_spec, mask_spec, key_spec = dataset.element_spec
    assert image_spec.shape.as_list() == [None, 160, 120, 3]
    assert mask_spec.shape.as_list() == [None, 160, 120, 1]
    assert (image_spec.dtype, mask_spec.dtype, key_spec.dtype) == (
        tf.float32,
        tf.float32,
        tf.string,
    )
    images, masks, _ = next(iter(dataset))
    assert 0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 255
    assert set(np.unique(masks.numpy())) == {0.0, 1.0}


def test_uint8_output_holds_the_same_values(data_dir):
    def first_batch(dtype):
        dataset = shard_reader.make_dataset(data_dir, "train", BATCH, training=False, dtype=dtype)
        return next(dataset.as_numpy_iterator())

    (images, masks), (images8, masks8) = first_batch(tf.float32), first_batch(tf.uint8)
    assert images8.dtype == np.uint8 and masks8.dtype == np.uint8
    np.testing.assert_array_equal(images8.astype(np.float32), images)
    np.testing.assert_array_equal(masks8.astype(np.float32), masks)
    with pytest.raises(ValueError, match="dtype"):
        shard_reader.make_dataset(data_dir, "train", BATCH, dtype=tf.int32)


def test_augment_keeps_image_and_mask_aligned(data_dir):
    reference = {
        key.decode(): (image, mask)
        for images, masks, keys in shard_reader.make_dataset(
            data_dir, "train", BATCH, training=False, with_keys=True
        ).as_numpy_iterator()
        for image, mask, key in zip(images, masks, keys, strict=True)
    }
    augmented = shard_reader.make_dataset(
        data_dir, "train", BATCH, augment=random_flip, with_keys=True, seed=3
    )
    outcomes = collections.Counter()
    for images, masks, keys in augmented.as_numpy_iterator():
        for image, mask, key in zip(images, masks, keys, strict=True):
            original_image, original_mask = reference[key.decode()]
            flipped = not np.array_equal(image, original_image)
            if flipped:
                np.testing.assert_array_equal(image, original_image[:, ::-1])
                np.testing.assert_array_equal(mask, original_mask[:, ::-1])
            else:
                np.testing.assert_array_equal(mask, original_mask)
            # Foreground pixels of the mask still cover the same image pixels.
            foreground = mask[..., 0] > 0
            original_foreground = original_mask[..., 0] > 0
            if flipped:
                original_foreground = original_foreground[:, ::-1]
            np.testing.assert_array_equal(foreground, original_foreground)
            outcomes[flipped] += 1
    assert outcomes[True] and outcomes[False], outcomes
    assert sum(outcomes.values()) == len(reference)


def test_augment_may_change_the_size(data_dir):
    def shrink(image, mask):
        return tf.image.resize(image, [32, 24]), tf.image.resize(mask, [32, 24], "nearest")

    dataset = shard_reader.make_dataset(data_dir, "validation", 2, augment=shrink)
    images, masks = next(iter(dataset))
    assert images.shape[1:] == (32, 24, 3) and masks.shape[1:] == (32, 24, 1)


def test_import_does_not_pull_in_beam(data_dir):
    code = (
        "import sys, shard_reader\n"
        f"dataset = shard_reader.make_dataset({str(data_dir)!r}, 'train', 2)\n"
        "next(iter(dataset))\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam')\n"
        "assert not loaded, loaded\n"
        "assert 'tensorflow' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize(("environment", "expected"), [(None, "true"), ("false", "false")])
def test_import_turns_on_the_bfc_allocator_unless_the_environment_chose(environment, expected):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    if environment is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = environment
    code = "import os, shard_reader; print(os.environ['TF_CPU_ALLOCATOR_USE_BFC'])"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == expected


@pytest.fixture(scope="module")
def mixed_sizes(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    directory = tmp_path_factory.mktemp("mixed")
    return directory, write_mixed_sizes(directory)


def test_mixed_sizes_need_batch_size_one_or_a_resizing_augment(mixed_sizes):
    directory, masks = mixed_sizes
    with pytest.raises(ValueError, match="differ in size"):
        shard_reader.make_dataset(directory, "train", 2)
    dataset = shard_reader.make_dataset(directory, "train", 1, with_keys=True)
    assert dataset.element_spec[0].shape.as_list() == [None, None, None, 3]
    shapes = collections.Counter()
    for image, mask, key in dataset.as_numpy_iterator():
        assert image.shape[1:3] == mask.shape[1:3]
        np.testing.assert_array_equal(mask[0, ..., 0], masks[key[0].decode()])
        shapes[image.shape[1:3]] += 1
    assert shapes == {(40, 32): 2, (32, 40): 1}

    def square(image, mask):
        return tf.image.resize(image, [16, 16]), tf.image.resize(mask, [16, 16], "nearest")

    resized = shard_reader.make_dataset(directory, "train", 3, augment=square)
    images, resized_masks = next(iter(resized))
    assert images.shape == (3, 16, 16, 3)
    assert set(np.unique(resized_masks.numpy())) <= {0.0, 1.0}
