"""The last step: check that every entry is accounted for, stage the side tables, describe
the run (job/describe.py) and publish it (runtime/output_protocol.py: shards and rejects.jsonl
to their final names, metadata.json last, through the commit journal)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import time
from typing import Any

import apache_beam as beam

from beam_pipeline.errors import RejectLimitError
from beam_pipeline.job import attempts, versions
from beam_pipeline.job.describe import Accounting, StagedTables, describe
from beam_pipeline.job.hash_tables import published_order, stage_duplicates, staged_hash_rows
from beam_pipeline.job.settings import CommitSettings
from beam_pipeline.job.shard_work import WrittenShard, staged_digest_rows, staged_key_rows
from beam_pipeline.runtime import commit_journal, output_protocol
from transforms import files
from transforms.format import dataset_info, record_formats, record_index, tfds_info
from transforms.format.dataset_info import DatasetInfo, FileRef, RejectCounts
from transforms.format.naming import (
    DUPLICATES_FILE,
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
from transforms.limits import FILE_LIMITS
from transforms.rejects import Reason, Reject, rejects_jsonl
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


class MetadataTooLargeError(RuntimeError):
    """metadata.json would be larger than every reader accepts (FILE_LIMITS.metadata_bytes)."""

    _tagged_with_step = True  # one whole line for the user, as RejectLimitError


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


def commit(
    _,
    shards: list[WrittenShard],
    rejects: list[Reject],
    discovered: int,
    settings: CommitSettings,
    skipped: int = 0,
    duplicates: dict[str, Any] | None = None,
) -> DatasetInfo:
    """Check the accounting and the reject limit, stage the side tables, describe the run
    (job/describe.py) and publish it through the commit journal.

    `skipped`: an append's keys already in the output with the same content."""
    shards, rejects = _one_attempt_per_shard(shards, rejects, settings, duplicates is not None)
    _check_accounting(shards, rejects, discovered, skipped)
    # Unlabeled images (--images_without_mask skip) are set apart: listed, counted, no rejects.
    unlabeled = [reject for reject in rejects if reject.reason == Reason.UNLABELED]
    judged = [reject for reject in rejects if reject.reason != Reason.UNLABELED]
    previous = _previous(settings) if settings.append else None
    published = final_names(shards, settings.append.version if settings.append else FIRST_VERSION)
    staged = output_protocol.staging_dir(settings.output_dir, settings.run_id)
    rejects_bytes = rejects_jsonl(judged)
    commit_journal.hook("accounted")
    commit_journal.check_space(
        settings.output_dir, _commit_bytes(staged, shards, published, len(rejects_bytes))
    )
    # The refusal comes before any further staging: its rejects are all a refused run keeps.
    _stage_rejects(staged, rejects_bytes, unlabeled)
    _check_reject_limit(judged, len(unlabeled), discovered, settings, staged)
    tables, new_keys = _stage_tables(staged, shards, published, settings, previous, duplicates)
    unlabeled_count = len(unlabeled)
    if previous is None:
        num_rejected = RejectCounts.count((r.key, r.reason.value) for r in sorted(judged))
    else:
        accounted = new_keys | {reject.key for reject in rejects}
        num_rejected = _stage_merged_rejects(staged, settings, rejects_bytes, accounted)
        unlabeled_count = _stage_merged_unlabeled(staged, settings, unlabeled, accounted)
    run = Accounting(
        discovered, judged, unlabeled_count, skipped, num_rejected, duplicates,
        package_versions(), time.time(),
    )  # fmt: skip
    info = _stage_tfds_files(staged, describe(shards, published, tables, run, settings, previous))
    moves = _moves(info, published, tables, unlabeled_count > 0, _groups_changed(tables, previous))
    _publish(info, settings, moves, previous)
    return info


def _check_accounting(
    shards: list[WrittenShard], rejects: list[Reject], discovered: int, skipped: int
) -> None:
    accepted = sum(shard.num_examples for shard in shards)
    keys = [reject.key for reject in rejects]
    if accepted + len(rejects) + skipped != discovered or len(set(keys)) != len(keys):
        raise AccountingError(
            f"{discovered} entries discovered but {accepted} accepted + {len(rejects)} rejected "
            f"+ {skipped} already present ({len(keys) - len(set(keys))} duplicate reject "
            "keys): refusing to publish"
        )


def _stage_rejects(staged: str, rejects_bytes: bytes, unlabeled: list[Reject]) -> None:
    files.write_bytes(staged + REJECTS_FILE, rejects_bytes)
    if unlabeled:
        files.write_bytes(staged + UNLABELED_FILE, rejects_jsonl(unlabeled))


