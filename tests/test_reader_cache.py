"""shard_reader's decoded cache: exact, reshuffled epochs read back from memory or disk."""

from __future__ import annotations

import collections
import hashlib
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import shard_reader
from shard_reader import dataset as reader_dataset
from tests.helpers.tf_reading import by_key, random_flip, read_keys, shard_contents, split_metadata
from transforms.format.naming import METADATA_FILE, shard_name

BATCH = 4


@pytest.fixture(scope="module")
def data_dir(prepared) -> Path:
    return Path(prepared[0])


@pytest.fixture(params=["memory", "directory"])
def cache(request, tmp_path) -> str:
    """Each kind of cache; a fresh directory per test, so no test reads another's files."""
    return "memory" if request.param == "memory" else str(tmp_path / "cache")


@pytest.fixture
def copy(data_dir, tmp_path) -> Path:
    """A copy of the prepared output whose shards a test may delete."""
    return Path(shutil.copytree(data_dir, tmp_path / "data"))


def delete_shards(directory: Path, split: str = "train") -> None:
    for shard in split_metadata(directory, split)["shards"]:
        (directory / shard["file"]).unlink()


def test_cached_epochs_are_exact_reshuffled_and_come_from_the_cache(copy, cache):
    total = split_metadata(copy, "train")["num_examples"]
    steps = shard_reader.steps_per_epoch(copy, "train", BATCH)
    dataset = shard_reader.make_dataset(
        copy, "train", BATCH, repeat=True, with_keys=True, cache=cache, seed=11
    )
    iterator = dataset.as_numpy_iterator()

    def epoch():
        return [key.decode() for _ in range(steps) for key in next(iterator)[-1]]

    first = epoch()
    # Later epochs must not touch the shards: with them gone, only the cache can serve.
    delete_shards(copy)
    later = [epoch() for _ in range(3)]
    for keys in [first, *later]:
        assert len(keys) == total and len(set(keys)) == total
        assert set(keys) == set(first)
    orders = [tuple(keys) for keys in [first, *later]]
    assert len(set(orders)) == len(orders), "every epoch should be reshuffled"
    # Per example, not a rotation or a block move of one fixed order.
    position = {key: index for index, key in enumerate(later[0])}
    displacement = np.mean([abs(index - position[key]) for index, key in enumerate(later[1])])
    assert displacement > total / 8


@pytest.mark.parametrize("training", [True, False])
def test_without_cache_a_large_part_goes_back_to_the_shards(copy, training):
    """The control for the test above: a part larger than the shuffle buffer is re-read."""
    total = split_metadata(copy, "train")["num_examples"]
    steps = shard_reader.steps_per_epoch(copy, "train", BATCH)
    dataset = shard_reader.make_dataset(
        copy, "train", BATCH, repeat=True, training=training, shuffle_buffer=total // 2
    )
    iterator = dataset.as_numpy_iterator()
    for _ in range(steps):
        next(iterator)
    delete_shards(copy)
    # Read-ahead may already hold the next epoch's files open (an unlinked file stays
    # readable), but it cannot run a whole epoch ahead: the epoch after must reopen them.
    with pytest.raises(tf.errors.NotFoundError):
        for _ in range(2 * steps):
            next(iterator)


def test_a_part_within_the_shuffle_buffer_is_read_from_the_shards_once(copy):
    """The buffer holds the whole part anyway, so its serialized records are kept; epochs
    stay exact and reshuffled."""
    total = split_metadata(copy, "train")["num_examples"]
    steps = shard_reader.steps_per_epoch(copy, "train", BATCH)
    dataset = shard_reader.make_dataset(
        copy, "train", BATCH, repeat=True, with_keys=True, shuffle_buffer=total
    )
    iterator = dataset.as_numpy_iterator()
    epochs = [[key.decode() for _ in range(steps) for key in next(iterator)[-1]]]
    delete_shards(copy)
    epochs += [[key.decode() for _ in range(steps) for key in next(iterator)[-1]] for _ in "ab"]
    for keys in epochs:
        assert len(keys) == total and set(keys) == set(epochs[0])
    assert len({tuple(keys) for keys in epochs}) == 3


def test_a_cache_directory_serves_a_new_dataset_object(copy, tmp_path):
    """A later process (here: a new pipeline) reads the files the first one wrote."""
    directory = tmp_path / "cache"
    first = by_key(
        shard_reader.make_dataset(copy, "train", BATCH, with_keys=True, cache=str(directory))
    )
    delete_shards(copy)
    again = by_key(shard_reader.make_dataset(copy, "train", BATCH, with_keys=True, cache=directory))
    assert sorted(again) == sorted(first)
    for key, (image, mask) in first.items():
        np.testing.assert_array_equal(again[key][0], image)
        np.testing.assert_array_equal(again[key][1], mask)


