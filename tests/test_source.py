"""RecordSource: random access by index, equal to tf.data's pixels, loud on damage, no TF needed."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import shard_reader
from shard_reader.source import (
    CorruptRecordError,
    IndexMissingError,
    MetadataError,
    RecordSource,
    resize_example,
)
from tests.helpers.handmade import write_output
from tests.helpers.no_tensorflow import NO_TENSORFLOW
from tests.helpers.tf_reading import by_key
from transforms.format.naming import METADATA_FILE


@pytest.fixture(scope="module")
def png_output(tmp_path_factory):
    """PNG masks, records of two sizes, three shards (one empty): (dir, key -> arrays)."""
    directory = tmp_path_factory.mktemp("png") / "out"
    sizes = [[(40, 32), (32, 40), (40, 32)], [], [(48, 24)]]
    return directory, write_output(directory, sizes, mask_format="png")


def test_items_equal_what_tf_data_yields(indexed):
    source = RecordSource(indexed, "train")
    info = shard_reader.load_split(indexed, "train")
    assert len(source) == info.num_examples
    expected = by_key(
        shard_reader.make_dataset(
            indexed, "train", 4, training=False, with_keys=True, dtype=tf.uint8
        )
    )
    seen = set()
    for index in range(len(source)):
        item = source[index]
        image, mask = expected[item["key"]]
        assert item["image"].dtype == np.uint8 and item["image"].shape == (160, 120, 3)
        assert item["mask"].dtype == np.uint8 and item["mask"].shape == (160, 120, 1)
        np.testing.assert_array_equal(item["image"], image)  # same decoder settings as TF
        np.testing.assert_array_equal(item["mask"], mask)
        seen.add(item["key"])
    assert seen == set(expected)
    assert set(np.unique(np.concatenate([source[i]["mask"].ravel() for i in range(3)]))) == {0, 1}


def test_png_masks_and_mixed_sizes(png_output):
    directory, written = png_output
    source = RecordSource(directory, "train")
    assert len(source) == 4 and source.image_shape is None
    expected = by_key(
        shard_reader.make_dataset(
            directory, "train", 1, training=False, with_keys=True, dtype=tf.uint8
        )
    )
    for index, key in enumerate(sorted(written)):
        item = source[index]
        assert item["key"] == key
        np.testing.assert_array_equal(item["mask"][..., 0], written[key][1])
        np.testing.assert_array_equal(item["image"], expected[key][0])
    assert source.locate(3) == (2, 0)  # the empty middle shard is skipped
    small = resize_example(source[3], (20, 10))
    assert small["image"].shape == (20, 10, 3) and small["mask"].shape == (20, 10, 1)
    assert set(np.unique(small["mask"])) <= {0, 1}


def test_index_and_key_lookup(indexed):
    source = RecordSource(indexed, "validation")
    for index in range(len(source)):
        assert source.index_of(source[index]["key"]) == index
    assert source[-1]["key"] == source[len(source) - 1]["key"]
    for bad in (len(source), -len(source) - 1):
        with pytest.raises(IndexError):
            source[bad]
    with pytest.raises(KeyError, match="not in split"):
        source.index_of("no-such-key")
    with pytest.raises(ValueError, match="unknown split"):
        RecordSource(indexed, "test")


def test_a_record_index_is_an_integer_as_a_sequence_takes_it(indexed):
    """`source[1.5]` served record 1 and `source["0"]` record 0 (int() of either); an index
    out of range was named after adding the length (`record -1` for -len-1)."""
    source = RecordSource(indexed, "validation")
    assert source[np.int64(1)]["key"] == source[1]["key"]
    for bad in (1.5, "0", None):
        with pytest.raises(TypeError, match="is not an integer"):
            source[bad]
    with pytest.raises(IndexError, match=rf"^record {-len(source) - 1} outside "):
        source[-len(source) - 1]


def test_read_into_a_batch_buffer(indexed):
    source = RecordSource(indexed, "train")
    images = np.zeros((2, 160, 120, 3), np.uint8)
    masks = np.full((2, 160, 120, 1), 7, np.uint8)
    key = source.read_into(5, images[1], masks[1])
    item = source[5]
    assert key == item["key"]
    np.testing.assert_array_equal(images[1], item["image"])
    np.testing.assert_array_equal(masks[1], item["mask"])
    assert not images[0].any() and (masks[0] == 7).all()
    with pytest.raises(CorruptRecordError, match="expected"):
        source.read_into(5, np.zeros((10, 10, 3), np.uint8), np.zeros((10, 10, 1), np.uint8))


def test_pickled_and_forked_copies_read_the_same(indexed):
    source = RecordSource(indexed, "train")
    first = source[0]
    clone = pickle.loads(pickle.dumps(source))
    assert clone[0]["key"] == first["key"]
    np.testing.assert_array_equal(clone[7]["image"], source[7]["image"])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads through its own descriptors
        os.close(read)
        os.write(write, source[3]["key"].encode())
        os._exit(0)
    os.close(write)
    assert os.read(read, 100).decode() == source[3]["key"]
    os.waitpid(pid, 0)


@pytest.fixture
def damaged(indexed, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(indexed, copy)
    return copy


def _frame(directory, record: int) -> tuple[str, int, int]:
    """(shard path, offset, length) of train record `record` (in the first shard)."""
    metadata = json.loads((directory / METADATA_FILE).read_text())
    shard = metadata["splits"]["train"]["shards"][0]
    lines = (directory / shard["index"]["file"]).read_text().splitlines()
    offset, length = map(int, lines[record].split())
    return str(directory / shard["file"]), offset, length


@pytest.mark.parametrize(
    ("where", "message"),
    [(lambda o, n: o + 3, "length CRC"), (lambda o, n: o + n // 2, "data CRC")],
    ids=["length", "payload"],
)
def test_a_flipped_byte_fails_the_crc_of_that_record_only(damaged, where, message):
    path, offset, length = _frame(damaged, 2)
    with open(path, "r+b") as handle:
        handle.seek(where(offset, length))
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x40]))
    source = RecordSource(damaged, "train")
    with pytest.raises(CorruptRecordError, match=message):
        source[2]
    source[1], source[3]  # neighbours still read


def test_a_shard_of_another_size_is_refused(damaged):
    path, _, _ = _frame(damaged, 0)
    with open(path, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(CorruptRecordError, match="bytes, metadata.json says"):
        RecordSource(damaged, "train")[0]


def test_a_stale_index_is_refused(damaged):
    metadata = json.loads((damaged / METADATA_FILE).read_text())
    name = metadata["splits"]["train"]["shards"][0]["index"]["file"]
    lines = (damaged / name).read_text().splitlines()
    (damaged / name).write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(MetadataError, match="sha256"):
        RecordSource(damaged, "train")
    source = RecordSource(damaged, "validation")  # other splits are unaffected
    assert len(source) > 0
    with pytest.raises(MetadataError, match="records ending at byte"):
        RecordSource(damaged, "train", verify_index=False)


def test_no_index_says_how_to_add_it(unindexed):
    with pytest.raises(IndexMissingError, match="segprep index"):
        RecordSource(unindexed, "train")


def test_remote_paths_other_than_gs_are_refused_plainly():
    # gs:// is read through the shard cache: tests/test_gcs_reader.py.
    with pytest.raises(ValueError, match="local paths and gs:// only"):
        RecordSource("s3://bucket/out", "train")


def test_readers_work_without_tensorflow(indexed, png_output):
    code = NO_TENSORFLOW + (
        "import numpy as np\n"
        "import shard_reader\n"
        "from shard_reader.source import RecordSource\n"
        f"source = RecordSource({str(indexed)!r}, 'train')\n"
        "keys = [source[i]['key'] for i in range(len(source))]\n"
        "assert len(set(keys)) == len(source) > 0\n"
        f"png = RecordSource({str(png_output[0])!r}, 'train')\n"
        "assert png[3]['mask'].shape == (48, 24, 1)\n"
        "from shard_reader.torch import make_loader\n"
        f"images, masks = next(iter(make_loader({str(indexed)!r}, 'train', 4, num_workers=0)))\n"
        "assert tuple(images.shape) == (4, 3, 160, 120)\n"
        "from shard_reader.grain import make_loader as grain_loader\n"
        f"batch = next(iter(grain_loader({str(indexed)!r}, 'train', 4)))\n"
        "assert batch['image'].shape == (4, 160, 120, 3)\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'apache_beam')]\n"
        "assert not loaded, loaded\n"
        "try:\n"
        "    shard_reader.make_dataset\n"
        "except ImportError:\n"
        "    print('make_dataset needs TensorFlow')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "make_dataset needs TensorFlow" in done.stdout


def test_importing_shard_reader_loads_tensorflow_only_when_asked():
    code = (
        "import sys, shard_reader\n"
        "assert 'tensorflow' not in sys.modules\n"
        "from shard_reader import load_split, SplitInfo, MetadataError\n"
        "assert 'tensorflow' not in sys.modules\n"
        "make = shard_reader.make_dataset\n"
        "assert 'tensorflow' in sys.modules and make.__module__ == 'shard_reader.dataset'\n"
        "from shard_reader import steps_per_epoch, DEFAULT_SHUFFLE_BUFFER\n"
        "assert 'make_dataset' in dir(shard_reader)\n"
        "try:\n"
        "    shard_reader.no_such_name\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
