"""COCO instances/stuff annotations: the COCO tool (transforms/sources/annotations.py).

The launcher reads the JSON once (`read_coco`), streaming it with ijson so a large file is
never a Python object tree: each annotation is kept only as its class id, crowd flag and
segmentation (polygons as float64 arrays, RLE as given). Grouping them per image is an
external sort-merge join (transforms/spill.py) in a temporary folder, so memory stays flat
for a million images; the joined images wait there, in image id order, as staged
`AnnotatedImage`s, painted largest first (transforms/sources/rasterize.py).

Before ijson sees the file, one cheap pass of the bounded reader (transforms/bounded_text.py)
checks it is UTF-8, nested no deeper than COCO needs and holds no token over its cap:
ijson's cost grows with the square of the depth and of a token's length. The three passes
then read the same local bytes in the reader's 1 MB chunks. Each image is capped
(transforms/limits.py: points per polygon and per image, RLE length, record bytes); an
image over a cap is a reject with the reason, not a stalled job.

A crowd region (`iscrowd: 1`) paints the ignore index. Pixels no annotation covers get the
background class 0, or the ignore index (`unlabeled="ignore"`, for COCO-Stuff, whose
"unlabeled" is no class).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

import ijson
import numpy as np

from transforms import spill
from transforms.bounded_text import CHUNK_BYTES, JsonReader, skip_bom
from transforms.files import open_regular
from transforms.format.features import COCO_UNLABELED, DEFAULT_COCO_UNLABELED, MAX_CLASS_ID
from transforms.limits import DEFAULT_LIMITS, InputLimits, TooLargeError
from transforms.sources.annotations import (
    BACKGROUND_NAME,
    AnnotatedDataset,
    AnnotatedImage,
    AnnotatedShape,
    AnnotationTool,
    ReadRequest,
    StagedImages,
    check_class_names,
    checked_rle,
    too_large,
)
from transforms.spill import ExternalSort

_MIN_POLYGON_COORDINATES = 6  # three points; fewer enclose nothing (dropped, as detectron2 does)
# COCO nests 5 deep (annotations > item > segmentation > polygon); `info` and `licenses` are
# free-form, so room is left, but never the thousands of levels that make ijson quadratic.
MAX_DEPTH = 32


@dataclasses.dataclass(frozen=True)
class CocoCategory:
    coco_id: int
    class_id: int
    name: str
    supercategory: str | None


def read_coco(
    open_file: Callable[[], IO[bytes]],
    source: str,
    *,
    unlabeled: str = DEFAULT_COCO_UNLABELED,
    class_names: tuple[str, ...] | None = None,
    limits: InputLimits = DEFAULT_LIMITS,
) -> AnnotatedDataset:
    """Stream a COCO JSON (a shape check, then three passes: categories, images, annotations)
    into staged images in a temporary folder, with memory flat in the file's size.

    `class_names` (the --class_names file) sets the ids, as for every annotation tool: a
    category takes the id of its name in the list, and with unlabeled "background" the list
    must name `background`. A category the list does not name makes each image that uses it
    a reject naming the category.

    `open_file` opens the JSON afresh for each pass. A file that is not COCO (not UTF-8,
    nested too deep, no images or categories, duplicate image or category ids, missing
    fields) is a ValueError naming `source`; an unusable or oversized annotation only marks
    its image (`AnnotatedImage.problem`), which becomes a reject. A file_name listed twice is
    two staged images, which meet under one key at pairing: one duplicate_key reject, as
    for every annotation tool.
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
    class_of = {category.coco_id: category.class_id for category in categories}
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
            # None: nothing to draw, but the annotation still names an image (or is an orphan).
            annotation, over = _annotation(raw, class_of, unnamed, limits), False
        except ValueError as error:  # a str: the image's problem; TooLargeError: over a cap
            annotation, over = f"{error}", isinstance(error, TooLargeError)
        annotations.add((image_id, total), (raw.get("id"), annotation, over))
    staged = StagedImages(folder.name, limits)
    for image in _join(images, annotations.sorted(), orphans, limits):
        staged.write(image)
    records = staged.close()
    for name in os.listdir(folder.name):  # the sorts' runs: joined, no longer needed
        if name.endswith(".run"):
            os.remove(os.path.join(folder.name, name))
    names = class_names
    if names is None:
        names = tuple(category.name for category in categories)
        names = (BACKGROUND_NAME, *names) if unlabeled == "background" else names
    return AnnotatedDataset(
        "coco",
        tuple(names),
        unlabeled,
        staged.count,
        total,
        orphans.count,
        _description(categories, unlabeled, class_names is not None, total, orphans),
        records,
        folder,
    )


