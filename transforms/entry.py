"""Turn one paired entry's raw bytes into a serialised record, or a precise rejection."""

from __future__ import annotations

import dataclasses

from transforms.example import build_example
from transforms.image_codec import validate_image
from transforms.mask_codec import binarize, encode_mask, load_mask
from transforms.rejects import Reason, RejectError


@dataclasses.dataclass(frozen=True)
class Record:
    key: str
    serialized: bytes
    height: int
    width: int
    image_transcoded: bool


def make_record(
    key: str,
    image_bytes: bytes,
    mask_bytes: bytes,
    mask_filename: str,
    *,
    mask_format: str = "jpeg",
    mask_key: str | None = None,
) -> Record:
    """Decode and check image and mask once each, then serialise; raises RejectError."""
    image = validate_image(image_bytes)
    mask = binarize(load_mask(mask_bytes, mask_filename, mask_key))
    if mask.shape != (image.height, image.width):
        raise RejectError(
            Reason.SIZE_MISMATCH,
            f"image is {image.height}x{image.width} (HxW), mask is {mask.shape[0]}x{mask.shape[1]}",
        )
    serialized = build_example(
        key, image.jpeg, encode_mask(mask, mask_format), image.height, image.width
    )
    return Record(key, serialized, image.height, image.width, image.transcoded)
