"""Read metadata.json, the commit marker: no marker, no dataset."""

from __future__ import annotations

import dataclasses
import json

import tensorflow as tf

from transforms.naming import METADATA_FILE


class IncompleteOutputError(FileNotFoundError):
    """The directory has no metadata.json: the job did not finish, or it is not segprep output."""


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    files: tuple[str, ...]
    num_examples: int
    mask_format: str
    image_shape: tuple[int, int] | None  # (height, width) when every record has it


def load_metadata(data_dir: str) -> dict:
    path = f"{data_dir.rstrip('/')}/{METADATA_FILE}"
    if not tf.io.gfile.exists(path):
        raise IncompleteOutputError(
            f"{path} not found: {data_dir} is not a finished segprep output "
            "(the job failed or is still running); re-run `segprep prepare`"
        )
    with tf.io.gfile.GFile(path, "rb") as handle:
        return json.loads(handle.read())


def load_split(data_dir: str, split: str) -> SplitInfo:
    metadata = load_metadata(data_dir)
    splits = metadata["splits"]
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; this dataset has {sorted(splits)}")
    info = splits[split]
    if info["num_examples"] == 0:
        raise ValueError(f"split {split!r} of {data_dir} has no examples")
    base = data_dir.rstrip("/")
    files = tuple(f"{base}/{shard['file']}" for shard in info["shards"])
    shape = info.get("image_shape")
    return SplitInfo(
        files, info["num_examples"], metadata["mask_format"], tuple(shape) if shape else None
    )
