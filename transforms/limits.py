"""Caps on what one entry may cost, checked before the bytes or pixels are allocated.

A hostile or broken file (a sparse 6 GB `.jpg`, a 2 KB HDF5 mask that declares 60000x60000,
a zlib bomb) must become a reject with a reason, never gigabytes in a writer process. The
defaults leave room for 8x the 800x600 portraits and 4K frames; peak memory per writer stays
well under a few hundred MB with them.
"""

from __future__ import annotations

import dataclasses
import math

MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class InputLimits:
    image_bytes: int = 64 * MB  # file size of one image
    mask_bytes: int = 64 * MB  # file size of one mask
    pixels: int = 40_000_000  # width x height of an image or a mask (decompression bombs)
    mask_array_bytes: int = 160 * MB  # a decoded mask array (40 Mpx of float32)
    # One annotated image, checked by the launcher as it reads the export. Real
    # outlines have tens to a few thousand points; pycocotools walks every point, so the
    # count (not the outline's length: 10^7 identical points have none) is what costs.
    polygon_points: int = 100_000  # points of one polygon
    image_points: int = 1_000_000  # polygon points of all of one image's annotations
    rle_chars: int = 16_000_000  # one compressed RLE string (or uncompressed run count)
    annotation_record_bytes: int = 64 * MB  # one image's staged record, all annotations
    # Annotation files as they stream to a parser (transforms/bounded_text.py): parsers pay
    # up to the square of a token's length. A COCO RLE string over rle_chars is still
    # its image's reject, and a labelme imageData of a 48 MB image fits; a CVAT mask RLE
    # over rle_chars is its image's reject too, and expat is the slower parser.
    json_string_bytes: int = 64 * MB  # one JSON string
    xml_token_bytes: int = 32 * MB  # one XML tag, attribute or text (a stretch without '<')
    number_chars: int = 100  # one JSON number or literal (a float's repr takes 24)
    entry_values: int = 2_500_000  # JSON values of one Label Studio task or labelme file
    annotation_depth: int = 32  # nesting of an annotation file (the formats use under 10)
    # Label Studio's brush stream is decoded run by run (a few us each): this bounds that to
    # seconds; real brushes take tens of KB.
    brush_rle_bytes: int = MB


class TooLargeError(ValueError):
    """An annotation over a cap of InputLimits, found before anything was allocated for it;
    its entry is a mask_too_large reject with this message."""


def check_pixels(height: int, width: int, limits: InputLimits, what: str) -> None:
    """TooLargeError unless `what` (an image's stated size, a mask or a box) is positive and
    at most `limits.pixels`: the one check before any annotation source allocates pixels."""
    if height <= 0 or width <= 0:
        raise ValueError(f"{what} of {height}x{width} pixels is empty")
    if height * width > limits.pixels:
        raise TooLargeError(
            f"{what} of {height:,}x{width:,} pixels, more than the {limits.pixels:,} "
            "one image may have"
        )


def annotation_int(value: object, what: str, *, truncate: bool = False) -> int:
    """A whole number from an annotation (a JSON number, or the text of an XML attribute,
    "12" or "12.0"; `truncate`: "12.7" too, as 12); ValueError naming `what` for anything
    else, long digit strings (Python refuses over 4300 digits, with a hint about its own
    settings) and infinities."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: not a number: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if len(value) > 32:
            raise ValueError(f"{what}: a number of {len(value):,} characters")
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise ValueError(f"{what}: not a number: {value!r}") from None
        if isinstance(value, int):
            return value
    if isinstance(value, float) and math.isfinite(value) and (truncate or value.is_integer()):
        return int(value)
    raise ValueError(f"{what}: not a whole number: {value!r}")


DEFAULT_LIMITS = InputLimits()
# One record the launcher stages for the job (a pair, a reject or an annotated image): at
# most one capped annotated image plus paths. A longer one was not written by this launcher.
STAGED_RECORD_BYTES = DEFAULT_LIMITS.annotation_record_bytes + MB


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
    # A key is a relative path, so at most PATH_MAX bytes of UTF-8; written as JSON a byte
    # takes at most 6 (a control character or an undecodable byte: \u0001, \udcff).
    key_bytes: int = 4096
    side_file_bytes: int = 64 * MB  # a TFDS file listed in metadata.json


DEFAULT_METADATA_LIMITS = MetadataLimits()
# Longest key-table line: ["key", shard, record] with the key escaped at worst and both
# numbers 20 digits; a split's key tables together hold one line per record.
KEY_ROW_BYTES = 6 * DEFAULT_METADATA_LIMITS.key_bytes + 2 * 20 + len('["", , ]\n')
# Longest hash-table line (transforms/duplicates.py ImageHash.row): the key escaped at
# worst, the sha256 and mask digests (64 hex digits), phash (16), signature (256 base64).
HASH_ROW_BYTES = (
    6 * DEFAULT_METADATA_LIMITS.key_bytes
    + len('{"key": "", "mask": "", "phash": "", "sha256": "", "sig": ""}\n')
    + 64 + 64 + 16 + 256
)  # fmt: skip


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
