"""Each pair read once: its record built and spilled into the staging folder, a reference on.

With the duplicate search on, groups decide splits and splits decide shards, so a record
must exist before its shard is known. One chunk of pairs is read, decoded and hashed here
(the validation decode also makes the thumbnail), the records' bytes are appended to one
spill file of this attempt in the run's staging folder, each followed by its facts (what
metadata.json and the hash tables need of it: BuiltFacts), and each pair goes on carrying a
small `BuiltFile` (where its bytes are, or why it was rejected) while its hashes go to the
search. Planning moves only these references; the shard writer (job/shard_work.py) copies
each record into its shard and reads its facts in the same read.

A spill file's name is new for every attempt (a retried chunk never appends to a file that
another attempt wrote), it sits in the staging folder, and the staging folder is never
published: a run's spill files go with it.

Plain Python, no Beam: a local run's writer processes run it (runtime/writer_pool.py).
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
from collections.abc import Sequence

from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.runtime.ordered_pool import ordered_map
from beam_pipeline.runtime.progress_counts import Reporter
from transforms import files
from transforms.class_stats import ClassStats
from transforms.duplicates import ImageHash, digest, fingerprint
from transforms.files import RangeReader
from transforms.pairing import Pair, SourceFile
from transforms.record import Record
from transforms.rejects import Reason, RejectError
from transforms.sources import registry

SPILL_PREFIX = "records-"
SPILL_SUFFIX = ".spill"
# Errors of the storage itself, not of one file: the run fails rather than calling data bad.
_STORAGE_FAILURES = (errno.EIO, errno.ENOMEM, errno.ENOSPC, errno.EROFS)


@dataclasses.dataclass(frozen=True, order=True)
class BuiltFile(SourceFile):
    """A pair's image file once its record is built: where in the staging folder its
    record's bytes wait, followed by what the shard writer needs of it (BuiltFacts); or,
    with `reject`, why it has no record. Small, since planning moves it about: the facts
    travel once, inside the spill file."""

    spill: str = dataclasses.field(default="", compare=False)  # its name in the staging folder
    offset: int = dataclasses.field(default=0, compare=False)
    length: int = dataclasses.field(default=0, compare=False)  # the record's bytes
    facts: int = dataclasses.field(default=0, compare=False)  # its facts' JSON bytes after it
    reject: tuple[Reason, str] | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class BuiltFacts:
    """What the shard writer and metadata.json need of a built record besides its bytes.
    Stored as JSON, not pickled: the staging folder may sit in a shared bucket, and loading
    a pickle from it would run whatever someone put there."""

    height: int
    width: int
    transcoded: bool
    exif_ignored: bool
    class_stats: ClassStats | None
    digest: str  # the pair's content digest
    hashes: ImageHash  # as its hash-table row (no mask digest: the search has it already)

    def to_bytes(self) -> bytes:
        stats = None if self.class_stats is None else self.class_stats.to_json()
        facts = [self.height, self.width, self.transcoded, self.exif_ignored, stats]
        return json.dumps([*facts, self.digest, self.hashes.row()]).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> BuiltFacts:
        try:
            height, width, transcoded, exif, stats, digest, row = json.loads(data)
            stats = None if stats is None else ClassStats.from_json(stats)
            return cls(height, width, transcoded, exif, stats, digest, ImageHash.from_row(row))
        except (ValueError, TypeError, KeyError) as error:
            raise OSError(f"{where}: a record's facts do not decode ({error})") from None


def build_records(
    settings: ShardWriterSettings, pairs: Sequence[Pair]
) -> list[tuple[Pair, ImageHash | None]]:
    """Read each pair once and spill its record; each pair back carrying its BuiltFile, with
    its image's hashes for the search (None: rejected)."""
    local = files.is_local(settings.staging_dir)
    name = f"{SPILL_PREFIX}{uuid.uuid4().hex}{SPILL_SUFFIX}"
    spill = files.join(settings.staging_dir, name)
    written = spill if local else os.path.join(tempfile.gettempdir(), name)
    progress = Reporter(settings.progress_dir)
    convert = functools.partial(_record_or_reject, settings)
    built: list[tuple[Pair, ImageHash | None]] = []
    try:
        with open(written, "xb") as handle:
            for pair, made in ordered_map(convert, pairs, settings.threads):
                built.append(_reference(pair, made, name, handle))
                progress.add()
        progress.flush()
        if not local:
            files.upload_file(written, spill)
    finally:
        if not local and os.path.exists(written):
            os.remove(written)
    return built


