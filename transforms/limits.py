"""Caps on what one entry may cost, checked before the bytes or pixels are allocated.

A hostile or broken file (a sparse 6 GB `.jpg`, a 2 KB HDF5 mask that declares 60000x60000,
a zlib bomb) must become a reject with a reason, never gigabytes in a writer process. The
defaults leave room for 8x the 800x600 portraits and 4K frames; peak memory per writer stays
well under a few hundred MB with them.
"""

from __future__ import annotations

import dataclasses

MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class InputLimits:
    image_bytes: int = 64 * MB  # file size of one image
    mask_bytes: int = 64 * MB  # file size of one mask
    pixels: int = 40_000_000  # width x height of an image or a mask (decompression bombs)
    mask_array_bytes: int = 160 * MB  # a decoded mask array (40 Mpx of float32)


DEFAULT_LIMITS = InputLimits()


@dataclasses.dataclass(frozen=True)
class FileLimits:
    """Caps on the files segprep reads back whole (metadata, index, key tables, rejects): a
    file over its cap is refused by its size, a FIFO or device is refused outright."""

    metadata_bytes: int = 64 * MB  # metadata.json, manifest.json, TFDS json files
    index_bytes: int = 256 * MB  # one shard's index file (16 bytes a record)
    key_table_bytes: int = 1024 * MB  # one split's key table
    rejects_bytes: int = 1024 * MB  # rejects.jsonl


FILE_LIMITS = FileLimits()
