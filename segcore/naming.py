"""File naming of the output directory: the only module that knows the names."""

from __future__ import annotations

import re

METADATA_FILE = "metadata.json"
REJECTS_FILE = "rejects.jsonl"
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


def is_output_name(name: str) -> bool:
    """True for every final name a segprep run may publish in its output directory.

    A foreign file under such a name stops a run: segprep would have to replace it.
    """
    return name in (METADATA_FILE, REJECTS_FILE) or parse_shard_name(name) is not None
