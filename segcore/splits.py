"""Deterministic split and shard assignment, and the shard plan: pure planning code."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping

from segcore.naming import SPLITS, shard_name

_TWO_64 = float(2**64)


def _unit_hash(salt: str, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}:{key}".encode()).digest()[:8], "big")


@dataclasses.dataclass(frozen=True)
class SplitFractions:
    """Fractions of the valid entries; what both leave out is reported, not dropped."""

    train: float
    validation: float

    def __post_init__(self) -> None:
        for name, value in (("train_size", self.train), ("validation_size", self.validation)):
            if not (0.0 <= value <= 1.0) or math.isnan(value):
                raise ValueError(f"--{name} must be a fraction between 0 and 1, got {value}")
        if self.train + self.validation > 1.0 + 1e-9:
            raise ValueError(
                f"--train_size + --validation_size must be at most 1, got "
                f"{self.train} + {self.validation} = {self.train + self.validation:g}"
            )
        if self.train + self.validation == 0:
            raise ValueError("--train_size and --validation_size are both 0: nothing to write")

    def split_of(self, key: str) -> str | None:
        """Same key, same split, whatever else is in the dataset; None if left out."""
        position = _unit_hash("split", key) / _TWO_64
        if position < self.train:
            return "train"
        if position < self.train + self.validation:
            return "validation"
        return None


def shard_index(key: str, num_shards: int) -> int:
    """Spread keys evenly over shards, independently of the split hash."""
    return _unit_hash("shard", key) % num_shards


@dataclasses.dataclass(frozen=True, order=True)
class ShardSpec:
    split: str
    index: int
    num_shards: int

    @property
    def name(self) -> str:
        return shard_name(self.split, self.index, self.num_shards)


@dataclasses.dataclass(frozen=True)
class SplitSize:
    """What the listing tells about one split before any file is read."""

    entries: int
    bytes: int


def plan_num_shards(
    sizes: Mapping[str, SplitSize],
    *,
    num_shards: int | None = None,
    shard_size_mb: float | None = None,
    min_total_shards: int = 1,
) -> dict[str, int]:
    """Shards per split, spread over the splits by entry count.

    The total is `num_shards`, or the listed input size over `shard_size_mb` but at least
    `min_total_shards` (local runs ask for a few per worker: round-robin scheduling then
    hands every worker an equal share of similar-sized shards). Each split with entries
    gets at least one shard and never more shards than entries.
    """
    if (num_shards is None) == (shard_size_mb is None):
        raise ValueError("give exactly one of num_shards and shard_size_mb")
    entries = {split: sizes.get(split, SplitSize(0, 0)).entries for split in SPLITS}
    total_entries = sum(entries.values())
    if total_entries == 0:
        return {split: 0 for split in SPLITS}
    if num_shards is None:
        total_bytes = sum(size.bytes for size in sizes.values())
        num_shards = max(math.ceil(total_bytes / (shard_size_mb * 1_000_000)), min_total_shards)
    return {
        split: min(count, max(1, round(num_shards * count / total_entries))) if count else 0
        for split, count in entries.items()
    }


def shard_specs(plan: Mapping[str, int]) -> list[ShardSpec]:
    return [ShardSpec(split, i, n) for split, n in sorted(plan.items()) for i in range(n)]


def assign_shard(key: str, split: str, plan: Mapping[str, int]) -> ShardSpec:
    n = plan[split]
    return ShardSpec(split, shard_index(key, n), n)
