"""The last step: check that every entry is accounted for, then publish the staged run
(runtime/output_protocol.py: shards and rejects.jsonl to their final names, metadata.json last)."""

from __future__ import annotations

import datetime
import importlib.metadata
import time
from typing import Any

import apache_beam as beam

from beam_pipeline.errors import RejectLimitError
from beam_pipeline.job.settings import CommitSettings
from beam_pipeline.job.shard_work import WrittenShard
from beam_pipeline.runtime import output_protocol, storage
from segcore import features, metadata
from segcore.naming import REJECTS_FILE, SPLITS
from segcore.rejects import Reason, Reject
from segcore.splits import ShardSpec

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
    info = metadata.build_metadata(
        (_shard_dict(shard, published[shard.spec.name]) for shard in shards if shard.num_examples),
        rejects,
        mask_format=settings.mask_format,
        parameters=settings.parameters,
        versions=package_versions(),
    )
    info["num_discovered"] = discovered
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
    staged = output_protocol.staging_dir(settings.output_dir, settings.run_id)
    storage.write_bytes_atomically(metadata.rejects_jsonl(rejects), staged + REJECTS_FILE, staged)
    bad = sum(reject.reason != Reason.NOT_IN_SPLIT for reject in rejects)
    if discovered and bad / discovered > settings.max_reject_fraction:
        raise RejectLimitError(
            f"{bad} of {discovered} entries rejected ({bad / discovered:.0%}), more than "
            f"--max_reject_fraction {settings.max_reject_fraction:g}: nothing was published; "
            f"see {staged}{REJECTS_FILE}"
        )
    moves = [*sorted(published.items()), (REJECTS_FILE, REJECTS_FILE)]
    output_protocol.publish(settings.output_dir, settings.run_id, moves, metadata.dumps(info))
    if settings.release_lock:
        output_protocol.release_lock_of(settings.output_dir, settings.run_id)
    return info


def _add_classes(
    info: dict[str, Any], shards: list[WrittenShard], settings: CommitSettings
) -> None:
    """metadata.json's `classes` section: the shards' class statistics summed per split, and
    what the stored mask holds."""
    from segcore.class_stats import ClassStats, classes_section, sum_stats

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
        shards, rejects, discovered = inputs
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
            )
        )
