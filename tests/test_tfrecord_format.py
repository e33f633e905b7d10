"""segprep's own TFRecord framing and Example codec write exactly TensorFlow's bytes.

The writer needs no TensorFlow; these tests hold it to TensorFlow's own writer and message
classes on random records (empty and large payloads, non-ASCII keys, 64-bit sizes), and
check that corruption of any kind is caught on the way back.
"""

from __future__ import annotations

import io
import random

import pytest
import tensorflow as tf

from transforms.format import record_formats, tfrecord
from transforms.format.example import ExampleError, build_example, parse_example


def _records(count: int, seed: int) -> list[tuple[str, bytes, bytes, int, int]]:
    rng = random.Random(seed)
    records = []
    for number in range(count):
        key = rng.choice(["k", "dir/ключ", "a b", "<script>"]) + str(number)
        image = rng.randbytes(rng.choice([0, 1, 200, 70_000]))
        mask = rng.randbytes(rng.choice([0, 3, 5_000]))
        records.append((key, image, mask, rng.randint(1, 2**40), rng.randint(1, 70_000)))
    return records


def _tf_example(key: str, image: bytes, mask: bytes, height: int, width: int) -> bytes:
    def _bytes(value: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def _int(value: int) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    feature = {
        "image": _bytes(image),
        "mask": _bytes(mask),
        "key": _bytes(key.encode("utf-8")),
        "height": _int(height),
        "width": _int(width),
    }
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


def test_examples_are_tensorflows_bytes_and_parse_back():
    for record in _records(60, seed=1):
        ours = build_example(*record)
        assert ours == _tf_example(*record)
        parsed = parse_example(ours)
        assert (parsed["key"], parsed["image"], parsed["mask"]) == record[:3]
        assert (parsed["height"], parsed["width"]) == record[3:]


def test_shards_are_tensorflows_bytes(tmp_path):
    payloads = [build_example(*record) for record in _records(40, seed=2)]
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        for payload in payloads:
            writer.write(payload)
    with record_formats.get("tfrecord").writer(str(tmp_path / "ours.tfrecord")) as writer:
        for payload in payloads:
            writer.write(payload)
    ours = (tmp_path / "ours.tfrecord").read_bytes()
    assert ours == (tmp_path / "tf.tfrecord").read_bytes()
    read = list(tf.data.TFRecordDataset(str(tmp_path / "ours.tfrecord")).as_numpy_iterator())
    assert read == payloads
    adapter = record_formats.get("tfrecord")
    assert list(adapter.read_records(io.BytesIO(ours), "ours", len(ours))) == payloads


@pytest.mark.parametrize("damage", ["flip_length", "flip_payload", "truncate", "extend_length"])
def test_damaged_frames_are_refused(damage):
    payload = build_example("k", b"jpeg" * 50, b"mask", 6, 8)
    framed = bytearray(tfrecord.frame(payload) + tfrecord.frame(payload))
    if damage == "flip_length":
        framed[2] ^= 0x10
    elif damage == "flip_payload":
        framed[40] ^= 0x01
    elif damage == "truncate":
        del framed[-5:]
    else:  # a consistent header claiming a length past the end: refused before reading it
        header = (len(payload) + 10**9).to_bytes(8, "little")
        framed[:12] = header + tfrecord.masked_crc(header).to_bytes(4, "little")
    data = bytes(framed)
    with pytest.raises(tfrecord.CorruptRecordError):
        list(tfrecord.read_frames(io.BytesIO(data), "shard", len(data)))


def test_an_example_that_is_not_ours_is_refused():
    with pytest.raises(ExampleError):
        parse_example(b"\xff\xff not protobuf")
    other = tf.train.Example(
        features=tf.train.Features(
            feature={"image": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))}
        )
    ).SerializeToString()
    with pytest.raises(ExampleError, match="image"):
        parse_example(other)


def test_the_blogs_reader_reads_shards_written_without_tensorflow(prepared):
    """The origin blog's tf.data pipeline: TFRecordDataset, parse_single_example with two
    FixedLenFeature strings, decode_jpeg of image and mask, threshold at 128."""
    output_dir, _ = prepared
    files = sorted(str(path) for path in output_dir.glob("train-*.tfrecord"))
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "mask": tf.io.FixedLenFeature([], tf.string),
    }

    def parse_and_decode(serialized):
        parsed = tf.io.parse_single_example(serialized, spec)
        image = tf.cast(tf.io.decode_jpeg(parsed["image"], channels=3), tf.float32)
        mask = tf.cast(tf.io.decode_jpeg(parsed["mask"], channels=1) >= 128, tf.float32)
        return image, mask

    count = 0
    for image, mask in tf.data.TFRecordDataset(files).map(parse_and_decode):
        assert image.shape[-1] == 3 and mask.shape[:2] == image.shape[:2]
        assert set(tf.unique(tf.reshape(mask, [-1]))[0].numpy()) <= {0.0, 1.0}
        count += 1
    import json

    metadata = json.loads((output_dir / "metadata.json").read_text())
    assert count == metadata["splits"]["train"]["num_examples"] > 0


def test_copied_frames_make_the_same_file_as_written_ones(tmp_path):
    """A rewrite copies frames of a staged shard byte for byte (adjacent ones in one call),
    between records written anew: the file equals one written record by record."""
    payloads = [bytes([n]) * (n * 100 + 1) for n in range(6)]
    source, copied, written = tmp_path / "source", tmp_path / "copied", tmp_path / "written"
    with tfrecord.Writer(str(source)) as writer:
        for payload in payloads:
            writer.write(payload)
    frames, offset = [], 0
    for payload in payloads:
        frames.append((offset, len(payload) + 16))
        offset += len(payload) + 16
    order = [4, 0, 1, 2, "new", 5]  # a run of three adjacent frames, then a written record
    with open(source, "rb") as handle, tfrecord.Writer(str(copied)) as writer:
        for item in order:
            if item == "new":
                writer.write(b"fresh")
            else:
                writer.copy_frames(handle.fileno(), *frames[item])
    with tfrecord.Writer(str(written)) as writer:
        for item in order:
            writer.write(b"fresh" if item == "new" else payloads[item])
    assert copied.read_bytes() == written.read_bytes()
    got = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(str(copied))]
    assert got == [b"fresh" if item == "new" else payloads[item] for item in order]


def test_frames_are_copied_by_reading_where_the_kernel_will_not(tmp_path, monkeypatch):
    """A filesystem without copy_file_range (EXDEV, EOPNOTSUPP, ...): the same bytes, read
    and written."""
    import errno
    import os

    def refused(*args):
        raise OSError(errno.EOPNOTSUPP, "not supported")

    source, copied = tmp_path / "source", tmp_path / "copied"
    with tfrecord.Writer(str(source)) as writer:
        writer.write(b"a" * 300)
        writer.write(b"b" * 5)
    monkeypatch.setattr(os, "copy_file_range", refused)
    with open(source, "rb") as handle, tfrecord.Writer(str(copied)) as writer:
        writer.copy_frames(handle.fileno(), 316, 21)
        writer.copy_frames(handle.fileno(), 0, 316)
    assert [bytes(r.numpy()) for r in tf.data.TFRecordDataset(str(copied))] == [
        b"b" * 5,
        b"a" * 300,
    ]
