"""One shard's whole job: read its pairs, validate and convert them, write the shard file
into the run's staging folder.

Plain Python with no Beam runner context, so the same call runs inside a DoFn (Dataflow)
or in a local writer process (runtime/writer_pool.py). Records are written in key order: the
same inputs always give the same bytes. Nothing here writes under a final name: the commit
step publishes the staged shards once the whole run has been accounted for.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from beam_pipeline.job.attempts import attempt_name, new_attempt
from beam_pipeline.job.hash_tables import staged_hash_rows
from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.runtime.ordered_pool import ordered_map
from beam_pipeline.runtime.progress_counts import Reporter
from transforms import duplicates as dups
from transforms import files
from transforms.class_stats import ClassStats, StatsSum
from transforms.duplicates import ImageHash
from transforms.format import digest_table, record_formats, record_index
from transforms.format.naming import DIGEST_TABLE_SUFFIX, INDEX_DIR, KEY_TABLE_SUFFIX
from transforms.pairing import Pair, SourceFile
from transforms.record import Record
from transforms.rejects import Reason, Reject, RejectError
from transforms.sources import registry
from transforms.splits import ShardSpec

FACTS_SUFFIX = ".facts.jsonl"
# Thumbnails hashed per numpy call (transforms.duplicates.fingerprints): 3 KB each held
_HASHED = 256
# Errors of the storage itself, not of one file: the run fails rather than calling data bad.
_STORAGE_FAILURES = (errno.EIO, errno.ENOMEM, errno.ENOSPC, errno.EROFS)


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
    images_read: int = 0  # pairs whose files this shard's writer read (0: a rewrite)


def write_shard(
    settings: ShardWriterSettings, spec: ShardSpec, pairs: Sequence[Pair]
) -> tuple[WrittenShard, tuple[Reject, ...], list[ImageHash]]:
    """Read, convert and write the shard's pairs in key order into the staging folder, under
    this attempt's names (job/attempts.py); its rejects, and (the duplicate search on) its
    records' image hashes, made in the validation decode."""
    progress = Reporter(settings.progress_dir)
    rejects: list[Reject] = []
    ordered = sorted(pairs, key=lambda pair: pair.key)
    convert = functools.partial(build_record, settings)
    with ShardBuilder(settings, spec) as shard:
        for pair, made in ordered_map(convert, ordered, settings.threads):
            progress.add()
            if isinstance(made, RejectError):
                rejects.append(
                    Reject(pair.key, made.reason, made.detail, pair.image.path, pair.mask.path)
                )
                continue
            record, digest, hashes = made
            shard.add(record, digest, hashes, (pair.image.path, pair.mask.path))
        progress.flush()
        written = shard.finish(images_read=len(ordered))
    return written, tuple(rejects), shard.hashes


