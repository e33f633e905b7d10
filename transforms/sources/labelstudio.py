"""Label Studio JSON export: the Label Studio tool (transforms/sources/annotations.py).

The export is a list of tasks, streamed one task at a time with ijson through the bounded
reader (transforms/bounded_text.py: UTF-8, depth and token caps, as COCO's), each task built
with a budget of values (`InputLimits.entry_values`): a larger task is a mask_too_large
reject, as is a size over `InputLimits.pixels`, checked before a brush is decoded. A
task's image is `data.image` (or its only image-like value);
its first annotation not marked `was_cancelled` is drawn (later ones are counted as
skipped), result by result in result order, later on top:
- `polygonlabels`: `value.points` in percent of `original_width` x `original_height`;
- `rectanglelabels`: `value.x, y, width, height` in percent, `rotation` in degrees clockwise
  about the top-left corner (x, y), as Label Studio draws it;
- `brushlabels`: `value.rle`, Label Studio's own RLE of the RGBA canvas
  (label-studio-converter's brush format), decoded exactly; a pixel is set where alpha > 0.
Other result types are counted and not drawn. Labels get ids sorted by name (Label Studio
keeps no order); the class-id rule is labelled_shapes.py's.

Image names: `/data/upload/N/1a2b3c4d-cat.jpg`, `/data/local-files/?d=dir/cat.jpg`,
`gs://bucket/dir/cat.jpg`, `s3://...`, URLs and plain paths. Matched against the images
under the image folder (local or gs://, listed once): the path (the `d=` value, or the path
inside the bucket or host) if it names an image there, also with leading folders dropped;
else the file name, or the file name without Label Studio's 8-hex upload prefix, anywhere
under the folder. A name that matches two images (`sub1/dup.jpg`, `sub2/dup.jpg`, or
`cat.jpg` and `1a2b3c4d-cat.jpg`) makes the task a reject naming both. With no image
matched, or no folder to look in, the path is used, or the prefix-free name for an upload.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import posixpath
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import ijson
import numpy as np

from transforms import files
from transforms.bounded_text import JsonReader, Oversized, bounded_entries
from transforms.files import open_regular
from transforms.limits import (
    InputLimits,
    TooLargeError,
    annotation_int,
    check_pixels,
)
from transforms.pairing import IMAGE_EXTENSIONS, is_hidden
from transforms.sources.annotations import AnnotatedDataset, AnnotationTool, ReadRequest
from transforms.sources.labelled_shapes import (
    ToolImage,
    ToolShape,
    ToolStats,
    box_polygon,
    build_dataset,
    rle_of_bitmap,
)

MAX_DEPTH = 32
UPLOAD_PREFIX = re.compile(r"^[0-9a-f]{8}-(.+)$")
DRAWN = ("polygonlabels", "rectanglelabels", "brushlabels")


def read_labelstudio(path: str, request: ReadRequest) -> AnnotatedDataset:
    """Stage a Label Studio JSON export; ValueError (one line) for a file that is not one.
    `request.image_dir`: the image folder to match names against (module doc), or None."""
    reader = _Reader(request.origin, request.image_dir, request.limits)
    with open_regular(path) as stream:
        tasks = reader.images(JsonReader(stream, request.origin, MAX_DEPTH, request.limits))
        return build_dataset("labelstudio", tasks, reader.stats, request)


TOOL = AnnotationTool(
    "labelstudio",
    "Label Studio",
    "a JSON list of tasks",
    detect=lambda head: head.text.startswith(b"["),
    read=read_labelstudio,
)


class _Reader:
    def __init__(self, origin: str, image_dir: str | None, limits: InputLimits) -> None:
        self.origin = origin
        self.image_dir = image_dir
        self.limits = limits
        self.ignored: collections.Counter[str] = collections.Counter()
        self.skipped: collections.Counter[str] = collections.Counter()

    def stats(self) -> ToolStats:
        return ToolStats(dict(self.ignored), skipped=dict(self.skipped))

    def images(self, reader: JsonReader) -> Iterator[ToolImage]:
        tasks = bounded_entries(
            reader, "item", self.limits.entry_values, fields=("data.image", "id")
        )
        try:
            for position, task in enumerate(tasks):
                if isinstance(task, Oversized):
                    yield self._oversized(position, task)
                else:
                    yield self._task(position, task)
        except ijson.JSONError as error:
            first = (str(error).strip().splitlines() or [""])[0]
            raise ValueError(f"{self.origin}: not valid JSON ({first})") from None

    def _oversized(self, position: int, task: Oversized) -> ToolImage:
        url = task.fields.get("data.image")
        name = self._name_or_problem(url)[0] if isinstance(url, str) else None
        return ToolImage(
            name or f"task-{task.fields.get('id', position)}",
            0,
            0,
            problem=f"a task of more than {self.limits.entry_values:,} JSON values",
            too_large=True,
        )

    def _task(self, position: int, task: Any) -> ToolImage:
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise ValueError(f"{self.origin}: task {position} is not a Label Studio task")
        url = _image_url(task["data"])
        if url is None:
            return ToolImage(f"task-{task.get('id', position)}", 0, 0, problem="no data.image")
        name, problem = self._name_or_problem(url)
        if problem is not None:
            return ToolImage(name, 0, 0, problem=problem)
        annotations = task.get("annotations")  # a falsy non-list ({}, "", 0) is no list
        annotations = [] if annotations is None else annotations
        if not isinstance(annotations, list):
            problem = f"task {task.get('id', position)!r}: annotations is not a list"
            return ToolImage(name, 0, 0, problem=f"{problem} but {type(annotations).__name__}")
        for index, annotation in enumerate(annotations):
            if not isinstance(annotation, dict):  # was dropped uncounted: maybe the only one
                problem = f"task {task.get('id', position)!r}: annotation {index} is not an object"
                return ToolImage(name, 0, 0, problem=f"{problem} but {type(annotation).__name__}")
        chosen = None
        for annotation in annotations:
            if annotation.get("was_cancelled"):
                self.skipped["cancelled_annotations"] += 1
            elif chosen is None:
                chosen = annotation
            else:
                self.skipped["further_annotations"] += 1
        if chosen is None:
            return ToolImage(name, 0, 0)
        try:
            results = chosen.get("result")  # a falsy non-list ({}, "", 0) is no empty list
            return self._shapes(name, [] if results is None else results)
        except TooLargeError as error:
            return ToolImage(name, 0, 0, problem=f"Label Studio result: {error}", too_large=True)
        except (TypeError, ValueError, KeyError, IndexError) as error:
            return ToolImage(name, 0, 0, problem=f"Label Studio result: {error!r}")

    def _shapes(self, name: str, results: list[Any]) -> ToolImage:
        shapes = []
        height = width = 0
        if not isinstance(results, list):
            raise ValueError("an annotation's result must be a list")
        for result in results:
            if not isinstance(result, dict) or not isinstance(result.get("value") or {}, dict):
                raise ValueError("a result must be an object with an object value")
            kind = result.get("type")
            value = result.get("value") or {}
            if kind not in DRAWN:
                self.ignored[str(kind)] += 1
                continue
            w = annotation_int(result["original_width"], "original_width")
            h = annotation_int(result["original_height"], "original_height")
            if w <= 0 or h <= 0 or (height and (h, w) != (height, width)):
                raise ValueError(f"original size {w}x{h} disagrees or is not positive")
            check_pixels(h, w, self.limits, "original size")
            height, width = h, w
            labels = value.get(kind) or []
            if len(labels) != 1 or not isinstance(labels[0], str):
                raise ValueError(f"a {kind} result needs exactly one label, has {labels!r}")
            label = labels[0]
            if kind == "polygonlabels":
                points = value["points"]
                if len(points) > self.limits.polygon_points:
                    return ToolImage(
                        name, h, w, problem=f"a polygon of {len(points):,} points", too_large=True
                    )
                xy = np.asarray(points, dtype=np.float64)
                if xy.ndim != 2 or xy.shape[1] != 2:
                    raise ValueError("points must be [x, y] pairs")
                with np.errstate(over="ignore", invalid="ignore"):  # non-finite: refused
                    xy = xy * [w / 100.0, h / 100.0]  # where every shape's points are
                shapes.append(ToolShape(label, (xy.reshape(-1),)))
            elif kind == "rectanglelabels":
                x, y = float(value["x"]) * w / 100, float(value["y"]) * h / 100
                bw, bh = float(value["width"]) * w / 100, float(value["height"]) * h / 100
                rotation = float(value.get("rotation") or 0)
                box = box_polygon(x, y, x + bw, y + bh, rotation, (x, y))
                shapes.append(ToolShape(label, (box,)))
            else:
                rle = value.get("rle")
                if not isinstance(rle, list):
                    raise ValueError("brush rle must be a list of bytes")
                if len(rle) > self.limits.brush_rle_bytes:
                    raise TooLargeError(
                        f"a brush rle of {len(rle):,} bytes, more than the "
                        f"{self.limits.brush_rle_bytes:,} one brush may have"
                    )
                alpha = decode_brush(rle, h, w)
                shapes.append(
                    ToolShape(label, rle=rle_of_bitmap(alpha > 0, 0, 0, h, w, self.limits))
                )
        return ToolImage(name, height, width, tuple(shapes))

    def _name_or_problem(self, url: str) -> tuple[str, str | None]:
        """`_file_name`, or for a URL that does not parse ("http://[bad/a.jpg": an invalid
        IPv6 host) its last part and the problem: that task's reject, not the run's end."""
        try:
            return self._file_name(url)
        except ValueError as error:
            last = url.split("?", 1)[0].replace("\\", "/").rsplit("/", 1)[-1]
            return last or "task-image", f"data.image {url[:200]!r} is not a URL: {error}"

    def _file_name(self, url: str) -> tuple[str, str | None]:
        candidates = image_candidates(url)
        index = self._index
        if index is None:
            return candidates[-1 if url.startswith("/data/upload/") else 0], None
        path = candidates[0]
        if "/" in path:
            # The path as the task gives it, else with leading folders dropped: Label Studio's
            # document root is rarely the image folder itself.
            parts = path.split("/")
            for start in range(len(parts) - 1):
                if "/".join(parts[start:]) in index.paths:
                    return "/".join(parts[start:]), None
        names = [c for c in candidates if "/" not in c]
        found = list(dict.fromkeys(p for name in names for p in index.by_name.get(name, ())))
        if len(found) > 1:
            more = f" (and {len(found) - 2} more)" if len(found) > 2 else ""
            return found[0], f"two images match {url!r}: {found[0]} and {found[1]}{more}"
        return (found[0] if found else path), None

    @functools.cached_property
    def _index(self) -> _ImageIndex | None:
        """The image folder's images, listed once (local or gs://); None without any."""
        return None if self.image_dir is None else _ImageIndex.of(self.image_dir) or None


