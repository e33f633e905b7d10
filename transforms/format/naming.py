"""File naming of the output directory: the only module that knows the names."""

from __future__ import annotations

import re

METADATA_FILE = "metadata.json"
REJECTS_FILE = "rejects.jsonl"
DUPLICATES_FILE = "duplicates.jsonl"  # one line per group of duplicate images
SHARD_SUFFIX = ".tfrecord"
SPLITS = ("train", "validation")

# segprep's own folder inside an output directory (hidden: a `*.tfrecord` glob never sees it).
# It holds the run lock, the manifest of every final name segprep wrote, and each run's
# staging area; nothing under a final name exists until a run's commit moves it there.
SEGPREP_DIR = ".segprep"
LOCK_FILE = f"{SEGPREP_DIR}/lock"
MANIFEST_FILE = f"{SEGPREP_DIR}/manifest.json"
RUNS_DIR = f"{SEGPREP_DIR}/runs"


def run_dir(run_id: str) -> str:
    """`.segprep/runs/<run_id>`: where one run stages everything before its commit.

    A refused or failed run's rejects stay here (`<run_dir>/rejects.jsonl`) for inspection.
    """
    return f"{RUNS_DIR}/{run_id}"


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


# The record index (transforms/format/record_index.py) lives in its own folder, so a shard glob
# such as
# `train-*-of-*.tfrecord` run at the top of the output never sees it.
INDEX_DIR = "index"
INDEX_SUFFIX = ".idx"
KEY_TABLE_SUFFIX = ".keys.jsonl"
HASHES_SUFFIX = ".hashes.jsonl"
# What tfds.builder_from_directory reads (transforms/format/tfds_info.py writes them).
TFDS_DATASET_INFO = "dataset_info.json"
TFDS_FEATURES = "features.json"
TFDS_FILES = (TFDS_DATASET_INFO, TFDS_FEATURES)
# TFDS's name for the shards, in its template language: it expands to shard_name()'s output.
TFDS_FILE_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}" + SHARD_SUFFIX


def index_name(shard_file: str) -> str:
    """`index/train-00003-of-00010.tfrecord.idx`: the record index of one shard."""
    if parse_shard_name(shard_file) is None:
        raise ValueError(f"{shard_file!r} is not a shard name")
    return f"{INDEX_DIR}/{shard_file}{INDEX_SUFFIX}"


def key_table_name(split: str) -> str:
    """`index/train.keys.jsonl`: key -> (shard, record number) for one split."""
    if not re.fullmatch(r"[a-z]+", split):
        raise ValueError(f"{split!r} is not a split name")
    return f"{INDEX_DIR}/{split}{KEY_TABLE_SUFFIX}"


def hashes_name(split: str) -> str:
    """`index/train.hashes.jsonl`: the image hashes of one split, in key-table order."""
    return key_table_name(split).removesuffix(KEY_TABLE_SUFFIX) + HASHES_SUFFIX


def is_output_name(name: str) -> bool:
    """True for every top-level name a segprep run may publish in its output directory.

    A foreign file under such a name stops a run: segprep would have to replace it.
    """
    return name in (METADATA_FILE, REJECTS_FILE, DUPLICATES_FILE, INDEX_DIR, *TFDS_FILES) or (
        parse_shard_name(name) is not None
    )
