"""TFDS loads a segprep output as it is: tfds.builder_from_directory, splits and slicing."""

from __future__ import annotations

import json

import numpy as np
import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from google.protobuf import json_format  # noqa: E402
from tensorflow_datasets.core.proto import dataset_info_pb2  # noqa: E402

from shard_reader.source import RecordSource  # noqa: E402
from tests.helpers.handmade import write_output  # noqa: E402
from transforms.format.dataset_info import DatasetInfo  # noqa: E402
from transforms.format.naming import METADATA_FILE, TFDS_DATASET_INFO, TFDS_FEATURES  # noqa: E402
from transforms.format.tfds_info import features_json  # noqa: E402


def test_files_are_in_tfds_own_format(indexed):
    info = DatasetInfo.from_json(json.loads((indexed / METADATA_FILE).read_text()))
    # Strict parse: a misspelt or unknown field would raise.
    proto = json_format.Parse(
        (indexed / TFDS_DATASET_INFO).read_text(), dataset_info_pb2.DatasetInfo()
    )
    assert proto.file_format == "tfrecord"
    assert {split.name: list(split.shard_lengths) for split in proto.splits} == {
        name: [shard.num_examples for shard in split.shards] for name, split in info.splits.items()
    }
    # features.json is byte for byte what TFDS writes for the same features.
    features = tfds.features.FeaturesDict(
        {
            "image": tfds.features.Image(shape=(160, 120, 3), encoding_format="jpeg"),
            "mask": tfds.features.Image(shape=(160, 120, 1), encoding_format="jpeg"),
            "key": tfds.features.Text(),
            "height": tfds.features.Scalar(dtype=np.int64),
            "width": tfds.features.Scalar(dtype=np.int64),
        }
    )
    assert json.loads((indexed / TFDS_FEATURES).read_text()) == json_format.MessageToDict(
        features.to_proto()
    )
    assert features_json(info) == json_format.MessageToDict(features.to_proto())


def test_builder_from_directory_reads_every_split(indexed):
    builder = tfds.builder_from_directory(str(indexed))
    source = RecordSource(indexed, "train")
    assert builder.info.splits["train"].num_examples == len(source)
    assert builder.info.splits["train"].num_shards == 2
    examples = list(builder.as_dataset(split="train", shuffle_files=False).as_numpy_iterator())
    assert len(examples) == len(source)
    for example in examples:
        item = source[source.index_of(example["key"].decode())]
        np.testing.assert_array_equal(example["image"], item["image"])
        # TFDS decodes the stored mask (0/255); shard_reader thresholds it to 0/1.
        np.testing.assert_array_equal(example["mask"] >= 128, item["mask"].astype(bool))
        assert (example["height"], example["width"]) == (160, 120)
    validation = builder.as_dataset(split="validation", as_supervised=True)
    image, mask = next(iter(validation))
    assert image.shape == (160, 120, 3) and mask.shape == (160, 120, 1)


def test_split_slicing(indexed):
    builder = tfds.builder_from_directory(str(indexed))
    total = builder.info.splits["train"].num_examples
    tenth = list(builder.as_dataset(split="train[:10%]").as_numpy_iterator())
    rest = list(builder.as_dataset(split="train[10%:]").as_numpy_iterator())
    assert 0 < len(tenth) < total and len(tenth) + len(rest) == total
    assert not {e["key"] for e in tenth} & {e["key"] for e in rest}
    # TFDS slices in record order: the first records of the first shard.
    source = RecordSource(indexed, "train")
    assert sorted(e["key"].decode() for e in tenth) == sorted(
        source[index]["key"] for index in range(len(tenth))
    )


def test_png_masks_and_mixed_sizes(tmp_path):
    directory = tmp_path / "out"
    write_output(directory, [[(40, 32), (32, 40)], [(48, 24)]], mask_format="png")
    features = json.loads((directory / TFDS_FEATURES).read_text())["featuresDict"]["features"]
    assert features["mask"]["image"]["encodingFormat"] == "png"
    assert features["image"]["image"]["shape"]["dimensions"] == ["-1", "-1", "3"]
    builder = tfds.builder_from_directory(str(directory))
    assert list(builder.info.splits) == ["train"]  # the empty validation split is left out
    shapes = sorted(e["mask"].shape for e in builder.as_dataset(split="train").as_numpy_iterator())
    assert shapes == [(32, 40, 1), (40, 32, 1), (48, 24, 1)]
