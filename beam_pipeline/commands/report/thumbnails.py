"""Small inline JPEG thumbnails (data: URIs) of records and of rejected inputs.

Decoding is DCT-scaled (Pillow's draft mode) and size-checked before pixels are allocated,
so a huge or hostile rejected image costs little; any decoder failure means no thumbnail.
"""

from __future__ import annotations

import base64
import io
import warnings
from typing import Any

import numpy as np
from PIL import Image

from transforms.codecs.image import MAX_JPEG_SCANS, jpeg_scans
from transforms.format.features import PILLOW_FORMATS
from transforms.limits import DEFAULT_LIMITS

HEIGHT = 112  # thumbnail height in pixels
MAX_WIDTH = 4 * HEIGHT  # and width, for very wide images
QUALITY = 72
TINT = np.array((255, 0, 200), dtype=np.float32)  # binary foreground: magenta, as inspect's
IGNORE_COLOUR = (224, 224, 192)  # the ignore index: Pascal VOC's boundary colour
ALPHA = 0.5


def _open(data: bytes) -> Image.Image | None:
    if jpeg_scans(data) > MAX_JPEG_SCANS:  # a decode-time bomb among the rejects
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            image = Image.open(io.BytesIO(data), formats=PILLOW_FORMATS)
            width, height = image.size
            if width * height > DEFAULT_LIMITS.pixels or width < 1 or height < 1:
                return None
            image.draft("RGB", (max(1, width * HEIGHT // height), HEIGHT))
            image.load()
            return image
    except Exception:  # noqa: BLE001 - a rejected file is expected not to decode
        return None


def _uri(image: Image.Image) -> str:
    out = io.BytesIO()
    image.convert("RGB").save(out, format="JPEG", quality=QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def _fit(image: Image.Image) -> Image.Image:
    """HEIGHT tall, or MAX_WIDTH wide for an image wider than MAX_WIDTH / HEIGHT (a 3000x1
    strip scaled to HEIGHT would be wider than JPEG's 65,500 pixels)."""
    scale = min(HEIGHT / image.height, MAX_WIDTH / image.width)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.BILINEAR)


def image_thumbnail(data: bytes) -> str | None:
    image = _open(data)
    return None if image is None else _uri(_fit(image.convert("RGB")))


def decode_mask(data: bytes) -> np.ndarray | None:
    """A stored mask's values [H, W] (0/255 binary, or class ids), None if it does not decode."""
    try:
        with Image.open(io.BytesIO(data), formats=PILLOW_FORMATS) as image:
            if image.width * image.height > DEFAULT_LIMITS.pixels:
                return None
            return np.asarray(image)
    except Exception:  # noqa: BLE001
        return None


def class_palette(classes: Any) -> np.ndarray:
    """uint8 [num_classes, 3]: the output's colormap, else evenly spread hues."""
    if classes.colormap:
        return np.array(classes.colormap, dtype=np.uint8).reshape(-1, 3)
    count = classes.num_classes
    hues = [(index * 0.618033988749895) % 1.0 for index in range(count)]
    colours = [
        _hsv(hue, 0.75 if index else 0.0, 0.95 if index else 0.15) for index, hue in enumerate(hues)
    ]
    return np.array(colours, dtype=np.uint8).reshape(-1, 3)


def _hsv(hue: float, saturation: float, value: float) -> tuple[int, int, int]:
    import colorsys

    red, green, blue = colorsys.hsv_to_rgb(hue, saturation, value)
    return round(red * 255), round(green * 255), round(blue * 255)


def record_tiles(
    record: dict[str, Any], classes: Any, palette: np.ndarray | None
) -> tuple[str, str]:
    """(image thumbnail, mask-overlay thumbnail) of one record."""
    image = _open(record["image"])
    mask = decode_mask(record["mask"])
    if image is None:
        blank = Image.new("RGB", (HEIGHT, HEIGHT), (150, 150, 150))
        return _uri(blank), _uri(blank)
    return _tiles(_fit(image.convert("RGB")), mask, classes, palette)


def array_tiles(
    image: np.ndarray, mask: np.ndarray | None, classes: Any, palette: np.ndarray | None
) -> tuple[str, str]:
    """(image thumbnail, mask-overlay thumbnail) of decoded pixels ([H, W, 3] uint8, mask
    [H, W] or [H, W, 1]; binary masks 0/1 or 0/255), as a RecordSource gives them."""
    thumb = _fit(Image.fromarray(np.ascontiguousarray(image[..., :3])).convert("RGB"))
    if mask is not None and mask.ndim == 3:
        mask = mask[..., 0]
    if mask is not None and classes is None:
        mask = (mask > 0).astype(np.uint8) * 255
    return _tiles(thumb, mask, classes, palette)


def _tiles(thumb: Image.Image, mask: np.ndarray | None, classes, palette) -> tuple[str, str]:
    if mask is None or mask.ndim != 2:
        return _uri(thumb), _uri(thumb)
    # Nearest-neighbour for masks: a class id is never blended with its neighbour's.
    small = np.asarray(
        Image.fromarray(mask).resize(thumb.size, Image.Resampling.NEAREST), dtype=np.int64
    )
    pixels = np.asarray(thumb, dtype=np.float32)
    if classes is None:
        where = small >= 128
        pixels[where] = pixels[where] * (1 - ALPHA) + TINT * ALPHA
    else:
        colours = np.zeros((max(int(small.max()) + 1, len(palette)), 3), dtype=np.float32)
        colours[: len(palette)] = palette
        if classes.ignore_index < len(colours):
            colours[classes.ignore_index] = IGNORE_COLOUR
        pixels = pixels * (1 - ALPHA) + colours[small] * ALPHA
    overlay = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return _uri(thumb), _uri(overlay)
