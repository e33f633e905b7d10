"""Validate an image file by decoding all of its data, and produce the RGB JPEG to store."""

from __future__ import annotations

import dataclasses
import io
import warnings
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageOps

from transforms.codecs.pixels import eight_bit, on_background
from transforms.duplicates import THUMB_SIDE
from transforms.duplicates import thumbnail as thumbnail_of
from transforms.format.features import PILLOW_FORMATS
from transforms.limits import DEFAULT_LIMITS
from transforms.rejects import Reason, RejectError

# Above this many pixels a header is treated as a decompression bomb: rejected before
# any pixel buffer is allocated. 8x the 800x600 portraits, 4x a 4K frame.
MAX_PIXELS = DEFAULT_LIMITS.pixels
TRANSCODE_QUALITY = 95
# Scans in one JPEG: a progressive photo has about 10; libjpeg's decode time grows with each.
MAX_JPEG_SCANS = 200
_ORIENTATION_TAG = 0x0112
_QUARTER_TURNS = (5, 6, 7, 8)


@dataclasses.dataclass(frozen=True)
class ValidImage:
    jpeg: bytes
    height: int
    width: int
    transcoded: bool
    orientation: int = 1  # EXIF orientation tag of the source; 1 = as stored
    # transforms.duplicates.thumbnail of the decoded pixels (as stored), when asked for
    thumbnail: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def rotated_shape(self) -> tuple[int, int] | None:
        """(height, width) the image has when its EXIF 90-degree rotation is applied."""
        return (self.width, self.height) if self.orientation in _QUARTER_TURNS else None


@dataclasses.dataclass(frozen=True)
class OpenReasons:
    """The reject reasons (and the noun in details) of one kind of file `open_image` opens."""

    too_large: Reason
    unreadable: Reason
    truncated: Reason
    noun: str  # "image", "mask image"


IMAGE_REASONS = OpenReasons(
    Reason.IMAGE_TOO_LARGE, Reason.IMAGE_UNREADABLE, Reason.IMAGE_TRUNCATED, "image"
)
MASK_REASONS = OpenReasons(
    Reason.MASK_TOO_LARGE, Reason.MASK_UNREADABLE, Reason.MASK_UNREADABLE, "mask image"
)


def jpeg_scans(data: bytes) -> int:
    """An upper bound on a JPEG's scans (0 for other formats). libjpeg decodes every scan over
    every block: a few MB of repeated scans cost minutes of CPU, whatever the pixel count.
    0xFFDA starts a scan, and entropy-coded data stuffs every 0xFF, so the count of that pair
    bounds the scans (an embedded EXIF thumbnail's count too)."""
    return data.count(b"\xff\xda") if data.startswith(b"\xff\xd8") else 0


def open_image(
    data: bytes,
    max_pixels: int,
    reasons: OpenReasons,
    check_header: Callable[[Image.Image], None] | None = None,
) -> Image.Image:
    """Decode all of `data` with Pillow (its verify() would miss a truncated file),
    behind the decompression-bomb guard: the size in the header is checked against
    `max_pixels` before any pixel buffer is allocated, and Pillow's own bomb warning is an
    error. `check_header` may refuse the file (RejectError) from its header alone, or choose
    how it is decoded (a JPEG draft scale): it runs before any pixel is decoded. Every
    failure is a RejectError with the codes of `reasons`.
    """
    scans = jpeg_scans(data)
    if scans > MAX_JPEG_SCANS:
        raise RejectError(
            reasons.too_large,
            f"JPEG of {scans:,} scans, more than {MAX_JPEG_SCANS} (a decode-time bomb guard)",
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=PILLOW_FORMATS)
            width, height = image.size
            if width * height > max_pixels:
                raise RejectError(
                    reasons.too_large,
                    f"{width}x{height} exceeds {max_pixels:,} pixels (decompression bomb guard)",
                )
            if check_header is not None:
                check_header(image)
            image.load()
    except RejectError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise RejectError(reasons.too_large, str(error)) from error
    except Image.UnidentifiedImageError as error:  # its text holds an object address
        raise RejectError(
            reasons.unreadable,
            "not an image segprep reads (JPEG, PNG, GIF, BMP, TIFF, WebP), or a corrupt header",
        ) from error
    except OSError as error:
        message = str(error)
        if "truncated" in message.lower() or "broken data stream" in message:
            raise RejectError(reasons.truncated, message) from error
        raise RejectError(reasons.unreadable, f"unreadable {reasons.noun}: {message}") from error
    except (ValueError, SyntaxError, EOFError) as error:
        detail = f"unreadable {reasons.noun}: {type(error).__name__}: {error}"
        raise RejectError(reasons.unreadable, detail) from error
    return image