class ShardBuilder:
    """One shard attempt being written: add records in key order, then finish() stages the
    shard, its offset index, key rows, digest rows and, with the duplicate search on, its
    hash rows and facts (what a rewrite, job/shard_rewrite.py, needs of each record besides
    its bytes); the WrittenShard that describes them. Side rows are kept as the lines they
    are staged as, so a rewrite copies a staged record's rows without parsing them."""

    def __init__(self, settings: ShardWriterSettings, spec: ShardSpec) -> None:
        self._settings = settings
        self._spec = spec
        self._attempt = new_attempt()
        self._local = files.is_local(settings.staging_dir)
        folder = settings.staging_dir if self._local else tempfile.gettempdir() + "/"
        self._partial = f"{folder}{spec.name}.partial-{uuid.uuid4().hex}"
        self._adapter = record_formats.get(spec.record_format)  # the format the name says
        classes = settings.classes
        self._stats = StatsSum(classes.num_classes) if classes.is_classes else None
        self._shapes: set[tuple[int, int]] = set()
        self._written: list[tuple[str, int]] = []  # (key, serialized length): the index
        self._rows = StagedRows([], [], [])  # in key order, as the shard
        self.hashes: list[ImageHash] = []  # of the records this attempt made
        self._unhashed: list[dups.Unhashed] = []
        self._transcoded = self._exif_ignored = 0

    def __enter__(self) -> ShardBuilder:
        self._writer = self._adapter.writer(self._partial)
        self._writer.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._writer is not None:
            self._writer.__exit__(*exc)
        if os.path.exists(self._partial):
            os.remove(self._partial)

    def add(self, record: Record, digest: str, hashes: dups.Unhashed | None, paths) -> None:
        """A record made from its pair, its content digest, its thumbnail (hashed with the
        next _HASHED of them; None with the search off) and (image, mask) source paths."""
        self._writer.write(record.serialized)
        self._count(record, len(record.serialized))
        self._rows.digests.append(digest_table.row_bytes([(record.key, digest)]))
        if hashes is not None:
            self._unhashed.append(hashes)
            if len(self._unhashed) >= _HASHED:
                self._hash_waiting()
        if self._settings.store_hashes:
            self._rows.facts.append(RecordFacts.of(record, paths).line())

    def add_staged(self, record: Record, lines: tuple[bytes, bytes, bytes], framed=None) -> None:
        """A record an attempt of this run staged (a rewrite), with its (digest, hash, facts)
        lines as staged; `framed`: (descriptor, offset, length) of its frame in a staged
        shard of this format, copied as it is (record.serialized is then not read)."""
        self._hash_waiting()
        if framed is None:
            self._writer.write(record.serialized)
            length = len(record.serialized)
        else:
            self._writer.copy_frames(*framed)
            length = framed[2] - record_index.FRAME_OVERHEAD
        self._count(record, length)
        for rows, line in zip(self._rows, lines, strict=True):
            rows.append(line)

    def _count(self, record: Record, length: int) -> None:
        self._written.append((record.key, length))
        self._transcoded += record.image_transcoded
        self._exif_ignored += record.exif_ignored
        self._shapes.add((record.height, record.width))
        if self._stats is not None:
            self._stats.add(record.class_stats)

    def _hash_waiting(self) -> None:
        if self._unhashed:
            made = dups.fingerprints(self._unhashed)
            self.hashes += made
            self._rows.hashes.append(dups.hash_rows_bytes(made))
            self._unhashed = []

    def finish(self, images_read: int = 0) -> WrittenShard:
        self._hash_waiting()
        writer, self._writer = self._writer, None
        writer.__exit__(None, None, None)
        settings, spec, attempt = self._settings, self._spec, self._attempt
        staged = files.join(settings.staging_dir, attempt_name(spec.name, attempt))
        size, digest = _stage(self._partial, staged, self._local)
        index_bytes, index_sha256 = stage_index(
            settings.staging_dir, spec, self._written, self._adapter.offset_index, attempt
        )
        tables = [(staged_digest_rows, self._rows.digests)]
        if settings.store_hashes:
            tables += [(staged_hash_rows, self._rows.hashes), (staged_facts, self._rows.facts)]
        for name, rows in tables:
            staged_table = files.join(settings.staging_dir, attempt_name(name(spec.name), attempt))
            files.write_bytes(staged_table, b"".join(rows))
        return WrittenShard(
            spec,
            len(self._written),
            size,
            digest,
            tuple(sorted(self._shapes)),
            self._transcoded,
            index_bytes,
            index_sha256,
            None if self._stats is None else self._stats.result().to_json(),
            self._exif_ignored,
            attempt,
            images_read,
        )


class StagedRows(NamedTuple):
    """A shard's side-table lines, each ending in a newline: digest rows, hash rows (one
    item may hold a batch of them), facts."""

    digests: list[bytes]
    hashes: list[bytes]
    facts: list[bytes]


@dataclasses.dataclass(frozen=True)
class RecordFacts:
    """What a shard's description needs of a record besides its bytes, and where its pair
    came from (a rewrite's rejects name the files): one JSON line per record, staged beside
    the shard. JSON, not pickle: the staging folder may sit in a shared bucket."""

    image_path: str
    mask_path: str
    height: int
    width: int
    transcoded: bool
    exif_ignored: bool
    class_stats: ClassStats | None

    @classmethod
    def of(cls, record: Record, paths: tuple[str, str]) -> RecordFacts:
        image, mask = paths
        return cls(
            image,
            mask,
            record.height,
            record.width,
            record.image_transcoded,
            record.exif_ignored,
            record.class_stats,
        )

    def line(self) -> bytes:
        stats = None if self.class_stats is None else self.class_stats.to_json()
        fields = [self.image_path, self.mask_path, self.height, self.width]
        return (json.dumps([*fields, self.transcoded, self.exif_ignored, stats]) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes, where: str) -> RecordFacts:
        try:
            image, mask, height, width, transcoded, exif, stats = json.loads(line)
            stats = None if stats is None else ClassStats.from_json(stats)
            return cls(image, mask, height, width, transcoded, exif, stats)
        except (ValueError, TypeError, KeyError) as error:
            raise OSError(f"{where}: a record's facts do not decode ({error})") from None

    def record(self, key: str, serialized: bytes) -> Record:
        return Record(
            key,
            serialized,
            self.height,
            self.width,
            self.transcoded,
            self.class_stats,
            self.exif_ignored,
        )


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


