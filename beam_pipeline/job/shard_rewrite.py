"""A written shard rewritten after the duplicate search: some of its records leave (a group
takes them to another split, or --duplicates drop / --leakage_check rejects them), others
come in from shards of another split.

Shards are written straight from the listing's plan, before the search has seen every
image, so each image is read and decoded once and, where the search changes nothing (the
common case), each record is written once. Only a shard that the search changed is written
again, from the staged files of this run: its own records and the incoming ones, in key
order, into a new attempt (job/attempts.py) whose WrittenShard replaces the first one.
The shard's own local TFRecord frames are copied byte for byte in the kernel
(tfrecord.Writer.copy_frames); incoming records are gathered first, one source shard open at
a time, into a local holding file (on gs:// each one a ranged read of its frame), so memory
and descriptors stay those of one source shard however many send records.

Plain Python, no Beam: a local run's writer processes run it (runtime/writer_pool.py).
"""

from __future__ import annotations

import dataclasses
import io
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence

from beam_pipeline.job.attempts import attempt_name
from beam_pipeline.job.hash_tables import staged_hash_rows
from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.job.shard_work import (
    RecordFacts,
    ShardBuilder,
    WrittenShard,
    staged_digest_rows,
    staged_facts,
    staged_key_rows,
)
from transforms import files
from transforms.format import record_formats, record_index
from transforms.format.naming import index_name
from transforms.rejects import Reason, Reject
from transforms.splits import ShardSpec

_TABLE_LIMIT = 1 << 30  # a staged table of this run's own: bounded all the same


@dataclasses.dataclass(frozen=True)
class Incoming:
    """A record that joins the shard: its key and the written shard that holds it now."""

    key: str
    source: str  # the source shard's name
    attempt: str  # the attempt whose staged files hold it
    record_format: str


class StagedShard:
    """A written shard's staged files, read back: keys, records, facts, digests, hashes."""

    def __init__(self, staging_dir: str, name: str, attempt: str, record_format: str) -> None:
        def staged(file: str) -> str:
            return files.join(staging_dir, attempt_name(file, attempt))

        def table(file: str) -> bytes:
            return files.read_bounded(staged(file), _TABLE_LIMIT)

        self.name = name
        self.keys = [row.key for row in record_index.parse_key_table(table(staged_key_rows(name)))]
        self.position = {key: number for number, key in enumerate(self.keys)}
        # Rows are parsed only for the records used: a shard that gives one record to
        # another is opened for that one.
        self._where = staged(staged_facts(name))
        self._facts = table(staged_facts(name)).splitlines(keepends=True)
        self._digests = table(staged_digest_rows(name)).splitlines(keepends=True)
        self._hashes = table(staged_hash_rows(name)).splitlines(keepends=True)
        lengths = {len(self._facts), len(self._digests), len(self._hashes)}
        if lengths != {len(self.keys)}:
            raise OSError(f"{staged(name)}: its staged tables disagree on how many records")
        self._path, self._record_format = staged(name), record_format
        self._index = staged(index_name(name))
        self._reader = self._copy = self._fd = self._frames = self._ranges = None

    def facts(self, number: int) -> RecordFacts:
        return RecordFacts.from_line(self._facts[number], self._where)

    def lines(self, number: int) -> tuple[bytes, bytes, bytes]:
        """Record `number`'s (digest, hash, facts) lines as staged: a rewrite copies them."""
        return self._digests[number], self._hashes[number], self._facts[number]

    def record(self, number: int):
        """Record `number` (key order), its bytes read at first use: a ranged read of its
        frame where the format has self-contained frames (gs:// included), else through the
        format's random reader (a gs:// shard downloaded first)."""
        adapter = record_formats.get(self._record_format)
        if adapter.offset_index:
            offset, length = self._frame(number)
            if self._ranges is None:
                self._ranges = files.RangeReader(self._path)
            framed = self._ranges.read_at(offset, length)
            where = f"{self._path} record {number}"
            (payload,) = adapter.read_records(io.BytesIO(framed), where, len(framed))
        else:
            if self._reader is None:
                self._reader = self._open(adapter)
            payload = self._reader.read(number)
        return self.facts(number).record(self.keys[number], payload)

    def framed(self, number: int):
        """(Record `number` without its bytes, (descriptor, offset, length) of its frame) when
        its format has self-contained frames and the file is local, else None."""
        if not (
            record_formats.get(self._record_format).offset_index and files.is_local(self._path)
        ):
            return None
        offset, length = self._frame(number)
        if self._fd is None:
            with files.open_regular(self._path) as handle:
                self._fd = os.dup(handle.fileno())
        return self.facts(number).record(self.keys[number], b""), (self._fd, offset, length)

    def _frame(self, number: int) -> tuple[int, int]:
        if self._frames is None:
            self._frames = record_index.parse_index(files.read_bounded(self._index, _TABLE_LIMIT))
            if len(self._frames) != len(self.keys):
                raise OSError(f"{self._index}: its offsets disagree with the key rows")
        return self._frames[number]

    def _open(self, adapter):
        path = self._path
        if not files.is_local(path):  # the format's random reader reads a local file
            self._copy = os.path.join(tempfile.gettempdir(), f"{uuid.uuid4().hex}-{self.name}")
            files.download_file(path, self._copy)
            path = self._copy
        return adapter.random_reader(path, os.path.getsize(path), len(self.keys), None)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        if self._reader is not None:
            self._reader.close()
        if self._copy is not None and os.path.exists(self._copy):
            os.remove(self._copy)


