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
    digest, size = hashlib.sha256(), 0
    kept = sorted(
        (published[shard.spec.name], shard.spec.name)
        for shard in shards
        if shard.spec.name in published and shard.spec.split == split
    )
    with files.streamed(staged + name) as table:
        for _, staged_name in kept:
            path = staged + staged_hash_rows(staged_name)
            rows = files.read_bounded(path, 1 << 30)
            table.write(rows)
            digest.update(rows)
            size += len(rows)
    return FileRef(name, size, digest.hexdigest())


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