def staged_facts(shard_name: str) -> str:
    """Where a shard's record facts (RecordFacts lines, in key order) wait: staging only."""
    return f"{INDEX_DIR}/{shard_name}{FACTS_SUFFIX}"


def staged_digest_rows(shard_name: str) -> str:
    """Where a shard's (key, content digest) rows wait for the commit (in key order)."""
    return f"{INDEX_DIR}/{shard_name}{DIGEST_TABLE_SUFFIX}"


def _stage(partial: str, staged: str, local: bool) -> tuple[int, str]:
    """Give the finished file its staged name; (bytes, sha256).

    The name is the attempt's own (job/attempts.py): a retried or doubled shard never
    overwrites another attempt's file.
    """
    with open(partial, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256")  # one reused buffer: see files.sha256
        size = os.fstat(handle.fileno()).st_size
    if local:
        os.replace(partial, staged)
    else:
        files.upload_file(partial, staged)
    return size, digest.hexdigest()


def read_source(source: SourceFile, limit: int, too_large: Reason) -> bytes:
    """A source file's bytes, or a RejectError saying why it cannot be used."""
    try:
        return files.read_bounded(source.path, limit, source.size)
    except files.NotAFileError as error:
        raise RejectError(Reason.NOT_A_FILE, f"{os.path.basename(source.path)}: {error}") from None
    except files.TooLargeError as error:
        raise RejectError(too_large, f"{os.path.basename(source.path)}: {error}") from None
    except FileNotFoundError:
        raise RejectError(
            Reason.READ_ERROR, f"{os.path.basename(source.path)} vanished after listing"
        ) from None
    except OSError as error:
        if error.errno in _STORAGE_FAILURES:
            raise
        raise RejectError(
            Reason.READ_ERROR, f"{os.path.basename(source.path)}: {error.strerror or error}"
        ) from None


def _read_pair(settings: ShardWriterSettings, pair: Pair) -> tuple[bytes, bytes | None, bytes]:
    """The pair's image bytes, mask bytes (None when the mask is no file) and what its
    content digest takes of the mask side (the mask file's bytes, or an annotation entry's
    staged payload)."""
    limits = settings.limits
    image_bytes = read_source(pair.image, limits.image_bytes, Reason.IMAGE_TOO_LARGE)
    if registry.get(settings.mask_source).reads_mask_file:
        mask_bytes = read_source(pair.mask, limits.mask_bytes, Reason.MASK_TOO_LARGE)
        return image_bytes, mask_bytes, mask_bytes
    return image_bytes, None, (getattr(pair.mask, "payload", None) or "").encode()


def pair_digest(settings: ShardWriterSettings, pair: Pair) -> str | RejectError:
    """The content digest of a pair's source files, or why they cannot be read."""
    try:
        image_bytes, _, mask_side = _read_pair(settings, pair)
        return digest_table.content_digest(image_bytes, mask_side)
    except RejectError as error:
        return error


def build_record(settings: ShardWriterSettings, pair: Pair):
    """(record, content digest, its image as dups.Unhashed: None with the search off) from
    one read of each file, or the RejectError saying why there is no record: what the writer
    does per entry (the dry run's estimate times this, launch/estimate.py)."""
    source = registry.get(settings.mask_source)
    try:
        image_bytes, mask_bytes, mask_side = _read_pair(settings, pair)
        record = source.record(
            pair.key, image_bytes, pair.mask, mask_bytes, settings.source_settings
        )
    except RejectError as error:
        return error
    if not settings.store_hashes:
        return record, digest_table.content_digest(image_bytes, mask_side), None
    image_sha256, mask_sha256 = dups.digest(image_bytes), dups.digest(mask_side)
    mask = mask_sha256 if mask_bytes is not None else None
    unhashed = dups.Unhashed(pair.key, image_sha256, record.thumbnail, mask)
    return record, digest_table.digest_of_digests(image_sha256, mask_sha256), unhashed
