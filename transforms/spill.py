"""Bounded memory for listings of any size: an external sort, and record files.

The launcher's listing, pairing and COCO staging hold one bounded chunk of rows at a time:
rows are sorted in chunks of at most `chunk_bytes` (pickled size), each chunk spilled to a run
file in a folder the caller owns, and the runs merged lazily with heapq.merge. A million
entries then cost the same peak memory as ten thousand; the disk holds the rest.

Record files are TFRecord-framed (transforms/format/tfrecord.py): reading one is linear in
its size, a record's length is known before its bytes are read (so a cap is checked before
anything is allocated), and a reader can start at any file of a set in parallel.
"""

from __future__ import annotations

import heapq
import itertools
import os
import pickle
import re
import shutil
import stat
import struct
import sys
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from transforms.format import tfrecord

CHUNK_BYTES = 4 << 20  # pickled rows held before a chunk is sorted and spilled
MERGE_FAN_IN = 64  # run files open at once; more runs are merged in rounds
_LENGTH = struct.Struct("<Q")
_ROW_OVERHEAD = 160  # bytes object, (key, blob) tuple, key tuple, list slot


class ExternalSort:
    """(key, value) rows in, the same rows sorted by key out; memory bounded by `chunk_bytes`
    of pickled values, whatever the count. Keys are tuples that compare (and should be
    unique: equal keys fall back to comparing the pickled values); values may be anything
    picklable, pickled once when added."""

    def __init__(self, folder: str, name: str, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._folder = folder
        self._name = name
        self._chunk_bytes = chunk_bytes
        self._chunk: list[tuple[tuple[Any, ...], bytes]] = []
        self._held = 0
        self._runs: list[str] = []
        self._count = itertools.count()
        self.rows = 0

    def add(self, key: tuple[Any, ...], value: Any = None) -> None:
        blob = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        self._chunk.append((key, blob))
        # What the row costs in memory: the pickled value, the key's objects, the two tuples.
        self._held += len(blob) + sum(map(sys.getsizeof, key)) + _ROW_OVERHEAD
        self.rows += 1
        if self._held >= self._chunk_bytes:
            self._spill()

    def sorted(self) -> Iterator[tuple[tuple[Any, ...], Any]]:
        """Every (key, value) added, in key order; the sort takes no more rows after this."""
        if not self._runs:
            rows, self._chunk = sorted(self._chunk), []
            rows.reverse()
            while rows:  # popped as yielded: the chunk's memory goes as the rows do
                key, blob = rows.pop()
                yield key, pickle.loads(blob)
            return
        self._spill()
        runs = self._runs
        while len(runs) > MERGE_FAN_IN:
            merged = []
            for start in range(0, len(runs), MERGE_FAN_IN):
                path = self._run_path()
                group = runs[start : start + MERGE_FAN_IN]
                _write_rows(path, heapq.merge(*(_read_rows(p) for p in group)))
                merged.append(path)
            for path in runs:
                os.remove(path)
            runs = merged
        self._runs = runs
        for key, blob in heapq.merge(*(_read_rows(path) for path in runs)):
            yield key, pickle.loads(blob)

    def _spill(self) -> None:
        if not self._chunk:
            return
        self._chunk.sort()
        path = self._run_path()
        _write_rows(path, self._chunk)
        self._runs.append(path)
        self._chunk, self._held = [], 0

    def _run_path(self) -> str:
        return os.path.join(self._folder, f"{self._name}-{next(self._count):05d}.run")


def _write_rows(path: str, rows: Iterable[tuple[tuple[Any, ...], bytes]]) -> None:
    """Each row pickled on its own behind its length: one shared Pickler/Unpickler would
    keep a memo of every row read."""
    with open(path, "xb") as handle:
        for row in rows:
            blob = pickle.dumps(row, pickle.HIGHEST_PROTOCOL)
            handle.write(_LENGTH.pack(len(blob)))
            handle.write(blob)


def _read_rows(path: str) -> Iterator[tuple[tuple[Any, ...], bytes]]:
    with open(path, "rb") as handle:
        while header := handle.read(_LENGTH.size):
            (length,) = _LENGTH.unpack(header)
            yield pickle.loads(handle.read(length))


class RecordFiles:
    """Writes records into numbered TFRecord-framed files of at most `per_file` records each:
    `prefix-00000.records`, ... The files are the unit a job reads in parallel."""

    def __init__(self, prefix: str, per_file: int) -> None:
        self._prefix = prefix
        self._per_file = per_file
        self._writer: tfrecord.Writer | None = None
        self._in_file = 0
        self.paths: list[str] = []
        self.records = 0

    def write(self, payload: bytes) -> None:
        if self._writer is None or self._in_file == self._per_file:
            self._close_file()
            path = f"{self._prefix}-{len(self.paths):05d}.records"
            self._writer = tfrecord.Writer(path)
            self.paths.append(path)
        self._writer.write(payload)
        self._in_file += 1
        self.records += 1

    def close(self) -> list[str]:
        self._close_file()
        return self.paths

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer, self._in_file = None, 0


def read_records(handle: BinaryIO, where: str, size: int, limit: int) -> Iterator[bytes]:
    """The payload of every frame of a record file of `size` bytes; a frame longer than
    `limit` is refused before its bytes are read (CorruptRecordError)."""
    for _, payload in tfrecord.read_frames(handle, where, size, max_length=limit):
        yield payload


def read_record_file(path: str, limit: int) -> Iterator[bytes]:
    """read_records of the whole local record file `path`."""
    with open(path, "rb") as handle:
        yield from read_records(handle, path, os.fstat(handle.fileno()).st_size, limit)


_TEMP_NAME = re.compile(r"^segprep-[a-z]+-(?P<pid>\d+)-[a-z0-9_]+$")
# Written first into every folder temporary_folder makes: "PID START\n", START the kernel's
# start time of the process. A folder is swept only with this marker (a regular file, read
# without following links) naming a process that is gone, a zombie, or a reused pid.
OWNER_MARKER = ".segprep-owner"


def temporary_folder(kind: str) -> tempfile.TemporaryDirectory:
    """A temporary folder for spilled rows, named for this process (`segprep-KIND-PID-...`).

    A process killed with SIGKILL cannot remove its folder; the next one to make a folder
    removes every such folder of this user whose marker names a process that is gone. A
    folder of a live process, of another user, or without the marker is never touched.
    """
    _remove_orphans()
    folder = tempfile.TemporaryDirectory(prefix=f"segprep-{kind}-{os.getpid()}-")
    # Written under another name and renamed: a marker is whole whenever it exists, even if
    # this process is killed while writing it (an empty folder without one is left alone).
    writing = os.path.join(folder.name, f"{OWNER_MARKER}.writing")
    marker = os.open(writing, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(marker, "w") as handle:
        handle.write(f"{os.getpid()} {_process_start(os.getpid())}\n")
    os.rename(writing, os.path.join(folder.name, OWNER_MARKER))
    return folder


def _remove_orphans() -> None:
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if _TEMP_NAME.match(name) is not None:
            path = os.path.join(root, name)
            if _is_orphan(path):
                shutil.rmtree(path, ignore_errors=True)  # never follows links (fd-based)


def _is_orphan(path: str) -> bool:
    """A real folder of this user holding this tool's marker, whose process is gone."""
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return False
        marker = os.open(
            os.path.join(path, OWNER_MARKER), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        )
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(marker).st_mode):
            return False
        fields = os.read(marker, 64).split()
    finally:
        os.close(marker)
    if len(fields) != 2 or not fields[0].isdigit():
        return False
    pid, start = int(fields[0]), fields[1].decode("ascii", "replace")
    if f"-{pid}-" not in os.path.basename(path):
        return False
    return not _alive(pid) or str(_process_start(pid)) != start


def _process_start(pid: int) -> str | None:
    """The kernel's start time of a running `pid` (None when it is gone or a zombie): a
    reused pid has another."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] == b"Z":
        return None
    return fields[19].decode() if len(fields) > 19 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
