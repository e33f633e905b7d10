"""Load a segmentation mask from .mat or .png, check it, and encode it for the record."""

from __future__ import annotations

import io
import zlib

import h5py
import numpy as np
import scipy.io
import scipy.io.matlab
from PIL import Image

from segcore.features import MASK_FOREGROUND, MASK_THRESHOLD
from segcore.limits import DEFAULT_LIMITS, InputLimits
from segcore.rejects import Reason, RejectError

DEFAULT_MASK_KEY = "mask"
JPEG_QUALITIES = (95, 100)  # the second only if the first would not survive thresholding
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# Bytes per element of the numeric MATLAB classes whosmat reports; any other class (cell,
# struct, char, sparse, object) is not an array mask.
_MAT_ITEMSIZE = {
    "double": 8,
    "single": 4,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "logical": 1,
}
# MAT v5: a 128-byte file header, then per variable an 8-byte tag; a compressed variable's
# tag is followed by one zlib stream (MATLAB's "MAT-File Format", miCOMPRESSED).
_MAT5_VARIABLE_DATA = 128 + 8
_UNREADABLE = (ValueError, TypeError, OSError, EOFError, zlib.error, KeyError, IndexError)


def load_mask(
    data: bytes, filename: str, mask_key: str | None = None, limits: InputLimits = DEFAULT_LIMITS
) -> np.ndarray:
    """A 2-D array from a .mat (v4, v5, v7, v7.3) or image mask file.

    The variable (or image) size is read from the header and checked against `limits` before
    anything is decoded, and only the mask variable is ever loaded.
    """
    if not data:
        raise RejectError(Reason.MASK_EMPTY, "file is empty (0 bytes)")
    if filename.lower().endswith(".mat"):
        array = _load_mat(data, mask_key, limits)
    else:
        array = _load_image_mask(data, limits)
    return _check_2d(array)


def _load_mat(data: bytes, mask_key: str | None, limits: InputLimits) -> np.ndarray:
    if data[512 : 512 + len(_HDF5_SIGNATURE)] == _HDF5_SIGNATURE or data.startswith(
        _HDF5_SIGNATURE
    ):
        return _load_mat_v73(data, mask_key, limits)
    try:
        listed = scipy.io.whosmat(io.BytesIO(data))
    except NotImplementedError as error:  # v7.3 without the usual 512-byte header offset
        raise RejectError(Reason.MASK_UNREADABLE, str(error)) from error
    except _UNREADABLE as error:
        raise _unreadable(error) from error
    variables = {
        name: (tuple(shape), _MAT_ITEMSIZE.get(kind), kind)
        for name, shape, kind in listed
        if not name.startswith("__")
    }
    name = _pick_variable(
        {n: (s, size is not None) for n, (s, size, _) in variables.items()}, mask_key
    )
    shape, itemsize, kind = variables[name]
    if itemsize is None:
        raise RejectError(Reason.MASK_VALUES, f"variable {name!r} is a MATLAB {kind}, not numeric")
    declared = _check_size(shape, itemsize, limits)
    _check_inflated_size(data, name, declared)
    try:
        return scipy.io.loadmat(io.BytesIO(data), variable_names=[name], squeeze_me=False)[name]
    except _UNREADABLE as error:
        raise _unreadable(error) from error


def _unreadable(error: Exception) -> RejectError:
    return RejectError(
        Reason.MASK_UNREADABLE, f"not a readable MATLAB file: {type(error).__name__}: {error}"
    )


def _check_size(shape: tuple[int, ...], itemsize: int, limits: InputLimits) -> int:
    """Bytes the array will take; a reject when it exceeds the limits."""
    elements = int(np.prod(shape, dtype=np.float64))
    if elements > limits.pixels or elements * itemsize > limits.mask_array_bytes:
        dims = "x".join(str(d) for d in shape)
        raise RejectError(
            Reason.MASK_TOO_LARGE,
            f"mask array is {dims} ({elements * itemsize:,} bytes); the limit is "
            f"{limits.pixels:,} elements and {limits.mask_array_bytes:,} bytes",
        )
    return elements * itemsize


