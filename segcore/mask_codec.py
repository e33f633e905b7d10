"""Load a segmentation mask from .mat or .png, check it, and encode it for the record."""

from __future__ import annotations

import io
import zlib

import h5py
import numpy as np
import scipy.io
from PIL import Image

from segcore.features import MASK_FOREGROUND, MASK_THRESHOLD
from segcore.rejects import Reason, RejectError

DEFAULT_MASK_KEY = "mask"
JPEG_QUALITIES = (95, 100)  # the second only if the first would not survive thresholding
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def load_mask(data: bytes, filename: str, mask_key: str | None = None) -> np.ndarray:
    """A 2-D array from a .mat (v4, v5, v7, v7.3) or image mask file."""
    if not data:
        raise RejectError(Reason.MASK_EMPTY, "file is empty (0 bytes)")
    if filename.lower().endswith(".mat"):
        array = _load_mat(data, mask_key)
    else:
        array = _load_image_mask(data)
    return _check_2d(array)


def _load_mat(data: bytes, mask_key: str | None) -> np.ndarray:
    if data[512 : 512 + len(_HDF5_SIGNATURE)] == _HDF5_SIGNATURE or data.startswith(
        _HDF5_SIGNATURE
    ):
        return _load_mat_v73(data, mask_key)
    try:
        variables = scipy.io.loadmat(io.BytesIO(data), squeeze_me=False)
    except NotImplementedError as error:  # v7.3 without the usual 512-byte header offset
        raise RejectError(Reason.MASK_UNREADABLE, str(error)) from error
    except (ValueError, TypeError, OSError, EOFError, zlib.error, KeyError, IndexError) as error:
        raise RejectError(
            Reason.MASK_UNREADABLE, f"not a readable MATLAB file: {type(error).__name__}: {error}"
        ) from error
    arrays = {
        name: value
        for name, value in variables.items()
        if not name.startswith("__") and isinstance(value, np.ndarray)
    }
    return _pick_variable(arrays, mask_key)


def _load_mat_v73(data: bytes, mask_key: str | None) -> np.ndarray:
    """MATLAB v7.3 is HDF5, stored column-major: transpose back to rows x columns."""
    try:
        with h5py.File(io.BytesIO(data), "r") as handle:
            arrays = {
                name: np.asarray(item[()]).T
                for name, item in handle.items()
                if isinstance(item, h5py.Dataset) and not name.startswith("#")
            }
    except (OSError, ValueError, KeyError) as error:
        raise RejectError(
            Reason.MASK_UNREADABLE, f"unreadable MATLAB v7.3 (HDF5) file: {error}"
        ) from error
    return _pick_variable(arrays, mask_key)


def _pick_variable(arrays: dict[str, np.ndarray], mask_key: str | None) -> np.ndarray:
    """--mask_key if given; else `mask`; else the only 2-D numeric variable."""
    if mask_key is not None:
        if mask_key not in arrays:
            raise RejectError(
                Reason.MASK_VARIABLE,
                f"no variable {mask_key!r}; variables: {sorted(arrays) or 'none'}",
            )
        return arrays[mask_key]
    if DEFAULT_MASK_KEY in arrays:
        return arrays[DEFAULT_MASK_KEY]
    candidates = [
        name
        for name, value in arrays.items()
        if value.ndim == 2 and min(value.shape) > 1 and _is_numeric(value)
    ]
    if len(candidates) == 1:
        return arrays[candidates[0]]
    raise RejectError(
        Reason.MASK_VARIABLE,
        f"no variable {DEFAULT_MASK_KEY!r} and {len(candidates)} 2-D candidates "
        f"{sorted(candidates)}: pass --mask_key",
    )


def _is_numeric(array: np.ndarray) -> bool:
    return array.dtype.kind in "biuf"


def _load_image_mask(data: bytes) -> np.ndarray:
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as error:
        raise RejectError(Reason.MASK_UNREADABLE, f"unreadable mask image: {error}") from error
    if image.mode == "P":
        return np.asarray(image)  # palette index = class id
    array = np.asarray(image)
    if array.ndim == 3:
        channels = array[..., :3] if array.shape[2] >= 3 else array[..., :1]
        if not (channels == channels[..., :1]).all():
            raise RejectError(
                Reason.MASK_NOT_2D, f"colour mask ({image.mode}) with differing channels"
            )
        array = channels[..., 0]
    return array


def _check_2d(array: np.ndarray) -> np.ndarray:
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[..., 0]
    if array.ndim != 2:
        raise RejectError(Reason.MASK_NOT_2D, f"mask has shape {array.shape}, expected 2-D")
    if not _is_numeric(array):
        raise RejectError(Reason.MASK_VALUES, f"mask has non-numeric dtype {array.dtype}")
    return array


def binarize(mask: np.ndarray) -> np.ndarray:
    """uint8 0/255 from a mask of {0,1} or {0,255}; anything else is rejected, not guessed.

    Soft or multi-class masks would be silently degraded by thresholding, so they are
    refused with the values found.
    """
    if mask.dtype == np.bool_:
        return mask.view(np.uint8) * np.uint8(MASK_FOREGROUND)
    if mask.dtype == np.uint8:
        if mask.max() <= 1:  # the common 0/1 .mat mask: one pass to check, one to scale
            return mask * np.uint8(MASK_FOREGROUND)
        # bincount is linear; np.unique would sort 480k pixels per mask.
        present = set(np.flatnonzero(np.bincount(mask.ravel(), minlength=256)).tolist())
    else:
        if mask.dtype.kind == "f" and not np.isfinite(mask).all():
            raise RejectError(Reason.MASK_VALUES, "mask contains NaN or infinity")
        present = {float(value) for value in np.unique(mask)}
    if present <= {0, 1}:
        return (mask != 0).view(np.uint8) * np.uint8(MASK_FOREGROUND)
    if present <= {0, MASK_FOREGROUND}:
        return mask if mask.dtype == np.uint8 else (mask != 0).view(np.uint8) * np.uint8(255)
    values = sorted(present)
    shown = ", ".join(f"{value:g}" for value in values[:6])
    more = "" if len(values) <= 6 else f", ... ({len(values)} distinct)"
    raise RejectError(
        Reason.MASK_VALUES,
        f"mask values {{{shown}{more}}} are not binary ({{0,1}} or {{0,255}})",
    )


def encode_mask(mask: np.ndarray, mask_format: str) -> bytes:
    """Single-channel JPEG or PNG of a 0/255 mask that thresholds back exactly at 128."""
    image = Image.fromarray(mask, mode="L")
    if mask_format == "png":
        out = io.BytesIO()
        image.save(out, format="PNG", optimize=False, compress_level=1)
        return out.getvalue()
    if mask_format != "jpeg":
        raise ValueError(f"unknown mask format {mask_format!r}")
    expected = mask >= MASK_THRESHOLD
    for quality in JPEG_QUALITIES:
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=quality)
        encoded = out.getvalue()
        if np.array_equal(decode_mask_threshold(encoded), expected):
            return encoded
    raise RejectError(
        Reason.MASK_VALUES, "mask does not survive JPEG encoding; use --mask_format png"
    )


def decode_mask_threshold(encoded: bytes) -> np.ndarray:
    """Boolean foreground of a stored mask, as a reader sees it."""
    return np.asarray(Image.open(io.BytesIO(encoded)).convert("L")) >= MASK_THRESHOLD
