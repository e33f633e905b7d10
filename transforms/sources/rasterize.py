"""The one rasteriser of annotated images, whichever tool wrote them, and the mask source that
uses it in the shard writers.

pycocotools turns each shape into an RLE (polygons and RLEs, in COCO's pixel convention),
whose runs are painted straight into the mask. Draw order:
a tool that gives one (`AnnotatedImage.ordered`) is painted in it, later on top; otherwise
(COCO) largest first, by the pixel area of each shape's own rasterisation (ties in file
order), so a small object on top of a large one stays visible. A crowd region paints the
ignore index in the same order: small individually annotated objects inside a crowd keep
their class. Pixels no shape covers get the dataset's fill value.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pycocotools import mask as mask_utils

from transforms.codecs.class_mask import ClassMaskSettings
from transforms.limits import DEFAULT_LIMITS, InputLimits
from transforms.record import Record, aligned, class_record, guarded, valid_image
from transforms.record_spec import RecordSpec
from transforms.rejects import Reason, RejectError
from transforms.sources.annotations import AnnotatedImage, image_from_payload
from transforms.sources.base import SourceSettings

# pycocotools 2.0.11's decode trips a numpy 2 deprecation on every call; harmless, and it
# would otherwise be printed by every worker.
warnings.filterwarnings(
    "ignore",
    message="__array__ implementation doesn't accept a copy keyword",
    category=DeprecationWarning,
    module="pycocotools",
)


# Pixels per run above which painting run by run (a Python slice a run, about 1 us) is
# cheaper than pycocotools' decode of the whole image (about 10 ns a pixel) and a copy.
_PIXELS_PER_RUN = 64


def rasterize(
    image: AnnotatedImage, height: int, width: int, settings: ClassMaskSettings, fill: int
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
    # Painted in COCO's column order (the mask transposed), where each run of an RLE is one
    # slice: the work is that of the runs, not a decode of the whole image per shape (1,000
    # triangles on a 6000x6000 image took minutes). A shape of many short runs (one slice
    # each) is decoded whole instead, which is then the cheaper.
    mask = np.full((width, height), fill, dtype=settings.dtype)
    flat = mask.reshape(-1)
    for index in range(len(rles)) if image.ordered else draw_order(rles):
        annotation = image.annotations[index]
        value = settings.ignore_index if annotation.iscrowd else annotation.class_id
        counts = rles[index]["counts"]
        runs = _runs(counts.decode() if isinstance(counts, bytes) else counts)
        if len(runs) > height * width // _PIXELS_PER_RUN:
            np.copyto(mask, value, where=mask_utils.decode(rles[index]).T.view(bool))
            continue
        ends = np.cumsum(runs)
        for start, end in zip((ends - runs)[1::2].tolist(), ends[1::2].tolist(), strict=True):
            flat[start:end] = value
    return np.ascontiguousarray(mask.T)


def draw_order(rles: list[dict[str, Any]]) -> list[int]:
    """Indices in painting order: largest rasterised area first, file order among equals."""
    # One RLE a call: pycocotools 2.0.11's area of a list of 256 or more fails under numpy 2
    # ("Python integer 256 out of bounds for uint8"); each call is the same C count.
    areas = [int(mask_utils.area(rle)) for rle in rles]
    return sorted(range(len(rles)), key=lambda index: -areas[index])


def annotation_rles(image: AnnotatedImage) -> list[dict[str, Any]]:
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
        if covered < 0:
            raise ValueError("RLE counts are not a compressed COCO RLE string")
        if covered != height * width:
            raise ValueError(f"RLE counts cover {covered} pixels, not {height * width}")
        return {"size": [height, width], "counts": counts}
    if int(counts.sum()) != height * width:
        raise ValueError(f"RLE counts cover {int(counts.sum())} pixels, not {height * width}")
    uncompressed = {"size": [height, width], "counts": counts.tolist()}
    return mask_utils.frPyObjects(uncompressed, height, width)


def _compressed_total(counts: str) -> int:
    """Pixels covered by a compressed RLE string, or -1 if it is not one."""
    runs = _runs(counts)
    return -1 if runs is None else int(runs.sum())


def _runs(counts: str) -> np.ndarray | None:
    """The runs of a compressed RLE string (zeros first, then ones, alternating), or None
    if it is not one.

    pycocotools.mask.decode fills a mask whose runs end early with uninitialised memory
    (garbage class pixels, no error), so the runs must add up before it sees them. This
    follows pycocotools' rleFrString, in numpy: 5 bits per character from '0', 0x20 = more,
    0x10 on the last = negative, runs after the second stored as differences.
    """
    try:
        raw = np.frombuffer(counts.encode("ascii"), np.uint8)
    except UnicodeEncodeError:
        return None
    if ((raw < 48) | (raw >= 112)).any():
        return None
    codes = raw - np.uint8(48)
    if codes.size and codes[-1] & 0x20:
        return None
    ends = np.flatnonzero((codes & 0x20) == 0).astype(np.int32)  # at most 16M characters
    if not ends.size:
        return np.zeros(0, np.int64)
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int32)
    lengths = ends - starts + 1
    # Up to 12 characters (60 bits) a run is exact in int64; pycocotools' own 64-bit value
    # would shift past its width beyond that, so such a string is refused.
    if lengths.max() > 12:
        return None
    position = np.arange(codes.size, dtype=np.int32) - np.repeat(starts, lengths)
    values = np.add.reduceat((codes & 0x1F).astype(np.int64) << (5 * position), starts)
    negative = (codes[ends] & 0x10) != 0
    values -= np.where(negative, np.int64(1) << (5 * lengths.astype(np.int64)), 0)
    runs = values.copy()
    runs[1::2] = np.cumsum(values[1::2])
    runs[2::2] = np.cumsum(values[2::2])
    if ((runs < 0) | (runs >= 2**32)).any():  # a run is a uint in pycocotools
        return None
    return runs


def make_annotated_record(
    key: str,
    image_bytes: bytes,
    annotated: AnnotatedImage,
    spec: RecordSpec,
    *,
    fill: int,
    limits: InputLimits = DEFAULT_LIMITS,
    thumbnail: bool = False,
) -> Record:
    """A record whose mask is rasterised from the image's annotations, and its stats.

    The image is decoded first, so the mask is allocated at a size the decoder vouched for;
    annotations drawn on the EXIF-rotated view rotate the image, as for mask files.
    """
    image = valid_image(image_bytes, limits, thumbnail)
    if annotated.height == 0 and not annotated.annotations:
        # An annotation tool's image with no shapes may state no size: the image's own.
        annotated = dataclasses.replace(annotated, height=image.height, width=image.width)
    image = aligned(image, image_bytes, (annotated.height, annotated.width))
    ids = guarded(
        rasterize, Reason.MASK_UNREADABLE, annotated, image.height, image.width, spec.classes, fill
    )
    return class_record(key, image, ids, spec)


class AnnotationSource:
    """Masks rasterised from an annotation export's shapes (any tool's).

    The pair's mask side is an `AnnotatedEntry` whose staged payload the job attached; no
    mask file is read.
    """

    name: ClassVar[str] = "annotations"
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
            raise ValueError("an annotation source needs the fill value of unlabeled pixels")
        return make_annotated_record(
            key,
            image_bytes,
            image_from_payload(mask.payload),
            settings.spec,
            fill=settings.fill,
            limits=settings.limits,
            thumbnail=settings.thumbnails,
        )