def _reference(pair: Pair, made, name: str, handle) -> tuple[Pair, ImageHash | None]:
    """The pair carrying its BuiltFile, and its hashes; its record's bytes and facts
    appended to the spill file."""
    image = pair.image
    if isinstance(made, RejectError):
        failed = BuiltFile(image.path, image.size, image.regular, reject=(made.reason, made.detail))
        return dataclasses.replace(pair, image=failed), None
    record, content, hashes = made
    facts = BuiltFacts(
        record.height,
        record.width,
        record.image_transcoded,
        record.exif_ignored,
        record.class_stats,
        content,
        hashes,
    ).to_bytes()
    offset = handle.tell()
    handle.write(record.serialized)
    handle.write(facts)
    reference = BuiltFile(
        image.path, image.size, image.regular, name, offset, len(record.serialized), len(facts)
    )
    return dataclasses.replace(pair, image=reference), hashes


def _record_or_reject(settings: ShardWriterSettings, pair: Pair):
    try:
        return _record_of(settings, pair)
    except RejectError as error:
        return error


def _record_of(settings: ShardWriterSettings, pair: Pair) -> tuple[Record, str, ImageHash]:
    """The pair's record, content digest and hashes, from one read of each file."""
    limits = settings.limits
    source = registry.get(settings.mask_source)
    image_bytes = read_source(pair.image, limits.image_bytes, Reason.IMAGE_TOO_LARGE)
    mask_bytes = mask_sha256 = None
    if source.reads_mask_file:
        mask_bytes = read_source(pair.mask, limits.mask_bytes, Reason.MASK_TOO_LARGE)
        mask_sha256 = digest(mask_bytes)
    record = source.record(pair.key, image_bytes, pair.mask, mask_bytes, settings.source_settings)
    hashes = fingerprint(pair.key, image_bytes, record.thumbnail, mask_sha256)
    if mask_sha256 is None:
        mask_sha256 = digest((getattr(pair.mask, "payload", None) or "").encode())
    # digest_table.content_digest's value, from the two sha256 already computed
    content = hashlib.sha256(bytes.fromhex(hashes.sha256) + bytes.fromhex(mask_sha256))
    return record, content.hexdigest(), hashes


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


def is_built(pair: Pair) -> bool:
    return isinstance(pair.image, BuiltFile)


class SpilledRecords:
    """The records of built pairs, read back from the spill files in `staging_dir` (one open
    reader per file, kept while a shard is written)."""

    def __init__(self, staging_dir: str) -> None:
        self._staging_dir = staging_dir
        self._readers: dict[str, RangeReader] = {}

    def record(self, pair: Pair) -> tuple[Record, str, ImageHash] | RejectError:
        """(record, content digest, hashes) of a built pair, or the reject it was built as:
        its record's bytes and facts in one read."""
        built = pair.image
        if built.reject is not None:
            return RejectError(*built.reject)
        path = files.join(self._staging_dir, built.spill)
        reader = self._readers.get(path)
        if reader is None:
            reader = self._readers[path] = RangeReader(path)
        data = reader.read_at(built.offset, built.length + built.facts)
        if len(data) != built.length + built.facts:
            raise OSError(f"{path} ends before the record of {pair.key}")
        facts = BuiltFacts.from_bytes(data[built.length :], path)
        record = Record(
            pair.key,
            data[: built.length],
            facts.height,
            facts.width,
            facts.transcoded,
            facts.class_stats,
            facts.exif_ignored,
        )
        return record, facts.digest, facts.hashes
