"""CVAT for images 1.1 (XML): the CVAT tool (transforms/sources/annotations.py).

The XML is parsed by defusedxml's iterparse: streamed (each `<image>` is dropped once read,
so a 500 MB export never sits in memory), and an entity declaration (the billion-laughs
bomb) or an external entity stops the read with one line, never expands. The bytes reach
it through the bounded reader (transforms/bounded_text.py: no tag, attribute or text over
`InputLimits.xml_token_bytes`), nesting is capped, and an image's stated size and a mask's box
are checked against `InputLimits.pixels` before a pixel is allocated (mask_too_large).

Shapes drawn: `<polygon points="x,y;x,y;...">`, `<box xtl ytl xbr ybr rotation>` (rotation in
degrees clockwise about the box centre, as CVAT draws it) and `<mask rle left top width
height>` (CVAT's run lengths, alternating unset/set and starting with unset, row by row
inside the width x height box at left, top: decoded exactly). `<polyline>`, `<points>`,
`<skeleton>`, `<tag>` and `<ellipse>` are counted in metadata.json and not drawn.
Draw order: `z_order` ascending, then document order; later shapes are on top.
Label order: the `<meta>` labels list (skeleton points, which name a parent, excluded).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from transforms.bounded_text import TextLimitError, XmlReader
from transforms.files import open_regular
from transforms.limits import (
    InputLimits,
    TooLargeError,
    annotation_int,
    check_pixels,
)
from transforms.sources.annotations import AnnotatedDataset, AnnotationTool, ReadRequest
from transforms.sources.labelled_shapes import (
    ToolImage,
    ToolShape,
    ToolStats,
    box_polygon,
    build_dataset,
    rle_of_bitmap,
)

DRAWN = ("polygon", "box", "mask")


def read_cvat(path: str, request: ReadRequest) -> AnnotatedDataset:
    """Stage a CVAT for images 1.1 file; ValueError (one line) for a file that is not one."""
    origin, limits = request.origin, request.limits
    reader = _Reader(origin, limits, needs_labels=request.class_names is None)
    with open_regular(path) as stream:
        images = reader.images(XmlReader(stream, origin, limits))
        return build_dataset("cvat", images, reader.stats, request)


TOOL = AnnotationTool(
    "cvat",
    "CVAT",
    "CVAT for images 1.1 XML, with <annotations>",
    detect=lambda head: head.text.startswith(b"<") and b"<annotations" in head.start,
    read=read_cvat,
)


class _Reader:
    def __init__(self, origin: str, limits: InputLimits, *, needs_labels: bool = True) -> None:
        self.origin = origin
        self.limits = limits
        self.needs_labels = needs_labels
        self.labels: list[str] = []
        self.shape_labels = False  # some drawn shape names a label
        self.ignored: collections.Counter[str] = collections.Counter()

    def stats(self) -> ToolStats:
        """What was counted; without <meta> labels, the labels are the shapes' (sorted)."""
        if not self.labels and not self.shape_labels and self.needs_labels:
            raise ValueError(
                f"{self.origin}: no labels: the file has no <meta> <labels> list and no shape "
                "names a label (or give --class_names)"
            )
        return ToolStats(dict(self.ignored), labels=tuple(self.labels) or None)

    def images(self, stream: IO[bytes]) -> Iterator[ToolImage]:
        events = _parsed(iterparse(stream, events=("start", "end"), forbid_dtd=True), self.origin)
        root = None
        path: list[str] = []
        for event, element in events:
            if event == "start":
                if root is None:
                    root = element
                    if element.tag != "annotations":
                        raise ValueError(f"{self.origin}: not a CVAT for images XML file")
                path.append(element.tag)
                if len(path) > self.limits.annotation_depth:
                    raise ValueError(
                        f"{self.origin}: nested deeper than "
                        f"{self.limits.annotation_depth} levels, more than CVAT has"
                    )
                continue
            path.pop()
            if element.tag == "label" and "meta" in path and "labels" in path:
                name = (element.findtext("name") or "").strip()
                if name and not (element.findtext("parent") or "").strip():
                    self.labels.append(name)
            elif element.tag == "image" and path == ["annotations"]:
                yield self._image(element)
                root.clear()
            elif element.tag == "track" and path == ["annotations"]:
                self.ignored["track"] += 1
                root.clear()

    def _image(self, element: Any) -> ToolImage:
        name = element.get("name") or ""
        try:
            height = annotation_int(element.get("height"), "height")
            width = annotation_int(element.get("width"), "width")
        except ValueError:
            height = width = 0
        # A problem image states size 0: the image's own (make_coco_record), so its reject
        # names the problem, not a size mismatch.
        if height <= 0 or width <= 0:
            return ToolImage(name, 0, 0, problem="CVAT <image> without a positive width/height")
        try:
            check_pixels(height, width, self.limits, "CVAT <image> size")
        except TooLargeError as error:
            return ToolImage(name, 0, 0, problem=str(error), too_large=True)
        shapes = []
        points = 0
        for position, child in enumerate(element):
            kind = child.tag
            if kind not in DRAWN:
                self.ignored[kind] += 1
                continue
            label = child.get("label") or ""
            self.shape_labels = self.shape_labels or bool(label)
            try:
                z = annotation_int(child.get("z_order") or 0, "z_order")
                if kind == "polygon":
                    text = child.get("points") or ""
                    points += text.count(";") + 1
                    if points > self.limits.image_points:
                        return ToolImage(
                            name,
                            0,
                            0,
                            problem=f"polygons of more than {self.limits.image_points:,} points",
                            too_large=True,
                        )
                    shape = ToolShape(label, (_points(text),))
                elif kind == "box":
                    xtl, ytl, xbr, ybr = (float(child.get(k)) for k in ("xtl", "ytl", "xbr", "ybr"))
                    rotation = float(child.get("rotation") or 0)
                    centre = ((xtl + xbr) / 2, (ytl + ybr) / 2)
                    shape = ToolShape(label, (box_polygon(xtl, ytl, xbr, ybr, rotation, centre),))
                else:
                    shape = ToolShape(label, rle=self._mask(child, height, width))
            except TooLargeError as error:
                problem = f"CVAT <{kind}> {position}: {error}"
                return ToolImage(name, 0, 0, problem=problem, too_large=True)
            except (TypeError, ValueError) as error:
                return ToolImage(name, height, width, problem=f"CVAT <{kind}> {position}: {error}")
            shapes.append((z, position, shape))
        shapes.sort(key=lambda item: item[:2])
        return ToolImage(name, height, width, tuple(shape for _, _, shape in shapes))

    def _mask(self, child: Any, height: int, width: int) -> dict[str, Any]:
        left, top, box_width, box_height = (
            annotation_int(child.get(k), k, truncate=True)
            for k in ("left", "top", "width", "height")
        )
        text = child.get("rle") or ""
        if len(text) > self.limits.rle_chars:
            raise TooLargeError(f"an RLE of more than {self.limits.rle_chars:,} characters")
        if box_width <= 0 or box_height <= 0 or box_width * box_height > 4 * height * width:
            raise ValueError(f"mask box {box_width}x{box_height} does not fit the image")
        check_pixels(box_height, box_width, self.limits, "mask box")
        counts = _runs(text)
        if int(counts.sum()) != box_width * box_height:
            raise ValueError(
                f"mask RLE covers {int(counts.sum())} pixels, not its box's "
                f"{box_width * box_height}"
            )
        values = np.zeros(len(counts), dtype=bool)
        values[1::2] = True
        bitmap = np.repeat(values, counts).reshape(box_height, box_width)
        return rle_of_bitmap(bitmap, top, left, height, width, self.limits)


