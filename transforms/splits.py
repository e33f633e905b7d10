"""Deterministic split and shard assignment, and the shard plan: pure planning code."""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import math
import re
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

    def listed(self, key: str) -> bool:
        """Fractions list no key: a missing file is never an official entry."""
        return False

    def left_out_detail(self, key: str) -> str:
        return f"outside train_size={self.train} + validation_size={self.validation}"

    def split_of(self, key: str) -> str | None:
        """Same key, same split, whatever else is in the dataset; None if left out."""
        position = _unit_hash("split", key) / _TWO_64
        if position < self.train:
            return "train"
        if position < self.train + self.validation:
            return "validation"
        return None


@dataclasses.dataclass(frozen=True, eq=False)
class SplitLists:
    """--split_file: the official lists (VOC's ImageSets/Segmentation/*.txt), key -> split.

    Keys in no list are `not_in_split`; a listed key the folders lack is a reject.
    """

    keys: Mapping[str, str]
    sources: Mapping[str, str]  # split -> the file that lists it, for messages

    def listed(self, key: str) -> bool:
        return key in self.keys

    def split_of(self, key: str) -> str | None:
        return self.keys.get(key)

    def left_out_detail(self, key: str) -> str:
        return "in no --split_file list (" + ", ".join(sorted(self.sources)) + ")"


# --split_by_folder: the first folder of a key names its split, as public datasets name them.
FOLDER_SPLITS = {
    "train": "train",
    "training": "train",
    "val": "validation",
    "validation": "validation",
    "test": "test",
}


def folder_split(folder: str) -> str | None:
    """The split a folder names, in any case, with an optional year as COCO's: `train2017`."""
    return FOLDER_SPLITS.get(re.sub(r"(?<=[a-z])\d{4}$", "", folder.lower()))


def first_folder(key: str) -> str | None:
    return key.split("/", 1)[0] if "/" in key else None


@dataclasses.dataclass(frozen=True)
class FolderSplits:
    """--split_by_folder: `train/aachen/x` is in train, `val/x` in validation."""

    def listed(self, key: str) -> bool:
        return False

    def split_of(self, key: str) -> str | None:
        folder = first_folder(key)
        return None if folder is None else folder_split(folder)

    def left_out_detail(self, key: str) -> str:
        folder = first_folder(key)
        where = "lies in no folder" if folder is None else f"lies in folder {folder!r}"
        return f"{where}: --split_by_folder takes " + ", ".join(FOLDER_SPLITS) + " (+ a year)"


def split_names(splits: Iterable[str]) -> list[str]:
    """train and validation first (always present in metadata), then any other, sorted."""
    return [*SPLITS, *sorted(set(splits) - set(SPLITS))]


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
    names = split_names(sizes)
    entries = {split: sizes.get(split, SplitSize(0, 0)).entries for split in names}
    total_entries = sum(entries.values())
    if total_entries == 0:
        return {split: 0 for split in names}
    if num_shards is None:
        total_bytes = sum(size.bytes for size in sizes.values())
        num_shards = max(math.ceil(total_bytes / (shard_size_mb * 1_000_000)), min_total_shards)
    present = [split for split in names if entries[split]]
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
    return {split: plan.get(split, 0) for split in names}


def num_shards_note(requested: int | None, planned: int) -> str | None:
    """One line for the CLI when `--num_shards` was more than the entries it could fill."""
    if requested is None or planned >= requested:
        return None
    return (
        f"note: --num_shards {requested:,} capped at {planned:,}, one shard per entry at "
        "most, so that no shard is empty"
    )


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