def _check_reject_limit(
    rejects: list[Reject], unlabeled: int, discovered: int, settings: CommitSettings, staged: str
) -> None:
    """Above --max_reject_fraction bad entries, nothing is published."""
    bad = sum(reject.reason != Reason.NOT_IN_SPLIT for reject in rejects)
    # Unlabeled and not_in_split entries are set aside, not judged: counted in neither part of
    # the fraction, so a dataset's many unlabeled images never dilute its bad ones.
    judged = discovered - unlabeled - (len(rejects) - bad)
    if judged and bad / judged > settings.max_reject_fraction:
        aside = discovered - judged
        raise RejectLimitError(
            f"{bad} of {judged} entries rejected "
            f"({percent(bad / judged, settings.max_reject_fraction)}"
            + (f"; {aside} unlabeled or not_in_split not counted" if aside else "")
            + f"), more than --max_reject_fraction {settings.max_reject_fraction:g}: nothing "
            f"was published; {_commonest_reasons(rejects)}; all in {staged}{REJECTS_FILE}"
        )


def _stage_tables(
    staged: str,
    shards: list[WrittenShard],
    published: dict[str, str],
    settings: CommitSettings,
    previous: DatasetInfo | None,
    duplicates: dict[str, Any] | None,
) -> tuple[StagedTables, set[str]]:
    """Each split's key and digest tables (and, for a run that searched for duplicates, its
    hash table, plus duplicates.jsonl for a first version); the keys the digest tables add."""
    version = settings.append.version if settings.append else FIRST_VERSION
    splits = split_names([*(s.spec.split for s in shards), *(previous.splits if previous else ())])
    earlier = previous.splits if previous else {}
    key_tables = {
        split: _stage_key_table(
            staged,
            split,
            shards,
            published,
            version,
            earlier[split].num_shards if split in earlier else 0,
        )
        for split in splits
    }
    new_keys: set[str] = set()
    digest_tables = {
        split: versions.stage_digest_table(staged, split, shards, published, version, new_keys)
        for split in splits
    }
    tables = StagedTables(key_tables, digest_tables)
    if duplicates is not None:  # an append's rows go to tables of its version
        listed = split_names(parse_shard_name(name)[0] for name in published.values())
        found, hashes = stage_duplicates(staged, listed, shards, published, version)
        tables = dataclasses.replace(tables, hash_tables=hashes, duplicates_file=found)
    return tables, new_keys


def _stage_merged_rejects(
    staged: str, settings: CommitSettings, rejects_bytes: bytes, accounted: set[str]
) -> RejectCounts:
    """An append's rejects.jsonl: the earlier rejects of keys this run did not account for
    again, then this run's; counted by reason."""
    old_rejects = files.read_bounded(files.join(settings.output_dir, REJECTS_FILE), 1 << 32)
    merged = versions.merged_rejects(old_rejects, rejects_bytes, accounted)
    files.write_bytes(staged + REJECTS_FILE, merged)
    return versions.rejected_by_reason(merged)


def _stage_merged_unlabeled(
    staged: str, settings: CommitSettings, unlabeled: list[Reject], accounted: set[str]
) -> int:
    """An append's unlabeled.jsonl, merged as rejects.jsonl is (a key this run judged again
    leaves the earlier list: stored now, or rejected); how many lines it holds."""
    earlier = files.join(settings.output_dir, UNLABELED_FILE)
    old = files.read_bounded(earlier, 1 << 32) if files.exists(earlier) else b""
    merged = versions.merged_rejects(old, rejects_jsonl(unlabeled), accounted)
    if merged:  # in place of this run's alone, staged before the reject limit
        files.write_bytes(staged + UNLABELED_FILE, merged)
    return len(merged.splitlines())


def _stage_tfds_files(staged: str, info: DatasetInfo) -> DatasetInfo:
    """What `tfds.builder_from_directory` reads, written from the description, listed in it."""
    refs = []
    for name, data in sorted(tfds_info.tfds_files(info).items()):
        files.write_bytes(staged + name, data)
        refs.append(FileRef(name, len(data), hashlib.sha256(data).hexdigest()))
    return dataclasses.replace(info, tfds_files=tuple(refs))


def _groups_changed(tables: StagedTables, previous: DatasetInfo | None) -> bool:
    """Whether the run publishes a duplicates.jsonl: a search's, unless an append's groups
    are the output's own to the byte (its file then stays, inode and all)."""
    if tables.duplicates_file is None:
        return False
    earlier = (previous.duplicates or {}).get("file") if previous is not None else None
    return earlier != tables.duplicates_file.to_json()


