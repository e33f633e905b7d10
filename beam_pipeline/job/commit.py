"""The last step: check that every entry is accounted for, then publish the staged run
(runtime/output_protocol.py: shards and rejects.jsonl to their final names, metadata.json last)."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import hashlib
import importlib.metadata
import time
from typing import Any

import apache_beam as beam

from beam_pipeline.errors import RejectLimitError
from beam_pipeline.job.hash_tables import add_duplicates
from beam_pipeline.job.settings import CommitSettings
from beam_pipeline.job.shard_work import WrittenShard, staged_key_rows
from beam_pipeline.runtime import output_protocol, storage
from transforms.format import features, metadata, record_index, tfds_info
from transforms.format.dataset_info import DatasetInfo
from transforms.format.naming import (
    REJECTS_FILE,
    SPLITS,
    index_name,
    key_table_name,
    parse_shard_name,
)
from transforms.rejects import Reason, Reject
from transforms.splits import ShardSpec

_VERSIONED_PACKAGES = (
    "segprep",
    "apache-beam",
    "tensorflow",
    "tensorflow-cpu",
    "pillow",
    "scipy",
    "h5py",
    "numpy",
    "pycocotools",
    "ijson",
)


class AccountingError(RuntimeError):
    """Accepted + rejected differs from discovered: something was lost or duplicated."""


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def final_names(shards: list[WrittenShard]) -> dict[str, str]:
    """Staged name -> published name of every shard that holds a record.

    A shard whose every pair was rejected while it was written is not published: the split's
    other shards are renumbered `-of-N` over the ones left, so no published shard is empty.
    """
    names: dict[str, str] = {}
    for split in sorted({shard.spec.split for shard in shards}):
        kept = sorted(s.spec for s in shards if s.spec.split == split and s.num_examples)
        for index, spec in enumerate(kept):
            names[spec.name] = ShardSpec(split, index, len(kept)).name
    return names


def _shard_dict(shard: WrittenShard, name: str) -> dict[str, Any]:
    return {
        "split": shard.spec.split,
        "file": name,
        "index": {
            "file": index_name(name),
            "bytes": shard.index_bytes,
            "sha256": shard.index_sha256,
        },
        "num_examples": shard.num_examples,
        "bytes": shard.bytes,
        "sha256": shard.sha256,
        "image_shapes": [list(shape) for shape in shard.image_shapes],
    }


def commit(
    _,
    shards: list[WrittenShard],
    rejects: list[Reject],
    discovered: int,
    settings: CommitSettings,
    duplicates: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Check the accounting and the reject limit, then publish the staged run."""
    accepted = sum(shard.num_examples for shard in shards)
    keys = [reject.key for reject in rejects]
    if accepted + len(rejects) != discovered or len(set(keys)) != len(keys):
        raise AccountingError(
            f"{discovered} entries discovered but {accepted} accepted + {len(rejects)} rejected "
            f"({len(keys) - len(set(keys))} duplicate reject keys): refusing to publish"
        )
    published = final_names(shards)
    staged = output_protocol.staging_dir(settings.output_dir, settings.run_id)
    # The refusal comes before any further staging: its rejects are all a refused run keeps.
    storage.write_bytes(staged + REJECTS_FILE, metadata.rejects_jsonl(rejects))
    bad = sum(reject.reason != Reason.NOT_IN_SPLIT for reject in rejects)
    if discovered and bad / discovered > settings.max_reject_fraction:
        raise RejectLimitError(
            f"{bad} of {discovered} entries rejected ({bad / discovered:.0%}), more than "
            f"--max_reject_fraction {settings.max_reject_fraction:g}: nothing was published; "
            f"{_commonest_reasons(rejects)}; all in {staged}{REJECTS_FILE}"
        )
    key_tables = {split: _stage_key_table(staged, split, shards, published) for split in SPLITS}
    written = [
        _shard_dict(shard, published[shard.spec.name]) for shard in shards if shard.num_examples
    ]
    info = metadata.build_metadata(
        written,
        rejects,
        mask_format=settings.mask_format,
        parameters=settings.parameters,
        versions=package_versions(),
        key_tables=key_tables,
    )
    info["num_discovered"] = discovered
    duplicate_files = add_duplicates(info, staged, shards, published, duplicates)
    info["exif_orientation_ignored"] = sum(shard.exif_ignored_images for shard in shards)
    if settings.classes.is_classes:
        _add_classes(info, shards, settings)
    info["run"] = {"run_id": settings.run_id}
    if settings.started_at is not None:
        wall = max(time.time() - settings.started_at, 1e-6)
        started = datetime.datetime.fromtimestamp(settings.started_at, datetime.UTC)
        info["run"].update(
            started_at=started.isoformat(timespec="seconds"),
            wall_seconds=round(wall, 2),
            records_per_second=round(accepted / wall, 1),
            bytes_written=sum(shard.bytes for shard in shards),
        )
    tfds = []
    for name, data in tfds_info.tfds_files(DatasetInfo.from_json(info)).items():
        storage.write_bytes(staged + name, data)
        tfds.append({"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    info = metadata.with_tfds_files(info, tfds)
    moves = [
        *sorted(published.items()),
        *sorted((index_name(old), index_name(new)) for old, new in published.items()),
        *sorted((ref["file"], ref["file"]) for ref in key_tables.values()),
        *((ref["file"], ref["file"]) for ref in info["tfds_files"]),
        (REJECTS_FILE, REJECTS_FILE),
        *((name, name) for name in duplicate_files),
    ]
    output_protocol.publish(settings.output_dir, settings.run_id, moves, metadata.dumps(info))
    if settings.release_lock:
        output_protocol.release_lock_of(settings.output_dir, settings.run_id)
    return info


def _stage_key_table(
    staged: str, split: str, shards: list[WrittenShard], published: dict[str, str]
) -> dict[str, Any]:
    """The split's key table, streamed from its shards' staged key rows in published order:
    no more than one shard's rows are ever held. Its {file, bytes, sha256}."""
    name = key_table_name(split)
    digest, size = hashlib.sha256(), 0
    kept = sorted(
        (published[shard.spec.name], shard.spec.name)
        for shard in shards
        if shard.spec.name in published and shard.spec.split == split
    )
    with storage.streamed(staged + name) as table:
        for number, (_, staged_name) in enumerate(kept):
            rows = storage.read_bounded(staged + staged_key_rows(staged_name), 1 << 30)
            if int(parse_shard_name(staged_name)[1]) != number:  # renumbered: rewrite rows
                rows = record_index.key_table_bytes(
                    dataclasses.replace(row, shard=number)
                    for row in record_index.parse_key_table(rows)
                )
            table.write(rows)
            digest.update(rows)
            size += len(rows)
    return {"file": name, "bytes": size, "sha256": digest.hexdigest()}


def _add_classes(
    info: dict[str, Any], shards: list[WrittenShard], settings: CommitSettings
) -> None:
    """metadata.json's `classes` section: the shards' class statistics summed per split, and
    what the stored mask holds."""
    from transforms.class_stats import ClassStats, classes_section, sum_stats

    classes = settings.classes
    stats = {
        split: sum_stats(
            (
                ClassStats.from_json(shard.class_stats)
                for shard in shards
                if shard.spec.split == split
            ),
            classes.num_classes,
        )
        for split in SPLITS
    }
    info["classes"] = classes_section(classes, stats, coco=settings.coco)
    info["features"] = {
        **info["features"],
        features.MASK: {
            **info["features"][features.MASK],
            "description": f"single-channel {classes.bit_depth}-bit PNG of class ids "
            f"0..{classes.num_classes - 1}, {classes.ignore_index} = ignore",
        },
    }


class CommitOutput(beam.PTransform):
    """Runs once, after all shards: side inputs are complete only when their producers are."""

    def __init__(self, settings: CommitSettings) -> None:
        super().__init__()
        self._settings = settings

    def expand(self, inputs):
        shards, rejects, discovered, *report = inputs
        side = {}
        if report and report[0] is not None:  # duplicates searched: job/duplicates.py
            side["duplicates"] = beam.pvalue.AsSingleton(report[0])
        return (
            shards.pipeline
            | "CommitSeed" >> beam.Create([None])
            | "WriteMetadata"
            >> beam.Map(
                commit,
                shards=beam.pvalue.AsList(shards),
                rejects=beam.pvalue.AsList(rejects),
                discovered=beam.pvalue.AsSingleton(discovered),
                settings=self._settings,
                **side,
            )
        )


def _commonest_reasons(rejects: list[Reject], shown: int = 2, detail_chars: int = 120) -> str:
    """The refusal's line says why: the commonest reasons, the first with an example."""
    counts = collections.Counter(r.reason for r in rejects if r.reason != Reason.NOT_IN_SPLIT)
    parts = []
    for index, (reason, count) in enumerate(counts.most_common(shown)):
        part = f"{reason.value} {count}"
        if index == 0:
            example = next(r for r in rejects if r.reason == reason)
            detail = " ".join(example.detail.split())
            if len(detail) > detail_chars:
                detail = detail[: detail_chars - 3] + "..."
            part += f" (e.g. {example.key}: {detail})"
        parts.append(part)
    if len(counts) > shown:
        parts.append(f"{len(counts) - shown} more reasons")
    return "mostly " + ", ".join(parts)
