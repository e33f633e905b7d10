"""metadata.json as a pure function of what the commit has in hand: the settled shards, the
tables it staged, the run's accounting, the spec and the version the run extends. No I/O: the
commit (job/commit.py) stages and publishes what this describes."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from beam_pipeline.job import versions
from beam_pipeline.job.settings import CommitSettings
from beam_pipeline.job.shard_work import WrittenShard
from transforms.class_stats import ClassStats, sum_stats
from transforms.codecs.class_mask import ClassMaskSettings
from transforms.format import features, record_formats
from transforms.format.dataset_info import (
    FORMAT_VERSION,
    ClassesInfo,
    DatasetInfo,
    FileRef,
    RejectCounts,
    RunInfo,
    ShardInfo,
    SplitInfo,
)
from transforms.format.naming import FIRST_VERSION, index_name, parse_shard_name
from transforms.rejects import Reason, Reject
from transforms.splits import split_names


@dataclasses.dataclass(frozen=True)
class StagedTables:
    """The side tables the commit staged beside the shards, per split."""

    key_tables: Mapping[str, FileRef]
    digest_tables: Mapping[str, FileRef]
    hash_tables: Mapping[str, FileRef] = dataclasses.field(default_factory=dict)  # a search's
    duplicates_file: FileRef | None = None  # duplicates.jsonl, when the run searched


@dataclasses.dataclass(frozen=True)
class Accounting:
    """What the run accounted for besides its shards, and when it finished."""

    discovered: int
    rejects: Sequence[Reject]  # this run's, unlabeled images set apart
    unlabeled: int
    skipped: int  # an append's keys already present with the same bytes
    num_rejected: RejectCounts  # of the rejects.jsonl published (an append's: merged)
    duplicates: Mapping[str, Any] | None  # the duplicate search's report; None: off
    packages: Mapping[str, str]  # package versions
    finished_at: float  # epoch seconds


def describe(
    shards: Sequence[WrittenShard],
    published: Mapping[str, str],
    tables: StagedTables,
    run: Accounting,
    settings: CommitSettings,
    previous: DatasetInfo | None = None,
) -> DatasetInfo:
    """metadata.json of the run, without its TFDS files (which are written from it).

    `shards` are the settled ones, `published` maps their staged names to final ones, and
    `previous` is the version an append extends: its sums are carried on, never re-read."""
    version = settings.append.version if settings.append else FIRST_VERSION
    added = _added_splits(shards, published, tables, settings.spec.record_format, version)
    splits = added if previous is None else versions.merged_splits(previous, added)
    num_discovered = run.discovered
    if previous is not None:  # each key of the latest version once, in a shard or rejected
        num_discovered = (
            sum(s.num_examples for s in splits.values())
            + run.num_rejected.total
            - kept_keys(run.num_rejected)
            + run.unlabeled
        )
    info = DatasetInfo(
        format_version=FORMAT_VERSION,
        mask_format=settings.spec.mask_format,
        record_format=record_formats.get(settings.spec.record_format).name,
        splits=splits,
        classes=_classes(shards, settings, previous),
        num_discovered=num_discovered,
        num_rejected=run.num_rejected,
        num_unlabeled=run.unlabeled or None,
        exif_orientation_ignored=_exif_ignored(shards, previous),
        run=_run_info(shards, settings, run.finished_at),
        parameters=_parameters(settings, previous),
        versions=dict(run.packages),
        features=_features(settings.classes),
        record_spec=settings.spec.stored(),
        duplicates=_duplicates(run.duplicates, tables.duplicates_file, previous, run.num_rejected),
    )
    record = versions.version_info(
        info,
        version=version,
        run_id=settings.run_id,
        created_at=_iso(run.finished_at),
        added_files=_added_files(published, tables),
        key_tables=tables.key_tables,
        digest_tables=tables.digest_tables,
        rejects=run.rejects,
        skipped_identical=run.skipped,
    )
    earlier = previous.dataset_versions if previous else ()
    return dataclasses.replace(info, dataset_versions=(*earlier, record))


def kept_keys(rejected: RejectCounts) -> int:
    """The rejects of keys a shard also holds: an append's `key_exists` lines, whose key an
    earlier version stores and keeps. num_discovered counts such a key once, as stored."""
    return rejected.by_reason.get(Reason.KEY_EXISTS.value, 0)


def _added_splits(
    shards: Sequence[WrittenShard],
    published: Mapping[str, str],
    tables: StagedTables,
    record_format: str,
    version: int = FIRST_VERSION,
) -> dict[str, SplitInfo]:
    """This run's splits (train and validation always, and every split the staged tables
    cover: an append's earlier splits, even where it adds nothing): its published shards by
    name; an append's hash tables as its `appended_hashes` (the first version's stay
    `hashes`)."""
    offsets = record_formats.get(record_format).offset_index
    kept = [shard for shard in shards if shard.spec.name in published]
    splits = {}
    for name in split_names([*(shard.spec.split for shard in kept), *tables.key_tables]):
        entries = sorted(
            (published[shard.spec.name], shard) for shard in kept if shard.spec.split == name
        )
        shapes = sorted({shape for _, shard in entries for shape in shard.image_shapes})
        hashes = tables.hash_tables.get(name)
        first = version == FIRST_VERSION
        splits[name] = SplitInfo(
            name=name,
            num_examples=sum(shard.num_examples for _, shard in entries),
            # (height, width) when every record has that size: readers may use static shapes
            image_shape=shapes[0] if len(shapes) == 1 else None,
            shards=tuple(_shard_info(file, shard, offsets) for file, shard in entries),
            key_table=tables.key_tables.get(name),
            extra={"hashes": hashes.to_json()} if hashes and first else {},
            offset_index=offsets,
            appended_hashes=(hashes,) if hashes and not first else (),
        )
    return splits


def _shard_info(file: str, shard: WrittenShard, offsets: bool) -> ShardInfo:
    index = FileRef(index_name(file), shard.index_bytes, shard.index_sha256) if offsets else None
    return ShardInfo(file, shard.num_examples, shard.bytes, shard.sha256, index=index)


def _added_files(published: Mapping[str, str], tables: StagedTables) -> dict[str, list[str]]:
    added: dict[str, list[str]] = {split: [] for split in tables.key_tables}
    for name in published.values():
        added[parse_shard_name(name)[0]].append(name)
    return added


def _classes(
    shards: Sequence[WrittenShard], settings: CommitSettings, previous: DatasetInfo | None
) -> ClassesInfo | None:
    """The shards' class statistics summed per split (an append adds them to the earlier
    version's sums), and what the stored mask holds."""
    classes = settings.classes
    if not classes.is_classes:
        return None
    earlier = previous.classes.stats if previous and previous.classes else {}
    stats = {
        split: sum_stats(
            (
                *(ClassStats.from_json(s.class_stats) for s in shards if s.spec.split == split),
                *((earlier[split],) if split in earlier else ()),
            ),
            classes.num_classes,
        )
        for split in split_names(shard.spec.split for shard in shards)
    }
    return ClassesInfo.of(classes, stats, annotations=settings.annotations)


