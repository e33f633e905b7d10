"""dataset_info.json and features.json: what `tfds.builder_from_directory(OUT)` reads.

Both are TFDS's own JSON forms (its DatasetInfo and Feature protos through protobuf's JSON
mapping), written from metadata.json alone, so neither TFDS nor TensorFlow is needed to
make them. The shards keep their names: each split's `filepathTemplate` spells
`{split}-{index:05d}-of-{count:05d}.tfrecord` (or the record format's suffix) in TFDS's
template language, and `fileFormat` is the record format's TFDS name (TFDS reads
array_record shards through `as_data_source()`, not `as_dataset()`). The features
describe the records as they are: TFDS decodes `image` (JPEG) to uint8 HxWx3 and `mask`
to uint8 HxWx1 with its stored values 0/255 (not the 0/1 that shard_reader yields), or to
the stored class ids: uint8, uint16 for 16-bit PNGs (declared uint8, TFDS would scale them).
"""

from __future__ import annotations

import json
from typing import Any

from transforms.format import features
from transforms.format.dataset_info import DatasetInfo
from transforms.format.naming import (
    TFDS_DATASET_INFO,
    TFDS_FEATURES,
    shard_version,
    tfds_file_template,
    version_prefix,
)

TFDS_NAME = "segprep"
TFDS_VERSION = "1.0.0"
_FEATURES = "tensorflow_datasets.core.features"


def _image(
    channels: int, encoding: str, shape: tuple[int, int] | None, dtype: str = "uint8"
) -> dict[str, Any]:
    height, width = shape if shape else (-1, -1)
    return {
        "pythonClassName": f"{_FEATURES}.image_feature.Image",
        "image": {
            "shape": {"dimensions": [str(height), str(width), str(channels)]},
            "dtype": dtype,
            "encodingFormat": encoding,
        },
    }


def _scalar_int64() -> dict[str, Any]:
    return {
        "pythonClassName": f"{_FEATURES}.scalar.Scalar",
        "tensor": {"shape": {}, "dtype": "int64", "encoding": "none"},
    }


def features_json(info: DatasetInfo) -> dict[str, Any]:
    """TFDS FeaturesDict of transforms.format.features; static H and W when every split agrees."""
    shapes = {split.image_shape for split in info.splits.values() if split.num_examples}
    shape = shapes.pop() if len(shapes) == 1 else None
    sixteen = info.classes is not None and info.classes.png_bit_depth == 16
    mask_dtype = "uint16" if sixteen else "uint8"
    return {
        "pythonClassName": f"{_FEATURES}.features_dict.FeaturesDict",
        "featuresDict": {
            "features": {
                features.IMAGE: _image(3, "jpeg", shape),
                features.MASK: _image(1, info.mask_format, shape, mask_dtype),
                features.KEY: {"pythonClassName": f"{_FEATURES}.text_feature.Text", "text": {}},
                features.HEIGHT: _scalar_int64(),
                features.WIDTH: _scalar_int64(),
            }
        },
    }


def tfds_split_names(info: DatasetInfo, split: str) -> list[str]:
    """The TFDS splits that together hold `split`: `train`, then after appends `train_v00002`,
    ... (one per version that added shards); read the whole split with
    `split="+".join(names)`, TFDS's split arithmetic."""
    return sorted(
        {version_prefix(split, shard_version(shard.file)) for shard in info.split(split).shards}
    )


def dataset_info_json(info: DatasetInfo) -> dict[str, Any]:
    """TFDS DatasetInfo: non-empty splits with their shard lengths and our file names.

    TFDS names a split's shards from one template with one shard count, so shards an append
    added (`train_v00002-00000-of-00003.tfrecord`) are the TFDS split `train_v00002`, whose
    template spells their names (tfds_split_names)."""
    template = tfds_file_template(info.adapter.suffix)
    splits = []
    for split in info.splits.values():
        for name in tfds_split_names(info, split.name):
            shards = [
                shard
                for shard in split.shards
                if version_prefix(split.name, shard_version(shard.file)) == name
            ]
            splits.append(
                {
                    "name": name,
                    "shardLengths": [str(shard.num_examples) for shard in shards],
                    "numBytes": str(sum(shard.bytes for shard in shards)),
                    "filepathTemplate": template,
                }
            )
    return {
        "name": TFDS_NAME,
        "version": TFDS_VERSION,
        "description": "Images and segmentation masks prepared by segprep (see metadata.json).",
        "fileFormat": info.adapter.tfds_file_format,
        "splits": splits,
        # as_supervised=True yields (image, mask) pairs.
        "supervisedKeys": {"tuple": {"items": [{"featureKey": "image"}, {"featureKey": "mask"}]}},
    }


def tfds_files(info: DatasetInfo) -> dict[str, bytes]:
    """File name -> bytes of both TFDS files, formatted as TFDS writes them."""
    return {
        TFDS_DATASET_INFO: _dumps(dataset_info_json(info)),
        TFDS_FEATURES: _dumps(features_json(info)),
    }


def _dumps(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, indent=4, sort_keys=True) + "\n").encode()
