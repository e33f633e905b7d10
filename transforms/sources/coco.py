"""COCO instances/stuff annotations -> one class-id mask per image, with pycocotools.

The launcher reads the JSON once (`read_coco`), streaming it with ijson so a large file is
never a Python object tree: each annotation is kept only as its class id, crowd flag and
segmentation (polygons as float64 arrays, RLE as given). Grouping them per image is an
external sort-merge join (transforms/spill.py) in a temporary folder, so memory stays flat
for a million images; the joined per-image records wait there, in image id order, and travel
with the image paths; a worker turns one into a mask with `rasterize`.

Before ijson sees the file, one cheap pass of the bounded reader (transforms/bounded_text.py)
checks it is UTF-8, nested no deeper than COCO needs and holds no token over its cap:
ijson's cost grows with the square of the depth and of a token's length. The three passes
then read the same local bytes in the reader's 1 MB chunks. Each
image record is capped (transforms/limits.py: points per polygon and per image, RLE length,
record bytes); an image over a cap is a reject with the reason, not a stalled job.

Draw order: an image's annotations are painted largest first, by the pixel area of their
own rasterisation (ties in file order), so a small object on top of a large one stays
visible. A crowd region (`iscrowd: 1`) paints the ignore index in the same order: small
individually annotated objects inside a crowd keep their class. Pixels no annotation
covers get the background class 0, or the ignore index (`unlabeled="ignore"`, for
COCO-Stuff, whose "unlabeled" is no class).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pickle
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, ClassVar

import ijson
import numpy as np
from pycocotools import mask as mask_utils

from transforms import spill
from transforms.bounded_text import CHUNK_BYTES, JsonReader
from transforms.codecs.class_mask import ClassMaskSettings, class_mask_settings
from transforms.format.features import COCO_UNLABELED, DEFAULT_COCO_UNLABELED, MAX_CLASS_ID
from transforms.limits import DEFAULT_LIMITS, STAGED_RECORD_BYTES, InputLimits
from transforms.record import Record, aligned, class_record, guarded, valid_image
from transforms.record_spec import RecordSpec
from transforms.rejects import Reason, RejectError
from transforms.sources.base import SourceSettings
from transforms.spill import ExternalSort, RecordFiles, read_records

# pycocotools 2.0.11's decode trips a numpy 2 deprecation on every call; harmless, and it
# would otherwise be printed by every worker.
warnings.filterwarnings(
    "ignore",
    message="__array__ implementation doesn't accept a copy keyword",
    category=DeprecationWarning,
    module="pycocotools",
)

BACKGROUND_NAME = "background"
_MIN_POLYGON_COORDINATES = 6  # three points; fewer enclose nothing (dropped, as detectron2 does)
# COCO nests 5 deep (annotations > item > segmentation > polygon); `info` and `licenses` are
# free-form, so room is left, but never the thousands of levels that make ijson quadratic.
MAX_DEPTH = 32


@dataclasses.dataclass(frozen=True, eq=False)
class CocoAnnotation:
    """What rasterising needs of one annotation, and nothing else (memory: see module doc)."""

    annotation_id: int | None
    class_id: int
    iscrowd: bool
    polygons: tuple[np.ndarray, ...] = ()  # each [x0, y0, x1, y1, ...], float64
    rle: Mapping[str, Any] | None = None  # {"size": [h, w], "counts": str or int array}


@dataclasses.dataclass(frozen=True, eq=False)
class CocoImage:
    """One image's annotations, as they travel with its path to a worker."""

    file_name: str
    image_id: int
    height: int
    width: int
    annotations: tuple[CocoAnnotation, ...] = ()
    problem: str | None = None  # set when an annotation was unusable: the image is a reject
    too_large: bool = False  # the problem is a cap of transforms/limits.py
    ordered: bool = False  # paint in the given order (annotation tools), not largest first
    not_a_file: bool = False  # the problem: the annotation file is a FIFO or device


@dataclasses.dataclass(frozen=True)
class CocoCategory:
    coco_id: int
    class_id: int
    name: str
    supercategory: str | None


