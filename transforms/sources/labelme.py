"""labelme JSON files: the labelme tool (transforms/sources/annotations.py).

The annotations are a folder of labelme `.json` files (every one under it, sorted by path;
hidden ones skipped), which may be the image folder itself: labelme saves `a.json` beside
`a.jpg`. Each file names its image by `imagePath`, relative to the JSON file, and states
`imageHeight` and `imageWidth`. Shapes drawn, in shape order (later on top):
- `polygon`: its points;
- `rectangle`: two opposite corners;
- `circle`: centre and a point on the circle, drawn as a 64-gon through pycocotools (the
  rasteriser every polygon goes through);
- `mask`: a base64 PNG whose nonzero pixels are set, placed with its top-left at the first
  point (rounded down), as labelme places it.
`line`, `linestrip`, `point` and other types are counted and not drawn. `imageData` is
never decoded. Labels get ids sorted by name (labelme keeps no order).

Every file is that image's entry: one that is not a regular file (a FIFO would block the
read) is a not_a_file reject, never opened as one; its bytes reach ijson through the
bounded reader (transforms/bounded_text.py: UTF-8, depth and token caps), its fields are
built with a budget of values, and its stated size and each mask PNG's are checked against
`InputLimits.pixels` before a pixel is allocated. Whatever is wrong with one file is its
image's reject naming the file, never the run's end.
"""

from __future__ import annotations

import base64
import binascii
import collections
import io
import math
import os
import posixpath
import warnings
from collections.abc import Iterator
from typing import Any

import ijson
import numpy as np

from transforms.bounded_text import JsonReader, Oversized, TextLimitError, bounded_entries
from transforms.files import NotAFileError, open_regular
from transforms.limits import InputLimits, TooLargeError, check_pixels
from transforms.sources.annotations import AnnotatedDataset, AnnotationTool, ReadRequest
from transforms.sources.labelled_shapes import (
    ToolImage,
    ToolShape,
    ToolStats,
    box_polygon,
    build_dataset,
    rle_of_bitmap,
)

CIRCLE_POINTS = 64
JSON_FILE_LIMIT = 256 << 20  # one labelme file, imageData included
FIELDS = frozenset({"shapes", "imagePath", "imageHeight", "imageWidth"})  # imageData: never


