"""Decoding a record's image and mask for verify, as TensorFlow's decoders would shape them.

JPEG by simplejpeg with TensorFlow's default DCT (fastdct), so the pixels near the mask
threshold are those a tf.data reader sees; PNG by Pillow, with the channel count
tf.io.decode_png gives (palette expanded, 16-bit scaled to 8 unless asked for). Both refuse
more pixels than transforms.limits allows before decoding.
"""

from __future__ import annotations

import io

import numpy as np
import simplejpeg
from PIL import Image

from transforms.format.features import PNG_SIGNATURE
from transforms.limits import DEFAULT_LIMITS

# simplejpeg's output colourspace that keeps the JPEG's channel count (else RGB)
_JPEG_OUTPUT = {"Gray": "GRAY", "CMYK": "CMYK", "YCCK": "CMYK"}


class DecodeError(ValueError):
    """The bytes do not decode as the format they should be."""


def _check_pixels(height: int, width: int) -> None:
    if height * width > DEFAULT_LIMITS.pixels:
        raise DecodeError(f"{height}x{width} is more than {DEFAULT_LIMITS.pixels:,} pixels")


def decode_jpeg(data: bytes) -> np.ndarray:
    """uint8 [H, W, C] with the JPEG's own channel count (1 grey, 3 colour, 4 CMYK)."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        _check_pixels(height, width)
        output = _JPEG_OUTPUT.get(colorspace, "RGB")
        pixels = simplejpeg.decode_jpeg(data, colorspace=output, fastdct=True)
    except ValueError as error:
        raise DecodeError(f"ValueError: {error}") from None
    return pixels if pixels.ndim == 3 else pixels[..., None]


def _open_png(data: bytes) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data), formats=("PNG",))
        if image.format != "PNG":
            raise DecodeError(f"a {image.format} file, not PNG")
        _check_pixels(image.height, image.width)
        image.load()
    except DecodeError:
        raise
    except Image.UnidentifiedImageError:
        raise DecodeError("not a PNG") from None
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as error:
        raise DecodeError(f"{type(error).__name__}: {error}") from None
    return image


def decode_png(data: bytes) -> np.ndarray:
    """uint8 [H, W, C] as tf.io.decode_png(data) gives it (channels as stored)."""
    image = _open_png(data)
    mode = image.mode
    if mode in ("L", "LA", "RGB", "RGBA"):
        pixels = np.asarray(image)
    elif mode == "P":
        pixels = np.asarray(image.convert("RGBA" if "transparency" in image.info else "RGB"))
    elif mode.startswith("I"):  # 16-bit grey: scaled to 8 bits as TensorFlow does
        wide = np.asarray(image).astype(np.uint32)
        pixels = ((wide * 255 + 32767) // 65535).astype(np.uint8)
    else:
        pixels = np.asarray(image.convert("L"))
    return pixels if pixels.ndim == 3 else pixels[..., None]


def decode_class_png(data: bytes, depth: int) -> np.ndarray:
    """[H, W, 1] stored values of a grey PNG of bit depth `depth` (uint8 or uint16)."""
    image = _open_png(data)
    dtype = np.uint16 if depth == 16 else np.uint8
    return np.asarray(image, dtype=dtype)[..., None]


def decode_any(data: bytes) -> np.ndarray:
    """A PNG or JPEG, by its signature."""
    return decode_png(data) if data.startswith(PNG_SIGNATURE) else decode_jpeg(data)
