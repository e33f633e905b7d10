"""Content digests of a version's keys: what `segprep prepare --append` looks new keys up in.

`index/<split>[.vN].digests.jsonl` (names in transforms.format.naming), one JSON array per
key, `["<key>", "<sha256 hex>"]`, sorted by key (Python's string order, the order shards are
written in). The digest is content_digest() of the source image and mask bytes as read, so
an unchanged input file gives the same digest whatever the record stores.

Lookups never load a table: `SortedTable` bisects the file by byte offset (each probe reads
one block and resynchronises on the next newline, as `look(1)` does), so a lookup costs
O(log n) block reads and memory of one block, and an append's lookups cost
O(new entries x versions x log n) whatever the size of the dataset.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Callable, Iterable, Iterator

_BLOCK = 4096


class DigestTableError(ValueError):
    """A digest table that is not sorted [key, sha256] lines."""


def content_digest(image: bytes, mask: bytes) -> str:
    """sha256 over the sha256 of the image bytes and of the mask bytes (no ambiguity where
    one ends and the other starts)."""
    return digest_of_digests(hashlib.sha256(image).hexdigest(), hashlib.sha256(mask).hexdigest())


def digest_of_digests(image_sha256: str, mask_sha256: str) -> str:
    """content_digest from the two sha256 (hex) already taken, as the duplicate search has."""
    return hashlib.sha256(bytes.fromhex(image_sha256) + bytes.fromhex(mask_sha256)).hexdigest()


def row_bytes(rows: Iterable[tuple[str, str]]) -> bytes:
    lines = (json.dumps([key, digest], ensure_ascii=False) + "\n" for key, digest in rows)
    return "".join(lines).encode()


def parse_row(line: bytes) -> tuple[str, str]:
    try:
        key, digest = json.loads(line)
    except (ValueError, TypeError) as error:
        raise DigestTableError(f"not [key, sha256]: {error}") from None
    if not (isinstance(key, str) and isinstance(digest, str) and len(digest) == 64):
        raise DigestTableError(f"not [key, sha256]: {line[:200]!r}")
    return key, digest


def iter_rows(lines: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """The rows of a table's lines, checked to be in strictly increasing key order."""
    previous = None
    for line in lines:
        key, digest = parse_row(line)
        if previous is not None and key <= previous:
            raise DigestTableError(f"key {key!r} after {previous!r}: not sorted")
        previous = key
        yield key, digest


class KeyOrder:
    """A table's lines checked one at a time as another read streams them (the append's
    sha256 read), so the order its lookups bisect by costs no second read: `problem` names
    the first line that is not a [key, sha256] row after its predecessor's key."""

    def __init__(self) -> None:
        self._previous: str | None = None
        self._line = 0
        self.problem: str | None = None

    def add(self, line: bytes) -> None:
        if self.problem is not None:
            return
        self._line += 1
        try:
            key, _ = parse_row(line)
        except DigestTableError as error:
            self.problem = f"line {self._line} is {error}"
            return
        if self._previous is not None and key <= self._previous:
            # A key out of order hides itself and its neighbours from the bisection, and an
            # equal one is a key stored twice: either way a lookup answers wrongly.
            self.problem = f"not sorted at line {self._line}"
        self._previous = key


def merge_sorted(tables: Iterable[Iterable[bytes]]) -> Iterator[bytes]:
    """The lines of sorted tables (one per shard) as one sorted table: holds one line per
    input at a time."""
    return heapq.merge(*tables, key=lambda line: parse_row(line)[0])


class SortedTable:
    """Key lookups in one sorted digest table, by bisection over byte offsets.

    `read_at(offset, length)` returns up to `length` bytes at `offset` (a local file's pread
    or a ranged Cloud Storage read); `size` is the table's size in bytes.
    """

    def __init__(self, read_at: Callable[[int, int], bytes], size: int) -> None:
        self._read_at = read_at
        self._size = size

    def _line_from(self, start: int) -> tuple[bytes, int] | None:
        """The line starting exactly at `start` and the offset after it."""
        if start >= self._size:
            return None
        data = b""
        while True:
            chunk = self._read_at(start + len(data), _BLOCK)
            if not chunk:
                raise DigestTableError(f"the last line (from byte {start}) has no newline")
            data += chunk
            end = data.find(b"\n")
            if end >= 0:
                return data[:end], start + end + 1

    def _next_line_start(self, offset: int) -> int:
        """The first line start at or after `offset` (offset 0 starts a line)."""
        if offset == 0:
            return 0
        position = offset - 1
        while position < self._size:
            chunk = self._read_at(position, _BLOCK)
            if not chunk:
                break
            found = chunk.find(b"\n")
            if found >= 0:
                return position + found + 1
            position += len(chunk)
        return self._size

    def get(self, key: str) -> str | None:
        """The digest stored for `key`, or None when the table does not hold it."""
        low, high = 0, self._size  # every line starting before `low` holds a smaller key
        while high - low > _BLOCK:
            middle = (low + high) // 2
            start = self._next_line_start(middle)
            found = self._line_from(start)
            if found is None:
                high = middle
                continue
            line, after = found
            if parse_row(line)[0] < key:
                low = after
            else:
                high = middle
        # The key's line starts at or after `low`, within a block of `high`: scan that range
        # from one read, reading on only for a line that crosses its end.
        position, buffer = low, b""
        while position + len(buffer) < self._size or buffer:
            end = buffer.find(b"\n")
            if end < 0:
                chunk = self._read_at(position + len(buffer), max(_BLOCK, high - low + _BLOCK))
                if not chunk:
                    raise DigestTableError(f"the last line (from byte {position}) has no newline")
                buffer += chunk
                continue
            row_key, digest = parse_row(buffer[:end])
            if row_key == key:
                return digest
            if row_key > key:
                return None
            position, buffer = position + end + 1, buffer[end + 1 :]
        return None
