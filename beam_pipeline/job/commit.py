"""The last step: check that every entry is accounted for, then publish the staged run
(runtime/output_protocol.py: shards and rejects.jsonl to their final names, metadata.json last)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import time
from typing import Any

import apache_beam as beam

from beam_pipeline.errors import RejectLimitError
from beam_pipeline.job import attempts, versions
from beam_pipeline.job.hash_tables import add_duplicates, staged_hash_rows
from beam_pipeline.job.settings import CommitSettings
from beam_pipeline.job.shard_work import WrittenShard, staged_digest_rows, staged_key_rows
from beam_pipeline.runtime import commit_journal, output_protocol
from transforms import files
from transforms.format import (
    dataset_info,
    features,
    metadata,
    record_formats,
    record_index,
    tfds_info,
)
from transforms.format.dataset_info import DatasetInfo
from transforms.format.naming import (
    FIRST_VERSION,
    METADATA_FILE,
    REJECTS_FILE,
    TFDS_FILES,
    UNLABELED_FILE,
    index_name,
    key_table_name,
    parse_shard_name,
    shard_name,
)
from transforms.rejects import Reason, Reject
from transforms.splits import split_names

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


def final_names(shards: list[WrittenShard], version: int = FIRST_VERSION) -> dict[str, str]:
    """Staged name -> published name of every shard that holds a record.

    A shard whose every pair was rejected while it was written is not published: the split's
    other shards are renumbered `-of-N` over the ones left, so no published shard is empty.
    An append's shards carry its version in their names (transforms.format.naming).
    """
    names: dict[str, str] = {}
    for split in sorted({shard.spec.split for shard in shards}):
        kept = sorted(s.spec for s in shards if s.spec.split == split and s.num_examples)
        for index, spec in enumerate(kept):
            suffix = record_formats.get(spec.record_format).suffix
            names[spec.name] = shard_name(split, index, len(kept), version, suffix)
    return names


def _shard_dict(shard: WrittenShard, name: str, offsets: bool) -> dict[str, Any]:
    index = {"file": index_name(name), "bytes": shard.index_bytes, "sha256": shard.index_sha256}
    return {
        "split": shard.spec.split,
        "file": name,
        "index": index if offsets else None,
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
    skipped: int = 0,
    duplicates: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Check the accounting and the reject limit, then publish the staged run.

    `skipped`: an append's keys already in the output with the same content."""
    shards, rejects = _one_attempt_per_shard(shards, rejects, settings, duplicates is not None)
    accepted = sum(shard.num_examples for shard in shards)
    keys = [reject.key for reject in rejects]
    if accepted + len(rejects) + skipped != discovered or len(set(keys)) != len(keys):
        raise AccountingError(
            f"{discovered} entries discovered but {accepted} accepted + {len(rejects)} rejected "
            f"+ {skipped} already present ({len(keys) - len(set(keys))} duplicate reject "
            "keys): refusing to publish"
        )
    # Unlabeled images (--unlabeled_images skip) are set apart: listed, counted, no rejects.
    unlabeled = [reject for reject in rejects if reject.reason == Reason.UNLABELED]
    rejects = [reject for reject in rejects if reject.reason != Reason.UNLABELED]
    append = settings.append
    version = append.version if append else FIRST_VERSION
    previous = _previous(settings) if append else None
    published = final_names(shards, version)
    staged = output_protocol.staging_dir(settings.output_dir, settings.run_id)
    rejects_bytes = metadata.rejects_jsonl(rejects)
    commit_journal.hook("accounted")
    commit_journal.check_space(
        settings.output_dir, _commit_bytes(staged, shards, published, len(rejects_bytes))
    )
    # The refusal comes before any further staging: its rejects are all a refused run keeps.
    files.write_bytes(staged + REJECTS_FILE, rejects_bytes)
    if unlabeled:
        files.write_bytes(staged + UNLABELED_FILE, metadata.rejects_jsonl(unlabeled))
    bad = sum(reject.reason != Reason.NOT_IN_SPLIT for reject in rejects)
    # Unlabeled and not_in_split entries are set aside, not judged: counted in neither part of
    # the fraction, so a dataset's many unlabeled images never dilute its bad ones.
    judged = discovered - len(unlabeled) - (len(rejects) - bad)
    if judged and bad / judged > settings.max_reject_fraction:
        aside = discovered - judged
        raise RejectLimitError(
            f"{bad} of {judged} entries rejected "
            f"({percent(bad / judged, settings.max_reject_fraction)}"
            + (f"; {aside} unlabeled or not_in_split not counted" if aside else "")
            + f"), more than --max_reject_fraction {settings.max_reject_fraction:g}: nothing "
            f"was published; {_commonest_reasons(rejects)}; all in {staged}{REJECTS_FILE}"
        )
    splits = split_names(
        [*(shard.spec.split for shard in shards), *(previous.splits if previous else ())]
    )
    key_tables = {
        split: _stage_key_table(
            staged,
            split,
            shards,
            published,
            version,
            previous.splits[split].num_shards if previous and split in previous.splits else 0,
        )
        for split in splits
    }
    new_keys: set[str] = set()
    digest_tables = {
        split: versions.stage_digest_table(staged, split, shards, published, version, new_keys)
        for split in splits
    }
    adapter = record_formats.get(settings.spec.record_format)
    written = [
        _shard_dict(shard, published[shard.spec.name], adapter.offset_index)
        for shard in shards
        if shard.num_examples
    ]
    info = metadata.build_metadata(
        written,
        rejects,
        mask_format=settings.spec.mask_format,
        parameters=settings.parameters,
        versions=package_versions(),
        key_tables=key_tables,
        record_format=adapter.name,
    )
    info["num_discovered"] = discovered
    info["record_spec"] = settings.spec.stored()
    if unlabeled:
        info["num_unlabeled"] = {"total": len(unlabeled), "file": UNLABELED_FILE}
    if previous is None:
        duplicate_files = add_duplicates(info, staged, shards, published, duplicates)
    else:  # an append leaves duplicates.jsonl and the hash tables as they were
        duplicate_files = []
        if "duplicates" in previous.extra:
            info["duplicates"] = previous.extra["duplicates"]
        if duplicates is not None and isinstance(info.get("duplicates"), dict):
            # what this append's search found among its new images (docs/duplicates.md)
            info["duplicates"] = {**info["duplicates"], "latest_append": duplicates}
    info["exif_orientation_ignored"] = sum(shard.exif_ignored_images for shard in shards)
    if settings.classes.is_classes:
        _add_classes(info, shards, settings, previous)
    if previous is not None:
        info["splits"] = versions.merged_splits(previous, info["splits"])
        accounted = new_keys | set(keys)
        old_rejects = files.read_bounded(files.join(settings.output_dir, REJECTS_FILE), 1 << 32)
        rejects_bytes = versions.merged_rejects(old_rejects, rejects_bytes, accounted)
        files.write_bytes(staged + REJECTS_FILE, rejects_bytes)
        info["num_rejected"] = versions.rejected_by_reason(rejects_bytes)
        for field in ("parameters", "format_version"):
            if field in previous.extra:
                info[field] = previous.extra[field]
        if isinstance(info.get("parameters"), dict):
            # The output may have been copied or moved since: name the folder written now.
            info["parameters"] = {**info["parameters"], "output_dir": settings.output_dir}
        info["exif_orientation_ignored"] += previous.extra.get("exif_orientation_ignored", 0)
        # The entries the latest version accounts for: each key once, in a shard or rejected.
        records = sum(split["num_examples"] for split in info["splits"].values())
        info["num_discovered"] = records + info["num_rejected"]["total"]
    added_files = {split: [] for split in splits}
    for name in published.values():
        added_files[parse_shard_name(name)[0]].append(name)
    record = versions.version_info(
        info,
        version=version,
        run_id=settings.run_id,
        added_files=added_files,
        key_tables=key_tables,
        digest_tables=digest_tables,
        rejects=rejects,
        skipped_identical=skipped,
    )
    earlier = [v.to_json() for v in previous.dataset_versions] if previous else []
    info["dataset_versions"] = [*earlier, record.to_json()]
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
        files.write_bytes(staged + name, data)
        tfds.append({"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    info = metadata.with_tfds_files(info, tfds)
    moves = [
        *sorted(published.items()),
        *sorted(
            (index_name(old), index_name(new))
            for old, new in published.items()
            if adapter.offset_index
        ),
        *sorted((ref["file"], ref["file"]) for ref in key_tables.values()),
        *sorted((ref["file"], ref["file"]) for ref in digest_tables.values()),
        *((ref["file"], ref["file"]) for ref in info["tfds_files"]),
        (REJECTS_FILE, REJECTS_FILE),
        *([(UNLABELED_FILE, UNLABELED_FILE)] if unlabeled else []),
        *((name, name) for name in duplicate_files),
    ]
    keep: list[str] = []
    if previous is not None:
        # Every earlier file stays where it is, untouched; only these are replaced.
        replaced = {METADATA_FILE, REJECTS_FILE, *TFDS_FILES}
        state = output_protocol.inspect_output(settings.output_dir, holder=False)
        keep = [name for name in state.ours if name not in replaced]
    # Written through the typed DatasetInfo every reader loads: a commit cannot publish a
    # metadata.json that its own readers would refuse (from_json checks it here first).
    info = DatasetInfo.from_json(info).to_json()
    output_protocol.publish(
        settings.output_dir, settings.run_id, moves, metadata.dumps(info), keep=keep
    )
    if settings.release_lock:
        output_protocol.release_lock_of(settings.output_dir, settings.run_id)
    return info


def _one_attempt_per_shard(
    shards: list[WrittenShard], rejects: list[Reject], settings: CommitSettings, hashes: bool
) -> tuple[list[WrittenShard], list[Reject]]:
    """Settle one attempt per shard (job/attempts.py). A shard that reached the commit twice
    (a runner delivered both attempts) brought its rejects twice: identical rows are one."""
    chosen = attempts.one_per_shard(shards)
    if len(chosen) < len(shards):
        rejects = list(dict.fromkeys(rejects))

    def names_of(shard: WrittenShard) -> list[str]:
        name = shard.spec.name
        names = [name, staged_key_rows(name), staged_digest_rows(name)]
        if record_formats.get(shard.spec.record_format).offset_index:
            names.append(index_name(name))
        return [*names, staged_hash_rows(name)] if hashes else names

    staged = output_protocol.staging_dir(settings.output_dir, settings.run_id)
    return attempts.settle(staged, chosen, names_of), rejects


def percent(fraction: float, limit: float) -> str:
    """`50 %`, or `50.4 %` when whole percents would hide that it is above the limit."""
    whole = f"{fraction:.0%}"
    if round(fraction * 100) <= limit * 100 < fraction * 100:
        return f"{fraction * 100:.1f} %"
    return whole.replace("%", " %")


def _commit_bytes(
    staged: str, shards: list[WrittenShard], published: dict[str, str], rejects: int
) -> int:
    """What the commit writes beside the staged shards: rejects.jsonl, the key tables (as
    large as the staged key rows), metadata.json, the TFDS files and the manifest. Local
    only: the caller does not check gs://."""
    import os

    rows = 0
    if files.is_local(staged):
        for shard in shards:
            if shard.spec.name in published:
                with contextlib.suppress(OSError):
                    rows += os.path.getsize(staged + staged_key_rows(shard.spec.name))
                    rows += os.path.getsize(staged + staged_digest_rows(shard.spec.name))
    per_shard = 4096  # its metadata.json entry and TFDS lines, generously
    names = [name for shard in published.values() for name in (shard, index_name(shard))]
    return rejects + rows + per_shard * len(shards) + commit_journal.manifest_bytes(names)


def _previous(settings: CommitSettings) -> DatasetInfo:
    """The output an append extends, exactly as the run planned on (else nothing is
    published: another tool changed it meanwhile)."""
    data = dataset_info.read_metadata_bytes(settings.output_dir)
    if hashlib.sha256(data).hexdigest() != settings.append.previous_sha256:
        raise versions.OutputChangedError(
            f"{settings.output_dir}{METADATA_FILE} changed while the append ran: nothing was "
            "published"
        )
    return DatasetInfo.from_json(json.loads(data))


def _stage_key_table(
    staged: str,
    split: str,
    shards: list[WrittenShard],
    published: dict[str, str],
    version: int = FIRST_VERSION,
    first_shard: int = 0,
) -> dict[str, Any]:
    """The split's key table, streamed from its shards' staged key rows in published order:
    no more than one shard's rows are ever held. Its {file, bytes, sha256}.

    An append's table numbers its shards after the `first_shard` ones the split had, so the
    split's tables, concatenated, number every shard as the split lists it."""
    name = key_table_name(split, version)
    digest, size = hashlib.sha256(), 0
    kept = sorted(
        (published[shard.spec.name], shard.spec.name)
        for shard in shards
        if shard.spec.name in published and shard.spec.split == split
    )
    with files.streamed(staged + name) as table:
        for number, (_, staged_name) in enumerate(kept):
            rows = files.read_bounded(staged + staged_key_rows(staged_name), 1 << 30)
            if int(parse_shard_name(staged_name)[1]) != first_shard + number:  # rewrite rows
                rows = record_index.key_table_bytes(
                    dataclasses.replace(row, shard=first_shard + number)
                    for row in record_index.parse_key_table(rows)
                )
            table.write(rows)
            digest.update(rows)
            size += len(rows)
    return {"file": name, "bytes": size, "sha256": digest.hexdigest()}


def _add_classes(
    info: dict[str, Any],
    shards: list[WrittenShard],
    settings: CommitSettings,
    previous: DatasetInfo | None = None,
) -> None:
    """metadata.json's `classes` section: the shards' class statistics summed per split (an
    append adds them to the earlier version's sums), and what the stored mask holds."""
    from transforms.class_stats import ClassStats, classes_section, sum_stats

    classes = settings.classes
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
    info["classes"] = classes_section(classes, stats, annotations=settings.annotations)
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
        side = {
            name: beam.pvalue.AsSingleton(inputs[name])
            for name in ("skipped", "duplicates")  # an append's; a duplicate search's
            if name in inputs
        }
        shards, rejects, discovered = inputs["shards"], inputs["rejects"], inputs["discovered"]
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
