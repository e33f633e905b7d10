"""Load a segmentation mask from .mat or .png, check it, and encode it for the record."""

from __future__ import annotations

import functools
import io
import itertools
import re
import struct
import zlib

import numpy as np
import simplejpeg
from PIL import Image
from zlib_ng import zlib_ng

from transforms.codecs.image import MASK_REASONS, open_image
from transforms.format.features import JPEG_MASK_MARGIN, MASK_FOREGROUND, MASK_THRESHOLD
from transforms.limits import DEFAULT_LIMITS, InputLimits
from transforms.rejects import Reason, RejectError

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
_MAT5_HEADER = 128
_MI_COMPRESSED = 15
_MAT5_HEAD_BYTES = 1024  # a variable's tag, flags, dimensions and name fit in this
# A nested array's start in a MAT v5 variable: its miMATRIX tag (type 14, any length), then
# its array flags' tag (miUINT32, 8 bytes); little- or big-endian.
_NESTED = re.compile(
    rb"\x0e\x00\x00\x00.{4}\x06\x00\x00\x00\x08\x00\x00\x00"
    rb"|\x00\x00\x00\x0e.{4}\x00\x00\x00\x06\x00\x00\x00\x08",
    re.DOTALL,
)
_MAX_NESTED = 4096  # a mask struct holds a few (SBD's: 20-odd); scipy overflows past ~10,000
_UNREADABLE = (
    ValueError,
    TypeError,
    OSError,
    EOFError,
    zlib.error,
    zlib_ng.error,
    KeyError,
    IndexError,
)


def _scipy_io():
    """scipy.io, imported on first use (as is h5py, for v7.3): the launcher imports this
    module with the job's graph but never loads a mask, and those imports would cost it
    about 0.2 s of start-up (the writers import them beside Beam's)."""
    import scipy.io

    return scipy.io


def _h5py():
    """h5py, imported on first use: see _scipy_io."""
    import h5py

    return h5py


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
        if _scipy_io().matlab.matfile_version(io.BytesIO(data))[0] == 0:
            # v4 has no compression: nothing inflates, the file's size bounds the reads.
            listed = {
                name: (tuple(shape), kind, None)
                for name, shape, kind in _scipy_io().whosmat(io.BytesIO(data))
            }
        else:
            listed = _mat5_variables(data)
    except NotImplementedError as error:  # v7.3 without the usual 512-byte header offset
        raise RejectError(Reason.MASK_UNREADABLE, str(error)) from error
    except _UNREADABLE as error:
        raise _unreadable(error) from error
    variable, fields = _split_key(mask_key)
    name = _pick_variable(
        {name: (shape, kind in _MAT_ITEMSIZE) for name, (shape, kind, _) in listed.items()},
        variable,
    )
    shape, kind, element = listed[name]
    if kind == "struct":
        return _struct_field(data, name, fields, element, limits)
    if fields:
        raise RejectError(
            Reason.MASK_VARIABLE,
            f"variable {name!r} is a MATLAB {kind}, not a struct: no field {'.'.join(fields)!r}",
        )
    if kind not in _MAT_ITEMSIZE:
        raise RejectError(Reason.MASK_VALUES, f"variable {name!r} is a MATLAB {kind}, not numeric")
    declared = _check_size(shape, _MAT_ITEMSIZE[kind], limits)
    try:
        if element is None:
            return _scipy_io().loadmat(io.BytesIO(data), variable_names=[name])[name]
        # room for a complex part, tags, dimensions and name
        bound, what = 2 * declared + (64 << 10), f"the {declared:,} bytes its header declares"
        return _scipy_io().loadmat(io.BytesIO(_single(data, element, name, bound, what)))[name]
    except _UNREADABLE as error:
        raise _unreadable(error) from error


def _split_key(mask_key: str | None) -> tuple[str | None, tuple[str, ...]]:
    """`GTcls.Segmentation` -> ("GTcls", ("Segmentation",)): a variable, then struct fields."""
    if mask_key is None:
        return None, ()
    variable, *fields = mask_key.split(".")
    return variable, tuple(fields)


