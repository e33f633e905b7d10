"""Record formats: the one seam the writer, verify, index, inspect and every reader call.

In the spirit of TFDS's `file_adapters`: a format is one adapter object, registered here by
the name `prepare --record_format` takes (one module and one line of FORMATS per format).
An adapter knows its file suffix and TFDS name, how to write a new shard, how to read a
shard's records back in order, and how to read record i of a local shard. Whether the shards
need the record index's byte offsets (`index/<shard>.idx`, transforms.format.record_index)
for that is the adapter's `offset_index`; the key tables (`index/<split>.keys.jsonl`) exist
for every format. No caller asks which format it holds: it asks the adapter.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import BinaryIO, Protocol

from transforms.format import tfrecord
from transforms.format.array_record import ArrayRecordFormat
from transforms.format.tfrecord import CorruptRecordError

DEFAULT = "tfrecord"

__all__ = ["DEFAULT", "FORMATS", "CorruptRecordError", "RecordFormat", "get", "names"]


class RecordWriter(Protocol):
    def write(self, payload: bytes) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> RecordWriter: ...
    def __exit__(self, *exc) -> None: ...


class RandomReader(Protocol):
    def read(self, record: int) -> bytes:
        """Payload of record `record` (0-based) of the shard; CorruptRecordError if damaged."""
        ...

    def close(self) -> None: ...


class RecordFormat(Protocol):
    name: str  # what --record_format and metadata.json's record_format say
    suffix: str  # shard file suffix, with its dot
    tfds_file_format: str  # TFDS's FileFormat value for builder_from_directory
    offset_index: bool  # random access needs index/<shard>.idx (record_index.frame_offsets)
    tf_data: bool  # tf.data reads these shards (shard_reader.make_dataset)

    def writer(self, path: str) -> RecordWriter:
        """A writer of a new local shard file at `path` (never an existing one)."""
        ...

    def read_records(self, handle: BinaryIO, where: str, size: int) -> Iterator[bytes]:
        """Every record payload of one shard of `size` bytes, checked as the format allows."""
        ...

    def random_reader(
        self, path: str, size: int, num_records: int, frames: Sequence[tuple[int, int]] | None
    ) -> RandomReader:
        """Record-number access to the local shard `path` of `size` bytes and `num_records`
        records (CorruptRecordError when the file disagrees); `frames` is its parsed
        offset index when `offset_index`, else None. Open one per process: it holds a
        descriptor, and threads may share it."""
        ...


class TFRecordFormat:
    name = "tfrecord"
    suffix = tfrecord.SUFFIX
    tfds_file_format = "tfrecord"
    offset_index = True
    tf_data = True

    def writer(self, path: str) -> RecordWriter:
        return tfrecord.Writer(path)

    def read_records(self, handle: BinaryIO, where: str, size: int) -> Iterator[bytes]:
        for _, payload in tfrecord.read_frames(handle, where, size):
            yield payload

    def random_reader(
        self, path: str, size: int, num_records: int, frames: Sequence[tuple[int, int]] | None
    ) -> RandomReader:
        if frames is None or len(frames) != num_records:
            raise ValueError(f"{path}: TFRecord random access needs its {num_records} offsets")
        return tfrecord.RandomReader(path, size, frames)


FORMATS: dict[str, RecordFormat] = {
    TFRecordFormat.name: TFRecordFormat(),
    ArrayRecordFormat.name: ArrayRecordFormat(),
}


def names() -> list[str]:
    """The registered format names, sorted: what --record_format accepts."""
    return sorted(FORMATS)


def get(name: str) -> RecordFormat:
    """The adapter registered under `name`; ValueError naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown record format {name!r}; known: {', '.join(names())}") from None
