"""Pixel conversions every decoded image may need before it is stored or hashed, done a
band of rows at a time: a 40-megapixel image converted at once held several full-size
copies (a 16-bit PNG's float arithmetic four 320 MB arrays, an RGBA PNG's compositing about
1 GB), where a band holds a few MB."""

from __future__ import annotations

import numpy as np
from PIL import Image

_BAND_ROWS = 256


def eight_bit(image: Image.Image) -> Image.Image:
    """A 16- or 32-bit grey image ("I;16", "I", "F": PNG, TIFF) as 8-bit grey, 0..65535
    scaled to 0..255 as the record stores it (codecs/image.encode_rgb_jpeg); Pillow's own
    convert() clips every value above 255 to white, so distinct images would hash alike.
    Other modes are returned as they are."""
    if not (image.mode.startswith("I") or image.mode == "F"):
        return image
    source = np.asarray(image)  # 2 or 4 bytes a pixel, as decoded
    scaled = np.empty(source.shape, dtype=np.uint8)
    for start in range(0, source.shape[0], _BAND_ROWS):
        rows = source[start : start + _BAND_ROWS].astype(np.float64) / 257.0
        scaled[start : start + _BAND_ROWS] = np.clip(rows.round(), 0, 255)
    return Image.fromarray(scaled)


def on_background(image: Image.Image, colour: tuple[int, int, int]) -> Image.Image:
    """An image with transparency (RGBA, LA, PA, or P with a transparent index) as RGB
    composited over `colour`: the pixels Image.alpha_composite gives the whole image, since
    compositing is per pixel, built band by band into one RGB image."""
    width, height = image.size
    out = Image.new("RGB", image.size)
    for top in range(0, height, _BAND_ROWS):
        box = (0, top, width, min(height, top + _BAND_ROWS))
        band = image.crop(box).convert("RGBA")
        background = Image.new("RGBA", band.size, (*colour, 255))
        out.paste(Image.alpha_composite(background, band).convert("RGB"), box[:2])
    return out
