"""Retry-safe shard files: each attempt at a shard writes under names of its own, and the
commit settles exactly one attempt per shard.

Beam's FileBasedSink shape. A runner may retry a failed bundle (Dataflow: up to four times in
batch) or run one twice; both attempts write, and nothing but the attempt that reached the
commit may be published. So every file of a shard (the shard, its offset index, key rows,
digest rows and hash rows) is staged as `<staged name>.attempt-<id>`, and the WrittenShard
that reaches the commit names its attempt. The commit keeps one WrittenShard per shard
(deterministically: the smallest attempt id, whatever order they came in) and renames only
that attempt's files to their staged names. Files of other attempts (a bundle that failed
halfway, a zombie that finished late) stay in the staging folder, which is discarded with
the run; they are never renamed, so they can never overwrite what the commit publishes.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from transforms import files

ATTEMPT_MARK = ".attempt-"
Shard = Any  # a WrittenShard (job/shard_work.py): .spec.name and .attempt


def new_attempt() -> str:
    """A fresh attempt id: unique across workers, retries and reruns."""
    return uuid.uuid4().hex


def attempt_name(staged_name: str, attempt: str) -> str:
    """Where an attempt writes a file that waits for the commit under `staged_name`; an
    empty attempt (a file staged under its name directly) keeps the name."""
    return f"{staged_name}{ATTEMPT_MARK}{attempt}" if attempt else staged_name


def one_per_shard(shards: Iterable[Shard]) -> list[Shard]:
    """One result per shard name, the same whatever the order or number of deliveries: the
    smallest attempt id; in the order each shard first came."""
    chosen: dict[str, Shard] = {}
    for shard in shards:
        held = chosen.get(shard.spec.name)
        if held is None or shard.attempt < held.attempt:
            chosen[shard.spec.name] = shard
    return list(chosen.values())


def settle(
    staged: str, shards: Sequence[Shard], names_of: Callable[[Shard], list[str]]
) -> list[Shard]:
    """Rename each chosen attempt's files to their staged names; the shards as staged
    (attempt ""). `names_of(shard)`: the staged names of a shard's files."""
    sources, targets = [], []
    for shard in shards:
        if not shard.attempt:
            continue
        for name in names_of(shard):
            sources.append(staged + attempt_name(name, shard.attempt))
            targets.append(staged + name)
    files.rename(sources, targets)
    return [dataclasses.replace(shard, attempt="") for shard in shards]