def _moves(
    info: DatasetInfo,
    published: dict[str, str],
    tables: StagedTables,
    unlabeled: bool,
    groups: bool,
) -> list[tuple[str, str]]:
    """(staged name, final name) of every file the run publishes besides metadata.json."""
    offsets = info.adapter.offset_index
    return [
        *sorted(published.items()),
        *sorted((index_name(old), index_name(new)) for old, new in published.items() if offsets),
        *sorted((ref.file, ref.file) for ref in tables.key_tables.values()),
        *sorted((ref.file, ref.file) for ref in tables.digest_tables.values()),
        *((ref.file, ref.file) for ref in info.tfds_files),
        (REJECTS_FILE, REJECTS_FILE),
        *([(UNLABELED_FILE, UNLABELED_FILE)] if unlabeled else []),
        *([(DUPLICATES_FILE, DUPLICATES_FILE)] if groups else []),
        *((ref.file, ref.file) for ref in tables.hash_tables.values()),
    ]


def _publish(
    info: DatasetInfo,
    settings: CommitSettings,
    moves: list[tuple[str, str]],
    previous: DatasetInfo | None,
) -> None:
    """metadata.json last, through the journal (runtime/commit_journal.py)."""
    data = info.to_bytes()
    # Checked as every reader loads it: a commit cannot publish a metadata.json that its own
    # readers would refuse.
    _check_size(info, data)
    DatasetInfo.from_json(dataset_info.parse_json(data))
    keep: list[str] = []
    if previous is not None:
        # Every earlier file stays where it is, untouched; only these are replaced.
        replaced = {METADATA_FILE, REJECTS_FILE, UNLABELED_FILE, *TFDS_FILES}
        if any(final == DUPLICATES_FILE for _, final in moves):
            replaced.add(DUPLICATES_FILE)  # the whole dataset's groups, new images among them
        state = output_protocol.inspect_output(settings.output_dir, holder=False)
        keep = [name for name in state.ours if name not in replaced]
    output_protocol.publish(settings.output_dir, settings.run_id, moves, data, keep=keep)
    if settings.release_lock:
        output_protocol.release_lock_of(settings.output_dir, settings.run_id)


def _check_size(info: DatasetInfo, data: bytes) -> None:
    if len(data) <= FILE_LIMITS.metadata_bytes:
        return
    sections = info.to_json()
    largest = max(sections, key=lambda name: len(json.dumps(sections[name], ensure_ascii=False)))
    raise MetadataTooLargeError(
        f"metadata.json would be {len(data):,} bytes, more than the "
        f"{FILE_LIMITS.metadata_bytes:,} every reader accepts (most of it in its {largest!r} "
        "section, e.g. class names or annotation labels of that length): nothing was published"
    )


def _one_attempt_per_shard(
    shards: list[WrittenShard], rejects: list[Reject], settings: CommitSettings, hashes: bool
) -> tuple[list[WrittenShard], list[Reject]]:
    """Settle one attempt per shard (job/attempts.py). A bundle that a runner delivered
    twice brought its rejects twice, even when only one attempt of its shards reaches the
    commit (the duplicate search rewrote them): identical rows are one."""
    chosen = attempts.one_per_shard(shards)
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
    return DatasetInfo.from_json(dataset_info.parse_json(data))


def _stage_key_table(
    staged: str,
    split: str,
    shards: list[WrittenShard],
    published: dict[str, str],
    version: int = FIRST_VERSION,
    first_shard: int = 0,
) -> FileRef:
    """The split's key table, streamed from its shards' staged key rows in published order:
    no more than one shard's rows are ever held. Its reference.

    An append's table numbers its shards after the `first_shard` ones the split had, so the
    split's tables, concatenated, number every shard as the split lists it."""
    name = key_table_name(split, version)

    def rows():
        for number, staged_name in enumerate(published_order(split, shards, published)):
            rows = files.read_bounded(staged + staged_key_rows(staged_name), 1 << 30)
            if int(parse_shard_name(staged_name)[1]) != first_shard + number:  # rewrite rows
                rows = record_index.key_table_bytes(
                    dataclasses.replace(row, shard=first_shard + number)
                    for row in record_index.parse_key_table(rows)
                )
            yield rows

    return FileRef(name, *files.write_chunks(staged + name, rows()))


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
            | "CommitSeed" >> beam.Impulse()
            | "WriteMetadata"
            >> beam.Map(
                commit,
                shards=beam.pvalue.AsList(shards),
                rejects=beam.pvalue.AsList(rejects),
                # no element when nothing was found (the count has no default step)
                discovered=beam.pvalue.AsSingleton(discovered, default_value=0),
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
