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
    # One COCO image record, checked by the launcher as it reads the annotations file. Real
    # outlines have tens to a few thousand points; pycocotools walks every point, so the
    # count (not the outline's length: 10^7 identical points have none) is what costs.
    coco_polygon_points: int = 100_000  # points of one polygon
    coco_image_points: int = 1_000_000  # polygon points of all of one image's annotations
    coco_rle_chars: int = 16_000_000  # one compressed RLE string (or uncompressed run count)
    coco_record_bytes: int = 64 * MB  # one image's staged record, all annotations


DEFAULT_LIMITS = InputLimits()
# One record the launcher stages for the job (a pair, a reject or a COCO image record): at
# most one capped COCO record plus paths. A longer one was not written by this launcher.
STAGED_RECORD_BYTES = DEFAULT_LIMITS.coco_record_bytes + MB


@dataclasses.dataclass(frozen=True)
class MetadataLimits:
    """Caps on what a metadata.json may claim, checked when it is parsed: readers size
    buffers, permutations and file reads by these numbers, so a tampered one must be
    refused before anything is allocated by it.

    Each is far above what segprep writes: the writer rejects images over
    InputLimits.pixels, so no split it wrote has a larger image_shape.
    """

    json_depth: int = 32  # nesting of objects and arrays (segprep writes 6)
    image_pixels: int = DEFAULT_LIMITS.pixels  # height x width of a split's image_shape
    split_examples: int = 100_000_000  # records in one split
    shard_bytes: int = 1 << 40  # bytes of one shard
    key_table_bytes: int = 1024 * MB  # bytes of one split's key table (FileLimits reads no more)
    side_file_bytes: int = 64 * MB  # a TFDS file listed in metadata.json


DEFAULT_METADATA_LIMITS = MetadataLimits()


@dataclasses.dataclass(frozen=True)
class FileLimits:
    """Caps on the files segprep reads back whole (metadata, index, key tables, rejects): a
    file over its cap is refused by its size, a FIFO or device is refused outright."""

    metadata_bytes: int = 64 * MB  # metadata.json, manifest.json, TFDS json files
    index_bytes: int = 256 * MB  # one shard's index file (16 bytes a record)
    key_table_bytes: int = 1024 * MB  # one split's key table
    rejects_bytes: int = 1024 * MB  # rejects.jsonl
    # One line of rejects.jsonl or duplicates.jsonl, which are streamed line by line: a
    # reject's detail or a group's keys are far shorter.
    jsonl_line_bytes: int = 16 * MB


FILE_LIMITS = FileLimits()