def _parsed(events: Iterator[Any], origin: str) -> Iterator[Any]:
    """The parser's events; what the parser raises about the file's bytes becomes one
    ValueError naming `origin` (the bounded reader's TextLimitError names it already)."""
    while True:
        try:
            item = next(events)
        except StopIteration:
            return
        except TextLimitError:
            raise
        except DefusedXmlException as error:
            raise ValueError(f"{origin}: refused: {type(error).__name__}") from None
        except SyntaxError as error:  # ElementTree.ParseError
            raise ValueError(f"{origin}: not valid XML ({error})") from None
        except LookupError as error:
            if type(error) is not LookupError:  # KeyError, IndexError: not the file's
                raise
            # the declared encoding is one Python has no codec for
            raise ValueError(f"{origin}: not valid XML ({error})") from None
        except ValueError as error:
            # pyexpat reads a declared encoding it does not know through a table of 256
            # single bytes: a multi-byte one (shift_jis, gbk, euc-jp) or a codec that cannot
            # build the table (idna, undefined) raises here. CVAT writes UTF-8, so the file
            # was re-encoded; it is refused rather than transcoded behind the parser's back.
            raise ValueError(
                f"{origin}: not valid XML (its declared encoding cannot be read: {error}); "
                "CVAT writes UTF-8"
            ) from None
        yield item


def _runs(text: str) -> np.ndarray:
    """CVAT's "3, 5, 2" run lengths; ValueError for a negative, long or non-integer run."""
    parts = text.split(",") if text.strip() else []
    if any(len(part) > 20 for part in parts):  # 10^19 pixels is no image's run
        raise ValueError("mask RLE has a run of more than 20 digits")
    counts = np.array([int(part) for part in parts], np.int64)
    if (counts < 0).any():
        raise ValueError(f"mask RLE has a negative run ({int(counts.min())})")
    return counts


def _points(text: str) -> np.ndarray:
    """CVAT's "x1,y1;x2,y2;..." as [x1, y1, x2, y2, ...]."""
    values = [float(v) for pair in text.split(";") for v in pair.split(",")]
    if len(values) % 2:
        raise ValueError("points are not x,y pairs")
    return np.asarray(values, dtype=np.float64)