def _check_inflated_size(data: bytes, name: str, declared: int) -> None:
    """A compressed variable must not inflate past the size its header declares (zlib bomb).

    The stream is inflated in bounded steps and thrown away: nothing larger than one step is
    ever held.
    """
    if scipy.io.matlab.matfile_version(io.BytesIO(data))[0] != 1:
        return  # v4 has no compression: bounded by the file's size
    bound = 2 * declared + (64 << 10)  # complex parts, tags, dims and name
    for variable, raw in scipy.io.matlab.varmats_from_mat(io.BytesIO(data)):
        if variable != name:
            continue
        stream = raw.getvalue()[_MAT5_VARIABLE_DATA:]
        if len(stream) < 2 or (stream[0] & 0x0F) != 8 or (stream[0] << 8 | stream[1]) % 31:
            return  # no zlib header: stored uncompressed, bounded by the file's size
        inflater = zlib.decompressobj()
        inflated = 0
        try:
            while stream and inflated <= bound:
                inflated += len(inflater.decompress(stream, 1 << 20))
                stream = inflater.unconsumed_tail
        except zlib.error as error:
            raise _unreadable(error) from error
        if inflated > bound:
            raise RejectError(
                Reason.MASK_TOO_LARGE,
                f"variable {name!r} inflates past the {declared:,} bytes its header declares",
            )
        return


def _load_mat_v73(data: bytes, mask_key: str | None, limits: InputLimits) -> np.ndarray:
    """MATLAB v7.3 is HDF5, stored column-major: transpose back to rows x columns.

    Shapes and types come from HDF5's metadata; only the chosen dataset is read, and HDF5
    inflates each chunk into a buffer of the chunk's declared size.
    """
    try:
        with h5py.File(io.BytesIO(data), "r") as handle:
            datasets = {
                name: item
                for name, item in handle.items()
                if isinstance(item, h5py.Dataset) and not name.startswith("#")
            }
            shapes = {
                name: (tuple(reversed(item.shape)), item.dtype.kind in "biuf")
                for name, item in datasets.items()
            }
            name = _pick_variable(shapes, mask_key)
            dataset = datasets[name]
            _check_size(dataset.shape, dataset.dtype.itemsize, limits)
            if dataset.chunks:
                _check_size(dataset.chunks, dataset.dtype.itemsize, limits)
            return np.asarray(dataset[()]).T
    except RejectError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RejectError(
            Reason.MASK_UNREADABLE, f"unreadable MATLAB v7.3 (HDF5) file: {error}"
        ) from error


def _pick_variable(variables: dict[str, tuple[tuple[int, ...], bool]], mask_key: str | None) -> str:
    """--mask_key if given; else `mask`; else the only 2-D numeric variable.

    `variables` maps each name to (shape, numeric) as the file's header declares them.
    """
    if mask_key is not None:
        if mask_key not in variables:
            raise RejectError(
                Reason.MASK_VARIABLE,
                f"no variable {mask_key!r}; variables: {sorted(variables) or 'none'}",
            )
        return mask_key
    if DEFAULT_MASK_KEY in variables:
        return DEFAULT_MASK_KEY
    candidates = [
        name
        for name, (shape, numeric) in variables.items()
        if numeric and len(shape) == 2 and min(shape) > 1
    ]
    if len(candidates) == 1:
        return candidates[0]
    raise RejectError(
        Reason.MASK_VARIABLE,
        f"no variable {DEFAULT_MASK_KEY!r} and {len(candidates)} 2-D candidates "
        f"{sorted(candidates)}: pass --mask_key",
    )


def _is_numeric(array: np.ndarray) -> bool:
    return array.dtype.kind in "biuf"


def _load_image_mask(data: bytes, limits: InputLimits) -> np.ndarray:
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        if width * height > limits.pixels:
            raise RejectError(
                Reason.MASK_TOO_LARGE,
                f"{width}x{height} exceeds {limits.pixels:,} pixels (decompression bomb guard)",
            )
        image.load()
    except RejectError:
        raise
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