@dataclasses.dataclass
class _ImageIndex:
    """Image files under the image folder: their relative paths, and those by file name."""

    paths: set[str]
    by_name: dict[str, list[str]]

    def __bool__(self) -> bool:
        return bool(self.paths)

    @classmethod
    def of(cls, image_dir: str) -> _ImageIndex:
        if not files.is_remote(image_dir) and not os.path.isdir(image_dir):
            return cls(set(), {})
        root = image_dir.rstrip("/") + "/"
        paths: set[str] = set()
        by_name: dict[str, list[str]] = collections.defaultdict(list)
        for found in files.list_files(root):
            relative = found.removeprefix(root).replace(os.sep, "/")
            if is_hidden(relative):
                continue  # hidden files and folders are no inputs (pairing.py)
            if relative.lower().endswith(IMAGE_EXTENSIONS):
                paths.add(relative)
                by_name[relative.rsplit("/", 1)[-1]].append(relative)
        for same in by_name.values():
            same.sort()
        return cls(paths, dict(by_name))


def image_candidates(url: str) -> list[str]:
    """The names a task's image may have under the image folder, most specific first."""
    parsed = urllib.parse.urlparse(url)
    if parsed.path.startswith("/data/local-files/") or parsed.path == "/data/local-files":
        path = urllib.parse.parse_qs(parsed.query).get("d", [""])[0]
    elif parsed.scheme in ("gs", "s3", "http", "https"):
        path = urllib.parse.unquote(parsed.path)
    elif parsed.path.startswith("/data/upload/"):
        path = ""
    else:
        path = urllib.parse.unquote(parsed.path)
    path = path.lstrip("/")
    name = posixpath.basename(urllib.parse.unquote(parsed.path if not path else path))
    candidates = [c for c in (path, name) if c]
    match = UPLOAD_PREFIX.match(name)
    if match:
        candidates.append(match.group(1))
    return list(dict.fromkeys(candidates)) or [url]