def _struct_field(
    data: bytes,
    name: str,
    fields: tuple[str, ...],
    element: tuple[bytes, bool] | None,
    limits: InputLimits,
) -> np.ndarray:
    """The array at `name`.FIELD.FIELD... of a MATLAB struct (SBD's GTcls.Segmentation).

    A struct's header does not give its fields' sizes, so the whole variable is inflated under
    a bound of its own: a mask's worth of bytes, plus room for the struct's other fields.
    """
    if element is None:  # MAT v4 has no structs; whosmat never reports one there
        raise RejectError(Reason.MASK_VARIABLE, f"variable {name!r} is not a struct")
    bound = limits.mask_array_bytes
    try:
        single = _single(data, element, name, bound, f"the {bound:,} bytes a mask struct may hold")
        # scipy reads nested arrays recursively in C: tens of thousands of levels overflow
        # the stack and kill the process, so the arrays (each starts with its tag, then the
        # array flags' tag) are counted first.
        nested = sum(1 for _ in itertools.islice(_NESTED.finditer(single), _MAX_NESTED + 1))
        if nested > _MAX_NESTED:
            raise RejectError(
                Reason.MASK_VARIABLE, f"variable {name!r} nests more than {_MAX_NESTED:,} arrays"
            )
        value = _scipy_io().loadmat(io.BytesIO(single), simplify_cells=True)[name]
    except _UNREADABLE as error:
        raise _unreadable(error) from error
    path = name
    for field in fields:
        if not isinstance(value, dict) or field not in value:
            found = sorted(value) if isinstance(value, dict) else []
            raise RejectError(
                Reason.MASK_VARIABLE,
                f"{path!r} has no field {field!r}; fields: {found or 'none (not a struct)'}",
            )
        value, path = value[field], f"{path}.{field}"
    if isinstance(value, dict):
        raise RejectError(
            Reason.MASK_VARIABLE,
            f"{path!r} is a MATLAB struct: pass --mask_key {path}.FIELD, one of {sorted(value)}",
        )
    if not isinstance(value, np.ndarray) or not _is_numeric(value):
        raise RejectError(Reason.MASK_VALUES, f"{path!r} is not a numeric array")
    _check_size(value.shape, value.dtype.itemsize, limits)
    return value


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


def _mat5_variables(data: bytes) -> dict[str, tuple[tuple[int, ...], str, tuple[bytes, bool]]]:
    """name -> (shape, MATLAB class, (raw element, compressed)) of each variable of a MAT v5
    file.

    MAT v5 is a 128-byte header, then one tagged element per variable (MATLAB's "MAT-File
    Format": a 4-byte type, a 4-byte length; type 15 is one zlib stream). That framing is
    all that is read here, to find each variable; scipy reads each variable's header, from
    at most its first kilobyte inflated. No variable's data is inflated.
    """
    order = "<" if data[126:128] == b"IM" else ">"
    variables = {}
    position = _MAT5_HEADER
    while position + 8 <= len(data):
        kind, length = struct.unpack_from(order + "II", data, position)
        if length == 0:
            raise ValueError(f"empty element at byte {position}")
        element = data[position : position + 8 + length]
        head = element[:_MAT5_HEAD_BYTES]
        if kind == _MI_COMPRESSED:
            head = zlib_ng.decompressobj().decompress(element[8:], _MAT5_HEAD_BYTES)
        for name, shape, matlab_class in _scipy_io().whosmat(
            io.BytesIO(data[:_MAT5_HEADER] + head)
        ):
            if not name.startswith("__"):
                variables[name] = (tuple(shape), matlab_class, (element, kind == _MI_COMPRESSED))
        position += 8 + length
    return variables


def _single(data: bytes, element: tuple[bytes, bool], name: str, bound: int, what: str) -> bytes:
    """A MAT v5 file of the header of `data` and one variable's (raw element, compressed):
    as stored, or inflated by _inflate_bounded."""
    raw, compressed = element
    header = data[:_MAT5_HEADER]
    return _inflate_bounded(raw, name, bound, header, what) if compressed else header + raw


