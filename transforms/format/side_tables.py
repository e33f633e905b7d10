"""The one way to open a side table that metadata.json lists (digest tables, hash tables, key
tables): checked against its DatasetInfo entry before a line of it is used.

A side table steers what a run does (an append skips the keys it holds, a leakage check
rejects what is close to its hashes), so a table that was truncated, reordered, emptied or
swapped for a FIFO or a link would make segprep silently store keys twice or miss leaks.
Before use, here:

- its name is one naming.py's parse rules give (`index/<split>[.vN].<kind>.jsonl`): a name
  from metadata.json never leads outside the output;
- it is a regular file reached through no link (the file and `index/` are not links; the
  descriptor is opened with O_NOFOLLOW and checked with fstat), with no hole (segprep writes
  every byte of its tables), or a gs:// object whose generation is pinned for every later
  read;
- its size is the one listed, at most `cap`, and its sha256 the listed one (streamed in
  chunks: memory of one chunk);
- its lines are read at most LINE_CAP bytes each, so a hostile 100 MB line costs one
  bounded read, never a parse.

Any difference is a SideTableError, worded by the caller in one line that names the file
and `segprep verify`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat as stat_module
from collections.abc import Iterator
from typing import Any

from transforms import files
from transforms.format import digest_table
from transforms.format.dataset_info import DatasetInfo, FileRef, SplitInfo
from transforms.format.naming import INDEX_DIR, SIDE_TABLE_RE, hashes_name
from transforms.format.record_index import is_count
from transforms.limits import HASH_ROW_BYTES

_CHUNK = 1 << 20
# No row segprep writes in a digest, key or hash table comes near this (a key is a file
# name: at most a few KB escaped).
LINE_CAP = 1 << 16
TABLE_CAP = 1 << 30  # bytes of one side table (FileLimits.key_table_bytes)


class SideTableError(ValueError):
    """A side table that is not what metadata.json lists: never read as if it were."""


def _check_name(name: Any) -> str:
    """`name` when it is a side table name naming.py would give, else SideTableError."""
    if not isinstance(name, str):
        raise SideTableError(f"{name!r} is not a file name")
    folder, _, table = name.partition("/")
    if folder != INDEX_DIR or not SIDE_TABLE_RE.fullmatch(table):
        raise SideTableError(f"{name!r} is not the name of a side table in {INDEX_DIR}/")
    return name


def is_side_table_name(name: Any) -> bool:
    """A name naming.py gives a key, digest or hash table (inside index/, nothing else)."""
    try:
        _check_name(name)
    except SideTableError:
        return False
    return True


def hash_table_refs(split: SplitInfo) -> tuple[FileRef, ...]:
    """Every image-hash table of the split, in version order: the first version's (when it
    searched), then each append's that searched (`appended_hashes`)."""
    first = hash_table_ref_of(split.name, split.extra.get("hashes"))
    return (*((first,) if first else ()), *split.appended_hashes)


def check_hash_table_sizes(split: SplitInfo, refs: tuple[FileRef, ...]) -> None:
    """SideTableError naming the largest of a split's hash tables when together they are
    listed larger than one longest row per record: they hold one row per record (a version
    with --duplicates off none), so a table padded with rows and restamped is refused
    before a search reads it."""
    total, cap = sum(ref.bytes for ref in refs), split.num_examples * HASH_ROW_BYTES
    if total > cap:
        largest = max(refs, key=lambda ref: ref.bytes).file
        raise SideTableError(
            f"{largest}: split {split.name!r}'s hash tables are listed at {total:,} bytes, "
            f"more than the {cap:,} its {split.num_examples:,} records can need"
        )


