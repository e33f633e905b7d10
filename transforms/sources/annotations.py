"""Annotation tools behind one interface, and the per-image payload every tool produces.

A tool is one module with one `TOOL` (an `AnnotationTool`: its name, how to detect its
export, how to read it), listed once in transforms/sources/tools.py. Reading streams the
export into an `AnnotatedDataset`: one staged `AnnotatedImage` per image in a temporary
folder, memory flat in the export's size. An `AnnotatedImage` is what the job carries for
an image (`image_payload`, one line of JSON): its size and its shapes in pixels, each a
class id with polygons or a COCO RLE, painted by transforms/sources/rasterize.py whichever
tool wrote it.

Unlabeled pixels are class `background`, or the ignore index with unlabeled "ignore"; a
--class_names file must then name `background` (one rule for every tool).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pickle
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from transforms.files import open_regular
from transforms.format.features import DEFAULT_COCO_UNLABELED as DEFAULT_UNLABELED
from transforms.limits import DEFAULT_LIMITS, STAGED_RECORD_BYTES, InputLimits, TooLargeError
from transforms.spill import RecordFiles, read_record_file

BACKGROUND_NAME = "background"
HEAD_BYTES = 64 << 10  # what detection reads of a file
TOP_KEYS_DEPTH = 32  # deeper than any format nests: the format's reader refuses it


# --- the payload: one image's shapes, as the job carries them --------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class AnnotatedShape:
    """What rasterising needs of one shape, and nothing else."""

    annotation_id: int | None
    class_id: int
    iscrowd: bool  # painted with the ignore index (COCO's crowd regions)
    polygons: tuple[np.ndarray, ...] = ()  # each [x0, y0, x1, y1, ...] in pixels, float64
    rle: Mapping[str, Any] | None = None  # {"size": [h, w], "counts": str or int array}


@dataclasses.dataclass(frozen=True, eq=False)
class AnnotatedImage:
    """One image's shapes, as they travel with its path to a worker."""

    file_name: str  # relative to the image folder, '/'-separated
    image_id: int
    height: int  # 0 (with no shapes): the image's own size
    width: int
    annotations: tuple[AnnotatedShape, ...] = ()
    problem: str | None = None  # set when a shape was unusable: the image is a reject
    too_large: bool = False  # the problem is a cap of transforms/limits.py
    ordered: bool = False  # paint in the given order (later on top), not largest first
    not_a_file: bool = False  # the problem: the annotation file is a FIFO or device


def too_large(image: AnnotatedImage, problem: str) -> AnnotatedImage:
    return dataclasses.replace(image, annotations=(), problem=problem, too_large=True)


def image_payload(image: AnnotatedImage) -> str:
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


