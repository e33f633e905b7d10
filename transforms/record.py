"""Turn one paired entry's raw bytes into a serialised record, or a precise rejection.

The steps every mask source shares (image validation, EXIF alignment, encoding, the
Example) live here; each source in `transforms.sources` calls them.
"""

from __future__ import annotations

import dataclasses
import functools
import io

import numpy as np
from PIL import Image

from transforms.class_stats import ClassStats, mask_stats
from transforms.codecs.class_mask import encode_class_mask, load_class_mask
from transforms.codecs.image import (
    ValidImage,
    apply_orientation,
    encode_rgb_jpeg,
    validate_image,
)
from transforms.codecs.mask import binarize, encode_mask, load_mask
from transforms.format.example import build_example
from transforms.limits import DEFAULT_LIMITS, InputLimits
from transforms.record_spec import RecordSpec
from transforms.rejects import Reason, RejectError

BINARY = RecordSpec()  # the blog's records: binary masks stored as JPEG


@dataclasses.dataclass(frozen=True)
class Record:
    key: str
    serialized: bytes
    height: int
    width: int
    image_transcoded: bool
    class_stats: ClassStats | None = None  # class-id masks: this mask's counts
    # The image has an EXIF orientation that was not applied (its mask has the stored
    # size): right when the mask was drawn on the stored pixels, wrong when drawn on the
    # displayed view of a square image. Counted so the summary can say so.
    exif_ignored: bool = False
    # The duplicate search's thumbnail of the image as stored (transforms.duplicates), made
    # in the validation decode when asked for; never part of the record's bytes.
    thumbnail: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)


def make_record(
    key: str,
    image_bytes: bytes,
    mask_bytes: bytes,
    mask_filename: str,
    spec: RecordSpec = BINARY,
    *,
    limits: InputLimits = DEFAULT_LIMITS,
    thumbnail: bool = False,
) -> Record:
    """Decode and check image and mask once each, then serialise; raises RejectError.

    A mask drawn on the EXIF-rotated view (its size is the image's, turned 90 degrees) gets
    the image rotated to match; otherwise pixels stay as stored, which is what
    tf.io.decode_jpeg returns.
    """
    image = valid_image(image_bytes, limits, thumbnail)
    mask = binarize(
        guarded(load_mask, Reason.MASK_UNREADABLE, mask_bytes, mask_filename, spec.mask_key, limits)
    )
    image, mask = as_specified(aligned(image, image_bytes, mask.shape), mask, spec)
    return _record(key, image, encode_mask(mask, spec.mask_format, binary=True))


def make_class_record(
    key: str,
    image_bytes: bytes,
    mask_bytes: bytes,
    mask_filename: str,
    spec: RecordSpec,
    *,
    limits: InputLimits = DEFAULT_LIMITS,
    thumbnail: bool = False,
) -> Record:
    """A record with a class-id mask file (PNG, palette PNG, colour PNG, .mat) and its stats."""
    image = valid_image(image_bytes, limits, thumbnail)
    ids = guarded(
        load_class_mask,
        Reason.MASK_UNREADABLE,
        mask_bytes,
        mask_filename,
        spec.classes,
        spec.mask_key,
        limits,
    )
    return class_record(key, aligned(image, image_bytes, ids.shape), ids, spec)


def valid_image(image_bytes: bytes, limits: InputLimits, thumbnail: bool = False) -> ValidImage:
    """The validated image (and its thumbnail, when asked for); raises RejectError."""
    validate = functools.partial(validate_image, thumbnail=thumbnail)
    return guarded(validate, Reason.IMAGE_UNREADABLE, image_bytes, limits.pixels)


def aligned(image: ValidImage, image_bytes: bytes, mask_shape: tuple[int, ...]) -> ValidImage:
    """The image, rotated by its EXIF tag when the mask has the rotated size; a reject when
    the sizes still differ."""
    if mask_shape != (image.height, image.width) and mask_shape == image.rotated_shape:
        # The thumbnail stays the one of the pixels as stored, like every other image's.
        image = dataclasses.replace(apply_orientation(image_bytes), thumbnail=image.thumbnail)
    if mask_shape != (image.height, image.width):
        raise RejectError(
            Reason.SIZE_MISMATCH,
            f"image is {image.height}x{image.width} (HxW), mask is {mask_shape[0]}x{mask_shape[1]}",
        )
    return image


def class_record(key: str, image: ValidImage, ids: np.ndarray, spec: RecordSpec) -> Record:
    image, ids = as_specified(image, ids, spec)
    classes = spec.classes
    stats = mask_stats(ids, classes.num_classes, classes.ignore_index)
    return _record(key, image, encode_class_mask(ids, classes), stats)


def as_specified(
    image: ValidImage, mask: np.ndarray, spec: RecordSpec
) -> tuple[ValidImage, np.ndarray]:
    """The aligned image and mask as the spec stores them: downscaled to fit
    `max_image_side` (the image antialiased and re-encoded, the mask nearest-neighbour, so
    no id is ever interpolated), or as they are."""
    side = spec.max_image_side
    if side is None or max(image.height, image.width) <= side:
        return image, mask
    scale = side / max(image.height, image.width)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    with Image.open(io.BytesIO(image.jpeg)) as decoded:
        decoded.draft("RGB", size)  # JPEG DCT scaling, never below the target size
        small = decoded.convert("RGB").resize(size, Image.Resampling.LANCZOS)
    mask = np.asarray(Image.fromarray(mask).resize(size, Image.Resampling.NEAREST), mask.dtype)
    resized = dataclasses.replace(
        image, jpeg=encode_rgb_jpeg(small), height=size[1], width=size[0], transcoded=True
    )
    return resized, mask


def _record(
    key: str, image: ValidImage, encoded_mask: bytes, stats: ClassStats | None = None
) -> Record:
    serialized = build_example(key, image.jpeg, encoded_mask, image.height, image.width)
    exif_ignored = image.orientation != 1  # still tagged: not turned to match the mask
    return Record(
        key,
        serialized,
        image.height,
        image.width,
        image.transcoded,
        stats,
        exif_ignored,
        image.thumbnail,
    )


def guarded(decode, reason: Reason, *args):
    """Any decoder failure becomes a reject: one odd file must never fail the whole job."""
    try:
        return decode(*args)
    except RejectError:
        raise
    except MemoryError as error:
        raise RejectError(reason, "out of memory while decoding") from error
    except Exception as error:  # noqa: BLE001 - decoders raise many undocumented types
        raise RejectError(reason, f"{type(error).__name__}: {error}") from error
