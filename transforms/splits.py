"""Deterministic split and shard assignment, and the shard plan: pure planning code."""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

from transforms.format import record_formats
from transforms.format.naming import SPLITS, shard_name
from transforms.settings_error import SettingError

_TWO_64 = float(2**64)

# Every size-based plan has at least MIN_SHARDS shards (when there are that many entries): a
# multiple of 1, 2, 4 and 8 writer processes, so small datasets keep every core busy, yet the
# plan never depends on the machine.
MIN_SHARDS = 8


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
                raise SettingError(f"{{{name}}} must be a fraction between 0 and 1, got {value}")
        if self.train + self.validation > 1.0 + 1e-9:
            raise SettingError(
                "{train_size} + {validation_size} must be at most 1, got "
                f"{self.train} + {self.validation} = {self.train + self.validation:g}"
            )
        if self.train + self.validation == 0:
            raise SettingError("{train_size} and {validation_size} are both 0: nothing to write")

    def split_of(self, key: str) -> str | None:
        """Same key, same split, whatever else is in the dataset; None if left out."""
        position = _unit_hash("split", key) / _TWO_64
        if position < self.train:
            return "train"
        if position < self.train + self.validation:
            return "validation"
        return None


def shard_hash(key: str) -> int:
    """The key's place in shard order, independent of the split hash."""
    return _unit_hash("shard", key)


@dataclasses.dataclass(frozen=True, order=True)
class ShardSpec:
    split: str
    index: int
    num_shards: int
    record_format: str = record_formats.DEFAULT  # the name gets its suffix

    @property
    def name(self) -> str:
        suffix = record_formats.get(self.record_format).suffix
        return shard_name(self.split, self.index, self.num_shards, suffix=suffix)


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
    min_total_shards: int = MIN_SHARDS,
) -> dict[str, int]:
    """Shards per split, spread over the splits by entry count; never more than entries.

    The total is `num_shards`, or the listed input size over `shard_size_mb` but at least
    `min_total_shards`, capped at the number of entries: a shard per entry at most, so
    every shard can get one (see seed_keys). Each split with entries gets at least one
    shard; the total is exact otherwise (largest remainders, not per-split rounding).
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
    present = [split for split in SPLITS if entries[split]]
    target = max(min(num_shards, total_entries), len(present))
    ideal = {split: target * entries[split] / total_entries for split in present}
    # With two splits the minimum of one never overshoots: a split under one shard's worth
    # leaves the other's floor at most target - 1. Largest remainders then fill up to target.
    plan = {split: min(entries[split], max(1, math.floor(ideal[split]))) for split in present}
    while sum(plan.values()) < target:  # room exists: target <= total_entries
        grow = max(
            (split for split in present if plan[split] < entries[split]),
            key=lambda split: ideal[split] - plan[split],
        )
        plan[grow] += 1
    return {split: plan.get(split, 0) for split in SPLITS}


def num_shards_note(requested: int | None, planned: int) -> str | None:
    """One line for the CLI when `--num_shards` was more than the entries it could fill."""
    if requested is None or planned >= requested:
        return None
    return (
        f"note: --num_shards {requested:,} capped at {planned:,}, one shard per entry at "
        "most, so that no shard is empty"
    )


def shard_specs(
    plan: Mapping[str, int], record_format: str = record_formats.DEFAULT
) -> list[ShardSpec]:
    return [
        ShardSpec(split, i, n, record_format) for split, n in sorted(plan.items()) for i in range(n)
    ]


def seed_keys(hashed_keys: Iterable[tuple[int, str]], num_shards: int) -> list[str]:
    """The keys that open shards 0..n-1: the split's n smallest (shard_hash, key) pairs.

    A function of the split's key set alone, and computable with memory bounded by n
    (partial smallest-n per bundle, then merged), so no worker ever holds all keys.
    """
    return [key for _, key in heapq.nsmallest(num_shards, hashed_keys)]


@dataclasses.dataclass(frozen=True)
class ShardAssigner:
    """Key -> shard: seed i opens shard i, every other key goes to shard_hash % n.

    With n <= entries (plan_num_shards) each shard has its seed, so none is empty, and the
    rest spread evenly by hash. Same keys and plan, same assignment, on any machine.
    """

    plan: Mapping[str, int]
    seed_shard: Mapping[str, Mapping[str, int]]  # split -> seed key -> its shard index
    record_format: str = record_formats.DEFAULT

    @classmethod
    def from_seeds(
        cls,
        plan: Mapping[str, int],
        seeds: Mapping[str, Sequence[str]],
        record_format: str = record_formats.DEFAULT,
    ) -> ShardAssigner:
        """`seeds[split]`: at least plan[split] keys in seed order (extra ones are ignored)."""
        seed_shard = {}
        for split, n in plan.items():
            chosen = list(seeds.get(split, ()))[:n]
            if len(chosen) < n:
                raise ValueError(f"{split}: {n} shards need {n} seed keys, got {len(chosen)}")
            seed_shard[split] = {key: index for index, key in enumerate(chosen)}
        return cls(dict(plan), seed_shard, record_format)

    def assign(self, key: str, split: str) -> ShardSpec:
        n = self.plan[split]
        index = self.seed_shard[split].get(key)
        index = shard_hash(key) % n if index is None else index
        return ShardSpec(split, index, n, self.record_format)
