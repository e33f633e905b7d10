"""Exports whose shapes name labels (CVAT, Label Studio, labelme) -> staged annotated images.

A tool module reads its export into `ToolImage`s: a file name relative to the image
folder, the size the export states, and its shapes in draw order, each a label name with
polygons in pixel coordinates or a full-image bitmap (stored as a compressed COCO RLE).
`build_dataset` then names the classes and stages one `AnnotatedImage` per image, in two
streamed passes through a temporary record file, so memory holds one image at a time.

Class ids (one rule for every such tool): by default unlabeled pixels are class 0
`background` and the labels get ids 1..K; with unlabeled "ignore" they take the ignore
index and labels get 0..K-1. The label order is the tool's own where it has one (CVAT's
meta labels list), else labels sorted by name. `class_names` (the --class_names file)
overrides it: line i is id i. A label the file does not name makes its image a reject
naming the label; nothing ever gets an id silently.

Geometry: polygons are clipped to the image (one pixel of margin) before pycocotools
rasterises them with COCO's convention; non-finite coordinates and more points than
`InputLimits.image_points` make the image a reject. Shapes are painted in the order the
tool module gives (later on top): `AnnotatedImage.ordered`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from pycocotools import mask as mask_utils

from transforms import spill
from transforms.format.features import MAX_CLASS_ID
from transforms.limits import (
    DEFAULT_LIMITS,
    STAGED_RECORD_BYTES,
    InputLimits,
    TooLargeError,
    check_pixels,
)
from transforms.sources.annotations import (
    BACKGROUND_NAME,
    AnnotatedDataset,
    AnnotatedImage,
    AnnotatedShape,
    ReadRequest,
    StagedImages,
    check_class_names,
)
from transforms.spill import RecordFiles, read_record_file


@dataclasses.dataclass(frozen=True, eq=False)
class ToolShape:
    label: str
    polygons: tuple[np.ndarray, ...] = ()  # each [x0, y0, x1, y1, ...] in pixels, float64
    rle: dict[str, Any] | None = None  # a full-image compressed COCO RLE


@dataclasses.dataclass(frozen=True, eq=False)
class ToolImage:
    file_name: str  # relative to the image folder, '/'-separated
    height: int
    width: int
    shapes: tuple[ToolShape, ...] = ()  # in draw order: later on top
    problem: str | None = None  # the image is a reject with this reason
    too_large: bool = False  # the reason: a cap of transforms/limits.py
    not_a_file: bool = False  # the reason: the annotation file is a FIFO or device


@dataclasses.dataclass(frozen=True)
class ToolStats:
    """What a tool module counted while reading, for metadata.json."""

    ignored_shapes: dict[str, int]  # by shape type: counted, never drawn
    orphan_annotations: int = 0  # annotations naming no listed image
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)  # e.g. cancelled
    labels: tuple[str, ...] | None = None  # the tool's own label order, where it has one


def class_ids(
    labels: Iterable[str], tool_order: Sequence[str] | None, request: ReadRequest
) -> tuple[tuple[str, ...], str]:
    """(class names by id, how the order was chosen)."""
    source, class_names, unlabeled = request.origin, request.class_names, request.unlabeled
    if class_names is not None:
        check_class_names(class_names, unlabeled)
        return tuple(class_names), "--class_names"
    if tool_order is not None:
        order, how = list(dict.fromkeys(tool_order)), f"{source}'s label list"
    else:
        order, how = sorted(set(labels)), "label names sorted"
    if not order:
        raise ValueError(f"{source}: no labels: no shape names one (or give --class_names)")
    if unlabeled == "background":
        if BACKGROUND_NAME in order:
            raise ValueError(
                f"{source}: a label is named {BACKGROUND_NAME!r}, the name of unlabeled pixels: "
                "give --unlabeled_pixels ignore or a --class_names file"
            )
        order = [BACKGROUND_NAME, *order]
    if len(order) > MAX_CLASS_ID:
        raise ValueError(f"{source}: more than {MAX_CLASS_ID:,} labels")
    return tuple(order), how


def build_dataset(
    source: str, images: Iterator[ToolImage], stats_of: Any, request: ReadRequest
) -> AnnotatedDataset:
    """Stage every image of `images` (a tool module's reader) as an AnnotatedImage.

    `stats_of` is called after `images` is exhausted and returns its ToolStats. Two passes:
    the first spills the images with their label names and collects the label set; the
    second, once ids are known, stages the images the job reads.
    """
    origin, limits, unlabeled = request.origin, request.limits, request.unlabeled
    folder = spill.temporary_folder(source)
    raw = RecordFiles(os.path.join(folder.name, "raw"), per_file=2**62)
    labels: set[str] = set()
    total = 0
    for image in images:
        image = _checked(image, limits)
        labels.update(shape.label for shape in image.shapes)
        total += len(image.shapes)
        raw.write(pickle.dumps(image, pickle.HIGHEST_PROTOCOL))
    raw_paths = raw.close()
    if not raw_paths:
        folder.cleanup()
        raise ValueError(f"{origin}: no images")
    stats = stats_of()
    names, how = class_ids(labels, stats.labels, request)
    id_of = {name: index for index, name in enumerate(names)}
    staged = StagedImages(folder.name, limits)
    for image_id, payload in enumerate(read_record_file(raw_paths[0], STAGED_RECORD_BYTES)):
        staged.write(_annotated_image(pickle.loads(payload), image_id, id_of))
    records = staged.close()
    os.remove(raw_paths[0])
    description = {
        "format": source,
        "unlabeled": unlabeled,
        "label_order": how,
        "classes": [{"class_id": i, "name": name} for i, name in enumerate(names)],
        "num_annotations": total,
        "ignored_shapes": dict(sorted(stats.ignored_shapes.items())),
        "skipped": dict(sorted(stats.skipped.items())),
        "orphan_annotations": stats.orphan_annotations,
        "orphan_example_id": None,
    }
    return AnnotatedDataset(
        source,
        names,
        unlabeled,
        staged.count,
        total,
        stats.orphan_annotations,
        description,
        records,
        folder,
    )


def _annotated_image(image: ToolImage, image_id: int, id_of: dict[str, int]) -> AnnotatedImage:
    problem = image.problem
    unknown = sorted({shape.label for shape in image.shapes} - id_of.keys())
    if problem is None and unknown:
        problem = f"label {unknown[0]!r} is not in the class names"
    annotations = ()
    if problem is None:
        annotations = tuple(
            AnnotatedShape(index, id_of[shape.label], False, shape.polygons, shape.rle)
            for index, shape in enumerate(image.shapes)
        )
    return AnnotatedImage(
        image.file_name,
        image_id,
        image.height,
        image.width,
        annotations,
        problem,
        image.too_large and problem == image.problem,
        ordered=True,
        not_a_file=image.not_a_file and problem == image.problem,
    )


def _checked(image: ToolImage, limits: InputLimits) -> ToolImage:
    """The image with its polygons clipped; a problem for non-finite or too many points."""
    if image.problem is not None:
        return dataclasses.replace(image, shapes=())
    points = sum(len(p) // 2 for shape in image.shapes for p in shape.polygons)
    if points > limits.image_points:
        return dataclasses.replace(
            image,
            shapes=(),
            problem=f"polygons of {points:,} points, more than the "
            f"{limits.image_points:,} one image may have",
            too_large=True,
        )
    shapes = []
    for index, shape in enumerate(image.shapes):
        polygons = []
        for polygon in shape.polygons:
            if not np.isfinite(polygon).all():
                return dataclasses.replace(
                    image,
                    shapes=(),
                    problem=f"shape {index} ({shape.label!r}) has a non-finite coordinate",
                )
            clipped = clip_polygon(polygon, image.width, image.height)
            if len(clipped) >= 6:
                polygons.append(clipped)
        if polygons or shape.rle is not None:
            shapes.append(dataclasses.replace(shape, polygons=tuple(polygons)))
    return dataclasses.replace(image, shapes=tuple(shapes))


def _crossing(a: tuple, b: tuple, axis: int, limit: float) -> tuple[float, float]:
    """Where edge a-b crosses `limit` on `axis`, measured from the end nearer the limit: from
    the far end of an edge to 1e300 the step to the image rounds away. Halved differences
    cannot overflow, whatever finite values the ends hold."""
    near, far = (a, b) if abs(a[axis] - limit) <= abs(b[axis] - limit) else (b, a)
    other = 1 - axis
    t = (limit * 0.5 - near[axis] * 0.5) / (far[axis] * 0.5 - near[axis] * 0.5)
    crossing = [0.0, 0.0]
    crossing[axis] = limit
    crossing[other] = near[other] + t * (far[other] * 0.5 - near[other] * 0.5) * 2.0
    return crossing[0], crossing[1]


def clip_polygon(polygon: np.ndarray, width: int, height: int) -> np.ndarray:
    """The polygon clipped (Sutherland-Hodgman) to the image plus one pixel on every side,
    so pycocotools only ever sees coordinates near the image and draws the same pixels."""
    xs, ys = polygon[0::2], polygon[1::2]
    if xs.min() >= -1 and ys.min() >= -1 and xs.max() <= width + 1 and ys.max() <= height + 1:
        return polygon
    points = list(zip(xs.tolist(), ys.tolist(), strict=True))
    for axis, limit, keep_below in ((0, -1.0, False), (0, width + 1.0, True),
                                    (1, -1.0, False), (1, height + 1.0, True)):  # fmt: skip
        if not points:
            break
        inside = [(p[axis] <= limit) if keep_below else (p[axis] >= limit) for p in points]
        out = []
        for i, point in enumerate(points):
            prev, prev_in = points[i - 1], inside[i - 1]
            if inside[i] != prev_in:
                out.append(_crossing(prev, point, axis, limit))
            if inside[i]:
                out.append(point)
        points = out
    return np.asarray([c for p in points for c in p], dtype=np.float64)


def rle_of_bitmap(
    bitmap: np.ndarray,
    top: int,
    left: int,
    height: int,
    width: int,
    limits: InputLimits = DEFAULT_LIMITS,
) -> dict:
    """A full-image compressed COCO RLE of a boolean bitmap placed at (top, left), clipped;
    TooLargeError for an image larger than `limits` allows.

    The runs are counted on the bitmap alone, never on a full-size image: a file of
    thousands of small shapes on a stated 40-megapixel image would otherwise paint and
    encode 40 million pixels per shape."""
    check_pixels(height, width, limits, "image size")
    y0, x0 = max(top, 0), max(left, 0)
    y1 = min(top + bitmap.shape[0], height)
    x1 = min(left + bitmap.shape[1], width)
    rows, columns = max(y1 - y0, 0), max(x1 - x0, 0)
    if not rows or not columns:
        counts = [height * width]
    else:
        block = bitmap[y0 - top : y1 - top, x0 - left : x1 - left]
        counts = _block_counts(block, y0, x0, height, width, limits).tolist()
    rle = mask_utils.frPyObjects({"size": [height, width], "counts": counts}, height, width)
    text = rle["counts"].decode("ascii")
    _check_rle_size(len(text), limits)
    return {"size": [height, width], "counts": text}


def _block_counts(
    block: np.ndarray, y0: int, x0: int, height: int, width: int, limits: InputLimits
) -> np.ndarray:
    """COCO RLE counts of a `height` x `width` image of zeros holding `block` (nonzero: set)
    at (y0, x0), found from where the values change.

    COCO RLE runs over the image column by column, starting with zeros. In that order the
    image is: zeros, then each column of the block followed by the zeros below and above it
    (its gap), then zeros to the end. The block's columns are laid out one after another,
    a byte a pixel, with one zero standing in for each gap; only the positions where the
    value changes are mapped back to the image. Never an int64 per pixel: a mask stated
    6000x6000 took the launcher 1 GB that way."""
    rows, columns = block.shape
    step = rows + 1 if rows < height else rows  # a block as tall as the image has no gap
    stream = np.zeros((columns, step), dtype=np.uint8)
    np.not_equal(block.T, 0, out=stream[:, :rows].view(bool))
    stream = stream.reshape(-1)[: columns * step - (step - rows)]
    changed = stream[1:] != stream[:-1]
    # Checked here, where the RLE is made, before an int64 per run: the job refuses a staged
    # RLE over the cap, so one that got this far failed the whole run instead of being its
    # image's reject. Each run takes at least one character of the compressed string.
    _check_rle_size(int(np.count_nonzero(changed)) + 1 + int(stream[0]), limits)
    changes = np.flatnonzero(changed)
    del changed
    changes += 1
    before = x0 * height + y0

    def placed(index: np.ndarray | int) -> np.ndarray | int:
        return before + (index // step) * height + index % step

    edges = [np.zeros(1, np.int64)]
    if stream[0]:
        edges.append(np.array([before], np.int64))
    whole, part = np.divmod(changes, step)
    del changes
    whole *= height
    whole += part
    del part
    whole += before
    edges.append(whole)
    if stream[-1]:
        edges.append(np.array([placed(len(stream) - 1) + 1], np.int64))
    edges.append(np.array([height * width], np.int64))
    counts = np.diff(np.concatenate(edges))
    return counts[:-1] if len(counts) > 1 and counts[-1] == 0 else counts


def _check_rle_size(counts: int, limits: InputLimits) -> None:
    """TooLargeError for an RLE of more counts than the job takes (annotations.checked_rle)."""
    if counts > limits.rle_chars:
        raise TooLargeError(
            f"an RLE of {counts:,} counts, more than the {limits.rle_chars:,} one "
            "annotation may have"
        )


def box_polygon(
    xtl: float, ytl: float, xbr: float, ybr: float, degrees: float, pivot: tuple[float, float]
) -> np.ndarray:
    """The corners of a box rotated clockwise (image coordinates, y down) about `pivot`."""
    corners = np.array([[xtl, ytl], [xbr, ytl], [xbr, ybr], [xtl, ybr]], dtype=np.float64)
    if degrees:
        # Corners of 1e308 rotate to inf or nan, which `_checked` refuses as the image's
        # problem; numpy's RuntimeWarning about them went to stderr as two stray lines.
        with np.errstate(over="ignore", invalid="ignore"):
            return _rotated(corners, degrees, pivot)
    return corners.reshape(-1)


def _rotated(corners: np.ndarray, degrees: float, pivot: tuple[float, float]) -> np.ndarray:
    angle = math.radians(degrees)
    cos, sin = math.cos(angle), math.sin(angle)
    shifted = corners - pivot
    rotated = np.stack(
        [shifted[:, 0] * cos - shifted[:, 1] * sin, shifted[:, 0] * sin + shifted[:, 1] * cos],
        axis=1,
    ) + np.asarray(pivot)
    return rotated.reshape(-1)
