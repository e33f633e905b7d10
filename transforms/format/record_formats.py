"""Record formats: the one seam the writer, verify, index, inspect and every reader call.

In the spirit of TFDS's `file_adapters`: a format is one adapter object, registered here by
the name `prepare --record_format` takes. An adapter knows its file suffix, how to write a
new shard and how to read a shard's records back in order. Random access by record number
goes through the record index (`record_index`) for formats that need one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, Protocol

from transforms.format import tfrecord

DEFAULT = "tfrecord"


class RecordWriter(Protocol):
    def write(self, payload: bytes) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> RecordWriter: ...
    def __exit__(self, *exc) -> None: ...


class RecordFormat(Protocol):
    name: str  # what --record_format and metadata.json's record_format say
    suffix: str  # shard file suffix, with its dot
    tfds_file_format: str  # TFDS's FileFormat value for builder_from_directory

    def writer(self, path: str) -> RecordWriter:
        """A writer of a new local shard file at `path` (never an existing one)."""
        ...

    def read_records(self, handle: BinaryIO, where: str, size: int) -> Iterator[bytes]:
        """Every record payload of one shard of `size` bytes, checked as the format allows."""
        ...


class TFRecordFormat:
    name = "tfrecord"
    suffix = tfrecord.SUFFIX
    tfds_file_format = "tfrecord"

    def writer(self, path: str) -> RecordWriter:
        return tfrecord.Writer(path)

    def read_records(self, handle: BinaryIO, where: str, size: int) -> Iterator[bytes]:
        for _, payload in tfrecord.read_frames(handle, where, size):
            yield payload


FORMATS: dict[str, RecordFormat] = {
    TFRecordFormat.name: TFRecordFormat(),
}


def get(name: str) -> RecordFormat:
    """The adapter registered under `name`; ValueError naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown record format {name!r}; known: {', '.join(sorted(FORMATS))}"
        ) from None
