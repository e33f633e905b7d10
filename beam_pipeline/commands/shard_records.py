"""A shard's records, for the tools (verify, index, inspect): through the file layer and the
record-format adapter, so local and gs:// shards of any registered format read alike."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from transforms import files
from transforms.format import record_formats


def record_format(metadata: Mapping[str, Any]) -> record_formats.RecordFormat:
    """The adapter of the format metadata.json names (TFRecord when it names none)."""
    return record_formats.get(metadata.get("record_format") or record_formats.DEFAULT)


@contextlib.contextmanager
def shard_records(
    path: str, where: str, adapter: record_formats.RecordFormat
) -> Iterator[Iterator[bytes]]:
    """Every record payload of the shard at `path`, checked as its format allows; the shard
    must be a regular file or object (a FIFO or device is refused before it is read)."""
    with files.opened(path) as (handle, size):
        yield adapter.read_records(handle, where, size)
