"""One shard's whole job: read its pairs, validate and convert them, write the shard file
into the run's staging folder.

Plain Python with no Beam runner context, so the same call runs inside a DoFn (Dataflow)
or in a local writer process (runtime/writer_pool.py). Records are written in key order: the
same inputs always give the same bytes. Nothing here writes under a final name: the commit
step publishes the staged shards once the whole run has been accounted for.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from beam_pipeline.job.attempts import attempt_name, new_attempt
from beam_pipeline.job.built_records import SpilledRecords, is_built, read_source
from beam_pipeline.job.hash_tables import stage_shard_hashes
from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.runtime.ordered_pool import ordered_map
from beam_pipeline.runtime.progress_counts import Reporter
from transforms import files
from transforms.class_stats import StatsSum
from transforms.duplicates import ImageHash
from transforms.format import digest_table, record_formats, record_index
from transforms.format.naming import DIGEST_TABLE_SUFFIX, INDEX_DIR, KEY_TABLE_SUFFIX
from transforms.pairing import Pair
from transforms.record import Record
from transforms.rejects import Reason, Reject, RejectError
from transforms.sources import registry
from transforms.splits import ShardSpec

_CHUNK = 8 << 20


@dataclasses.dataclass(frozen=True)
class WrittenShard:
    """A staged shard, as metadata.json will describe it."""

    spec: ShardSpec
    num_examples: int
    bytes: int
    sha256: str
    image_shapes: tuple[tuple[int, int], ...]  # distinct (height, width), sorted
    transcoded_images: int
    # The staged offset index (index/<name>.idx, transforms/format/record_index), for record
    # formats that need one (record_formats: offset_index); 0 and "" for the others.
    index_bytes: int = 0
    index_sha256: str = ""
    # Class-id masks: the sum of the records' ClassStats, as ClassStats.to_json() gives it.
    class_stats: Mapping[str, Any] | None = None
    exif_ignored_images: int = 0  # accepted images whose EXIF orientation was not applied
    # The attempt that wrote the shard's files (job/attempts.py): they wait under
    # `<staged name>.attempt-<id>` until the commit settles one attempt per shard.
    attempt: str = ""
    images_read: int = 0  # pairs whose files this shard's writer read (0: built beforehand)


def write_shard(
    settings: ShardWriterSettings, spec: ShardSpec, pairs: Sequence[Pair]
) -> tuple[WrittenShard, tuple[Reject, ...]]:
    """Write the shard's records in key order into the staging folder, under this attempt's
    names (job/attempts.py); its rejects."""
    attempt = new_attempt()
    local = files.is_local(settings.staging_dir)
    folder = settings.staging_dir if local else tempfile.gettempdir() + "/"
    partial = f"{folder}{spec.name}.partial-{uuid.uuid4().hex}"
    progress = Reporter(settings.progress_dir)
    rejects: list[Reject] = []
    shapes: set[tuple[int, int]] = set()
    written: list[tuple[str, int]] = []  # (key, serialized length): the record index
    digests: list[tuple[str, str]] = []  # (key, content digest), in key order
    classes = settings.classes
    stats = StatsSum(classes.num_classes) if classes.is_classes else None
    transcoded = exif_ignored = 0
    ordered = sorted(pairs, key=lambda pair: pair.key)
    # Built pairs (job/built_records.py) were read, converted and counted once already: their
    # record bytes are copied from the spill files, in one thread, and their image hashes
    # (the duplicate search's) staged beside the shard.
    built = bool(ordered) and all(is_built(pair) for pair in ordered)
    hashes: list[ImageHash] = []  # a built record's come with it: (record, digest, hashes)
    if built:
        convert, threads = SpilledRecords(settings.staging_dir).record, 1
    else:
        convert, threads = functools.partial(_record_or_reject, settings), settings.threads
    adapter = record_formats.get(spec.record_format)  # the format the shard's name says
    try:
        with adapter.writer(partial) as writer:
            for pair, record in ordered_map(convert, ordered, threads):
                if not built:
                    progress.add()
                if isinstance(record, RejectError):
                    rejects.append(
                        Reject(
                            pair.key, record.reason, record.detail, pair.image.path, pair.mask.path
                        )
                    )
                    continue
                record, digest, *hashed = record
                digests.append((pair.key, digest))
                hashes += hashed
                writer.write(record.serialized)
                written.append((pair.key, len(record.serialized)))
                transcoded += record.image_transcoded
                exif_ignored += record.exif_ignored
                shapes.add((record.height, record.width))
                if stats is not None:
                    stats.add(record.class_stats)
        progress.flush()
        staged = files.join(settings.staging_dir, attempt_name(spec.name, attempt))
        size, digest = _stage(partial, staged, local)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    index_bytes, index_sha256 = stage_index(
        settings.staging_dir, spec, written, adapter.offset_index, attempt
    )
    files.write_bytes(
        files.join(settings.staging_dir, attempt_name(staged_digest_rows(spec.name), attempt)),
        digest_table.row_bytes(digests),
    )
    if settings.store_hashes:
        stage_shard_hashes(settings.staging_dir, spec.name, hashes, attempt)
    shard = WrittenShard(
        spec,
        len(written),
        size,
        digest,
        tuple(sorted(shapes)),
        transcoded,
        index_bytes,
        index_sha256,
        None if stats is None else stats.result().to_json(),
        exif_ignored,
        attempt,
        0 if built else len(ordered),
    )
    return shard, tuple(rejects)


def stage_index(
    staging_dir: str,
    spec: ShardSpec,
    written: list[tuple[str, int]],
    offsets: bool = True,
    attempt: str = "",
):
    """Stage the shard's key rows, and its offset index when `offsets`, under `attempt`'s
    names; (index bytes, sha256), (0, "") without one.

    The commit renames the index with its shard and joins the key rows into the split's key
    table, renumbered if shards emptied by rejects were dropped.
    """
    indexed = record_index.index_shard(spec.name, written)
    if offsets:
        index_file = attempt_name(indexed.index_file, attempt)
        files.write_bytes(files.join(staging_dir, index_file), indexed.index_bytes)
    files.write_bytes(
        files.join(staging_dir, attempt_name(staged_key_rows(spec.name), attempt)),
        record_index.key_table_bytes(indexed.key_rows),
    )
    if not offsets:
        return 0, ""
    return len(indexed.index_bytes), hashlib.sha256(indexed.index_bytes).hexdigest()


def staged_key_rows(shard_name: str) -> str:
    """Where a shard's key rows wait for the commit, inside the staging folder."""
    return f"{INDEX_DIR}/{shard_name}{KEY_TABLE_SUFFIX}"