def _open_fully(
    data: bytes,
    max_pixels: int = MAX_PIXELS,
    check_header: Callable[[Image.Image], None] | None = None,
) -> Image.Image:
    if not data:
        raise RejectError(Reason.IMAGE_EMPTY, "file is empty (0 bytes)")
    return open_image(data, max_pixels, IMAGE_REASONS, check_header)


def _stored_as_is(image: Image.Image) -> bool:
    return image.format == "JPEG" and image.mode == "RGB"


def validate_image(
    data: bytes, max_pixels: int = MAX_PIXELS, *, scaled_check: bool = True, thumbnail: bool = False
) -> ValidImage:
    """RGB JPEG bytes for the record: the source bytes untouched when already RGB JPEG.

    A JPEG kept as it is needs no pixels, only proof that it decodes: with `scaled_check`
    libjpeg decodes it at 1/8 scale, which still entropy-decodes every coefficient of every
    scan (truncated or corrupt data fails alike) but skips the full-size inverse DCT,
    upsampling and colour conversion. benchmarks/jpeg_fuzz.py and
    tests/test_jpeg_validation_fuzz.py show both decodes give the same verdict on corrupted
    photos. Images that are transcoded are decoded in full.

    With `thumbnail`, the same decode also gives the duplicate search its thumbnail: a kept
    JPEG is then drafted to the smallest scale of at least 64 px a side (1/8 for images of
    512 px and more, so the check costs the same), never decoded twice.
    """
    header: list[tuple[int, int]] = []

    def remember_size(image: Image.Image) -> None:
        header.append(image.size)
        if scaled_check and _stored_as_is(image):
            # libjpeg's smallest scale (1/8), or the smallest that leaves a thumbnail to see
            image.draft(None, (2 * THUMB_SIDE, 2 * THUMB_SIDE) if thumbnail else (1, 1))

    image = _open_fully(data, max_pixels, remember_size)
    width, height = header[0]
    orientation = image.getexif().get(_ORIENTATION_TAG, 1)
    thumb = thumbnail_of(image) if thumbnail else None
    if _stored_as_is(image):
        return ValidImage(data, height, width, False, orientation, thumb)
    return ValidImage(encode_rgb_jpeg(image), height, width, True, orientation, thumb)


def apply_orientation(data: bytes) -> ValidImage:
    """Transcoded image with its EXIF rotation applied to the pixels (tag then dropped).

    Used only when the mask was drawn on the rotated view: tf.io.decode_jpeg ignores EXIF,
    so the stored pixels themselves must be upright to stay aligned with the mask.
    """
    image = ImageOps.exif_transpose(_open_fully(data))
    width, height = image.size
    return ValidImage(encode_rgb_jpeg(image), height, width, transcoded=True, orientation=1)


def encode_rgb_jpeg(image: Image.Image) -> bytes:
    """Transcode any mode (CMYK, L, RGBA, P, I;16) to 8-bit RGB JPEG."""
    image = eight_bit(image)  # 16-bit grey (PNG): 0..65535 scaled to 0..255, not clipped
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        image = on_background(image, (0, 0, 0))  # black, the value a mask's background has
    out = io.BytesIO()
    if image.mode != "RGB":  # convert() copies even an RGB image
        image = image.convert("RGB")
    image.save(out, format="JPEG", quality=TRANSCODE_QUALITY)
    return out.getvalue()