def _features(classes: ClassMaskSettings) -> Mapping[str, Any]:
    if not classes.is_classes:
        return features.SCHEMA
    description = (
        f"single-channel {classes.bit_depth}-bit PNG of class ids "
        f"0..{classes.num_classes - 1}, {classes.ignore_index} = ignore"
    )
    mask = {**features.SCHEMA[features.MASK], "description": description}
    return {**features.SCHEMA, features.MASK: mask}


def _exif_ignored(shards: Sequence[WrittenShard], previous: DatasetInfo | None) -> int:
    earlier = previous.exif_orientation_ignored if previous else None
    return sum(shard.exif_ignored_images for shard in shards) + (earlier or 0)


def _parameters(settings: CommitSettings, previous: DatasetInfo | None) -> Mapping[str, Any]:
    """The flags of the run that made the dataset; an append keeps the first run's, naming
    the folder written now (the output may have been copied or moved since)."""
    if previous is None:
        return dict(settings.parameters)
    first = settings.parameters if previous.parameters is None else previous.parameters
    return {**first, "output_dir": settings.output_dir}


def _duplicates(
    report: Mapping[str, Any] | None,
    listed: FileRef | None,
    previous: DatasetInfo | None,
    rejected: RejectCounts,
) -> Mapping[str, Any] | None:
    """The search's report and duplicates.jsonl. An append's search took in the images the
    output stores, so its duplicates.jsonl and counts are the whole dataset's groups; what
    each run did (moves, near copies of stored images) adds up over the versions; drops and
    leaks are those rejects.jsonl holds (an append judges again the earlier rejects its input
    lists, so a sum would count them twice); `latest_append` is this append's own report
    (docs/duplicates.md). An
    append that did not search keeps the earlier section, its `latest_append` saying so:
    its new entries are in no group."""
    if report is None or listed is None:
        if previous is None:
            return {"mode": "off"}
        earlier = previous.duplicates
        if not earlier or earlier.get("mode") == "off":
            return earlier
        return {**earlier, "latest_append": {"mode": "off"}}
    section = {**report, "file": listed.to_json()}
    if previous is None:
        return section
    earlier = previous.duplicates or {}
    moved = dict(earlier.get("moved") or {})
    for split, change in (report.get("moved") or {}).items():
        moved[split] = moved.get(split, 0) + change
    checked = {*earlier.get("leakage_checked", ()), *report.get("leakage_checked", ())}
    return {
        **section,
        **{name: earlier.get(name, 0) + report.get(name, 0) for name in _ADDED_UP},
        **{name: rejected.by_reason.get(reason, 0) for name, reason in _REJECTED.items()},
        "moved": {split: change for split, change in sorted(moved.items()) if change},
        "leakage_checked": sorted(checked),
        "latest_append": dict(report),
    }


# The duplicates section's counts of what a run did, summed over an output's versions.
_ADDED_UP = ("in_output_matches", "entries_moved")
# ... and its counts of rejected entries: the merged rejects.jsonl's, by reason.
_REJECTED = {"dropped": Reason.DUPLICATE_IMAGE.value, "leaks": Reason.LEAKS_INTO.value}


def _run_info(shards: Sequence[WrittenShard], settings: CommitSettings, now: float) -> RunInfo:
    if settings.started_at is None:
        return RunInfo(settings.run_id)
    wall = max(now - settings.started_at, 1e-6)
    return RunInfo(
        run_id=settings.run_id,
        started_at=_iso(settings.started_at),
        wall_seconds=round(wall, 2),
        records_per_second=round(sum(shard.num_examples for shard in shards) / wall, 1),
        bytes_written=sum(shard.bytes for shard in shards),
    )


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")
