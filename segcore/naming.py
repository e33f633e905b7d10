"""File naming of the output directory: the only module that knows the names."""

from __future__ import annotations

import re

METADATA_FILE = "metadata.json"
REJECTS_FILE = "rejects.jsonl"
TEMP_DIR = "_tmp"
SHARD_SUFFIX = ".tfrecord"
SPLITS = ("train", "validation")

_SHARD_RE = re.compile(r"^(?P<split>[a-z]+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.tfrecord$")


def shard_name(split: str, index: int, num_shards: int) -> str:
    """`train-00003-of-00010.tfrecord`: sortable, self-describing, TFDS-like."""
    if not 0 <= index < num_shards:
        raise ValueError(f"shard index {index} outside 0..{num_shards - 1}")
    return f"{split}-{index:05d}-of-{num_shards:05d}{SHARD_SUFFIX}"


def parse_shard_name(name: str) -> tuple[str, int, int] | None:
    """(split, index, num_shards) for a shard file name, None for any other name."""
    match = _SHARD_RE.match(name)
    if not match:
        return None
    return match["split"], int(match["index"]), int(match["count"])


def is_output_file(name: str) -> bool:
    """True for every name a segprep run may leave in its output directory."""
    return name in (METADATA_FILE, REJECTS_FILE, TEMP_DIR) or parse_shard_name(name) is not None
