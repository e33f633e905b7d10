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