@pytest.mark.parametrize("image_size", [None, (80, 60)])
def test_cached_pixels_equal_the_uncached_ones(data_dir, cache, image_size):
    def read(cache_setting, passes):
        dataset = shard_reader.make_dataset(
            data_dir,
            "validation",
            BATCH,
            with_keys=True,
            cache=cache_setting,
            image_size=image_size,
            seed=2,
        )
        for _ in range(passes - 1):
            for _ in dataset:
                pass
        return by_key(dataset), dataset.element_spec

    (reference, spec), (cached, cached_spec) = read(None, 1), read(cache, 3)
    assert cached_spec == spec
    assert sorted(cached) == sorted(reference)
    for key, (image, mask) in reference.items():
        assert cached[key][0].dtype == np.float32
        np.testing.assert_array_equal(cached[key][0], image)
        np.testing.assert_array_equal(cached[key][1], mask)


@pytest.mark.parametrize("num_pipelines", [2, 3])
def test_each_input_pipeline_caches_only_its_own_part(copy, cache, num_pipelines, tmp_path):
    total = split_metadata(copy, "train")["num_examples"]
    pipelines = []
    for pipeline_id in range(num_pipelines):
        context = tf.distribute.InputContext(num_pipelines, pipeline_id)
        dataset = shard_reader.make_dataset(
            copy, "train", BATCH, input_context=context, with_keys=True, cache=cache, seed=4
        )
        pipelines.append((dataset, read_keys(dataset)))
    delete_shards(copy)
    parts = []
    for dataset, first in pipelines:
        second = read_keys(dataset)
        assert sorted(second) == sorted(first) and len(set(first)) == len(first)
        assert second != first, "a part should be reshuffled every epoch"
        parts.append(first)
    union = [key for part in parts for key in part]
    assert len(union) == total and len(set(union)) == total
    sizes = sorted(map(len, parts))
    assert sizes[-1] - sizes[0] <= 1
    if cache != "memory":
        assert len(list(Path(cache).iterdir())) == num_pipelines


def test_augment_is_drawn_afresh_every_epoch_over_the_cache(data_dir, cache):
    reference = by_key(
        shard_reader.make_dataset(data_dir, "train", BATCH, training=False, with_keys=True)
    )
    steps = shard_reader.steps_per_epoch(data_dir, "train", BATCH)
    dataset = shard_reader.make_dataset(
        data_dir, "train", BATCH, repeat=True, with_keys=True, cache=cache, augment=random_flip
    )
    iterator = dataset.as_numpy_iterator()
    flips = collections.defaultdict(list)
    for _ in range(3):
        for _ in range(steps):
            images, masks, keys = next(iterator)
            for image, mask, key in zip(images, masks, keys, strict=True):
                original_image, original_mask = reference[key.decode()]
                flipped = not np.array_equal(image, original_image)
                expected = (original_image[:, ::-1], original_mask[:, ::-1])
                if not flipped:
                    expected = (original_image, original_mask)
                np.testing.assert_array_equal(image, expected[0])
                np.testing.assert_array_equal(mask, expected[1])
                flips[key.decode()].append(flipped)
    assert len(flips) == len(reference)
    # A cache of augmented pixels would repeat the first epoch's draw for every key.
    changed = sum(len(set(draws)) > 1 for draws in flips.values())
    assert changed > len(flips) / 4, changed


def test_an_abandoned_first_pass_leaves_no_partial_cache(copy, cache):
    """Stopping in the middle of the filling pass must not truncate the next epochs."""
    total = split_metadata(copy, "train")["num_examples"]
    dataset = shard_reader.make_dataset(copy, "train", BATCH, with_keys=True, cache=cache)
    iterator = iter(dataset)
    next(iterator)
    next(iterator)
    del iterator
    for _ in range(2):
        keys = read_keys(dataset)
        assert len(keys) == total and len(set(keys)) == total


def test_memory_cache_too_large_for_the_host_is_refused(data_dir, monkeypatch):
    part = split_metadata(data_dir, "train")["num_examples"]
    needed = part * 160 * 120 * 4
    free, source = reader_dataset.available_memory()
    assert source == "MemAvailable in /proc/meminfo" and free > 0
    # A host where the cache would need more than the stated share of what is available.
    monkeypatch.setattr(reader_dataset, "MEMORY_CACHE_FRACTION", needed / free / 2)
    with pytest.raises(reader_dataset.MemoryCacheError) as refused:
        shard_reader.make_dataset(data_dir, "train", BATCH, cache="memory")
    message = str(refused.value)
    assert "MemAvailable in /proc/meminfo" in message
    assert f"{part} records x 160x120 x 4 bytes" in message
    assert f"{needed / 2**30:.2f} GiB" in message
    assert "cache=<local directory>" in message
    # "auto" falls back to reading without a cache, and still yields every record.
    keys = read_keys(
        shard_reader.make_dataset(data_dir, "train", BATCH, with_keys=True, cache="auto")
    )
    assert len(set(keys)) == part
    # A smaller image_size shrinks the estimate below the same bound.
    shard_reader.make_dataset(data_dir, "train", BATCH, cache="memory", image_size=(40, 30))


