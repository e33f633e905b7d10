"""Tiny in-memory images and masks for unit tests, generated at test time."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **params)
    return out.getvalue()


def rgb_array(height: int = 24, width: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def rgb_jpeg(height: int = 24, width: int = 16, seed: int = 0) -> bytes:
    return encode(Image.fromarray(rgb_array(height, width, seed)), "JPEG", quality=90)


def blob_mask(height: int = 24, width: int = 16, seed: int = 0) -> np.ndarray:
    """uint8 0/1 with a ragged blob: edges in every direction stress JPEG ringing."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:height, 0:width]
    radius = min(height, width) * (0.3 + 0.1 * rng.random((height, width)))
    inside = (rows - height / 2) ** 2 + (cols - width / 2) ** 2 < radius**2
    speckle = rng.random((height, width)) < 0.05
    return (inside ^ speckle).astype(np.uint8)
