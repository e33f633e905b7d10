"""shard_reader's image_size: reduced-resolution decoding, static shapes, masks still 0/1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import shard_reader
from shard_reader.decoding import dct_ratio
from tests.helpers.handmade import write_mixed_sizes
from tests.helpers.runs import job_args
from tests.helpers.tf_reading import by_key, random_flip, split_metadata
from transforms.format.features import MASK_THRESHOLD
from transforms.format.naming import METADATA_FILE

STORED = (160, 120)  # the sample dataset's size


@pytest.fixture(scope="module")
def data_dir(prepared) -> Path:
    return Path(prepared[0])


@pytest.fixture(scope="module")
def png_dir(sample_dataset, tmp_path_factory) -> Path:
    """The sample dataset prepared with PNG masks (no scaled decoding for those)."""
    from beam_pipeline.launch import launcher

    output = tmp_path_factory.mktemp("png") / "out"
    launcher.run(job_args(sample_dataset, output, "--num_shards", "2", "--mask_format", "png"))
    return output


def read_all(directory, split="validation", **settings) -> dict:
    return by_key(
        shard_reader.make_dataset(directory, split, 4, training=False, with_keys=True, **settings)
    )


@pytest.mark.parametrize(
    ("stored", "target", "ratio"),
    [
        ((800, 600), (400, 300), 2),
        ((800, 600), (200, 150), 4),
        ((800, 600), (100, 75), 8),
        ((800, 600), (50, 50), 8),
        ((800, 600), (401, 300), 1),
        ((800, 600), (399, 300), 2),
        ((800, 600), (300, 200), 2),
        ((800, 600), (201, 150), 2),
        ((801, 601), (101, 76), 8),  # 801/8 rounds up to 101: still covers
        ((800, 600), (800, 600), 1),
        ((800, 600), (1600, 1200), 1),
        ((800, 600), (100, 300), 2),  # the wider side decides
    ],
)
def test_dct_ratio_is_the_largest_that_still_covers_the_target(stored, target, ratio):
    assert dct_ratio(stored, target) == ratio


@pytest.mark.parametrize("layout", ["data_dir", "png_dir"])
@pytest.mark.parametrize("size", [(80, 60), (40, 30), (20, 15), (50, 40), (33, 97), (200, 150)])
def test_image_size_gives_static_shapes_and_binary_masks(request, layout, size):
    directory = request.getfixturevalue(layout)
    dataset = shard_reader.make_dataset(directory, "train", 4, image_size=size, with_keys=True)
    image_spec, mask_spec, _ = dataset.element_spec
    assert image_spec.shape.as_list() == [None, *size, 3]
    assert mask_spec.shape.as_list() == [None, *size, 1]
    count = 0
    for images, masks, _ in dataset.as_numpy_iterator():
        assert images.shape[1:] == (*size, 3) and masks.shape[1:] == (*size, 1)
        assert images.dtype == np.float32 and masks.dtype == np.float32
        assert set(np.unique(masks)) <= {0.0, 1.0}
        assert images.min() >= 0 and images.max() <= 255
        assert np.array_equal(images, np.round(images)), "pixels should be whole levels"
        count += len(images)
    assert count == split_metadata(directory, "train")["num_examples"]


def block_mean(pixels: np.ndarray, ratio: int) -> np.ndarray:
    height, width, channels = pixels.shape
    blocks = pixels.reshape(height // ratio, ratio, width // ratio, ratio, channels)
    return blocks.astype(np.float64).mean(axis=(1, 3))


@pytest.mark.parametrize("layout", ["data_dir", "png_dir"])
@pytest.mark.parametrize("ratio", [2, 4, 8])
def test_reduced_pixels_are_the_block_averages_of_the_full_ones(request, layout, ratio):
    """Image and mask are both shrunk as area averages, so they stay aligned."""
    directory = request.getfixturevalue(layout)
    size = (STORED[0] // ratio, STORED[1] // ratio)
    full, reduced = read_all(directory), read_all(directory, image_size=size)
    assert sorted(full) == sorted(reduced)
    disagreeing = total = 0
    for key, (image, mask) in full.items():
        small_image, small_mask = reduced[key]
        expected_image = block_mean(image, ratio)
        # libjpeg's scaled IDCT approximates the block mean: a few levels off, no more.
        assert np.abs(small_image - expected_image).mean() < 2.0, key
        assert np.abs(small_image - expected_image).max() < 40, key
        coverage = block_mean(mask, ratio)
        expected_mask = (coverage >= 0.5).astype(np.float32)
        wrong = small_mask != expected_mask
        # Only pixels close to half covered may fall either way (JPEG masks: ringing).
        assert np.all(np.abs(coverage[wrong] - 0.5) <= 0.25), key
        if layout == "png_dir":
            assert not wrong.any(), key
        disagreeing += int(wrong.sum())
        total += wrong.size
    assert disagreeing <= 0.01 * total


def test_sizes_between_ratios_are_area_resized_from_the_scaled_decode(data_dir):
    size = (50, 40)  # 1/2 scale (80x60) covers it, 1/4 (40x30) does not
    full, reduced = read_all(data_dir), read_all(data_dir, image_size=size)
    for key, (image, mask) in full.items():
        small_image, small_mask = reduced[key]
        reference = tf.image.resize(image, size, method="area").numpy()
        assert np.abs(small_image - reference).mean() < 2.0, key
        coverage = tf.image.resize(mask, size, method="area").numpy()
        wrong = small_mask != (coverage >= 0.5)
        assert np.all(np.abs(coverage[wrong] - 0.5) <= 0.25), key


def test_uint8_output_and_augment_at_a_reduced_size(data_dir):
    size = (40, 30)
    floats = read_all(data_dir, image_size=size)
    bytes_ = read_all(data_dir, image_size=size, dtype=tf.uint8)
    for key, (image, mask) in floats.items():
        assert bytes_[key][0].dtype == np.uint8
        np.testing.assert_array_equal(bytes_[key][0].astype(np.float32), image)
        np.testing.assert_array_equal(bytes_[key][1].astype(np.float32), mask)
    augmented = shard_reader.make_dataset(
        data_dir, "validation", 4, image_size=size, augment=random_flip, with_keys=True, seed=1
    )
    assert augmented.element_spec[0].shape.as_list() == [None, *size, 3]
    for images, masks, keys in augmented.as_numpy_iterator():
        for image, mask, key in zip(images, masks, keys, strict=True):
            image_ref, mask_ref = floats[key.decode()]
            if np.array_equal(image, image_ref):
                np.testing.assert_array_equal(mask, mask_ref)
            else:
                np.testing.assert_array_equal(image, image_ref[:, ::-1])
                np.testing.assert_array_equal(mask, mask_ref[:, ::-1])


def test_image_size_lets_mixed_sizes_batch(tmp_path):
    directory = tmp_path / "mixed"
    write_mixed_sizes(directory)
    full = by_key(shard_reader.make_dataset(directory, "train", 1, training=False, with_keys=True))
    size = (16, 20)
    dataset = shard_reader.make_dataset(
        directory, "train", 3, training=False, with_keys=True, image_size=size
    )
    assert dataset.element_spec[0].shape.as_list() == [None, *size, 3]
    images, masks, keys = next(dataset.as_numpy_iterator())
    assert images.shape == (3, *size, 3) and masks.shape == (3, *size, 1)
    for image, mask, key in zip(images, masks, keys, strict=True):
        image_ref, mask_ref = full[key.decode()]
        coverage = tf.image.resize(mask_ref, size, method="area").numpy()
        np.testing.assert_array_equal(mask, (coverage >= 0.5).astype(np.float32))
        # 40x32 and 32x40 are both decoded at 1/2 scale, then area-resized to 16x20.
        reference = tf.image.resize(image_ref, size, method="area").numpy()
        assert np.abs(image - reference).mean() < 4, key


@pytest.mark.parametrize("size", [(0, 10), (10,), (10, 10, 3), "ab", (10.5, 4), (-2, 5), None])
def test_bad_image_sizes_are_refused(data_dir, size):
    if size is None:
        shard_reader.make_dataset(data_dir, "train", 4, image_size=None)
        return
    with pytest.raises(ValueError, match="image_size"):
        shard_reader.make_dataset(data_dir, "train", 4, image_size=size)


def test_a_record_of_another_size_than_metadata_says_fails_loudly(data_dir, tmp_path):
    """Scaled decoding would hide a small size difference: the JPEG header is checked."""
    copy = Path(shutil.copytree(data_dir, tmp_path / "copy"))
    metadata = json.loads((copy / METADATA_FILE).read_text())
    metadata["splits"]["train"]["image_shape"] = [STORED[0] - 1, STORED[1]]
    (copy / METADATA_FILE).write_text(json.dumps(metadata))
    dataset = shard_reader.make_dataset(copy, "train", 4, image_size=(40, 30))
    with pytest.raises(tf.errors.InvalidArgumentError, match="image_shape"):
        for _ in dataset:
            pass


@pytest.mark.parametrize("image_size", [None, (16, 16)])
def test_every_grey_level_is_thresholded_at_128(image_size):
    """A PNG mask holding each level 0..255 once: the decoder's cut must sit at 128."""
    from shard_reader.decoding import make_decoder
    from transforms.format.example import build_example

    levels = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    image = tf.io.encode_jpeg(tf.zeros([16, 16, 3], tf.uint8)).numpy()
    mask = tf.io.encode_png(levels).numpy()
    record = build_example("k", image, mask, 16, 16)
    decoded = make_decoder("png", (16, 16), image_size=image_size)(tf.constant(record))[1]
    assert decoded.dtype == tf.uint8
    np.testing.assert_array_equal(decoded.numpy(), levels >= MASK_THRESHOLD)