@dataclasses.dataclass(frozen=True)
class _Arrival:
    """An incoming record, gathered: its facts, its staged side-table lines, and where its
    bytes wait in the rewrite's local holding file."""

    facts: RecordFacts
    lines: tuple[bytes, bytes, bytes]
    offset: int
    length: int


def _gather(settings: ShardWriterSettings, incoming: Sequence[Incoming], held) -> dict:
    """key -> _Arrival for each incoming record, its bytes appended to `held`: one source
    shard open at a time, so a shard that receives records from thousands of shards holds
    one shard's tables and one descriptor, not all of them."""
    by_source: dict[tuple[str, str, str], list[str]] = {}
    for item in incoming:
        by_source.setdefault((item.source, item.attempt, item.record_format), []).append(item.key)
    arrivals = {}
    for (name, attempt, record_format), keys in by_source.items():
        source = StagedShard(settings.staging_dir, name, attempt, record_format)
        try:
            for key in keys:
                number = source.position.get(key)
                if number is None:
                    raise OSError(f"{name} holds no record {key!r} to move")
                payload = source.record(number).serialized
                facts, lines = source.facts(number), source.lines(number)
                arrivals[key] = _Arrival(facts, lines, held.tell(), len(payload))
                held.write(payload)
        finally:
            source.close()
    held.flush()
    return arrivals


def rewrite_shard(
    settings: ShardWriterSettings,
    spec: ShardSpec,
    attempt: str | None,
    leaving: Mapping[str, tuple[str, str] | None],
    incoming: Sequence[Incoming],
) -> tuple[WrittenShard, tuple[Reject, ...]]:
    """The shard `spec` written again as a new attempt: its records (the attempt `attempt`
    staged; None: a shard the plan did not have) but those `leaving` (key -> (reason, detail)
    of a reject, or None for a record that moves), plus `incoming`, in key order; the rejects
    of the records that left as rejects. Incoming records are gathered first, source by
    source, into a local holding file; the shard's own records are copied as they are."""
    rejects: list[Reject] = []
    with tempfile.TemporaryFile(prefix="segprep-rewrite-") as held:
        arrivals = _gather(settings, incoming, held)
        entries: list[tuple[str, int]] = [(key, -1) for key in arrivals]
        own = None
        try:
            if attempt is not None:
                own = StagedShard(settings.staging_dir, spec.name, attempt, spec.record_format)
                for number, key in enumerate(own.keys):
                    if key not in leaving:
                        entries.append((key, number))
                    elif leaving[key] is not None:
                        reason, detail = leaving[key]
                        facts = own.facts(number)
                        rejects.append(
                            Reject(key, Reason(reason), detail, facts.image_path, facts.mask_path)
                        )
            entries.sort()
            with ShardBuilder(settings, spec) as builder:
                for key, number in entries:
                    if number < 0:  # an incoming record
                        arrival = arrivals[key]
                        payload = os.pread(held.fileno(), arrival.length, arrival.offset)
                        builder.add_staged(arrival.facts.record(key, payload), arrival.lines)
                        continue
                    record, framed = own.framed(number) or (own.record(number), None)
                    builder.add_staged(record, own.lines(number), framed)
                written = builder.finish()
        finally:
            if own is not None:
                own.close()
    return written, tuple(rejects)