def _inflate_bounded(element: bytes, name: str, bound: int, header: bytes, what: str) -> bytes:
    """`header` then a compressed variable's element, inflated (one join, no second copy);
    a reject if it inflates past `bound` bytes (`what`: the reject's words for that bound).

    Inflated in 1 MB steps, so a zlib bomb is stopped after `bound` bytes whatever its
    header says. scipy then reads the uncompressed element without inflating it again.
    zlib-ng inflates the same bytes as zlib, and a mask's long runs of one value tens of
    times faster (runs are copied in blocks, not byte by byte).
    """
    inflater = zlib_ng.decompressobj()
    pending, parts, inflated = element[8:], [header], 0
    while True:
        part = inflater.decompress(pending, 1 << 20)
        inflated += len(part)
        if inflated > bound:
            raise RejectError(
                Reason.MASK_TOO_LARGE,
                f"variable {name!r} inflates past {what}",
            )
        parts.append(part)
        pending = inflater.unconsumed_tail
        if inflater.eof or not (part or pending):
            return b"".join(parts)


def _load_mat_v73(data: bytes, mask_key: str | None, limits: InputLimits) -> np.ndarray:
    """MATLAB v7.3 is HDF5, stored column-major: transpose back to rows x columns.

    Shapes and types come from HDF5's metadata; only the chosen dataset is read, and HDF5
    inflates each chunk into a buffer of the chunk's declared size.
    """
    try:
        with _h5py().File(io.BytesIO(data), "r") as handle:
            datasets = {
                name: item
                for name in handle
                if not name.startswith("#")
                and isinstance(item := _hard_item(handle, name), _h5py().Dataset)
            }
            shapes = {
                name: (tuple(reversed(item.shape)), item.dtype.kind in "biuf")
                for name, item in datasets.items()
            }
            variable, fields = _split_key(mask_key)
            name = _pick_variable(shapes, variable) if not fields else variable
            dataset = _hdf5_field(handle, name, fields) if fields else datasets[name]
            if dataset.external or dataset.is_virtual:
                raise RejectError(
                    Reason.MASK_UNREADABLE,
                    f"{name!r} keeps its data outside the file (HDF5 external or virtual "
                    "storage): not read",
                )
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


def _hard_item(group, name: str):
    """group[name] where it is an object of the file itself; a soft or external link (to
    another file, anywhere on the machine) is refused, never followed."""
    if not isinstance(group.get(name, getlink=True), _h5py().HardLink):
        raise RejectError(
            Reason.MASK_UNREADABLE, f"{name!r} is an HDF5 link to elsewhere: not followed"
        )
    return group[name]


def _hdf5_field(handle, name: str, fields: tuple[str, ...]):
    """The dataset at NAME/FIELD/... of a v7.3 file, where a struct is an HDF5 group."""
    item, path = handle, ""
    for part in (name, *fields):
        if not isinstance(item, _h5py().Group) or part not in item:
            raise RejectError(
                Reason.MASK_VARIABLE,
                f"no {'variable' if not path else 'field'} {part!r}"
                + (f" in {path!r}" if path else ""),
            )
        item, path = _hard_item(item, part), f"{path}.{part}" if path else part
    if not isinstance(item, _h5py().Dataset):
        raise RejectError(Reason.MASK_VARIABLE, f"{path!r} is a MATLAB struct: name a field")
    return item


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
    image = open_image(data, limits.pixels, MASK_REASONS)
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
    if array.size == 0:
        raise RejectError(Reason.MASK_NOT_2D, f"mask has shape {array.shape}, no pixels")
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
            return _scaled_row_major(mask, np.uint8(MASK_FOREGROUND))
        # The common 0/255 PNG mask: 1..254 wrap to 0..253 and 0, 255 to 255, 254; one
        # subtraction and one comparison tell whether any value lies between.
        if not (mask - np.uint8(1) < np.uint8(MASK_FOREGROUND - 1)).any():
            return mask
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
    shown = ", ".join(f"{value:.9g}" for value in values[:6])
    more = "" if len(values) <= 6 else f", ... ({len(values)} distinct)"
    raise RejectError(
        Reason.MASK_VALUES,
        f"mask values {{{shown}{more}}} are not binary ({{0,1}} or {{0,255}})",
    )


_STRIP = 256  # columns of a column-major mask scaled at a time (_scaled_row_major)


