"""Readers of class-id outputs return exactly the stored ids: tf.data, RecordSource, PyTorch
and Grain, at full size, resized (nearest neighbour only), cached, and in every dtype; class
weights equal median-frequency balancing over a direct count of the source masks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import shard_reader
from shard_reader import dataset as reader_dataset
from shard_reader.source import CorruptRecordError, RecordSource, nearest_rows
from tests.helpers.class_outputs import direct_stats
from tests.helpers.class_reader_outputs import (
    BIG_CLASSES,
    BIG_IGNORE,
    SAMPLE_CLASSES,
    ClassOutput,
    png,
    rewrite_first_mask,
)
from tests.helpers.no_tensorflow import NO_TENSORFLOW
from transforms.format import dataset_info
from transforms.format.dataset_info import ClassesInfo, MetadataError
from transforms.format.naming import METADATA_FILE

torch = pytest.importorskip("torch")
grain = pytest.importorskip("grain")

from shard_reader.grain import make_loader as grain_loader  # noqa: E402
from shard_reader.torch import make_loader as torch_loader  # noqa: E402


@pytest.fixture(scope="module")
def outputs(class_outputs) -> dict[str, ClassOutput]:
    return class_outputs


@pytest.fixture(params=["8-bit", "16-bit"])
def output(request, outputs) -> ClassOutput:
    return outputs[request.param]


def mask_dtype(output: ClassOutput) -> np.dtype:
    return np.dtype(np.int32 if output.directory.name == "out16" else np.uint8)


def by_key(dataset: tf.data.Dataset) -> dict[str, np.ndarray]:
    """key -> mask [H, W] of every element (any batch size), checking no key comes twice."""
    found = {}
    for _, masks, keys in dataset:
        for mask, key in zip(masks.numpy(), keys.numpy(), strict=True):
            assert key.decode() not in found
            found[key.decode()] = mask[..., 0]
    return found


def nearest(ids: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return ids[nearest_rows(ids.shape[0], size[0])][:, nearest_rows(ids.shape[1], size[1])]


def batch_size(output: ClassOutput, split: str = "train") -> int:
    """Batches only where the split has one size (the 16-bit set mixes two)."""
    shape = json.loads((output.directory / METADATA_FILE).read_text())["splits"][split]
    return 4 if shape["image_shape"] else 1


# --- tf.data ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [tf.float32, tf.uint8])
def test_make_dataset_returns_the_stored_ids(output, dtype):
    for split, keys in output.splits.items():
        dataset = shard_reader.make_dataset(
            output.directory,
            split,
            batch_size(output, split),
            training=False,
            with_keys=True,
            dtype=dtype,
        )
        image_spec, mask_spec, _ = dataset.element_spec
        assert image_spec.dtype == dtype
        # Ids stay integers whatever the image's dtype: never silently made floats.
        assert mask_spec.dtype == tf.as_dtype(mask_dtype(output))
        masks = by_key(dataset)
        assert sorted(masks) == sorted(keys)
        for key, mask in masks.items():
            assert mask.dtype == mask_dtype(output)
            np.testing.assert_array_equal(mask, output.expected[key], err_msg=key)


def test_the_ignore_index_and_ids_above_255_come_through(outputs):
    big = by_key(shard_reader.make_dataset(outputs["16-bit"].directory, "train", 1, with_keys=True))
    values = np.unique(np.concatenate([mask.ravel() for mask in big.values()]))
    assert values.max() == BIG_IGNORE and (values[:-1] > 255).any()
    assert values[:-1].max() < BIG_CLASSES
    small = by_key(
        shard_reader.make_dataset(outputs["8-bit"].directory, "train", 4, with_keys=True)
    )
    values = np.unique(np.concatenate([mask.ravel() for mask in small.values()]))
    assert 255 in values and set(values.tolist()) <= {*range(SAMPLE_CLASSES), 255}


@pytest.mark.parametrize("size", [(37, 29), (200, 150), (61, 90)])
def test_image_size_resizes_ids_by_nearest_neighbour_only(output, size):
    dataset = shard_reader.make_dataset(
        output.directory, "train", 2, training=False, with_keys=True, image_size=size
    )
    assert dataset.element_spec[1].shape.as_list() == [None, *size, 1]
    new_values = False
    for key, mask in by_key(dataset).items():
        source = output.expected[key]
        assert set(np.unique(mask)) <= set(np.unique(source)), key
        np.testing.assert_array_equal(mask, nearest(source, size), err_msg=key)
        # The check has teeth: averaging the same ids would have made ids of its own.
        area = tf.image.resize(source[..., None].astype(np.float32), size, method="area")
        new_values |= not set(np.unique(np.round(area.numpy()))) <= set(np.unique(source))
    assert new_values


def test_nearest_rows_is_tensorflows_rule():
    for stored in (1, 2, 7, 36, 40, 44, 96, 600, 800):
        for target in (1, 3, 29, 37, 61, 150, 200, 333, 1000):
            column = np.arange(stored, dtype=np.int32)[None, :, None]
            picked = tf.image.resize(column, (1, target), method="nearest").numpy()[0, :, 0]
            np.testing.assert_array_equal(nearest_rows(stored, target), picked)


@pytest.mark.parametrize("cache", ["memory", "directory"])
def test_cache_returns_identical_ids(output, cache, tmp_path):
    setting = str(tmp_path / "cache") if cache == "directory" else "memory"
    size = (48, 40)  # the mixed 16-bit split needs one for a memory cache (and batching)
    dataset = shard_reader.make_dataset(
        output.directory, "train", 3, seed=1, with_keys=True, cache=setting, image_size=size
    )
    epochs = [by_key(dataset) for _ in range(2)]
    assert epochs[0].keys() == epochs[1].keys() == set(output.keys("train"))
    for key in output.keys("train"):
        expected = nearest(output.expected[key], size)
        for masks in epochs:
            assert masks[key].dtype == mask_dtype(output)
            np.testing.assert_array_equal(masks[key], expected, err_msg=key)
    if cache == "directory":
        assert list((tmp_path / "cache").glob("train-*/examples*.index"))


def test_full_size_memory_cache_of_uniform_ids(outputs):
    output = outputs["8-bit"]
    dataset = shard_reader.make_dataset(
        output.directory, "train", 4, seed=2, with_keys=True, cache="memory", dtype=tf.uint8
    )
    for _ in range(2):
        for key, mask in by_key(dataset).items():
            np.testing.assert_array_equal(mask, output.expected[key], err_msg=key)


def test_the_memory_estimate_counts_int32_ids(outputs, monkeypatch):
    output = outputs["16-bit"]
    monkeypatch.setattr(reader_dataset, "MEMORY_CACHE_FRACTION", 1e-12)
    with pytest.raises(reader_dataset.MemoryCacheError, match=r"x 20x20 x 7 bytes"):
        shard_reader.make_dataset(output.directory, "train", 1, cache="memory", image_size=(20, 20))
    with pytest.raises(reader_dataset.MemoryCacheError, match=r"x 20x20 x 4 bytes"):
        shard_reader.make_dataset(
            outputs["8-bit"].directory, "train", 1, cache="memory", image_size=(20, 20)
        )


def test_augment_gets_integer_ids_beside_a_float_image(outputs):
    output = outputs["8-bit"]

    def flip(image, mask):
        assert image.dtype == tf.float32 and mask.dtype == tf.uint8  # at trace time
        return tf.image.flip_left_right(image), tf.image.flip_left_right(mask)

    dataset = shard_reader.make_dataset(
        output.directory, "validation", 2, training=False, with_keys=True, augment=flip
    )
    for key, mask in by_key(dataset).items():
        np.testing.assert_array_equal(mask, output.expected[key][:, ::-1], err_msg=key)


# --- RecordSource, PyTorch, Grain ---------------------------------------------------------------


def test_record_source_returns_the_stored_ids(output):
    for split, keys in output.splits.items():
        source = RecordSource(output.directory, split)
        assert source.mask_dtype == mask_dtype(output)
        for index, key in enumerate(keys):
            item = source[index]
            assert item["key"] == key and item["mask"].shape[-1] == 1
            assert item["mask"].dtype == mask_dtype(output)
            np.testing.assert_array_equal(item["mask"][..., 0], output.expected[key], err_msg=key)


def test_record_source_batches_and_resizing_agree_with_tf_data(output):
    source = RecordSource(output.directory, "train")
    keys = output.keys("train")
    size = (37, 29)
    batch = source.read_batch(range(len(source)), image_size=size)
    assert batch["mask"].dtype == mask_dtype(output) and batch["key"] == keys
    resized = by_key(
        shard_reader.make_dataset(
            output.directory, "train", 1, training=False, with_keys=True, image_size=size
        )
    )
    for mask, key in zip(batch["mask"], keys, strict=True):
        np.testing.assert_array_equal(mask[..., 0], resized[key], err_msg=key)
    if source.image_shape is not None:  # decoded straight into the batch's own buffer
        full = source.read_batch([0, 2])
        np.testing.assert_array_equal(full["mask"][1, ..., 0], output.expected[keys[2]])


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_batches_hold_the_stored_ids(output, workers):
    size = None if batch_size(output) > 1 else (30, 30)
    loader = torch_loader(
        output.directory,
        "train",
        2,
        shuffle=False,
        num_workers=workers,
        with_keys=True,
        image_size=size,
    )
    seen = []
    for images, masks, keys in loader:
        assert (
            masks.dtype == {np.uint8: torch.uint8, np.int32: torch.int32}[mask_dtype(output).type]
        )
        assert masks.shape[1] == 1 and images.shape[1] == 3  # channels first
        for mask, key in zip(masks.numpy(), keys, strict=True):
            expected = output.expected[key] if size is None else nearest(output.expected[key], size)
            np.testing.assert_array_equal(mask[0], expected, err_msg=key)
            seen.append(key)
    assert seen == output.keys("train")[: len(seen)] and len(seen) == len(output.keys("train"))


def test_grain_batches_hold_the_stored_ids(output):
    size = None if batch_size(output) > 1 else (30, 30)
    loader = grain_loader(output.directory, "train", 2, shuffle=False, image_size=size)
    seen = []
    for batch in loader:
        assert batch["mask"].dtype == mask_dtype(output)
        for mask, key in zip(batch["mask"], batch["key"], strict=True):
            expected = output.expected[key] if size is None else nearest(output.expected[key], size)
            np.testing.assert_array_equal(mask[..., 0], expected, err_msg=key)
            seen.append(str(key))
    assert sorted(seen) == sorted(output.keys("train"))


# --- a mask of another bit depth than metadata.json says ----------------------------------------


def test_a_mask_of_another_bit_depth_is_refused_not_rescaled(outputs, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(outputs["8-bit"].directory, copy)
    rewrite_first_mask(copy, lambda ids: png(ids.astype(np.uint16)))  # same ids, 16-bit
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a 8-bit grey PNG"):
        for _ in shard_reader.make_dataset(copy, "train", 1, training=False):
            pass
    with pytest.raises(
        CorruptRecordError, match="a 1-channel 16-bit PNG, expected a 1-channel 8-bit PNG"
    ):
        RecordSource(copy, "train")[0]


# --- class weights and the classes section -----------------------------------------------------


def median_frequency(stats: dict) -> np.ndarray:
    pixels = np.array(stats["pixels"], np.float64)
    image_pixels = np.array(stats["image_pixels"], np.float64)
    weights = np.zeros(len(pixels))
    present = pixels > 0
    freq = pixels[present] / image_pixels[present]
    weights[present] = np.median(freq) / freq
    return weights


def test_class_weights_are_median_frequency_of_a_direct_count(output):
    classes = json.loads((output.directory / METADATA_FILE).read_text())["classes"]
    n, ignore = classes["num_classes"], classes["ignore_index"]
    for split, keys in output.splits.items():
        counted = direct_stats([output.expected[key] for key in keys], n, ignore)
        weights = shard_reader.class_weights(output.directory, split)
        assert weights.shape == (n,) and weights.dtype == np.float64
        np.testing.assert_allclose(weights, median_frequency(counted), rtol=1e-12)
        absent = np.array(counted["pixels"]) == 0
        assert (weights[absent] == 0).all() and (weights[~absent] > 0).all()
    assert shard_reader.class_weights(output.directory) is not None  # split defaults to train
    with pytest.raises(ValueError, match="no class statistics for split 'test'"):
        shard_reader.class_weights(output.directory, "test")


def test_binary_outputs_have_no_class_weights(prepared):
    with pytest.raises(MetadataError, match="binary masks"):
        shard_reader.class_weights(prepared[0])


def test_load_classes_describes_the_stored_values(outputs):
    big = shard_reader.load_classes(outputs["16-bit"].directory)
    assert (big.num_classes, big.ignore_index, big.png_bit_depth) == (300, 65535, 16)
    assert big.mask_dtype == np.int32
    small = shard_reader.load_classes(outputs["8-bit"].directory)
    assert (small.num_classes, small.ignore_index, small.mask_dtype) == (6, 255, np.uint8)


def test_the_classes_section_round_trips_and_inconsistencies_are_refused(outputs):
    raw = dataset_info.read_metadata_json(outputs["8-bit"].directory)
    assert dataset_info.DatasetInfo.from_json(raw).to_json() == raw
    section = raw["classes"]
    broken = {
        "png_bit_depth": {**section, "png_bit_depth": 16},
        "ignore_index": {**section, "ignore_index": 3},
        "ids": {**section, "ids": [0, 1, 2]},
        "counts": {**section, "splits": {"train": {**section["splits"]["train"], "pixels": [1]}}},
        "names": {**section, "names": ["a"]},
    }
    for field, data in broken.items():
        with pytest.raises(MetadataError, match="metadata.json classes"):
            ClassesInfo.from_json(data)
        with pytest.raises(MetadataError):
            dataset_info.DatasetInfo.from_json({**raw, "classes": data})
        assert field  # each kind is refused on its own
    with pytest.raises(MetadataError, match="only png"):
        dataset_info.DatasetInfo.from_json({**raw, "mask_format": "jpeg"})


def test_class_readers_and_weights_work_without_tensorflow(outputs):
    big = str(outputs["16-bit"].directory)
    code = NO_TENSORFLOW + (
        "import numpy as np\n"
        "import shard_reader\n"
        "from shard_reader.source import RecordSource\n"
        f"item = RecordSource({big!r}, 'train')[0]\n"
        "assert item['mask'].dtype == np.int32 and item['mask'].max() == 65535\n"
        f"assert shard_reader.class_weights({big!r}).shape == (300,)\n"
        f"batch = RecordSource({big!r}, 'train').read_batch([0, 1], image_size=(9, 7))\n"
        "assert batch['mask'].shape == (2, 9, 7, 1)\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'tensorflow']\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_tfds_reads_the_stored_ids(output):
    tfds = pytest.importorskip("tensorflow_datasets")
    builder = tfds.builder_from_directory(str(output.directory))
    stored = np.uint8 if mask_dtype(output) == np.uint8 else np.uint16  # never scaled to 8 bits
    for split, keys in output.splits.items():
        seen = []
        for example in builder.as_dataset(split=split):
            key = example["key"].numpy().decode()
            mask = example["mask"].numpy()
            assert mask.dtype == stored
            np.testing.assert_array_equal(mask[..., 0], output.expected[key], err_msg=key)
            seen.append(key)
        assert sorted(seen) == sorted(keys)


CLASS_DOC = Path(__file__).resolve().parent.parent / "docs" / "classes.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", CLASS_DOC.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("number", range(len(SNIPPETS)))
def test_the_class_doc_snippets_run(output, tmp_path, number):
    assert len(SNIPPETS) == 2 and all('"build/classes"' in snippet for snippet in SNIPPETS)
    script = tmp_path / "snippet.py"
    script.write_text(SNIPPETS[number].replace('"build/classes"', repr(str(output.directory))))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    dtype = "uint8" if mask_dtype(output) == np.uint8 else "int32"
    assert dtype in done.stdout and "nan" not in done.stdout, done.stdout


def test_record_source_masks_are_writable_arrays(output):
    item = RecordSource(output.directory, "train")[0]
    item["mask"][0, 0, 0] = 1  # the caller's own copy, as 0/1 masks are
