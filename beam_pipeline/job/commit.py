"""The last step: rejects.jsonl, then metadata.json, only once every shard is final."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import time
from collections.abc import Mapping
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.errors import RejectLimitError
from beam_pipeline.job.shard_work import ShardResult
from beam_pipeline.runtime import storage
from segcore import metadata
from segcore.naming import METADATA_FILE, REJECTS_FILE
from segcore.rejects import Reason, Reject

_VERSIONED_PACKAGES = (
    "segprep",
    "apache-beam",
    "tensorflow",
    "tensorflow-cpu",
    "pillow",
    "scipy",
    "h5py",
    "numpy",
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


def _shard_dict(result: ShardResult) -> dict[str, Any]:
    return {
        "split": result.spec.split,
        "file": result.spec.name,
        "num_examples": result.num_examples,
        "bytes": result.bytes,
        "sha256": result.sha256,
        "image_shapes": [list(shape) for shape in result.image_shapes],
    }


@dataclasses.dataclass(frozen=True)
class CommitSettings:
    output_dir: str
    temp_dir: str
    mask_format: str
    parameters: Mapping[str, Any]
    max_reject_fraction: float = 1.0
    started_at: float | None = None  # epoch seconds when the job was launched


def commit(
    _,
    shards: list[ShardResult],
    rejects: list[Reject],
    discovered: int,
    settings: CommitSettings,
) -> dict[str, Any]:
    accepted = sum(shard.num_examples for shard in shards)
    keys = [reject.key for reject in rejects]
    if accepted + len(rejects) != discovered or len(set(keys)) != len(keys):
        raise AccountingError(
            f"{discovered} entries discovered but {accepted} accepted + {len(rejects)} rejected "
            f"({len(keys) - len(set(keys))} duplicate reject keys): refusing to publish"
        )
    info = metadata.build_metadata(
        (_shard_dict(shard) for shard in shards),
        rejects,
        mask_format=settings.mask_format,
        parameters=settings.parameters,
        versions=package_versions(),
    )
    info["num_discovered"] = discovered
    if settings.started_at is not None:
        wall = max(time.time() - settings.started_at, 1e-6)
        started = datetime.datetime.fromtimestamp(settings.started_at, datetime.UTC)
        info["run"] = {
            "started_at": started.isoformat(timespec="seconds"),
            "wall_seconds": round(wall, 2),
            "records_per_second": round(accepted / wall, 1),
            "bytes_written": sum(shard.bytes for shard in shards),
        }
    join = FileSystems.join
    storage.write_bytes_atomically(
        metadata.rejects_jsonl(rejects), join(settings.output_dir, REJECTS_FILE), settings.temp_dir
    )
    bad = sum(reject.reason != Reason.NOT_IN_SPLIT for reject in rejects)
    if discovered and bad / discovered > settings.max_reject_fraction:
        raise RejectLimitError(
            f"{bad} of {discovered} entries rejected ({bad / discovered:.0%}), more than "
            f"--max_reject_fraction {settings.max_reject_fraction:g}: see {REJECTS_FILE}; "
            "nothing was published"
        )
    storage.write_bytes_atomically(
        metadata.dumps(info), join(settings.output_dir, METADATA_FILE), settings.temp_dir
    )
    storage.delete_tree(settings.temp_dir)
    return info


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
