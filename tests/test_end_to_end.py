"""The whole job on sample data: nothing lost, right reasons, repeatable, readable."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
import scipy.io
import tensorflow as tf
from PIL import Image

from beam_pipeline.launch import launcher
from tests.helpers.runs import expected_rejects, job_args
from transforms.format import features
from transforms.format.naming import METADATA_FILE, REJECTS_FILE


def _rejects(output_dir) -> dict[str, dict]:
    lines = (output_dir / REJECTS_FILE).read_text().splitlines()
    return {json.loads(line)["key"]: json.loads(line) for line in lines}


def _records(output_dir, metadata) -> list[tf.train.Example]:
    examples = []
    for split in metadata["splits"].values():
        for shard in split["shards"]:
            for raw in tf.data.TFRecordDataset(str(output_dir / shard["file"])):
                examples.append(tf.train.Example.FromString(raw.numpy()))
    return examples


def _keys(examples) -> list[str]:
    return [e.features.feature[features.KEY].bytes_list.value[0].decode() for e in examples]


def test_every_key_accounted_for_exactly_once(sample_dataset, prepared):
    output_dir, result = prepared
    metadata = result.metadata
    rejects = _rejects(output_dir)
    accepted = _keys(_records(output_dir, metadata))
    discovered = {p.stem for p in sample_dataset.image_dir.iterdir()}
    discovered |= {p.name.removesuffix("_mask.mat") for p in sample_dataset.mask_dir.iterdir()}
    assert len(accepted) == len(set(accepted)), "a key was written twice"
    assert not set(accepted) & set(rejects), "a key is both accepted and rejected"
    assert set(accepted) | set(rejects) == discovered
    assert metadata["num_discovered"] == len(discovered) == 60
    assert sum(s["num_examples"] for s in metadata["splits"].values()) == len(accepted)


def test_broken_entries_rejected_with_the_right_reasons(sample_dataset, prepared):
    output_dir, result = prepared
    rejects = _rejects(output_dir)
    expected = {key: reason.value for key, reason in expected_rejects(sample_dataset).items()}
    assert len(expected) == 6  # one of each breakage kind
    assert {key: line["reason"] for key, line in rejects.items()} == expected
    assert all(line["detail"] for line in rejects.values())
    by_reason = result.metadata["num_rejected"]["by_reason"]
    assert by_reason == {reason: 1 for reason in expected.values()}


def test_metrics_count_each_outcome(prepared):
    _, result = prepared
    metadata = result.metadata
    assert result.counters["discovered_keys"] == 60
    for split, info in metadata["splits"].items():
        assert result.counters.get(f"accepted_{split}", 0) == info["num_examples"]
    for reason, count in metadata["num_rejected"]["by_reason"].items():
        assert result.counters[f"rejected_{reason}"] == count


def test_metadata_describes_the_shards(prepared):
    output_dir, result = prepared
    on_disk = json.loads((output_dir / METADATA_FILE).read_text())
    assert on_disk == result.metadata
    files = sorted(p.name for p in output_dir.glob("*.tfrecord"))
    listed = [s["file"] for split in on_disk["splits"].values() for s in split["shards"]]
    assert sorted(listed) == files
    # --num_shards 3 exactly, spread by entries (each split with entries gets one).
    assert [split["num_shards"] for split in on_disk["splits"].values()] == [2, 1]
    for split in on_disk["splits"].values():
        assert split["image_shape"] == [160, 120]
        for shard in split["shards"]:
            data = (output_dir / shard["file"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
            assert len(data) == shard["bytes"]
    assert on_disk["mask_format"] == "jpeg"
    assert set(on_disk["features"]) == {"image", "mask", "key", "height", "width"}
    assert on_disk["versions"]["apache-beam"].startswith("2.77")
    assert not (output_dir / "_tmp").exists()


def test_records_round_trip_to_the_source_pixels(sample_dataset, prepared):
    output_dir, result = prepared
    for example in _records(output_dir, result.metadata):
        feature = example.features.feature
        key = feature[features.KEY].bytes_list.value[0].decode()
        source_image = (sample_dataset.image_dir / f"{key}.jpg").read_bytes()
        stored_image = feature[features.IMAGE].bytes_list.value[0]
        assert stored_image == source_image  # valid RGB JPEGs pass through untouched
        mat = scipy.io.loadmat(
            io.BytesIO((sample_dataset.mask_dir / f"{key}_mask.mat").read_bytes())
        )
        stored_mask = np.asarray(Image.open(io.BytesIO(feature[features.MASK].bytes_list.value[0])))
        np.testing.assert_array_equal(stored_mask >= 128, mat["mask"] == 1)
        assert feature[features.HEIGHT].int64_list.value[0] == 160
        assert feature[features.WIDTH].int64_list.value[0] == 120


def test_reader_round_trip(sample_dataset, prepared):
    import shard_reader

    output_dir, _ = prepared
    dataset = shard_reader.make_dataset(
        str(output_dir), "validation", 4, training=False, with_keys=True
    )
    seen = 0
    for images, masks, keys in dataset:
        for image, mask, key in zip(images.numpy(), masks.numpy(), keys.numpy(), strict=True):
            source = (sample_dataset.image_dir / f"{key.decode()}.jpg").read_bytes()
            np.testing.assert_array_equal(image, tf.io.decode_jpeg(source, channels=3).numpy())
            mat = scipy.io.loadmat(
                io.BytesIO((sample_dataset.mask_dir / f"{key.decode()}_mask.mat").read_bytes())
            )
            np.testing.assert_array_equal(mask[..., 0], mat["mask"].astype(np.float32))
            seen += 1
    assert (
        seen
        == json.loads((output_dir / METADATA_FILE).read_text())["splits"]["validation"][
            "num_examples"
        ]
    )


def test_rerun_gives_byte_identical_shards(sample_dataset, prepared, tmp_path):
    output_dir, first = prepared
    second = launcher.run(job_args(sample_dataset, tmp_path / "again", "--num_shards", "3"))
    assert second.metadata["splits"] == first.metadata["splits"]
    for shard in output_dir.glob("*.tfrecord"):
        assert (tmp_path / "again" / shard.name).read_bytes() == shard.read_bytes()
    assert (tmp_path / "again" / REJECTS_FILE).read_bytes() != b""
    rejects_again = (tmp_path / "again" / REJECTS_FILE).read_text()
    assert json.loads(rejects_again.splitlines()[0])["key"] in _rejects(output_dir)


@pytest.mark.parametrize("mask_format", ["png"])
def test_png_masks(sample_dataset, tmp_path, mask_format):
    result = launcher.run(
        job_args(
            sample_dataset,
            tmp_path / "png",
            "--mask_format",
            mask_format,
            "--train_size",
            "1",
            "--validation_size",
            "0",
        )
    )
    assert result.metadata["mask_format"] == "png"
    assert result.metadata["splits"]["validation"]["num_examples"] == 0
    examples = _records(tmp_path / "png", result.metadata)
    assert len(examples) == 54
    mask = examples[0].features.feature[features.MASK].bytes_list.value[0]
    assert Image.open(io.BytesIO(mask)).format == "PNG"
