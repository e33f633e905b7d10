"""The reader's view of metadata.json (checked by transforms.format.dataset_info): shard paths,
counts and, for class-id outputs, what the mask values mean and class weights from their stats.

No TensorFlow here: the no-TensorFlow readers (shard_reader.source, .torch, .grain) use it too.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from transforms import files
from transforms.format import dataset_info, record_formats
from transforms.format.dataset_info import ClassesInfo, IncompleteOutputError, MetadataError

__all__ = [
    "ClassesInfo",
    "IncompleteOutputError",
    "MetadataError",
    "SplitInfo",
    "class_weights",
    "load_classes",
    "load_metadata",
    "load_split",
]


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split as the reader needs it: shard paths with their record counts."""

    files: tuple[str, ...]
    shard_sizes: tuple[int, ...]  # records per file, same order as `files`
    num_examples: int
    mask_format: str
    image_shape: tuple[int, int] | None  # (height, width) when every record has it
    classes: ClassesInfo | None = None  # class-id masks; None: binary 0/255 masks
    record_format: str = record_formats.DEFAULT  # how to read `files` (its adapter's name)
    shard_bytes: tuple[int, ...] = ()  # each file's size, as metadata.json lists it


def load_metadata(data_dir: str | os.PathLike) -> dict[str, Any]:
    """The parsed metadata.json of `data_dir` (local path or gs://), as a plain dict."""
    return dataset_info.read_metadata_json(data_dir)


def load_split(data_dir: str | os.PathLike, split: str, version: int | None = None) -> SplitInfo:
    """The split's shards and shape, checked for consistency before any record is read.

    Exact epochs and sharding rely on the per-shard counts, so a metadata.json whose counts
    do not add up is refused rather than trusted. `version`: the split as that version of a
    dataset that grew (`prepare --append`) was published; None: the latest.
    """
    metadata = dataset_info.load(data_dir, version)
    info = metadata.split(split)
    if info.num_examples == 0:
        raise ValueError(f"split {split!r} of {data_dir} has no examples")
    return SplitInfo(
        files=tuple(files.join(data_dir, shard.file) for shard in info.shards),
        shard_sizes=tuple(shard.num_examples for shard in info.shards),
        num_examples=info.num_examples,
        mask_format=metadata.mask_format,
        image_shape=info.image_shape,
        classes=metadata.classes,
        record_format=metadata.record_format,
        shard_bytes=tuple(shard.bytes for shard in info.shards),
    )


def load_classes(data_dir: str | os.PathLike) -> ClassesInfo:
    """The `classes` section of a `--mask_type classes` output: class count, names, ignore
    index, stored bit depth, per-split statistics. MetadataError for a binary output."""
    classes = dataset_info.load(data_dir).classes
    if classes is None:
        raise MetadataError(f"{data_dir} holds binary masks: it has no classes section")
    return classes


def class_weights(data_dir: str | os.PathLike, split: str = "train") -> np.ndarray:
    """Median-frequency class weights [num_classes] (float64) from `split`'s statistics.

        freq(c)   = pixels(c) / image_pixels(c)   (labelled pixels of the images holding c)
        weight(c) = median(freq over classes present in the split) / freq(c)

    Ignored pixels count nowhere; a class absent from the split gets 0.0 (see
    transforms.class_stats.median_frequency_weights). Reads metadata.json only, no pixels.
    """
    return load_classes(data_dir).weights(split)