def image_from_payload(payload: str) -> AnnotatedImage:
    """The inverse of `image_payload`; ValueError for anything it did not write."""
    try:
        data = json.loads(payload)
        annotations = tuple(
            AnnotatedShape(
                raw["id"],
                raw["class_id"],
                raw["iscrowd"],
                tuple(np.asarray(p, dtype=np.float64) for p in raw["polygons"]),
                None if raw["rle"] is None else checked_rle(raw["rle"]),
            )
            for raw in data["annotations"]
        )
        return AnnotatedImage(
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
        raise ValueError(f"not a staged annotated image record: {error!r}") from error


def checked_rle(segmentation: Mapping[str, Any], limits: InputLimits = DEFAULT_LIMITS) -> dict:
    """A COCO RLE object as rasterising takes it; TooLargeError over the cap, ValueError for
    anything that is not one."""
    size, counts = segmentation.get("size"), segmentation.get("counts")
    if isinstance(counts, (str, list)) and len(counts) > limits.rle_chars:
        raise TooLargeError(
            f"an RLE of {len(counts):,} counts, more than the {limits.rle_chars:,} one "
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
    if isinstance(counts, list) and all(type(v) is int and v >= 0 for v in counts):
        raise ValueError("RLE counts hold a run of 2**32 pixels or more")
    raise ValueError("RLE counts must be a string or a list of non-negative integers")


# --- the dataset: what a tool's reader hands the launcher ------------------------------------


@dataclasses.dataclass(frozen=True)
class AnnotatedDataset:
    """An export read and staged: what the launcher plans, stages and commits with."""

    tool: str  # the tool's name (transforms/sources/tools.py)
    class_names: tuple[str, ...]  # by class id
    unlabeled: str  # "background" or "ignore"
    num_images: int
    num_annotations: int
    orphan_annotations: int  # annotations naming no listed image
    description: Mapping[str, Any]  # metadata.json's record of how labels became class ids
    records: str  # record file of (image id, file_name, payload), in image order
    folder: tempfile.TemporaryDirectory = dataclasses.field(repr=False)  # holds `records`

    def staged(self) -> Iterator[tuple[int, str, str]]:
        """(image id, file_name, image_payload) of every image, in order, streamed."""
        for payload in read_record_file(self.records, STAGED_RECORD_BYTES):
            yield pickle.loads(payload)

    def fill_value(self, ignore_index: int) -> int:
        """The value of pixels no shape covers."""
        if self.unlabeled != "background":
            return ignore_index
        return self.class_names.index(BACKGROUND_NAME)

    def metadata(self) -> dict[str, Any]:
        """For metadata.json (classes.coco, its name in every output so far)."""
        return dict(self.description)


class StagedImages:
    """Images staged in a temporary folder, in the order written; one over the record cap
    becomes a mask_too_large reject, so the job never meets a record it cannot read."""

    def __init__(self, folder: str, limits: InputLimits) -> None:
        self._records = RecordFiles(os.path.join(folder, "images"), per_file=2**62)
        self._limits = limits

    @property
    def count(self) -> int:
        return self._records.records

    def write(self, image: AnnotatedImage) -> None:
        payload = image_payload(image)
        if len(payload) > self._limits.annotation_record_bytes:
            image = too_large(
                image,
                f"{len(payload):,} bytes of annotations, more than "
                f"the {self._limits.annotation_record_bytes:,} one image may have",
            )
            payload = image_payload(image)
        record = (image.image_id, image.file_name, payload)
        self._records.write(pickle.dumps(record, pickle.HIGHEST_PROTOCOL))

    def close(self) -> str:
        (path,) = self._records.close()
        return path


def check_class_names(class_names: Iterable[str], unlabeled: str) -> None:
    """With unlabeled pixels as `background`, --class_names must say which id that is."""
    if unlabeled == "background" and BACKGROUND_NAME not in class_names:
        raise ValueError(
            f"--class_names must name {BACKGROUND_NAME!r} (the id of unlabeled pixels), "
            "or give --unlabeled_pixels ignore"
        )


# --- the protocol ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReadRequest:
    """What reading an export may need besides its path, resolved once by the launcher."""

    origin: str  # how messages name the export, e.g. "--annotations export.xml"
    image_dir: str | None = None  # the image folder (absolute or gs://), to match names
    class_names: tuple[str, ...] | None = None  # --class_names: ids by name, in this order
    unlabeled: str = DEFAULT_UNLABELED
    limits: InputLimits = DEFAULT_LIMITS


class Head:
    """What detection sees of an export: a folder, or a regular file's first bytes (and its
    top-level JSON keys, read on demand through the bounded reader)."""

    def __init__(self, path: str) -> None:
        mode = os.stat(path).st_mode
        self.path = path
        self.is_folder = stat.S_ISDIR(mode)
        self.start = b""
        if not self.is_folder:
            if not stat.S_ISREG(mode):  # a FIFO would block the read
                raise ValueError(f"{path}: not a regular file (FIFO, device or socket)")
            with open_regular(path) as stream:
                self.start = stream.read(HEAD_BYTES)
        self.text = self.start.lstrip(b"\xef\xbb\xbf \t\r\n")  # after a BOM and blanks

    @functools.cached_property
    def top_keys(self) -> frozenset[str]:
        """The keys of a JSON object file's top level; empty for anything else."""
        import ijson

        from transforms.bounded_text import CHUNK_BYTES, JsonReader

        keys: set[str] = set()
        if not self.text.startswith(b"{"):
            return frozenset()
        try:
            with open_regular(self.path) as stream:
                reader = JsonReader(stream, self.path, depth=TOP_KEYS_DEPTH)
                for prefix, event, value in ijson.parse(reader, buf_size=CHUNK_BYTES):
                    if prefix == "" and event == "map_key":
                        keys.add(value)
                    elif prefix == "" and event == "end_map":
                        break
        except ijson.JSONError:
            pass  # the keys so far tell the format; its reader names the syntax error
        return frozenset(keys)


@dataclasses.dataclass(frozen=True)
class AnnotationTool:
    """What a tool module provides, as its one `TOOL`."""

    name: str  # the --annotation_format value and the stored source name
    title: str  # how messages name the format
    looks_for: str  # what detection looks for, said when nothing matched
    # Whether the export `head` shows is this tool's.
    detect: Callable[[Head], bool]
    # The local export at `path`, staged; ValueError (one line, naming request.origin) for
    # one that is not this tool's. A problem of one image only marks that image.
    read: Callable[[str, ReadRequest], AnnotatedDataset]
    folder_of: str | None = None  # the export is a folder of files ending so; None: a file
