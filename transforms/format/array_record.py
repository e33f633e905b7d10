"""ArrayRecord shards (`--record_format array_record`): the adapter record_formats registers.

ArrayRecord (Riegeli chunks plus a footer index of chunk offsets) reads record i of a shard
by number, with no offset file beside it: its `.idx` would say nothing the file does not.
Every chunk carries a hash that the reader checks, so a damaged shard fails to read.

Writer options: `group_size:1` puts each record in a chunk of its own, so a random read
decodes exactly that record rather than a group of them (Grain logs an error for any other
group size, and TFDS writes its array_record shards with it too); `uncompressed` because
the payloads are JPEG and PNG bytes already: zstd would gain next to nothing and cost a
decompression on every read.

The `array_record` package is imported when a shard is opened, not with this module, so
loading metadata or `segprep --help` never pulls in its native library.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from transforms.files import open_regular
from transforms.format.tfrecord import CorruptRecordError

SUFFIX = ".array_record"
WRITER_OPTIONS = "group_size:1,uncompressed"
# The reader's options for random access (array_record's own advice): no read-ahead.
RANDOM_READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"
_BATCH = 64  # records per read when a shard is read in order
_CHUNK = 8 << 20


def _module():
    from array_record.python import array_record_module

    return array_record_module


class Writer:
    """Writes records to a new local ArrayRecord file; a context manager."""

    def __init__(self, path: str) -> None:
        # The native writer would truncate an existing file: refuse one, as TFRecord's does.
        open(path, "xb").close()
        self._writer = _module().ArrayRecordWriter(path, WRITER_OPTIONS)

    def write(self, payload: bytes) -> None:
        self._writer.write(payload)

    def close(self) -> None:
        if self._writer.is_open():
            self._writer.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RandomReader:
    """Record number -> payload of one local shard; one reader serves every thread (the
    native reader is thread-safe)."""

    def __init__(self, path: str, size: int, num_records: int) -> None:
        open_regular(path).close()  # a FIFO or device in a shard's place: refused, not opened
        actual = os.path.getsize(path)
        if actual != size:
            raise CorruptRecordError(
                f"{path}: {actual} bytes, metadata.json says {size} (changed file?)"
            )
        self._name = os.path.basename(path)
        self._reader = _open(path, self._name, RANDOM_READER_OPTIONS)
        count = self._reader.num_records()
        if count != num_records:
            self._reader.close()
            raise CorruptRecordError(
                f"{path}: {count} records, metadata.json says {num_records} (changed file?)"
            )

    def read(self, record: int) -> bytes:
        try:
            return self._reader.read([record])[0]
        except RuntimeError as error:
            raise CorruptRecordError(f"{self._name} record {record}: {error}") from None

    def close(self) -> None:
        if self._reader.is_open():
            self._reader.close()


def _open(path: str, where: str, options: str = ""):
    """A reader of `path` that has read its footer index, or CorruptRecordError naming
    `where` (the shard, also when `path` is a temporary copy)."""
    try:
        reader = _module().ArrayRecordReader(path, options)
    except RuntimeError as error:
        raise CorruptRecordError(f"{where}: {error}") from None
    if not reader.ok():
        # Some damage leaves the reader open but failed, counting no records; closing it
        # raises the reason.
        try:
            reader.close()
        except RuntimeError as error:
            raise CorruptRecordError(f"{where}: {error}") from None
        raise CorruptRecordError(f"{where}: not a readable ArrayRecord file")
    return reader


def read_records(handle: BinaryIO, where: str, size: int) -> Iterator[bytes]:
    """Every record of the shard behind `handle`, each chunk's hash checked by the reader.

    The native reader opens paths, not Python streams: a local file is read where it is, any
    other stream (gs://) is copied to a local temporary file first.
    """
    name = getattr(handle, "name", None)
    if isinstance(name, str) and os.path.isfile(name):
        yield from _read_path(name, where)
        return
    with tempfile.NamedTemporaryFile(suffix=SUFFIX) as local:
        shutil.copyfileobj(handle, local, _CHUNK)
        local.flush()
        if local.tell() != size:
            raise CorruptRecordError(f"{where}: {local.tell()} bytes read, expected {size}")
        yield from _read_path(local.name, where)


def _read_path(path: str, where: str) -> Iterator[bytes]:
    reader = _open(path, where)
    try:
        count = reader.num_records()
        for start in range(0, count, _BATCH):
            try:
                batch: Sequence[bytes] = reader.read(start, min(start + _BATCH, count))
            except RuntimeError as error:
                raise CorruptRecordError(f"{where}: from record {start}: {error}") from None
            yield from batch
    finally:
        reader.close()


class ArrayRecordFormat:
    name = "array_record"
    suffix = SUFFIX
    tfds_file_format = "array_record"
    offset_index = False  # random access is native: no index/<shard>.idx
    tf_data = False  # tf.data has no ArrayRecord reader

    def writer(self, path: str) -> Writer:
        return Writer(path)

    def read_records(self, handle: BinaryIO, where: str, size: int) -> Iterator[bytes]:
        return read_records(handle, where, size)

    def random_reader(
        self, path: str, size: int, num_records: int, frames: Sequence[tuple[int, int]] | None
    ) -> RandomReader:
        return RandomReader(path, size, num_records)
