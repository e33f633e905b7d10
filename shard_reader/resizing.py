"""The `image_size` and `resize` arguments every reader takes, and the geometry of "fit".

    image_size=256 or (height, width); resize="stretch" (default) or "fit"

stretch resizes each record to exactly (height, width), whatever its aspect ratio. fit keeps
the aspect ratio: the record is scaled to the largest size within (height, width) and padded
to it, evenly on both sides (an odd pixel goes to the bottom or right). Images pad with 0,
class-id masks with the ignore index (so the loss skips the padding), binary masks with 0;
for binary masks the readers can also return a `valid` mask (1 inside the record, 0 in the
padding) so padding never counts as background in a loss.

The scaled size is computed in integers (round half up), so tf.data and the random-access
readers place the padding on the same pixels.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

STRETCH = "stretch"
FIT = "fit"
RESIZE_MODES = (STRETCH, FIT)

Size = tuple[int, int]


def image_size_arg(image_size: int | Size | None) -> Size | None:
    """(height, width) from an int (a square) or a pair; ValueError for anything else."""
    if image_size is None:
        return None
    if isinstance(image_size, numbers.Integral) and not isinstance(image_size, bool):
        sides: tuple = (image_size, image_size)
    else:
        try:
            sides = tuple(image_size)
        except TypeError:  # not iterable: refused below, as a wrong pair is
            sides = ()
    if len(sides) != 2 or not all(
        isinstance(side, numbers.Integral) and not isinstance(side, bool) for side in sides
    ):
        raise ValueError(f"image_size must be an int or (height, width), got {image_size!r}")
    height, width = int(sides[0]), int(sides[1])
    if height < 1 or width < 1:
        raise ValueError(f"image_size must be positive, got {image_size!r}")
    return height, width


def resize_arg(resize: str, image_size: Size | None) -> str:
    if resize not in RESIZE_MODES:
        raise ValueError(f"resize must be one of {RESIZE_MODES}, got {resize!r}")
    if resize == FIT and image_size is None:
        raise ValueError('resize="fit" needs image_size=')
    return resize


class Fit(NamedTuple):
    """Where a record of some size goes in the target: its scaled size and its offset."""

    height: int
    width: int
    top: int
    left: int


def fit_geometry(stored: Size, target: Size) -> Fit:
    """The largest size of `stored`'s aspect ratio within `target`, centred in it."""
    height, width = int(stored[0]), int(stored[1])
    target_height, target_width = target
    if target_height * width <= target_width * height:  # height is the tighter side
        inner_height = target_height
        inner_width = (2 * width * target_height + height) // (2 * height)
    else:
        inner_width = target_width
        inner_height = (2 * height * target_width + width) // (2 * width)
    inner_height = min(max(inner_height, 1), target_height)
    inner_width = min(max(inner_width, 1), target_width)
    return Fit(
        inner_height,
        inner_width,
        (target_height - inner_height) // 2,
        (target_width - inner_width) // 2,
    )


def pad_into(pixels: np.ndarray, fit: Fit, target: Size, value: int) -> np.ndarray:
    """`pixels` (h, w, c) placed at `fit` in a (target, c) array filled with `value`."""
    out = np.full((*target, pixels.shape[2]), value, dtype=pixels.dtype)
    out[fit.top : fit.top + fit.height, fit.left : fit.left + fit.width] = pixels
    return out