def hash_table_ref_of(split: str, entry: Any) -> FileRef | None:
    """The image-hash table a split's raw `hashes` entry lists (None: none listed), its name
    exactly hashes_name(split); tools that read metadata leniently pass the entry as read."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise SideTableError(f"split {split!r}: its hashes entry is not an object")
    name, size, digest = entry.get("file"), entry.get("bytes"), entry.get("sha256")
    if name != hashes_name(split):
        raise SideTableError(
            f"split {split!r}: hashes file {name!r}, expected {hashes_name(split)!r}"
        )
    if not is_count(size):
        raise SideTableError(f"{name}: listed size {size!r} is not a count")
    if not isinstance(digest, str):
        raise SideTableError(f"{name}: listed sha256 {digest!r} is not a string")
    return FileRef(name, size, digest)


class CheckedTable:
    """A side table whose name, kind, size and sha256 were checked: ranged reads and bounded
    lines of exactly those bytes (`read_at` as digest_table.SortedTable takes it)."""

    def __init__(self, name: str, size: int, read_at, close) -> None:
        self.name = name
        self.size = size
        self.read_at = read_at
        self._close = close

    def close(self) -> None:
        self._close()

    def __enter__(self) -> CheckedTable:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def chunks(self) -> Iterator[bytes]:
        offset = 0
        while offset < self.size:
            chunk = self.read_at(offset, min(_CHUNK, self.size - offset))
            if not chunk:
                raise SideTableError(f"{self.name}: shorter than its {self.size:,} bytes")
            offset += len(chunk)
            yield chunk

    def lines(self) -> Iterator[bytes]:
        """Its lines (with their newline), none longer than LINE_CAP."""
        carry = b""
        for chunk in self.chunks():
            parts = (carry + chunk).split(b"\n")
            carry = parts.pop()
            for part in parts:
                if len(part) >= LINE_CAP:
                    raise SideTableError(f"{self.name}: a line of more than {LINE_CAP:,} bytes")
                yield part + b"\n"
            if len(carry) >= LINE_CAP:
                raise SideTableError(f"{self.name}: a line of more than {LINE_CAP:,} bytes")
        if carry:
            raise SideTableError(f"{self.name}: its last line has no newline")


def open_table(
    output_dir: str,
    ref: FileRef,
    *,
    cap: int = TABLE_CAP,
    check_sha256: bool = True,
    sorted_keys: bool = False,
) -> CheckedTable:
    """The side table `ref` of `output_dir`, checked as the module says. check_sha256=False
    (a job's worker, after the launcher checked it) checks all but the sha256 and the line
    lengths (its own reads of lines cap them). sorted_keys=True (a digest table that lookups
    will bisect) also checks, in the read that hashes it, that its rows are [key, sha256] in
    increasing key order: a table restamped after its lines were reordered matches its
    sha256, yet a bisection in it misses keys it holds."""
    name = _check_name(ref.file)
    if ref.bytes > cap:
        raise SideTableError(f"{name}: listed as {ref.bytes:,} bytes, more than {cap:,}")
    opener = _open_remote if files.is_remote(output_dir) else _open_local
    table = opener(output_dir, name)
    try:
        if table.size != ref.bytes:
            raise SideTableError(f"{name}: {table.size:,} bytes, metadata.json lists {ref.bytes:,}")
        if check_sha256 or sorted_keys:
            digest = hashlib.sha256()
            order = digest_table.KeyOrder() if sorted_keys else None
            for line in table.lines():  # a line over the cap fails here, unparsed
                digest.update(line)
                if order is not None:
                    order.add(line)
            # The sha256 first: a table that is not the listed one says so, whatever its order.
            if check_sha256 and digest.hexdigest() != ref.sha256:
                raise SideTableError(
                    f"{name}: sha256 {digest.hexdigest()[:16]}..., metadata.json lists "
                    f"{str(ref.sha256)[:16]}..."
                )
            if order is not None and order.problem is not None:
                raise SideTableError(f"{name}: {order.problem}")
    except BaseException:
        table.close()
        raise
    return table


def open_digest_table(
    output_dir: str, ref: FileRef, *, check_sha256: bool = True
) -> digest_table.SortedTable:
    """Key lookups (digest_table.SortedTable) in a checked digest table, local or gs://."""
    table = open_table(output_dir, ref, check_sha256=check_sha256)
    return digest_table.SortedTable(table.read_at, table.size)


def _open_local(output_dir: str, name: str) -> CheckedTable:
    folder = os.path.join(output_dir, INDEX_DIR)
    try:
        if not stat_module.S_ISDIR(os.lstat(folder).st_mode):
            raise SideTableError(
                f"{name}: {INDEX_DIR}/ is a link or not a folder: segprep wrote neither"
            )
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW
        descriptor = os.open(os.path.join(output_dir, name), flags)
    except FileNotFoundError:
        raise SideTableError(f"{name}: missing (listed in metadata.json)") from None
    except OSError as error:
        if error.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise SideTableError(f"{name}: a link, not the file segprep wrote") from None
        raise SideTableError(f"{name}: cannot be opened: {error.strerror}") from None
    status = os.fstat(descriptor)
    if not stat_module.S_ISREG(status.st_mode):
        os.close(descriptor)
        raise SideTableError(f"{name}: not a regular file (a FIFO, device, socket or folder)")
    try:  # a sparse table costs no disk, yet would be read for as long as its size says
        files.check_no_hole_at(descriptor)
    except OSError as error:
        os.close(descriptor)
        raise SideTableError(f"{name}: {error}") from None
    os.set_blocking(descriptor, True)
    return CheckedTable(
        name,
        status.st_size,
        lambda offset, length: os.pread(descriptor, length, offset),
        lambda: os.close(descriptor),
    )


def _open_remote(output_dir: str, name: str) -> CheckedTable:
    path = files.join(output_dir, name)
    try:
        reader = files.RangeReader(path)
    except FileNotFoundError:
        raise SideTableError(f"{name}: missing (listed in metadata.json)") from None
    except files.NotAFileError as error:
        raise SideTableError(str(error)) from None
    return CheckedTable(name, reader.size, reader.read_at, lambda: None)


def listed_refs(info: DatasetInfo) -> dict[str, tuple[int, str]]:
    """{name: (bytes, sha256)} of every file `info` lists with its size and sha256: shards,
    their indexes, key, digest and hash tables, TFDS files, duplicates.jsonl."""
    refs: dict[str, tuple[int, str]] = {
        ref.file: (ref.bytes, ref.sha256) for ref in info.tfds_files
    }
    for split in info.splits.values():
        for shard in split.shards:
            refs[shard.file] = (shard.bytes, shard.sha256)
            if shard.index is not None:
                refs[shard.index.file] = (shard.index.bytes, shard.index.sha256)
        for ref in split.key_tables:
            refs[ref.file] = (ref.bytes, ref.sha256)
        with contextlib.suppress(SideTableError):
            for hashes in hash_table_refs(split):
                refs[hashes.file] = (hashes.bytes, hashes.sha256)
    for version in info.dataset_versions:
        for ref in version.digest_tables.values():
            refs[ref.file] = (ref.bytes, ref.sha256)
    listed = (info.duplicates or {}).get("file")
    if isinstance(listed, dict) and isinstance(listed.get("file"), str):
        refs[listed["file"]] = (listed.get("bytes"), listed.get("sha256"))
    return refs