@dataclasses.dataclass(frozen=True)
class CocoDataset:
    categories: tuple[CocoCategory, ...]  # by class id
    unlabeled: str
    num_annotations: int
    orphan_annotations: int  # annotations naming no listed image
    orphan_example: int | None  # the id of the first, to look it up
    num_images: int
    records: str  # record file of (image id, file_name, payload), in image id order
    folder: tempfile.TemporaryDirectory = dataclasses.field(repr=False)  # holds `records`
    names: tuple[str, ...] | None = None  # --class_names: class names by id, the order given

    def staged(self) -> Iterator[tuple[int, str, str]]:
        """(image id, file_name, image_payload) of every image, in image id order, streamed."""
        with open(self.records, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            for payload in read_records(handle, self.records, size, STAGED_RECORD_BYTES):
                yield pickle.loads(payload)

    @property
    def images(self) -> dict[str, CocoImage]:
        """Every image by file_name, all in memory: for small files and tests only."""
        return {name: image_from_payload(payload) for _, name, payload in self.staged()}

    @property
    def class_names(self) -> tuple[str, ...]:
        if self.names is not None:
            return self.names
        names = tuple(category.name for category in self.categories)
        return (BACKGROUND_NAME, *names) if self.unlabeled == "background" else names

    def fill_value(self, ignore_index: int) -> int:
        """The value of pixels no annotation covers."""
        if self.unlabeled != "background":
            return ignore_index
        return 0 if self.names is None else self.names.index(BACKGROUND_NAME)

    def settings(self, ignore_index: int | None = None) -> ClassMaskSettings:
        return class_mask_settings(
            "classes", class_names=self.class_names, ignore_index=ignore_index
        )

    def metadata(self) -> dict[str, Any]:
        """For metadata.json: how COCO category ids became class ids."""
        return {
            "unlabeled": self.unlabeled,
            "label_order": "category ids" if self.names is None else "--class_names",
            "categories": [
                {
                    "coco_id": c.coco_id,
                    "class_id": c.class_id,
                    "name": c.name,
                    "supercategory": c.supercategory,
                }
                for c in self.categories
            ],
            "num_annotations": self.num_annotations,
            "orphan_annotations": self.orphan_annotations,
            "orphan_example_id": self.orphan_example,
        }


def read_coco(
    open_file: Callable[[], IO[bytes]],
    source: str,
    *,
    unlabeled: str = DEFAULT_COCO_UNLABELED,
    class_names: tuple[str, ...] | None = None,
    limits: InputLimits = DEFAULT_LIMITS,
) -> CocoDataset:
    """Stream a COCO JSON (a shape check, then three passes: categories, images, annotations)
    into per-image records in a temporary folder, with memory flat in the file's size.

    `class_names` (the --class_names file) sets the ids, as for every annotation source
    (sources/annotated.py): a category takes the id of its name in the list, and with
    unlabeled "background" the list must name `background`. A category the list does not
    name makes each image that uses it a reject naming the category.

    `open_file` opens the JSON afresh for each pass. A file that is not COCO (not UTF-8,
    nested too deep, no images or categories, duplicate ids or file names, missing fields) is
    a ValueError naming `source`; an unusable or oversized annotation only marks its image
    (`CocoImage.problem`), which becomes a reject.
    """
    if unlabeled not in COCO_UNLABELED:
        raise ValueError(f"unlabeled must be one of {', '.join(COCO_UNLABELED)}")
    with open_file() as stream:
        JsonReader(stream, source, MAX_DEPTH, limits).drain()
    if class_names is not None:
        check_class_names(class_names, unlabeled)
    categories, unnamed = _read_categories(
        _items(open_file, source, "categories"), source, unlabeled, class_names
    )
    class_of = _ClassOf({category.coco_id: category.class_id for category in categories}, unnamed)
    folder = spill.temporary_folder("coco")
    images = _read_images(_items(open_file, source, "images"), source, folder.name)
    annotations = ExternalSort(folder.name, "annotations")
    total = 0
    orphans = _Orphans()
    for raw in _items(open_file, source, "annotations"):
        total += 1
        image_id = raw.get("image_id") if isinstance(raw, dict) else None
        if type(image_id) is not int:
            orphans.add(total, raw)
            continue
        try:
            annotation = _annotation(raw, class_of, limits)
        except _TooLargeError as error:
            annotations.add((image_id, total), (raw.get("id"), f"{error}", True))
            continue
        except ValueError as error:
            annotations.add((image_id, total), (raw.get("id"), f"{error}", False))
            continue
        # None: nothing to draw, but the annotation still names an image (or is an orphan).
        annotations.add((image_id, total), (raw.get("id"), annotation, False))
    records = RecordFiles(os.path.join(folder.name, "images"), per_file=2**62)
    for image in _join(images, annotations.sorted(), orphans, limits):
        payload = image_payload(image)
        if len(payload) > limits.coco_record_bytes:
            image = _too_large(
                image,
                f"{len(payload):,} bytes of annotations, more than "
                f"the {limits.coco_record_bytes:,} one image may have",
            )
            payload = image_payload(image)
        records.write(
            pickle.dumps((image.image_id, image.file_name, payload), pickle.HIGHEST_PROTOCOL)
        )
    paths = records.close()
    for name in os.listdir(folder.name):  # the sorts' runs: joined, no longer needed
        if name.endswith(".run"):
            os.remove(os.path.join(folder.name, name))
    return CocoDataset(
        categories,
        unlabeled,
        total,
        orphans.count,
        orphans.example,
        records.records,
        paths[0],
        folder,
        None if class_names is None else tuple(class_names),
    )


def check_class_names(class_names: tuple[str, ...], unlabeled: str) -> None:
    """With unlabeled pixels as `background`, --class_names must say which id that is."""
    if unlabeled == "background" and BACKGROUND_NAME not in class_names:
        raise ValueError(
            f"--class_names must name {BACKGROUND_NAME!r} (the id of unlabeled pixels), "
            "or give --unlabeled_pixels ignore"
        )


class _ClassOf(dict):
    """Class id by COCO category id, knowing the categories --class_names leaves out."""

    def __init__(self, ids: dict[int, int], unnamed: dict[int, str]) -> None:
        super().__init__(ids)
        self.unnamed = unnamed


class _TooLargeError(ValueError):
    """An annotation over a cap of transforms/limits.py."""


class _Orphans:
    """Annotations naming no listed image: counted, and the first in file order named."""

    def __init__(self) -> None:
        self.count = 0
        self._first: tuple[int, Any] | None = None

    def add(self, position: int, raw: Any) -> None:
        self.count += 1
        if self._first is None or position < self._first[0]:
            self._first = (position, raw.get("id") if isinstance(raw, dict) else None)

    @property
    def example(self) -> int | None:
        return None if self._first is None else self._first[1]


def _too_large(image: CocoImage, problem: str) -> CocoImage:
    return dataclasses.replace(image, annotations=(), problem=problem, too_large=True)


def _join(
    images: ExternalSort,
    annotations: Iterator,
    orphans: _Orphans,
    limits: InputLimits,
) -> Iterator[CocoImage]:
    """Each image (in id order) with its annotations (in file order): a merge join of two
    sorted streams, holding one image's annotations at a time."""
    pending = next(annotations, None)
    for (image_id, _), (file_name, height, width) in images.sorted():
        while pending is not None and pending[0][0] < image_id:
            orphans.add(pending[0][1], {"id": pending[1][0]})
            pending = next(annotations, None)
        drawn: list[CocoAnnotation] = []
        problem, too_large, points = None, False, 0
        while pending is not None and pending[0][0] == image_id:
            annotation_id, annotation, over = pending[1]
            if isinstance(annotation, str):
                if problem is None:
                    problem, too_large = f"annotation {annotation_id}: {annotation}", over
            elif annotation is not None:
                drawn.append(annotation)
                points += sum(len(polygon) // 2 for polygon in annotation.polygons)
            pending = next(annotations, None)
        image = CocoImage(file_name, image_id, height, width, tuple(drawn), problem, too_large)
        if problem is None and points > limits.coco_image_points:
            image = _too_large(
                image,
                f"polygons of {points:,} points, more than the {limits.coco_image_points:,} "
                "one image may have",
            )
        elif problem is not None:
            image = dataclasses.replace(image, annotations=())
        yield image
    while pending is not None:
        orphans.add(pending[0][1], {"id": pending[1][0]})
        pending = next(annotations, None)


def read_coco_file(path: str, *, unlabeled: str = DEFAULT_COCO_UNLABELED) -> CocoDataset:
    """`read_coco` of a local file."""
    return read_coco(lambda: open(path, "rb"), path, unlabeled=unlabeled)


def _items(open_file: Callable[[], IO[bytes]], source: str, section: str) -> Iterator[Any]:
    """The elements of the top-level list `section`, parsed by ijson's C backend."""
    try:
        with open_file() as stream:
            yield from ijson.items(stream, f"{section}.item", use_float=True, buf_size=CHUNK_BYTES)
    except ijson.JSONError as error:
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise ValueError(f"{source}: not valid JSON ({first_line})") from error


def _read_categories(
    items: Iterator[Any], source: str, unlabeled: str, class_names: tuple[str, ...] | None = None
) -> tuple[tuple[CocoCategory, ...], dict[int, str]]:
    """(categories with their class ids, names of the categories `class_names` leaves out).

    Without `class_names`, contiguous class ids in ascending COCO id order: the file's order
    cannot change them. With it, each category takes the id of its name in the list."""
    raw: dict[int, tuple[str, str | None]] = {}
    first = 1 if unlabeled == "background" else 0
    for position, item in enumerate(items):
        if not (
            isinstance(item, dict)
            and type(item.get("id")) is int
            and isinstance(item.get("name"), str)
            and item["name"].strip()
        ):
            raise ValueError(f"{source}: category {position} needs an integer id and a name")
        if item["id"] in raw:
            raise ValueError(f"{source}: category id {item['id']} is listed twice")
        supercategory = item.get("supercategory")
        raw[item["id"]] = (item["name"], supercategory if isinstance(supercategory, str) else None)
        if len(raw) + first > MAX_CLASS_ID:
            raise ValueError(
                f"{source}: more than {MAX_CLASS_ID - first:,} categories: class ids and the "
                f"ignore index are stored in 16 bits, so {MAX_CLASS_ID:,} classes at most"
                + (" (background included)" if first else "")
            )
    if not raw:
        raise ValueError(f"{source}: no categories")
    if class_names is not None:
        return _named_categories(raw, class_names)
    categories = tuple(
        CocoCategory(coco_id, first + offset, *raw[coco_id])
        for offset, coco_id in enumerate(sorted(raw))
    )
    names = collections.Counter(c.name for c in categories)
    if first:
        names[BACKGROUND_NAME] += 1
    duplicates = sorted(name for name, count in names.items() if count > 1)
    if duplicates:
        hint = " (or use unlabeled pixels as ignore)" if BACKGROUND_NAME in duplicates else ""
        raise ValueError(f"{source}: duplicate class names {duplicates}{hint}")
    return categories, {}


def _named_categories(
    raw: dict[int, tuple[str, str | None]], class_names: tuple[str, ...]
) -> tuple[tuple[CocoCategory, ...], dict[int, str]]:
    id_of = {name: index for index, name in enumerate(class_names)}
    named = tuple(
        CocoCategory(coco_id, id_of[raw[coco_id][0]], *raw[coco_id])
        for coco_id in sorted(raw)
        if raw[coco_id][0] in id_of
    )
    unnamed = {coco_id: name for coco_id, (name, _) in raw.items() if name not in id_of}
    return tuple(sorted(named, key=lambda c: (c.class_id, c.coco_id))), unnamed


def _read_images(items: Iterator[Any], source: str, folder: str) -> ExternalSort:
    """The images, sorted by id into `folder`; ids and file names checked unique by sorting
    them too (a set of a million names would cost what the sorts save)."""
    images = ExternalSort(folder, "images")
    ids = ExternalSort(folder, "ids")
    names = ExternalSort(folder, "names")
    for position, item in enumerate(items):
        fields = (
            (item.get("id"), item.get("file_name"), item.get("height"), item.get("width"))
            if isinstance(item, dict)
            else (None,) * 4
        )
        image_id, file_name, height, width = fields
        if not (
            type(image_id) is int
            and isinstance(file_name, str)
            and file_name
            and type(height) is int
            and type(width) is int
            and height > 0
            and width > 0
        ):
            raise ValueError(
                f"{source}: image {position} needs an integer id, a file_name and a positive "
                "integer height and width"
            )
        images.add((image_id, position), (file_name, height, width))
        ids.add((image_id,))
        names.add((file_name,))
    if not images.rows:
        raise ValueError(f"{source}: no images")
    for sort, what in ((ids, "image id {}"), (names, "file_name {!r}")):
        previous = None
        for (value,), _ in sort.sorted():
            if value == previous:
                raise ValueError(f"{source}: {what.format(value)} is listed twice")
            previous = value
    return images


def _annotation(
    raw: Mapping[str, Any], class_of: Mapping[int, int], limits: InputLimits = DEFAULT_LIMITS
) -> CocoAnnotation | None:
    """The compact form of one annotation; None when it has no segmentation to draw."""
    category = raw.get("category_id")
    unnamed = getattr(class_of, "unnamed", {})
    if type(category) is int and category in unnamed:
        raise ValueError(
            f"category {unnamed[category]!r} (id {category}) is not in the class names"
        )
    if type(category) is not int or category not in class_of:
        raise ValueError(f"category_id {category!r} is not in categories")
    crowd = raw.get("iscrowd", 0)
    if crowd not in (0, 1):  # also True/False
        raise ValueError(f"iscrowd must be 0 or 1, got {crowd!r}")
    annotation_id = raw.get("id") if type(raw.get("id")) is int else None
    segmentation = raw.get("segmentation")
    if isinstance(segmentation, list):
        polygons = tuple(_polygon(polygon, limits) for polygon in segmentation)
        polygons = tuple(p for p in polygons if len(p) >= _MIN_POLYGON_COORDINATES)
        if not polygons:
            return None
        return CocoAnnotation(annotation_id, class_of[category], bool(crowd), polygons)
    if isinstance(segmentation, dict):
        return CocoAnnotation(
            annotation_id, class_of[category], bool(crowd), rle=_rle(segmentation, limits)
        )
    raise ValueError("segmentation must be a list of polygons or an RLE object")


def _polygon(values: Any, limits: InputLimits) -> np.ndarray:
    """float64 coordinates; numpy checks the types (a Python loop per number costs seconds)."""
    if isinstance(values, list) and len(values) > 2 * limits.coco_polygon_points:
        raise _TooLargeError(
            f"a polygon of {len(values) // 2:,} points, more than the "
            f"{limits.coco_polygon_points:,} one polygon may have"
        )
    try:
        array = np.array(values) if isinstance(values, list) else None
    except ValueError:  # ragged nesting
        array = None
    if array is None or array.ndim != 1 or array.dtype.kind not in "iuf":
        raise ValueError("a polygon must be a list of numbers")
    if len(array) % 2:
        raise ValueError(f"a polygon has an odd number of coordinates ({len(array)})")
    return array.astype(np.float64, copy=False)


def _rle(segmentation: Mapping[str, Any], limits: InputLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    size, counts = segmentation.get("size"), segmentation.get("counts")
    if isinstance(counts, (str, list)) and len(counts) > limits.coco_rle_chars:
        raise _TooLargeError(
            f"an RLE of {len(counts):,} counts, more than the {limits.coco_rle_chars:,} one "
            "annotation may have"
        )
    if not (
        isinstance(size, list) and len(size) == 2 and all(type(v) is int and v > 0 for v in size)
    ):
        raise ValueError("RLE size must be [height, width]")
    if isinstance(counts, str):
        return {"size": size, "counts": counts}
    if isinstance(counts, list) and all(type(v) is int and 0 <= v < 2**32 for v in counts):
        return {"size": size, "counts": np.asarray(counts, dtype=np.int64)}
    raise ValueError("RLE counts must be a string or a list of non-negative integers")


# --- travelling (launcher -> job) -----------------------------------------------------------


def image_payload(image: CocoImage) -> str:
    """One image's record as one line of JSON: what travels from the launcher to a worker.

    Floats are written as Python's shortest repr, which parses back to the same float64, so
    a worker rasterises exactly what the launcher read.
    """
    return json.dumps(
        {
            "file_name": image.file_name,
            "image_id": image.image_id,
            "height": image.height,
            "width": image.width,
            "problem": image.problem,
            "too_large": image.too_large,
            **({"ordered": True} if image.ordered else {}),
            **({"not_a_file": True} if image.not_a_file else {}),
            "annotations": [
                {
                    "id": a.annotation_id,
                    "class_id": a.class_id,
                    "iscrowd": a.iscrowd,
                    "polygons": [polygon.tolist() for polygon in a.polygons],
                    "rle": None if a.rle is None else _rle_json(a.rle),
                }
                for a in image.annotations
            ],
        },
        separators=(",", ":"),
        allow_nan=False,
    )


def _rle_json(rle: Mapping[str, Any]) -> dict[str, Any]:
    counts = rle["counts"]
    return {
        "size": list(rle["size"]),
        "counts": counts if isinstance(counts, str) else counts.tolist(),
    }


def image_from_payload(payload: str) -> CocoImage:
    """The inverse of `image_payload`; ValueError for anything it did not write."""
    try:
        data = json.loads(payload)
        annotations = tuple(
            CocoAnnotation(
                raw["id"],
                raw["class_id"],
                raw["iscrowd"],
                tuple(np.asarray(p, dtype=np.float64) for p in raw["polygons"]),
                None if raw["rle"] is None else _rle(raw["rle"]),
            )
            for raw in data["annotations"]
        )
        return CocoImage(
            data["file_name"],
            data["image_id"],
            data["height"],
            data["width"],
            annotations,
            data["problem"],
            data["too_large"],
            data.get("ordered", False) is True,
            data.get("not_a_file", False) is True,
        )
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"not a staged COCO image record: {error!r}") from error


# --- rasterising (in the worker) ------------------------------------------------------------


def rasterize(
    image: CocoImage, height: int, width: int, settings: ClassMaskSettings, fill: int
) -> np.ndarray:
    """The class-id mask [height, width] of one image; RejectError for unusable annotations.

    `height` and `width` are the decoded image's, so the mask can never be allocated at a
    size the JSON merely claims; a disagreement is a size_mismatch reject.
    """
    if image.problem is not None:
        reason = Reason.MASK_TOO_LARGE if image.too_large else Reason.MASK_UNREADABLE
        reason = Reason.NOT_A_FILE if image.not_a_file else reason
        raise RejectError(reason, image.problem)
    if (height, width) != (image.height, image.width):
        raise RejectError(
            Reason.SIZE_MISMATCH,
            f"image is {height}x{width} (HxW), its annotations say {image.height}x{image.width}",
        )
    rles = annotation_rles(image)
    mask = np.full((height, width), fill, dtype=settings.dtype)
    for index in range(len(rles)) if image.ordered else draw_order(rles):
        annotation = image.annotations[index]
        value = settings.ignore_index if annotation.iscrowd else annotation.class_id
        np.copyto(mask, value, where=mask_utils.decode(rles[index]).view(bool))
    return mask


def draw_order(rles: list[dict[str, Any]]) -> list[int]:
    """Indices in painting order: largest rasterised area first, file order among equals."""
    areas = [int(area) for area in mask_utils.area(rles)] if rles else []
    return sorted(range(len(rles)), key=lambda index: -areas[index])


def annotation_rles(image: CocoImage) -> list[dict[str, Any]]:
    """One pycocotools RLE per annotation, as COCO.annToRLE makes it, after bounds checks.

    pycocotools trusts its input: a polygon coordinate of 1e12 crashes it, 1e7 takes seconds
    and hundreds of MB. So coordinates must lie within one image size of the image, and the
    polygons' total outline (in pixel steps) may not exceed the image's pixel count, which
    keeps the work per image in proportion to the image (real outlines are far shorter).
    """
    height, width = image.height, image.width
    budget = float(height) * width
    rles = []
    for annotation in image.annotations:
        try:
            if annotation.rle is not None:
                rles.append(_checked_rle(annotation.rle, height, width))
                continue
            for polygon in annotation.polygons:
                budget -= _outline(polygon, height, width)
            if budget < 0:
                raise ValueError("polygon outlines longer than the image has pixels")
            parts = mask_utils.frPyObjects([p.tolist() for p in annotation.polygons], height, width)
            rles.append(mask_utils.merge(parts))
        except (ValueError, TypeError, OverflowError) as error:
            raise RejectError(
                Reason.MASK_UNREADABLE, f"annotation {annotation.annotation_id}: {error}"
            ) from error
    return rles


def _outline(polygon: np.ndarray, height: int, width: int) -> float:
    """Pixel steps pycocotools walks for a closed polygon, after checking its coordinates."""
    xs, ys = polygon[0::2], polygon[1::2]
    if not np.isfinite(polygon).all():
        raise ValueError("polygon has a non-finite coordinate")
    if xs.min() < -width or xs.max() > 2 * width or ys.min() < -height or ys.max() > 2 * height:
        raise ValueError(f"polygon coordinate far outside the {height}x{width} image")
    steps = np.maximum(np.abs(np.diff(xs, append=xs[0])), np.abs(np.diff(ys, append=ys[0])))
    return float(steps.sum())


def _checked_rle(rle: Mapping[str, Any], height: int, width: int) -> dict[str, Any]:
    if list(rle["size"]) != [height, width]:
        raise ValueError(f"RLE size {list(rle['size'])} is not the image's {[height, width]}")
    counts = rle["counts"]
    if isinstance(counts, str):
        covered = _compressed_total(counts)
        if covered != height * width:
            raise ValueError(f"RLE counts cover {covered} pixels, not {height * width}")
        return {"size": [height, width], "counts": counts}
    if int(counts.sum()) != height * width:
        raise ValueError(f"RLE counts cover {int(counts.sum())} pixels, not {height * width}")
    uncompressed = {"size": [height, width], "counts": counts.tolist()}
    return mask_utils.frPyObjects(uncompressed, height, width)


def _compressed_total(counts: str) -> int:
    """Pixels covered by a compressed RLE string, or -1 if it is not one.

    pycocotools.mask.decode fills a mask whose runs end early with uninitialised memory
    (garbage class pixels, no error), so the runs must add up before it sees them. This
    follows pycocotools' rleFrString: 5 bits per character from '0', 0x20 = more,
    0x10 on the last = negative, runs after the second stored as differences.
    """
    runs: list[int] = []
    value = shift = 0
    for char in counts:
        code = ord(char) - 48
        if not 0 <= code < 64:
            return -1
        value |= (code & 0x1F) << shift
        shift += 5
        if code & 0x20:
            continue
        if code & 0x10:
            value -= 1 << shift
        if len(runs) > 2:
            value += runs[-2]
        if not 0 <= value < 2**32:  # a run is a uint in pycocotools
            return -1
        runs.append(value)
        value = shift = 0
    return -1 if shift else sum(runs)


# --- the mask source (in the worker) --------------------------------------------------------


def make_coco_record(
    key: str,
    image_bytes: bytes,
    coco_image: CocoImage,
    spec: RecordSpec,
    *,
    fill: int,
    limits: InputLimits = DEFAULT_LIMITS,
    thumbnail: bool = False,
) -> Record:
    """A record whose mask is rasterised from the image's COCO annotations, and its stats.

    The image is decoded first, so the mask is allocated at a size the decoder vouched for;
    annotations drawn on the EXIF-rotated view rotate the image, as for mask files.
    """
    image = valid_image(image_bytes, limits, thumbnail)
    if coco_image.height == 0 and not coco_image.annotations:
        # An annotation tool's image with no shapes may state no size: the image's own.
        coco_image = dataclasses.replace(coco_image, height=image.height, width=image.width)
    image = aligned(image, image_bytes, (coco_image.height, coco_image.width))
    ids = guarded(
        rasterize, Reason.MASK_UNREADABLE, coco_image, image.height, image.width, spec.classes, fill
    )
    return class_record(key, image, ids, spec)


class CocoSource:
    """Masks rasterised from a COCO annotations file's polygons and RLEs.

    The pair's mask side is a `CocoEntry` whose staged payload the job attached; no mask
    file is read.
    """

    name: ClassVar[str] = "coco"
    reads_mask_file: ClassVar[bool] = False

    def record(
        self,
        key: str,
        image_bytes: bytes,
        mask: Any,
        mask_bytes: bytes | None,
        settings: SourceSettings,
    ) -> Record:
        if settings.fill is None:
            raise ValueError("a COCO source needs the fill value of unlabeled pixels")
        return make_coco_record(
            key,
            image_bytes,
            image_from_payload(mask.payload),
            settings.spec,
            fill=settings.fill,
            limits=settings.limits,
            thumbnail=settings.thumbnails,
        )
