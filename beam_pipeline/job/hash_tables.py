"""The stored image hashes: index/<split>.hashes.jsonl, one row per record, in key-table order
(an append's records: index/<split>.vN.hashes.jsonl, beside its key table).

Each shard's rows are staged beside its key rows once it is written (only accepted keys:
its rejects are left out); the commit joins them per split in published shard order, one
shard's rows at a time, as it does the key tables. --leakage_check and `segprep verify` read
them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from transforms import files
from transforms.format.dataset_info import FileRef
from transforms.format.naming import (
    DUPLICATES_FILE,
    FIRST_VERSION,
    HASHES_SUFFIX,
    INDEX_DIR,
    hashes_name,
)


def staged_hash_rows(shard_name: str) -> str:
    return f"{INDEX_DIR}/{shard_name}{HASHES_SUFFIX}"


def stage_hash_table(
    staged: str,
    split: str,
    shards: Sequence[Any],
    published: dict[str, str],
    version: int = FIRST_VERSION,
) -> FileRef:
    """Join a split's staged shard rows in published order; its reference. An append's
    (`version` >= 2) holds the rows of the records it added, as its key table does."""
    name = hashes_name(split, version)
    rows = (
        files.read_bounded(staged + staged_hash_rows(staged_name), 1 << 30)
        for staged_name in published_order(split, shards, published)
    )
    return FileRef(name, *files.write_chunks(staged + name, rows))


def published_order(split: str, shards: Sequence[Any], published: dict[str, str]) -> list[str]:
    """The staged names of the split's published shards, in published order."""
    kept = [shard.spec.name for shard in shards if shard.spec.split == split]
    return sorted((name for name in kept if name in published), key=published.__getitem__)


def stage_duplicates(
    staged: str,
    splits: Sequence[str],
    shards: Sequence[Any],
    published: dict[str, str],
    version: int = FIRST_VERSION,
) -> tuple[FileRef, dict[str, FileRef]]:
    """The staged duplicates.jsonl's reference (an append's holds the groups of the whole
    dataset, stored images with new) and each split's joined hash table of this version."""
    data = files.read_own(staged + DUPLICATES_FILE)
    listed = FileRef(DUPLICATES_FILE, len(data), hashlib.sha256(data).hexdigest())
    hashes = {s: stage_hash_table(staged, s, shards, published, version) for s in splits}
    return listed, hashes
