"""Reading an output back through tf.data and its metadata, for the reader tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from transforms.format.naming import METADATA_FILE


def read_keys(dataset: tf.data.Dataset) -> list[str]:
    """Keys in the order the dataset yields them (dataset built with with_keys=True)."""
    return [key.decode() for *_, keys in dataset.as_numpy_iterator() for key in keys]


def split_metadata(data_dir: Path, split: str) -> dict:
    return json.loads((data_dir / METADATA_FILE).read_text())["splits"][split]


def shard_contents(data_dir: Path, split: str) -> list[list[bytes]]:
    """Serialized records of each shard of `split`, in file order."""
    return [
        [record.numpy() for record in tf.data.TFRecordDataset(str(data_dir / shard["file"]))]
        for shard in split_metadata(data_dir, split)["shards"]
    ]


def by_key(dataset: tf.data.Dataset) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {
        key.decode(): (image, mask)
        for images, masks, keys in dataset.as_numpy_iterator()
        for image, mask, key in zip(images, masks, keys, strict=True)
    }


def random_flip(image: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One random draw flips both, the only correct way to augment a pair."""
    flip = tf.random.uniform([]) < 0.5
    return (
        tf.where(flip, tf.reverse(image, [1]), image),
        tf.where(flip, tf.reverse(mask, [1]), mask),
    )
