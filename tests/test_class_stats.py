"""Class statistics equal a direct count, add up in any order, and give the documented weights."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from transforms.class_stats import (
    ClassStats,
    absent_classes,
    class_weights,
    mask_stats,
    median_frequency_weights,
    rarest_and_most_frequent,
    sum_stats,
)
from transforms.codecs.class_mask import ClassMaskSettings, class_mask_settings
from transforms.format.dataset_info import ClassesInfo

N, IGNORE = 6, 255


def _masks(count: int = 8, seed: int = 0) -> list[np.ndarray]:
    """uint8 masks of varying sizes; class 5 never occurs, 255 sometimes does."""
    rng = np.random.default_rng(seed)
    masks = []
    for index in range(count):
        height, width = rng.integers(5, 40, size=2)
        ids = rng.choice([0, 1, 2, 3, 4], size=(height, width), p=[0.6, 0.25, 0.1, 0.04, 0.01])
        if index % 2:
            ids[rng.random((height, width)) < 0.1] = IGNORE
        masks.append(ids.astype(np.uint8))
    return masks


def _direct(masks: list[np.ndarray]) -> dict:
    """The statistics by the most literal count there is: pixel by pixel."""
    pixels = [0] * N
    images = [0] * N
    image_pixels = [0] * N
    ignored = 0
    for mask in masks:
        values = mask.ravel().tolist()
        labelled = sum(1 for v in values if v != IGNORE)
        ignored += len(values) - labelled
        for c in range(N):
            count = values.count(c)
            pixels[c] += count
            images[c] += count > 0
            image_pixels[c] += labelled if count else 0
    return {
        "pixels": pixels,
        "images": images,
        "image_pixels": image_pixels,
        "ignored_pixels": ignored,
        "num_images": len(masks),
    }


def test_statistics_equal_a_direct_count():
    masks = _masks()
    total = sum_stats((mask_stats(m, N, IGNORE) for m in masks), N)
    assert total.to_json() == _direct(masks)
    assert total.pixels[5] == 0 and total.images[5] == 0


def test_sixteen_bit_masks_count_the_same():
    masks = _masks(seed=3)
    wide = [m.astype(np.uint16) for m in masks]
    for m in wide:
        m[m == IGNORE] = 65535
    total = sum_stats((mask_stats(m, N, 65535) for m in wide), N)
    assert total.to_json() == _direct(masks)


def test_stats_add_up_in_any_order_and_grouping():
    per_mask = [mask_stats(m, N, IGNORE) for m in _masks(6, seed=1)]
    expected = sum_stats(per_mask, N)
    for order in itertools.islice(itertools.permutations(per_mask), 0, 720, 97):
        assert sum(order, ClassStats.empty(N)) == expected
    shards = [sum_stats(per_mask[:2], N), sum_stats(per_mask[2:5], N), sum_stats(per_mask[5:], N)]
    assert sum_stats(reversed(shards), N) == expected
    assert sum_stats([], N) == ClassStats.empty(N)


def test_stats_survive_json_exactly():
    stats = sum_stats((mask_stats(m, N, IGNORE) for m in _masks()), N)
    assert ClassStats.from_json(json.loads(json.dumps(stats.to_json()))) == stats
    assert all(type(v) is int for v in stats.pixels + stats.images + stats.image_pixels)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"pixels": [1], "images": [1], "image_pixels": [1], "ignored_pixels": 0},
        {
            "pixels": [1],
            "images": [1],
            "image_pixels": [1, 2],
            "ignored_pixels": 0,
            "num_images": 1,
        },
        {"pixels": [-1], "images": [1], "image_pixels": [1], "ignored_pixels": 0, "num_images": 1},
        {"pixels": [1.5], "images": [1], "image_pixels": [1], "ignored_pixels": 0, "num_images": 1},
        {
            "pixels": [True],
            "images": [1],
            "image_pixels": [1],
            "ignored_pixels": 0,
            "num_images": 1,
        },
        [1, 2],
    ],
)
def test_malformed_stats_are_value_errors(data):
    with pytest.raises(ValueError):
        ClassStats.from_json(data)


def test_stats_of_different_class_counts_do_not_mix():
    with pytest.raises(ValueError):
        ClassStats.empty(3) + ClassStats.empty(4)
    with pytest.raises(ValueError):
        sum_stats([ClassStats.empty(3)], 4)


def test_unchecked_masks_are_refused():
    with pytest.raises(ValueError, match="outside"):
        mask_stats(np.array([[0, 7]], dtype=np.uint8), N, IGNORE)
    with pytest.raises(ValueError, match="unsigned"):
        mask_stats(np.array([[0, -1]]), N, IGNORE)


def test_median_frequency_weights_follow_the_formula():
    # Two 10-pixel images. Class 0 in both (12 px), class 1 only in image A (6 px of 10),
    # class 2 only in image B (2 px), class 3 nowhere; 2 ignored pixels in A are no pixels.
    image_a = np.array([[0, 0, 1, 1, 1, 1, 1, 1, 255, 255]], dtype=np.uint8)
    image_b = np.array([[0, 0, 0, 0, 0, 0, 0, 0, 2, 2]], dtype=np.uint8)
    stats = mask_stats(image_a, 4, 255) + mask_stats(image_b, 4, 255)
    assert stats.image_pixels == (18, 8, 10, 0)
    freq = np.array([10 / 18, 6 / 8, 2 / 10])
    median = 10 / 18
    np.testing.assert_allclose(median_frequency_weights(stats), [*(median / freq), 0.0])
    assert median_frequency_weights(ClassStats.empty(3)).tolist() == [0.0, 0.0, 0.0]


def test_equal_frequencies_give_weight_one():
    stats = mask_stats(np.array([[0, 1], [2, 3]], dtype=np.uint8), 4, 255)
    np.testing.assert_allclose(median_frequency_weights(stats), [1.0] * 4)


def test_classes_section_and_weights_from_it():
    settings = class_mask_settings(
        "classes", colormap=[(n, (i, i, i)) for i, n in enumerate("abcdef")]
    )
    train = sum_stats((mask_stats(m, N, IGNORE) for m in _masks()), N)
    validation = mask_stats(_masks(1, seed=9)[0], N, IGNORE)
    section = json.loads(
        json.dumps(
            ClassesInfo.of(
                settings, {"train": train, "validation": validation}, annotations={"x": 1}
            ).to_json()
        )
    )
    assert section["names"] == list("abcdef") and section["ids"] == list(range(6))
    assert section["ignore_index"] == 255 and section["png_bit_depth"] == 8
    assert section["colormap"][2] == [2, 2, 2] and section["coco"] == {"x": 1}
    assert section["splits"]["train"] == train.to_json()
    np.testing.assert_array_equal(class_weights(section), median_frequency_weights(train))
    np.testing.assert_array_equal(
        class_weights(section, "validation"), median_frequency_weights(validation)
    )
    with pytest.raises(ValueError, match="test"):
        class_weights(section, "test")
    bare = ClassesInfo.of(ClassMaskSettings("classes", N), {"train": train}).to_json()
    assert bare["names"] is None and bare["colormap"] is None
    with pytest.raises(ValueError):
        ClassesInfo.of(ClassMaskSettings("classes", 4), {"train": train})


def test_rarest_and_most_frequent():
    stats = ClassStats((5, 0, 9, 1, 9), (1, 0, 1, 1, 1), (9, 0, 9, 9, 9))
    assert rarest_and_most_frequent(stats, 2) == ([3, 0], [2, 4])
    assert absent_classes(stats) == [1]


@pytest.mark.parametrize("seed", range(3))
def test_run_counting_equals_bincount_on_label_maps_and_noise(seed):
    from beam_pipeline.commands.sample_data import scene

    rng = np.random.default_rng(seed)
    blobs = scene(rng, 21, 90, 70)[1]  # long runs: counted run by run
    noise = rng.integers(0, 21, size=(90, 70)).astype(np.uint8)  # short runs: plain bincount
    for ids in (blobs, noise, blobs.astype(np.uint16), np.full((3, 3), 7, np.uint8), blobs[:1, :1]):
        counts = np.bincount(ids.ravel(), minlength=256)
        stats = mask_stats(ids, 21, 255)
        assert list(stats.pixels) == counts[:21].tolist()
        assert stats.ignored_pixels == counts[255]
        assert stats.images == tuple(int(c > 0) for c in counts[:21])
