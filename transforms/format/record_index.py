"""The record index: where every record of a shard starts, and which record holds which key.

Small text files under `index/` (names in transforms.format.naming):

* `index/<shard file>.idx`, one line per record, `"<offset> <length>\\n"`: the byte offset of
  the record's frame in the shard and the frame's length. This is the format of DALI's
  `tfrecord2idx` and of the `tfrecord` package's `.tfindex`, so their readers use it as is.
  Only formats whose adapter has `offset_index` (TFRecord) get one: ArrayRecord finds
  record i by itself, and offsets into its chunks would mean nothing to any reader.
* `index/<split>.keys.jsonl`, for every format, one JSON array per record,
  `["<key>", <shard>, <record>]`, in the split's record order (shard by shard, record by
  record): line i is the split's record i, and a dict over the lines answers
  key -> (shard number, record number in that shard).

Both are computed from the serialized record lengths alone, which the writer knows as it
writes, so no shard is read back to build them: a TFRecord frame is the payload plus a fixed
16 bytes (8-byte length, 4-byte masked CRC of the length, 4-byte masked CRC of the payload),
and frames follow each other with nothing in between.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence

from transforms.format.naming import index_name, parse_shard_name
from transforms.format.tfrecord import FRAME_OVERHEAD


class IndexFormatError(ValueError):
    """An index or key-table file that is not in the format this module writes."""


@dataclasses.dataclass(frozen=True)
class KeyRow:
    """One line of a key table: record `record` of shard number `shard` holds `key`."""

    key: str
    shard: int
    record: int


@dataclasses.dataclass(frozen=True)
class ShardIndex:
    """What the writer gets back for one shard: its index file and its key-table rows."""

    index_file: str  # index/<shard>.idx, relative to the output directory
    index_bytes: bytes
    key_rows: tuple[KeyRow, ...]


def frame_offsets(serialized_lengths: Iterable[int]) -> list[tuple[int, int]]:
    """(offset, framed length) of each record, for records written back to back from 0."""
    frames = []
    offset = 0
    for length in serialized_lengths:
        if length < 0:
            raise ValueError(f"negative record length {length}")
        framed = length + FRAME_OVERHEAD
        frames.append((offset, framed))
        offset += framed
    return frames


def index_bytes(frames: Iterable[tuple[int, int]]) -> bytes:
    """The `.idx` file: "offset length" per line, as tfrecord2idx writes it."""
    return "".join(f"{offset} {length}\n" for offset, length in frames).encode("ascii")


def parse_index(data: bytes) -> list[tuple[int, int]]:
    """(offset, framed length) per record from an `.idx` file; frames must be back to back."""
    frames = []
    expected = 0
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as error:
        raise IndexFormatError(f"not an ASCII index file: {error}") from None
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if len(fields) != 2 or not all(field.isdigit() for field in fields):
            raise IndexFormatError(f"line {number}: {line!r} is not 'offset length'")
        offset, length = int(fields[0]), int(fields[1])
        if offset != expected or length < FRAME_OVERHEAD:
            raise IndexFormatError(
                f"line {number}: frame at {offset} of {length} bytes, expected one at "
                f"{expected} of at least {FRAME_OVERHEAD}"
            )
        frames.append((offset, length))
        expected = offset + length
    if text and not text.endswith("\n"):
        raise IndexFormatError("the last line is cut short (no newline)")
    return frames


def key_table_bytes(rows: Iterable[KeyRow]) -> bytes:
    """Key-table lines for `rows`.

    The table of a split is the concatenation of its shards' rows in shard order, so a
    commit can write it shard by shard without holding the whole split in memory.
    """
    return "".join(
        json.dumps([row.key, row.shard, row.record], ensure_ascii=False) + "\n" for row in rows
    ).encode("utf-8")


def parse_key_table(data: bytes) -> list[KeyRow]:
    """The rows of a key-table file, in file order."""
    return [parse_key_row(line, number) for number, line in enumerate(data.splitlines(), 1)]


def parse_key_row(line: bytes, number: int) -> KeyRow:
    """Line `number` of a key table (a reader that streams the table parses line by line)."""
    try:
        key, shard, record = json.loads(line.decode("utf-8"))
    except (ValueError, TypeError) as error:  # UnicodeDecodeError is a ValueError
        raise IndexFormatError(f"line {number}: not [key, shard, record]: {error}") from None
    if not (isinstance(key, str) and is_count(shard) and is_count(record)):
        raise IndexFormatError(f"line {number}: not [key, shard, record]: {line[:200]!r}")
    return KeyRow(key, shard, record)


def is_count(value: object) -> bool:
    """A non-negative int that is not a bool (JSON's true is no count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def index_shard(shard_file: str, records: Sequence[tuple[str, int]]) -> ShardIndex:
    """The index of one shard from its records' (key, serialized length), in write order.

    Call it with what the writer passed to TFRecordWriter.write (the key and len(record));
    the offsets then match the file byte for byte.
    """
    index_file = index_name(shard_file)  # ValueError for a name that is no shard's
    _, shard_number, _ = parse_shard_name(shard_file)
    frames = frame_offsets(length for _, length in records)
    rows = tuple(KeyRow(key, shard_number, number) for number, (key, _) in enumerate(records))
    return ShardIndex(index_file, index_bytes(frames), rows)