def labelme_files(folder: str) -> list[str]:
    """Every .json file under `folder`, relative to it, sorted; no symlinked folders followed."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        relative = os.path.relpath(root, folder)
        for name in sorted(files):
            if name.lower().endswith(".json") and not name.startswith("."):
                found.append(
                    posixpath.normpath(posixpath.join(relative.replace(os.sep, "/"), name))
                )
    return sorted(found)


def read_labelme(folder: str, request: ReadRequest) -> AnnotatedDataset:
    """Stage a folder of labelme files; ValueError (one line) if it holds none."""
    files = labelme_files(folder)
    if not files:
        raise ValueError(f"{request.origin}: no .json files")
    reader = _Reader(folder, request.image_dir or ".", request.limits)
    return build_dataset("labelme", reader.images(files), reader.stats, request)


TOOL = AnnotationTool(
    "labelme",
    "labelme",
    "a folder of labelme JSON files",
    # One labelme file is detected too, so the launcher can say to give its folder.
    detect=lambda head: head.is_folder or "shapes" in head.top_keys,
    read=read_labelme,
    folder_of=".json",
)


class _Reader:
    def __init__(self, folder: str, image_dir: str, limits: InputLimits) -> None:
        self.folder = folder
        self.image_dir = image_dir
        self.limits = limits
        self.ignored: collections.Counter[str] = collections.Counter()

    def stats(self) -> ToolStats:
        return ToolStats(dict(self.ignored))

    def images(self, files: list[str]) -> Iterator[ToolImage]:
        for relative in files:
            yield self._file(relative)

    def _file(self, relative: str) -> ToolImage:
        fallback = posixpath.splitext(relative)[0] + ".jpg"
        try:
            fields = self._fields(relative)
        except NotAFileError:
            problem = f"{relative}: not a regular file (FIFO, device or socket)"
            return ToolImage(fallback, 0, 0, problem=problem, not_a_file=True)
        except TextLimitError as error:
            return ToolImage(fallback, 0, 0, problem=str(error), too_large=error.too_large)
        except (OSError, ijson.JSONError) as error:
            return ToolImage(fallback, 0, 0, problem=f"{relative}: not readable JSON ({error})")
        if isinstance(fields, Oversized):
            problem = f"{relative}: more than {self.limits.entry_values:,} JSON values"
            return ToolImage(fallback, 0, 0, problem=problem, too_large=True)
        if not isinstance(fields, dict):
            return ToolImage(fallback, 0, 0, problem=f"{relative}: not a labelme JSON object")
        image_path = fields.get("imagePath")
        if not isinstance(image_path, str) or not image_path:
            return ToolImage(fallback, 0, 0, problem=f"{relative}: no imagePath")
        name = self._image_name(relative, image_path)
        height, width = fields.get("imageHeight"), fields.get("imageWidth")
        if not (type(height) is int and type(width) is int and height > 0 and width > 0):
            return ToolImage(name, 0, 0, problem=f"{relative}: no positive imageHeight/Width")
        try:
            check_pixels(height, width, self.limits, "imageHeight x imageWidth")
            shapes = self._shapes(fields.get("shapes") or [], height, width)
        except TooLargeError as error:
            return ToolImage(name, 0, 0, problem=f"{relative}: {error}", too_large=True)
        except (TypeError, ValueError, KeyError, IndexError, OverflowError) as error:
            return ToolImage(name, height, width, problem=f"{relative}: shape: {error}")
        return ToolImage(name, height, width, shapes)

    def _fields(self, relative: str) -> Any:
        """The file's drawn fields (FIELDS), or Oversized; NotAFileError for a FIFO or device."""
        with open_regular(os.path.join(self.folder, relative)) as stream:
            if os.fstat(stream.fileno()).st_size > JSON_FILE_LIMIT:
                raise TextLimitError(f"{relative}: larger than {JSON_FILE_LIMIT >> 20} MB")
            reader = JsonReader(stream, relative, self.limits.annotation_depth, self.limits)
            entries = bounded_entries(reader, "", self.limits.entry_values, keys=FIELDS)
            return next(entries, None)

    def _image_name(self, relative: str, image_path: str) -> str:
        """imagePath (relative to the JSON file) as a path under the image folder; a name that
        leaves it stays as written and pairs with no listed image."""
        json_dir = os.path.dirname(os.path.join(self.folder, relative))
        target = os.path.normpath(os.path.join(json_dir, image_path.replace("\\", "/")))
        inside = os.path.relpath(target, os.path.normpath(self.image_dir))
        return inside.replace(os.sep, "/")

    def _shapes(self, shapes: list[Any], height: int, width: int) -> tuple[ToolShape, ...]:
        if not isinstance(shapes, list):
            raise ValueError("shapes is not a list")
        drawn = []
        for index, shape in enumerate(shapes):
            if not isinstance(shape, dict):
                raise ValueError(f"shape {index} is not an object: {str(shape)[:40]!r}")
            kind = shape.get("shape_type") or "polygon"
            label = shape["label"]
            if not isinstance(label, str):
                raise ValueError(f"label {label!r} is not a string")
            points = shape.get("points") or []
            if len(points) > self.limits.polygon_points:
                raise TooLargeError(
                    f"a shape of {len(points):,} points, more than the "
                    f"{self.limits.polygon_points:,} one polygon may have"
                )
            xy = np.asarray(points, dtype=np.float64).reshape(-1, 2) if points else None
            if kind == "polygon":
                drawn.append(ToolShape(label, (xy.reshape(-1),)))
            elif kind == "rectangle":
                (x0, y0), (x1, y1) = xy[:2]
                corners = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
                drawn.append(ToolShape(label, (box_polygon(*corners, 0.0, (0.0, 0.0)),)))
            elif kind == "circle":
                (cx, cy), (px, py) = xy[:2]
                radius = math.hypot(px - cx, py - cy)
                angles = np.linspace(0, 2 * math.pi, CIRCLE_POINTS, endpoint=False)
                ring = np.stack([cx + radius * np.cos(angles), cy + radius * np.sin(angles)], 1)
                drawn.append(ToolShape(label, (ring.reshape(-1),)))
            elif kind == "mask":
                bitmap = _png_mask(shape.get("mask"), self.limits)
                x0, y0 = (math.floor(v) for v in xy[0])
                rle = rle_of_bitmap(bitmap, y0, x0, height, width, self.limits)
                drawn.append(ToolShape(label, rle=rle))
            else:
                self.ignored[str(kind)] += 1
        return tuple(drawn)


def _png_mask(data: Any, limits: InputLimits) -> np.ndarray:
    """The nonzero pixels of a mask shape's base64 PNG; its size is checked before decoding,
    and a bomb, a truncated or a garbage PNG is a ValueError (the image's reject)."""
    from PIL import Image

    if not isinstance(data, str):
        raise ValueError("a mask shape needs its base64 PNG")
    try:
        raw = base64.b64decode(data, validate=True)
    except binascii.Error as error:
        raise ValueError(f"mask is not base64: {error}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # checked below
            with Image.open(io.BytesIO(raw), formats=("PNG",)) as image:
                if image.format != "PNG":
                    raise ValueError(f"mask is not a PNG but {image.format}")
                check_pixels(image.height, image.width, limits, "mask PNG")
                return np.asarray(image.convert("L")) > 0
    except Image.DecompressionBombError as error:
        raise TooLargeError(f"mask PNG: {error}") from None
    except (OSError, SyntaxError, EOFError) as error:  # PIL's errors for broken files
        raise ValueError(f"mask PNG unreadable: {error}") from None