def _image_url(data: dict[str, Any]) -> str | None:
    if isinstance(data.get("image"), str):
        return data["image"]
    images = [
        v for v in data.values() if isinstance(v, str) and v.lower().endswith(IMAGE_EXTENSIONS)
    ]
    return images[0] if len(images) == 1 else None


def decode_brush(rle: list[int], height: int, width: int) -> np.ndarray:
    """The alpha channel [height, width] of a Label Studio brush RLE.

    The stream (label-studio-converter's brush.decode_rle): 32 bits value count, 5 bits word
    size - 1, four 4-bit run-length field sizes - 1; then runs: 1 bit repeat?, 2 bits which
    size, that many bits of length - 1, then one word (repeat) or length words (literal).
    The values are the RGBA canvas, row-major; the alpha channel is every fourth byte.
    """
    if not all(type(v) is int and 0 <= v < 256 for v in rle):
        raise ValueError("brush rle must be a list of bytes")
    bits = np.unpackbits(np.asarray(rle, dtype=np.uint8))
    reader = _Bits(bits)
    count = reader.read(32)
    if count != height * width * 4:
        raise ValueError(f"brush rle holds {count} values, not {height}x{width}x4")
    word = reader.read(5) + 1
    sizes = [reader.read(4) + 1 for _ in range(4)]
    out = np.zeros(count, dtype=np.uint8)
    i = 0
    while i < count:
        repeat = reader.read(1)
        j = i + 1 + reader.read(sizes[reader.read(2)])
        if j > count:
            raise ValueError("brush rle runs past its value count")
        if repeat:
            out[i:j] = reader.read(word)
        else:
            out[i:j] = reader.read_many(word, j - i)
        i = j
    return out.reshape(height, width, 4)[:, :, 3]


class _Bits:
    """The stream's bits as ASCII '0'/'1' bytes: int(field, 2) reads a field at C speed (a
    Python loop per bit took 9 us a run, so a 16 MB stream of short runs took minutes)."""

    def __init__(self, bits: np.ndarray) -> None:
        self.text = (bits + ord("0")).tobytes()
        self.at = 0

    def read(self, size: int) -> int:
        end = self.at + size
        if end > len(self.text):
            raise ValueError("brush rle ends early")
        value = int(self.text[self.at : end], 2)
        self.at = end
        return value

    def read_many(self, size: int, count: int) -> np.ndarray:
        end = self.at + size * count
        if end > len(self.text):
            raise ValueError("brush rle ends early")
        chunk = np.frombuffer(self.text, np.uint8, size * count, self.at) - ord("0")
        chunk = chunk.reshape(count, size).astype(np.uint64)
        self.at = end
        weights = (1 << np.arange(size - 1, -1, -1, dtype=np.uint64)).astype(np.uint64)
        return (chunk * weights).sum(axis=1).astype(np.uint8)