def staged_digest_rows(shard_name: str) -> str:
    """Where a shard's (key, content digest) rows wait for the commit (in key order)."""
    return f"{INDEX_DIR}/{shard_name}{DIGEST_TABLE_SUFFIX}"


def _stage(partial: str, staged: str, local: bool) -> tuple[int, str]:
    """Give the finished file its staged name; (bytes, sha256).

    The name is the attempt's own (job/attempts.py): a retried or doubled shard never
    overwrites another attempt's file.
    """
    digest = hashlib.sha256()
    size = 0
    with open(partial, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    if local:
        os.replace(partial, staged)
    else:
        files.upload_file(partial, staged)
    return size, digest.hexdigest()


def _read_pair(settings: ShardWriterSettings, pair: Pair) -> tuple[bytes, bytes | None, str]:
    """The pair's image bytes, mask bytes (None when the mask is no file) and content digest
    (of the mask file's bytes, or of a COCO entry's staged annotations)."""
    limits = settings.limits
    image_bytes = read_source(pair.image, limits.image_bytes, Reason.IMAGE_TOO_LARGE)
    mask_bytes = None
    if registry.get(settings.mask_source).reads_mask_file:
        mask_bytes = read_source(pair.mask, limits.mask_bytes, Reason.MASK_TOO_LARGE)
        digested = mask_bytes
    else:
        digested = (getattr(pair.mask, "payload", None) or "").encode()
    return image_bytes, mask_bytes, digest_table.content_digest(image_bytes, digested)


def pair_digest(settings: ShardWriterSettings, pair: Pair) -> str | RejectError:
    """The content digest of a pair's source files, or why they cannot be read."""
    try:
        return _read_pair(settings, pair)[2]
    except RejectError as error:
        return error


def build_record(settings: ShardWriterSettings, pair: Pair) -> tuple[Record, str] | RejectError:
    """One pair's record and content digest, or why it is rejected: what the writer does per
    entry (the dry run's estimate times this, launch/estimate.py)."""
    return _record_or_reject(settings, pair)


def _record_or_reject(
    settings: ShardWriterSettings, pair: Pair
) -> tuple[Record, str] | RejectError:
    source = registry.get(settings.mask_source)
    try:
        image_bytes, mask_bytes, digest = _read_pair(settings, pair)
        record = source.record(
            pair.key, image_bytes, pair.mask, mask_bytes, settings.source_settings
        )
        return record, digest
    except RejectError as error:
        return error