def test_the_estimate_counts_only_this_pipelines_part(data_dir, monkeypatch):
    total = split_metadata(data_dir, "train")["num_examples"]
    free, _ = reader_dataset.available_memory()
    whole = total * 160 * 120 * 4
    # Room for a bit more than half the split: the split is refused, half of it is not.
    monkeypatch.setattr(reader_dataset, "MEMORY_CACHE_FRACTION", whole * 0.6 / free)
    with pytest.raises(reader_dataset.MemoryCacheError):
        shard_reader.make_dataset(data_dir, "train", BATCH, cache="memory")
    context = tf.distribute.InputContext(2, 1)
    shard_reader.make_dataset(data_dir, "train", BATCH, cache="memory", input_context=context)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("gs://bucket/cache", "local directory"),
        ("https://host/x", "local directory"),
        ("", "local directory"),
        (True, "local directory"),
        (b"/tmp/bytes", "local directory"),
    ],
)
def test_remote_or_malformed_cache_locations_are_refused(data_dir, setting, message):
    with pytest.raises(ValueError, match=message):
        shard_reader.make_dataset(data_dir, "train", BATCH, cache=setting)


def rewrite_reversed(directory: Path, split: str) -> None:
    """The split's records written back in reverse order, into one shard, metadata to match."""
    records = [record for shard in shard_contents(directory, split) for record in shard][::-1]
    metadata = json.loads((directory / METADATA_FILE).read_text())
    for shard in metadata["splits"][split]["shards"]:
        (directory / shard["file"]).unlink()
    name = shard_name(split, 0, 1)
    with tf.io.TFRecordWriter(str(directory / name)) as writer:
        for record in records:
            writer.write(record)
    data = (directory / name).read_bytes()
    shard = {"file": name, "num_examples": len(records), "bytes": len(data)}
    shard["sha256"] = hashlib.sha256(data).hexdigest()
    metadata["splits"][split].update(shards=[shard], num_shards=1)
    (directory / METADATA_FILE).write_text(json.dumps(metadata))


def test_a_rewritten_dataset_gets_a_new_cache_not_stale_pixels(copy, tmp_path):
    """Same path, new metadata.json: the cache of the old content must not be served."""
    directory = tmp_path / "cache"

    def keys_in_order(cache_setting):
        return read_keys(
            shard_reader.make_dataset(
                copy, "train", BATCH, training=False, with_keys=True, cache=cache_setting
            )
        )

    before = keys_in_order(directory)
    assert keys_in_order(directory) == before
    rewrite_reversed(copy, "train")
    after = keys_in_order(directory)
    assert after == keys_in_order(None)
    assert after != before
    assert len(list(directory.iterdir())) == 2


def test_mixed_sizes_cannot_be_sized_for_memory(tmp_path):
    from tests.helpers.handmade import write_mixed_sizes

    directory = tmp_path / "mixed"
    write_mixed_sizes(directory)
    with pytest.raises(reader_dataset.MemoryCacheError, match="image_size"):
        shard_reader.make_dataset(directory, "train", 1, cache="memory")
    dataset = shard_reader.make_dataset(
        directory, "train", 2, cache="memory", image_size=(16, 16), with_keys=True
    )
    assert len(read_keys(dataset)) == 3


FILLER = """
import sys
import shard_reader
dataset = shard_reader.make_dataset(sys.argv[1], "train", 2, training=False, cache=sys.argv[2])
iterator = iter(dataset)
next(iterator)
print("filling", flush=True)
sys.stdin.read()  # alive, holding the cache, until the test closes this pipe or kills it
"""


def test_a_killed_filler_does_not_block_the_cache_but_a_live_one_does(data_dir, tmp_path):
    directory = tmp_path / "cache"
    child = subprocess.Popen(
        [sys.executable, "-c", FILLER, str(data_dir), str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "filling"
        (cache_dir,) = directory.iterdir()
        assert any(name.name.endswith(".lockfile") for name in cache_dir.iterdir())
        with pytest.raises(reader_dataset.CacheBusyError, match="another running process"):
            shard_reader.make_dataset(data_dir, "train", BATCH, cache=directory)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    # The dead filler left tf.data's lock file behind; this process takes the cache over.
    assert any(name.name.endswith(".lockfile") for name in cache_dir.iterdir())

    def batches(cache_setting):
        return list(
            shard_reader.make_dataset(
                data_dir, "train", 2, training=False, cache=cache_setting
            ).as_numpy_iterator()
        )

    cached = batches(directory)
    assert (cache_dir / "examples.index").exists()
    assert not any(name.name.endswith(".lockfile") for name in cache_dir.iterdir())
    reference = batches(None)
    assert len(cached) == len(reference)
    for (image, mask), (image_ref, mask_ref) in zip(cached, reference, strict=True):
        np.testing.assert_array_equal(image, image_ref)
        np.testing.assert_array_equal(mask, mask_ref)
    assert len(list(directory.iterdir())) == 1, "the same settings share one cache"
