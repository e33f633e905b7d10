"""Turn one paired entry's raw bytes into a serialised record, or a precise rejection."""

from __future__ import annotations

import dataclasses

from segcore.example import build_example
from segcore.image_codec import apply_orientation, validate_image
from segcore.limits import DEFAULT_LIMITS, InputLimits
from segcore.mask_codec import binarize, encode_mask, load_mask
from segcore.rejects import Reason, RejectError


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
    limits: InputLimits = DEFAULT_LIMITS,
) -> Record:
    """Decode and check image and mask once each, then serialise; raises RejectError.

    A mask drawn on the EXIF-rotated view (its size is the image's, turned 90 degrees) gets
    the image rotated to match; otherwise pixels stay as stored, which is what
    tf.io.decode_jpeg returns.
    """
    image = _guarded(validate_image, Reason.IMAGE_UNREADABLE, image_bytes, limits.pixels)
    mask = binarize(
        _guarded(load_mask, Reason.MASK_UNREADABLE, mask_bytes, mask_filename, mask_key, limits)
    )
    if mask.shape != (image.height, image.width) and mask.shape == image.rotated_shape:
        image = apply_orientation(image_bytes)
    if mask.shape != (image.height, image.width):
        raise RejectError(
            Reason.SIZE_MISMATCH,
            f"image is {image.height}x{image.width} (HxW), mask is {mask.shape[0]}x{mask.shape[1]}",
        )
    encoded_mask = encode_mask(mask, mask_format)
    serialized = build_example(key, image.jpeg, encoded_mask, image.height, image.width)
    return Record(key, serialized, image.height, image.width, image.transcoded)


def _guarded(decode, reason: Reason, *args):
    """Any decoder failure becomes a reject: one odd file must never fail the whole job."""
    try:
        return decode(*args)
    except RejectError:
        raise
    except MemoryError as error:
        raise RejectError(reason, "out of memory while decoding") from error
    except Exception as error:  # noqa: BLE001 - decoders raise many undocumented types
        raise RejectError(reason, f"{type(error).__name__}: {error}") from error
