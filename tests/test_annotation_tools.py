"""A new annotation tool is one module plus one registry line: this module is one (a made-up
"boxes" format), registered through transforms/sources/tools.py's own `register`, and the
real CLI then detects it, accepts it as --annotation_format, rasterises it and stores its
name, like the four built-in tools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beam_pipeline import cli
from tests.helpers.class_outputs import metadata, rejects, stored_masks
from tests.helpers.runs import RUNNER_ARGS
from transforms.sources import tools
from transforms.sources.annotations import AnnotatedDataset, AnnotationTool, ReadRequest
from transforms.sources.labelled_shapes import (
    ToolImage,
    ToolShape,
    ToolStats,
    box_polygon,
    build_dataset,
)

H, W = 40, 60
MAGIC = b"#boxes"


# --- the tool: everything a new format needs ---------------------------------------------------


def read_boxes(path: str, request: ReadRequest) -> AnnotatedDataset:
    """`#boxes` then one line per image: `file_name height width [label x0 y0 x1 y1]...`."""
    lines = Path(path).read_text().splitlines()[1:]
    images = (_image(line) for line in lines if line.strip())
    return build_dataset("boxes", images, lambda: ToolStats({}), request)


def _image(line: str) -> ToolImage:
    name, height, width, *boxes = line.split()
    shapes = [
        ToolShape(label, (box_polygon(*map(float, corners), 0.0, (0.0, 0.0)),))
        for label, *corners in (boxes[i : i + 5] for i in range(0, len(boxes), 5))
    ]
    return ToolImage(name, int(height), int(width), tuple(shapes))


TOOL = AnnotationTool(
    "boxes",
    "boxes",
    "a text file starting with #boxes",
    detect=lambda head: head.text.startswith(MAGIC),
    read=read_boxes,
)


@pytest.fixture
def boxes_registered(monkeypatch):
    """The one registry line, undone after the test."""
    monkeypatch.setattr(tools, "TOOLS", dict(tools.TOOLS))
    tools.register("boxes", __name__)


# --- the checks --------------------------------------------------------------------------------


def _dataset(root: Path, header: bytes = MAGIC) -> tuple[Path, Path]:
    images = root / "images"
    images.mkdir(parents=True)
    for name in ("a.jpg", "b.jpg"):
        Image.fromarray(np.full((H, W, 3), 90, np.uint8)).save(images / name, quality=95)
    export = root / "export.txt"
    export.write_bytes(
        header + b"\na.jpg 40 60 boat 10 5 30 25 water 40 20 55 35\nb.jpg 40 60\ngone.jpg 40 60\n"
    )
    return images, export


def _prepare(images: Path, out: Path, *flags: str) -> int:
    argv = ["prepare", "--image_dir", str(images), "--output_dir", str(out)]
    split = ["--train_size", "1", "--validation_size", "0", "--max_reject_fraction", "1"]
    return cli.main([*argv, "--mask_type", "classes", *split, *flags, *RUNNER_ARGS])


def _check_output(out: Path) -> None:
    info = metadata(out)
    assert info["parameters"]["annotation_format"] == "boxes"
    assert info["classes"]["coco"]["format"] == "boxes"
    assert info["classes"]["names"] == ["background", "boat", "water"]
    stored = stored_masks(out)
    assert sorted(stored) == ["a", "b"]
    mask = stored["a"][1]
    assert mask[15, 20] == 1 and mask[28, 48] == 2 and mask[2, 2] == 0
    assert not stored["b"][1].any()  # an image with no shapes: all background
    assert rejects(out)["gone"]["reason"] == "missing_image"


def test_the_registry_gives_the_built_in_tools_in_detection_order():
    assert tools.names() == ("coco", "cvat", "labelstudio", "labelme")
    assert [tools.get(name).name for name in tools.names()] == list(tools.names())


def test_a_registered_tool_is_detected_from_its_content(boxes_registered, tmp_path):
    images, export = _dataset(tmp_path)
    assert tools.detect(str(export)) == "boxes"
    assert _prepare(images, tmp_path / "out", "--annotations", str(export)) == 0
    _check_output(tmp_path / "out")


def test_a_registered_tool_is_a_choice_of_the_flag(boxes_registered, tmp_path):
    images, export = _dataset(tmp_path, header=b"#no header detection knows")
    flags = ["--annotations", str(export), "--annotation_format", "boxes"]
    assert _prepare(images, tmp_path / "out", *flags) == 0
    _check_output(tmp_path / "out")


def test_an_unregistered_tool_is_neither_detected_nor_a_choice(tmp_path, capsys):
    images, export = _dataset(tmp_path)
    with pytest.raises(ValueError, match="not an annotation format segprep knows"):
        tools.detect(str(export))
    flags = ["--annotations", str(export), "--annotation_format", "boxes"]
    assert _prepare(images, tmp_path / "out", *flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--annotation_format" in err and "boxes" in err
    assert not (tmp_path / "out").exists()


def test_a_placed_bitmaps_rle_is_counted_on_the_bitmap_alone():
    """rle_of_bitmap gives the RLE pycocotools encodes from the full painted image, for any
    placement and clipping, without painting it: a labelme file of 5,000 tiny mask shapes
    on a stated 6324x6324 image painted 40 Mpx per shape (minutes of CPU)."""
    import tracemalloc

    from pycocotools import mask as mask_utils

    from transforms.sources.labelled_shapes import rle_of_bitmap

    rng = np.random.default_rng(0)
    for _ in range(3000):
        height, width = (int(v) for v in rng.integers(1, 24, 2))
        bitmap = rng.random(tuple(int(v) for v in rng.integers(0, 10, 2))) < rng.random()
        top, left = (int(v) for v in rng.integers(-12, 28, 2))
        full = np.zeros((height, width), dtype=np.uint8, order="F")
        y0, x0 = max(top, 0), max(left, 0)
        y1, x1 = min(top + bitmap.shape[0], height), min(left + bitmap.shape[1], width)
        if y1 > y0 and x1 > x0:
            full[y0:y1, x0:x1] = bitmap[y0 - top : y1 - top, x0 - left : x1 - left]
        expected = mask_utils.encode(full)["counts"].decode("ascii")
        assert rle_of_bitmap(bitmap, top, left, height, width)["counts"] == expected
    tracemalloc.start()
    rle_of_bitmap(np.ones((4, 4), bool), 3000, 3000, 6324, 6324)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20, peak  # the painted image would be 40 MB
