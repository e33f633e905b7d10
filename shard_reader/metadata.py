"""Read metadata.json, the commit marker: no marker, no dataset."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import tensorflow as tf

from segcore.features import MASK_FORMATS
from segcore.naming import METADATA_FILE, parse_shard_name


class IncompleteOutputError(FileNotFoundError):
    """The directory has no metadata.json: the job did not finish, or it is not segprep output."""


class MetadataError(ValueError):
    """metadata.json exists but does not describe a readable split."""


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split as the reader needs it: shard paths with their record counts."""

    files: tuple[str, ...]
    shard_sizes: tuple[int, ...]  # records per file, same order as `files`
    num_examples: int
    mask_format: str
    image_shape: tuple[int, int] | None  # (height, width) when every record has it


def load_metadata(data_dir: str) -> dict[str, Any]:
    """The parsed metadata.json of `data_dir` (local path or gs://)."""
    path = f"{str(data_dir).rstrip('/')}/{METADATA_FILE}"
    if not tf.io.gfile.exists(path):
        raise IncompleteOutputError(
            f"{path} not found: {data_dir} is not a finished segprep output "
            "(the job failed or is still running); re-run `segprep prepare`"
        )
    with tf.io.gfile.GFile(path, "rb") as handle:
        try:
            return json.loads(handle.read())
        except json.JSONDecodeError as error:
            raise MetadataError(f"{path} is not valid JSON: {error}") from error


def load_split(data_dir: str, split: str) -> SplitInfo:
    """The split's shards and shape, checked for consistency before any record is read.

    Exact epochs and sharding rely on the per-shard counts, so a metadata.json whose counts
    do not add up is refused rather than trusted.
    """
    metadata = load_metadata(data_dir)
    try:
        splits = metadata["splits"]
        mask_format = metadata["mask_format"]
    except (KeyError, TypeError) as error:
        raise MetadataError(f"metadata.json of {data_dir} lacks {error}") from error
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; this dataset has {sorted(splits)}")
    if mask_format not in MASK_FORMATS:
        raise MetadataError(f"mask_format {mask_format!r} is not one of {MASK_FORMATS}")
    info = splits[split]
    if info["num_examples"] == 0:
        raise ValueError(f"split {split!r} of {data_dir} has no examples")
    base = str(data_dir).rstrip("/")
    shards = info["shards"]
    for shard in shards:
        parsed = parse_shard_name(shard["file"])
        if parsed is None or parsed[0] != split:
            raise MetadataError(f"{shard['file']!r} is not a shard name of split {split!r}")
    sizes = tuple(int(shard["num_examples"]) for shard in shards)
    if sum(sizes) != info["num_examples"] or min(sizes, default=0) < 0:
        raise MetadataError(
            f"split {split!r}: shard counts {sizes} do not add up to {info['num_examples']}"
        )
    shape = info.get("image_shape")
    return SplitInfo(
        files=tuple(f"{base}/{shard['file']}" for shard in shards),
        shard_sizes=sizes,
        num_examples=int(info["num_examples"]),
        mask_format=mask_format,
        image_shape=(int(shape[0]), int(shape[1])) if shape else None,
    )