def _read(path: str, request: ReadRequest) -> AnnotatedDataset:
    return read_coco(
        lambda: open_regular(path),
        request.origin,
        unlabeled=request.unlabeled,
        class_names=request.class_names,
        limits=request.limits,
    )


TOOL = AnnotationTool(
    "coco",
    "COCO",
    "a JSON object with images or categories",
    detect=lambda head: bool(head.top_keys & {"images", "categories"}),
    read=_read,
)


def _description(
    categories: tuple[CocoCategory, ...],
    unlabeled: str,
    named: bool,
    total: int,
    orphans: _Orphans,
) -> dict[str, Any]:
    """For metadata.json: how COCO category ids became class ids."""
    return {
        "unlabeled": unlabeled,
        "label_order": "--class_names" if named else "category ids",
        "categories": [
            {
                "coco_id": c.coco_id,
                "class_id": c.class_id,
                "name": c.name,
                "supercategory": c.supercategory,
            }
            for c in categories
        ],
        "num_annotations": total,
        "orphan_annotations": orphans.count,
        "orphan_example_id": orphans.example,
    }


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


def _join(
    images: ExternalSort,
    annotations: Iterator,
    orphans: _Orphans,
    limits: InputLimits,
) -> Iterator[AnnotatedImage]:
    """Each image (in id order) with its annotations (in file order): a merge join of two
    sorted streams, holding one image's annotations at a time."""
    pending = next(annotations, None)
    for (image_id, _), (file_name, height, width) in images.sorted():
        while pending is not None and pending[0][0] < image_id:
            orphans.add(pending[0][1], {"id": pending[1][0]})
            pending = next(annotations, None)
        drawn: list[AnnotatedShape] = []
        problem, over_cap, points = None, False, 0
        while pending is not None and pending[0][0] == image_id:
            annotation_id, annotation, over = pending[1]
            if isinstance(annotation, str):
                if problem is None:
                    problem, over_cap = f"annotation {annotation_id}: {annotation}", over
            elif annotation is not None:
                drawn.append(annotation)
                points += sum(len(polygon) // 2 for polygon in annotation.polygons)
            pending = next(annotations, None)
        shapes = tuple(drawn) if problem is None else ()
        image = AnnotatedImage(file_name, image_id, height, width, shapes, problem, over_cap)
        if problem is None and points > limits.image_points:
            image = too_large(
                image,
                f"polygons of {points:,} points, more than the {limits.image_points:,} "
                "one image may have",
            )
        yield image
    while pending is not None:
        orphans.add(pending[0][1], {"id": pending[1][0]})
        pending = next(annotations, None)


def _items(open_file: Callable[[], IO[bytes]], source: str, section: str) -> Iterator[Any]:
    """The elements of the top-level list `section`, parsed by ijson's C backend."""
    try:
        with open_file() as stream:
            skip_bom(stream)  # checked by JsonReader, which skips it too
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
            raise ValueError(f"{source}: categories[{position}] needs an integer id and a name")
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
    """The images, sorted by id into `folder`; ids checked unique by sorting them too (a set
    of a million ids would cost what the sorts save). Annotations find their image by id,
    so a doubled id leaves them no image to belong to; a doubled file_name is left to the
    pairing (duplicate_key)."""
    images = ExternalSort(folder, "images")
    ids = ExternalSort(folder, "ids")
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
                f"{source}: images[{position}] needs an integer id, a file_name and a positive "
                "integer height and width"
            )
        images.add((image_id, position), (file_name, height, width))
        ids.add((image_id,))
    if not images.rows:
        raise ValueError(f"{source}: no images")
    previous = None
    for (image_id,), _ in ids.sorted():
        if image_id == previous:
            raise ValueError(f"{source}: image id {image_id} is listed twice")
        previous = image_id
    return images


def _annotation(
    raw: Mapping[str, Any],
    class_of: Mapping[int, int],
    unnamed: Mapping[int, str],
    limits: InputLimits = DEFAULT_LIMITS,
) -> AnnotatedShape | None:
    """The compact form of one annotation; None when it has no segmentation to draw.
    `unnamed`: the categories --class_names leaves out, by id."""
    category = raw.get("category_id")
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
        return AnnotatedShape(annotation_id, class_of[category], bool(crowd), polygons)
    if isinstance(segmentation, dict):
        return AnnotatedShape(
            annotation_id, class_of[category], bool(crowd), rle=checked_rle(segmentation, limits)
        )
    raise ValueError("segmentation must be a list of polygons or an RLE object")


def _polygon(values: Any, limits: InputLimits) -> np.ndarray:
    """float64 coordinates; numpy checks the types (a Python loop per number costs seconds)."""
    if isinstance(values, list) and len(values) > 2 * limits.polygon_points:
        raise TooLargeError(
            f"a polygon of {len(values) // 2:,} points, more than the "
            f"{limits.polygon_points:,} one polygon may have"
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
