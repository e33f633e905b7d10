"""Multi-class masks: read class ids from any mask source, check them, store them losslessly.

A class-id mask is a 2-D array of integer class ids 0..num_classes-1, plus `ignore_index`
for pixels no loss should count (Pascal VOC's 255 boundaries). The classic ways to get one
wrong are all silent: a palette PNG decoded to colours, a 16-bit label map clipped to 8 bits,
a 2-bit PNG scaled to 0/85/170/255, a JPEG label map smeared at every edge. Each source
therefore goes through one table entry that knows its trap, and every value is checked.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image

from transforms.codecs.class_map import ClassMap
from transforms.codecs.image import MASK_REASONS, open_image
from transforms.codecs.mask import load_mask
from transforms.format.features import (
    DEFAULT_IGNORE_INDEX,
    DEFAULT_MASK_TYPE,
    MASK_TYPES,
    MAX_CLASS_ID,
    PNG_SIGNATURE,
    class_png_bit_depth,
)
from transforms.json_shape import check_shape
from transforms.limits import DEFAULT_LIMITS, InputLimits
from transforms.rejects import Reason, RejectError
from transforms.settings_error import SettingError

PNG_COMPRESS_LEVEL = 1  # label maps compress well even at level 1; the writer's time matters
_SHOWN_VALUES = 8  # values listed in a reject detail before "... (N distinct)"

RGB = tuple[int, int, int]
FLAG_JSON_DEPTH = 8  # --class_names and --colormap JSON: 2 levels needed, deeper is refused


@dataclasses.dataclass(frozen=True)
class ClassMaskSettings:
    """How masks are read and stored; built by `class_mask_settings` from the flags."""

    mask_type: str = DEFAULT_MASK_TYPE
    num_classes: int | None = None
    ignore_index: int = DEFAULT_IGNORE_INDEX
    class_names: tuple[str, ...] | None = None
    colormap: tuple[RGB, ...] | None = None  # colour of class id i, from --colormap
    class_map: ClassMap | None = None  # --class_map: applied as a mask is read

    def __post_init__(self) -> None:
        if self.mask_type not in MASK_TYPES:
            raise ValueError(f"mask type must be one of {', '.join(MASK_TYPES)}")
        if self.mask_type == "binary":
            if (self.num_classes, self.class_names, self.colormap, self.class_map) != (None,) * 4:
                raise SettingError("class names, colormap and class count need {mask_type} classes")
            return
        n, ignore = self.num_classes, self.ignore_index
        if not (type(n) is int and 2 <= n <= MAX_CLASS_ID):
            raise SettingError(
                f"{{num_classes}} must be an integer from 2 to {MAX_CLASS_ID}, got {n}"
            )
        if not (type(ignore) is int and 0 <= ignore <= MAX_CLASS_ID):
            raise SettingError(f"{{ignore_index}} must be an integer from 0 to {MAX_CLASS_ID}")
        if ignore < n:
            raise SettingError(
                f"{{ignore_index}} {ignore} is a class id (num_classes {n}): pass "
                f"{{ignore_index}} {255 if n <= 255 else MAX_CLASS_ID} or another value >= {n}"
            )
        for label, values in (("class names", self.class_names), ("colormap", self.colormap)):
            if values is not None and len(values) != n:
                raise ValueError(f"{len(values)} {label} for num_classes {n}")
        if self.class_map is not None:
            bad = sorted(i for i in self.class_map.stored_ids() if i >= n and i != ignore)
            if bad:
                raise ValueError(
                    f"--class_map {self.class_map.source} stores ids {bad}: neither a class id "
                    f"(num_classes {n}) nor the ignore index {ignore}"
                )

    @property
    def is_classes(self) -> bool:
        return self.mask_type == "classes"

    @property
    def bit_depth(self) -> int:
        """8 when every stored value (ids and the ignore index) fits in a byte, else 16."""
        return class_png_bit_depth(self.ignore_index)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if self.bit_depth == 8 else np.uint16)


def class_mask_settings(
    mask_type: str = DEFAULT_MASK_TYPE,
    *,
    num_classes: int | None = None,
    ignore_index: int | None = None,
    class_names: Sequence[str] | None = None,
    colormap: Sequence[tuple[str, RGB]] | None = None,
    class_map: ClassMap | None = None,
) -> ClassMaskSettings:
    """Settings from the CLI's values (None = flag not given); ValueError names the flag.

    The class count comes from --num_classes, --class_names or --colormap; any two given
    must agree, so a names file and a colour file can never silently disagree.
    """
    names = None if class_names is None else tuple(class_names)
    colours = None if colormap is None else tuple(colour for _, colour in colormap)
    if mask_type != "classes":
        if ignore_index is not None:
            raise SettingError("{ignore_index} needs {mask_type} classes")
        return ClassMaskSettings(mask_type, num_classes, class_names=names, colormap=colours)
    colour_names = None if colormap is None else tuple(name for name, _ in colormap)
    if names is not None and colour_names is not None and names != colour_names:
        raise SettingError("{class_names} and {colormap} name different classes (or orders)")
    names = names or colour_names
    if num_classes is None:
        if names is None:
            raise SettingError(
                "{mask_type} classes needs {num_classes}, {class_names} or {colormap}"
            )
        num_classes = len(names)
    return ClassMaskSettings(
        mask_type,
        num_classes,
        DEFAULT_IGNORE_INDEX if ignore_index is None else ignore_index,
        names,
        colours,
        class_map,
    )


def parse_class_names(data: bytes | str, source: str) -> tuple[str, ...]:
    """Class names in class-id order: a JSON list of strings, or one name per line."""
    text = _text(data, source)
    if text.lstrip().startswith("["):
        names = _json(text, source)
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise ValueError(f"{source}: expected a JSON list of class names")
    else:
        names = text.splitlines()
        while names and not names[-1].strip():
            names.pop()
    names = [name.strip() for name in names]
    _check_names(names, source)
    return tuple(names)


def parse_colormap(data: bytes | str, source: str) -> tuple[tuple[str, RGB], ...]:
    """(name, colour) in class-id order, from any of the three files datasets ship:

    - a JSON object {name: [r, g, b], ...};
    - CVAT's labelmap.txt ("Segmentation mask 1.1" export): `name:r,g,b:parts:actions` per
      line, `#` lines are comments;
    - a CSV with a `name,r,g,b` header (CamVid's class_dict.csv).

    Class ids follow the order of the file; duplicate names and duplicate colours are errors,
    since either would make the id of a pixel ambiguous.
    """
    text = _text(data, source)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first.startswith(("{", "[")) or not first:
        pairs = _json(text, source, object_pairs_hook=list)
        if not isinstance(pairs, list) or not pairs or not all(isinstance(p, tuple) for p in pairs):
            raise ValueError(
                f"{source}: expected a JSON object {{class name: [r, g, b], ...}}, a CVAT "
                "labelmap.txt (name:r,g,b:parts:actions) or a CSV with a name,r,g,b header"
            )
    elif first.replace(" ", "").lower() == CLASS_DICT_HEADER:
        pairs = _class_dict_pairs(text, source)
    else:
        pairs = _labelmap_pairs(text, source)
    _check_names([name for name, _ in pairs], source)
    entries: list[tuple[str, RGB]] = []
    seen: dict[RGB, str] = {}
    for name, colour in pairs:
        if not (
            isinstance(colour, list)
            and len(colour) == 3
            and all(type(c) is int and 0 <= c <= 255 for c in colour)
        ):
            raise ValueError(f"{source}: colour of {name!r} must be [r, g, b] of 0-255 integers")
        rgb = (colour[0], colour[1], colour[2])
        if rgb in seen:
            raise ValueError(f"{source}: {name!r} and {seen[rgb]!r} share colour {list(rgb)}")
        seen[rgb] = name
        entries.append((name, rgb))
    return tuple(entries)


CLASS_DICT_HEADER = "name,r,g,b"


def _integers(values: Sequence[str]) -> list[int | str]:
    """Decimal integers where the text is one (else the text, refused by the range check)."""
    return [int(v.strip()) if v.strip().isdigit() else v for v in values]


def _labelmap_pairs(text: str, source: str) -> list[tuple[str, list]]:
    """CVAT's labelmap.txt, read with the csv module (':'-separated fields)."""
    # Comment lines become empty ones, so line numbers stay the file's.
    lines = ["" if line.lstrip().startswith("#") else line for line in text.splitlines()]
    pairs = []
    for number, row in enumerate(csv.reader(lines, delimiter=":"), start=1):
        if not row or not "".join(row).strip():
            continue
        if len(row) < 2:
            raise ValueError(
                f"{source}: not valid JSON, nor a labelmap line name:r,g,b:parts:actions "
                f"(line {number}: {':'.join(row)[:60]!r})"
            )
        pairs.append((row[0].strip(), _integers(row[1].split(","))))
    return pairs


def _class_dict_pairs(text: str, source: str) -> list[tuple[str, list]]:
    """A CSV with a name,r,g,b header (CamVid's class_dict.csv)."""
    reader = csv.reader(io.StringIO(text))
    pairs = []
    for number, row in enumerate(reader, start=1):
        if number == 1 or not row or not "".join(row).strip():
            continue
        if len(row) != 4:
            raise ValueError(f"{source}: line {number} has {len(row)} fields, not name,r,g,b")
        pairs.append((row[0].strip(), _integers(row[1:])))
    return pairs


def _text(data: bytes | str, source: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{source}: not UTF-8 text ({error.reason})") from error


def _json(text: str, source: str, **options):
    # A list of names or an object of colours is 2 levels deep; deep nesting would exhaust
    # json's recursion (RecursionError) instead of being a usage error.
    check_shape([text.encode("utf-8", "surrogatepass")], source, FLAG_JSON_DEPTH)
    try:
        return json.loads(text, **options)
    except json.JSONDecodeError as error:
        raise ValueError(f"{source}: not valid JSON ({error.msg}, line {error.lineno})") from error


def _check_names(names: Sequence[str], source: str) -> None:
    if len(names) < 2:
        raise ValueError(f"{source}: needs at least 2 classes, found {len(names)}")
    for position, name in enumerate(names):
        if not name.strip():
            raise ValueError(f"{source}: class {position} has an empty name")
    duplicates = sorted(name for name, count in collections.Counter(names).items() if count > 1)
    if duplicates:
        raise ValueError(f"{source}: duplicate class names {duplicates}")


# --- reading --------------------------------------------------------------------------------


def load_class_mask(
    data: bytes,
    filename: str,
    settings: ClassMaskSettings,
    mask_key: str | None = None,
    limits: InputLimits = DEFAULT_LIMITS,
) -> np.ndarray:
    """Checked class ids [H, W] in `settings.dtype`; raises RejectError for any bad mask.

    Sizes are checked against `limits` from the file's header, before pixels are decoded.
    """
    if not settings.is_classes:
        raise SettingError("load_class_mask needs {mask_type} classes settings")
    if not data:
        raise RejectError(Reason.MASK_EMPTY, "file is empty (0 bytes)")
    if filename.lower().endswith(".mat"):  # with transforms.codecs.mask's --mask_key rules
        ids = load_mask(data, filename, mask_key, limits)
    else:
        ids = _image_ids(data, settings, limits)
    if settings.class_map is not None:
        ids = settings.class_map.apply(ids)
    return check_class_ids(ids, settings)


def _image_ids(data: bytes, settings: ClassMaskSettings, limits: InputLimits) -> np.ndarray:
    image = open_image(data, limits.pixels, MASK_REASONS, _refuse_jpeg)
    reader = _MODES.get(image.mode)
    if reader is None:
        raise RejectError(
            Reason.MASK_NOT_2D,
            f"mask image mode {image.mode}: expected one channel, a palette, or RGB(A) colours",
        )
    array = reader(image, settings)
    return _undo_png_scaling(array, data)


def _refuse_jpeg(image: Image.Image) -> None:
    """Refused from the header, before decoding: JPEG label maps cannot be exact."""
    if image.format in ("JPEG", "MPO"):
        raise RejectError(
            Reason.MASK_VALUES,
            "JPEG label map: lossy compression changes class ids at every edge; "
            "store class masks as PNG",
        )


def _as_stored(image: Image.Image, settings: ClassMaskSettings) -> np.ndarray:
    """Single-channel values are the class ids (bilevel, 8-, 16- and 32-bit)."""
    return np.asarray(image)


def _palette_indices(image: Image.Image, settings: ClassMaskSettings) -> np.ndarray:
    """Palette INDICES are the class ids; with --colormap, their colours must agree with it."""
    indices = np.asarray(image)
    if settings.colormap is not None:
        _check_palette(image, indices, settings)
    return indices


def _check_palette(image: Image.Image, indices: np.ndarray, settings: ClassMaskSettings) -> None:
    """A palette re-ordered by some tool would give right colours but wrong ids: refuse it."""
    palette = image.getpalette() or []
    used = np.unique(_run_values(indices.ravel()))
    for index in used[used < len(settings.colormap)].tolist():
        colour = tuple(palette[3 * index : 3 * index + 3])
        expected = settings.colormap[index]
        if colour != expected:
            raise RejectError(
                Reason.MASK_VALUES,
                f"palette index {index} is colour {list(colour)} but the colormap gives class "
                f"{index} colour {list(expected)}",
            )


def _with_alpha(image: Image.Image, settings: ClassMaskSettings) -> np.ndarray:
    """Grey or colour plus alpha: the alpha must be opaque everywhere, then it is dropped."""
    array = np.asarray(image)
    if not (array[..., -1] == 255).all():
        raise RejectError(Reason.MASK_VALUES, f"{image.mode} mask has transparent pixels")
    if image.mode == "LA":
        return array[..., 0]
    return _colour_ids(array[..., :3], settings)


def _colours(image: Image.Image, settings: ClassMaskSettings) -> np.ndarray:
    return _colour_ids(np.asarray(image), settings)


def _colour_ids(rgb: np.ndarray, settings: ClassMaskSettings) -> np.ndarray:
    """Colour -> class id through the colormap; a grey RGB image (r = g = b) without one."""
    if settings.colormap is None:
        if not (rgb == rgb[..., :1]).all():
            raise RejectError(
                Reason.MASK_NOT_2D, "colour mask with differing channels: pass --colormap FILE"
            )
        return rgb[..., 0]
    packed = _pack(rgb).ravel()
    # Colour masks are long runs of one colour: look up each run once, then expand.
    starts = _run_starts(packed)
    colours = packed[starts]
    keys = np.array([_pack_one(colour) for colour in settings.colormap], dtype=np.uint32)
    order = np.argsort(keys)
    sorted_keys = keys[order]
    position = np.minimum(np.searchsorted(sorted_keys, colours), len(keys) - 1)
    known = sorted_keys[position] == colours
    if not known.all():
        unknown = np.unique(colours[~known])
        shown = ", ".join(str(_unpack(int(key))) for key in unknown[:_SHOWN_VALUES])
        more = "" if len(unknown) <= _SHOWN_VALUES else f", ... ({len(unknown)} distinct)"
        raise RejectError(Reason.MASK_VALUES, f"colours not in the colormap: {shown}{more}")
    run_ids = order[position].astype(np.uint16 if len(keys) > 256 else np.uint8)
    return np.repeat(run_ids, np.diff(starts, append=packed.size)).reshape(rgb.shape[:2])


def _run_starts(flat: np.ndarray) -> np.ndarray:
    """Indices where a new run of equal values begins (0 always)."""
    change = np.empty(flat.size, dtype=bool)
    change[:1] = True
    np.not_equal(flat[1:], flat[:-1], out=change[1:])
    return np.flatnonzero(change)


def _run_values(flat: np.ndarray) -> np.ndarray:
    """The value of each run: the distinct values, from far fewer elements than pixels."""
    return flat[_run_starts(flat)]


def _pack(rgb: np.ndarray) -> np.ndarray:
    """0xRRGGBB per pixel, in place on one uint32 array (fewer temporaries: 2x faster)."""
    packed = rgb[..., 0].astype(np.uint32)
    for channel in (1, 2):
        packed <<= 8
        packed |= rgb[..., channel]
    return packed


def _pack_one(colour: RGB) -> int:
    return (colour[0] << 16) | (colour[1] << 8) | colour[2]


def _unpack(key: int) -> list[int]:
    return [key >> 16, (key >> 8) & 255, key & 255]


# Pillow image mode -> how its pixels become class ids. A mode not listed is a reject.
_MODES: dict[str, Callable[[Image.Image, ClassMaskSettings], np.ndarray]] = {
    "1": _as_stored,
    "L": _as_stored,
    "I;16": _as_stored,
    "I;16B": _as_stored,
    "I;16L": _as_stored,
    "I": _as_stored,
    "F": _as_stored,  # float TIFF: check_class_ids refuses non-integers
    "P": _palette_indices,
    "LA": _with_alpha,
    "RGB": _colours,
    "RGBA": _with_alpha,
}

_PNG_GREY, _PNG_RGB, _PNG_GREY_ALPHA, _PNG_RGBA = 0, 2, 4, 6


def _undo_png_scaling(array: np.ndarray, data: bytes) -> np.ndarray:
    """Pillow widens 2- and 4-bit grey PNGs to 0..255 and cuts 16-bit colour to 8 bits.

    The IHDR chunk (always first, fixed offsets) gives the stored bit depth: scaled grey
    is divided back exactly, and 16-bit colour, which cannot be recovered, is refused.
    """
    if not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return array
    bit_depth, colour_type = data[24], data[25]
    if colour_type == _PNG_GREY and bit_depth in (2, 4):
        return array // (255 // (2**bit_depth - 1))
    if colour_type in (_PNG_RGB, _PNG_GREY_ALPHA, _PNG_RGBA) and bit_depth == 16:
        raise RejectError(
            Reason.MASK_VALUES, "16-bit colour PNG: Pillow keeps only 8 bits per channel"
        )
    return array


# --- checking and storing -------------------------------------------------------------------


def check_class_ids(array: np.ndarray, settings: ClassMaskSettings) -> np.ndarray:
    """The ids as `settings.dtype`; RejectError(MASK_VALUES) listing any value that is not.

    A value is valid when it is an integer in 0..num_classes-1 or equals the ignore index.
    """
    if array.ndim != 2:
        raise RejectError(Reason.MASK_NOT_2D, f"mask has shape {array.shape}, expected 2-D")
    if array.dtype == np.bool_:
        return array.astype(settings.dtype)
    if array.dtype.kind not in "iuf":
        raise RejectError(Reason.MASK_VALUES, f"mask has non-numeric dtype {array.dtype}")
    if array.dtype.kind == "f":
        if not np.isfinite(array).all():
            raise RejectError(Reason.MASK_VALUES, "mask contains NaN or infinity")
        fractional = array != np.floor(array)
        if fractional.any():
            raise RejectError(
                Reason.MASK_VALUES, f"non-integer class ids {_listing(array[fractional])}"
            )
    if array.size == 0:
        raise RejectError(Reason.MASK_NOT_2D, f"mask has shape {array.shape}, no pixels")
    if array.dtype.kind in "if" and array.min() < 0:
        raise RejectError(Reason.MASK_VALUES, f"negative class ids {_listing(array[array < 0])}")
    if array.max() >= settings.num_classes:  # else every value is a class id: the common case
        bad = (array >= settings.num_classes) & (array != settings.ignore_index)
        if bad.any():
            raise RejectError(
                Reason.MASK_VALUES,
                f"class ids {_listing(array[bad])} out of range: num_classes "
                f"{settings.num_classes} (ids 0-{settings.num_classes - 1}), "
                f"ignore_index {settings.ignore_index}",
            )
    return array.astype(settings.dtype, copy=False)


def _listing(values: np.ndarray) -> str:
    distinct = np.unique(values)
    shown = ", ".join(
        f"{value:g}" if isinstance(value, float) else str(value)
        for value in distinct[:_SHOWN_VALUES].tolist()
    )
    more = "" if len(distinct) <= _SHOWN_VALUES else f", ... ({len(distinct)} distinct)"
    return f"{{{shown}{more}}}"


def encode_class_mask(ids: np.ndarray, settings: ClassMaskSettings) -> bytes:
    """Lossless single-channel PNG of checked ids: 8-bit, or 16-bit when ids need it.

    Grey, never palette: tf.io.decode_png(channels=1) would turn a palette into luminance.
    """
    if ids.dtype != settings.dtype or ids.ndim != 2:
        raise ValueError(f"expected a 2-D {settings.dtype} id array, got {ids.ndim}-D {ids.dtype}")
    out = io.BytesIO()
    Image.fromarray(ids).save(out, format="PNG", optimize=False, compress_level=PNG_COMPRESS_LEVEL)
    return out.getvalue()