def _scaled_row_major(mask: np.ndarray, factor: np.uint8) -> np.ndarray:
    """mask * factor in row-major order, the order Pillow encodes (it would copy any other).
    MATLAB's arrays are column-major: numpy's transposing copy reads one byte per cache line;
    scaled a strip of _STRIP columns at a time, each strip is one contiguous read and its
    rows land in a few cache lines (0.33 -> 0.21 ms for an 800x600 mask)."""
    if mask.flags.c_contiguous or not mask.flags.f_contiguous:
        return np.multiply(mask, factor, order="C")
    out = np.empty(mask.shape, dtype=mask.dtype)
    for start in range(0, mask.shape[1], _STRIP):
        strip = slice(start, start + _STRIP)
        np.multiply(mask[:, strip], factor, out=out[:, strip])
    return out


def encode_mask(mask: np.ndarray, mask_format: str, *, binary: bool = False) -> bytes:
    """Single-channel JPEG or PNG of a mask that thresholds back exactly at 128. `binary`:
    the caller's word that every pixel is 0 or 255 (binarize's output): its JPEG must then
    decode clean, every pixel within JPEG_MASK_MARGIN of 0 or 255 (what verify checks)."""
    image = Image.fromarray(mask, mode="L")
    if mask_format == "png":
        out = io.BytesIO()
        image.save(out, format="PNG", optimize=False, compress_level=1)
        return out.getvalue()
    if mask_format != "jpeg":
        raise ValueError(f"unknown mask format {mask_format!r}")
    for quality in JPEG_QUALITIES:
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=quality)
        encoded = out.getvalue()
        if _thresholds_back(encoded, mask, binary):
            return encoded
    raise RejectError(
        Reason.MASK_VALUES, "mask does not survive JPEG encoding; use --mask_format png"
    )


def _thresholds_back(encoded: bytes, mask: np.ndarray, binary: bool = False) -> bool:
    """Whether the stored grey JPEG decodes to the mask's foreground with both kinds of
    decoder readers use: the fast integer inverse DCT (simplejpeg's fastdct in
    shard_reader and verify, tf.io.decode_jpeg's default), which a mask of checkered
    blocks drives 255 levels wrong, so it is always decoded; and the accurate one (Pillow),
    whose error the quantisation table bounds, so a 0/255 mask is decoded that way only
    when the bound is not below JPEG_MASK_MARGIN (at quality 95 it is 63). A 0/255 mask must
    decode within the margin (XOR with the mask below it), another one to the same side of
    the threshold."""
    header = Image.open(io.BytesIO(encoded))  # the header only, until its pixels are used
    try:
        fast = simplejpeg.decode_jpeg(encoded, colorspace="GRAY", fastdct=True)[..., 0]
    except ValueError:
        return False
    decoded = [fast]
    if not (binary and _largest_error(header) < JPEG_MASK_MARGIN):
        decoded.append(np.asarray(header.convert("L")))
    if binary and mask.dtype == np.uint8:
        return all(int(np.bitwise_xor(pixels, mask).max()) < JPEG_MASK_MARGIN for pixels in decoded)
    return all(
        np.array_equal(pixels >= MASK_THRESHOLD, mask >= MASK_THRESHOLD) for pixels in decoded
    )


def _largest_error(jpeg: Image.Image) -> float:
    """The most a pixel of this single-channel baseline JPEG can differ from its source."""
    tables = getattr(jpeg, "quantization", None)
    if jpeg.mode != "L" or not tables or len(tables) != 1:
        return float("inf")
    return _error_bound(tuple(next(iter(tables.values()))))


@functools.lru_cache(maxsize=16)
def _error_bound(table: tuple[int, ...]) -> float:
    """An upper bound on a pixel's error for a quantisation table (in any coefficient
    order): each coefficient is off by at most half its step (rounding) plus 1 for the
    integer forward DCT; JPEG's coefficients are the orthonormal 8x8 DCT's, whose basis
    functions never exceed 1/4 in size; plus 1 for the inverse DCT's own rounding (IEEE
    1180 allows a peak error of 1)."""
    if len(table) != 64 or min(table) < 1:
        return float("inf")
    return sum(step / 2 + 1 for step in table) / 4 + 1
