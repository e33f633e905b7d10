"""The rasteriser paints each shape's RLE runs in column order: the same pixels as painting
pycocotools' full-size decode of every shape, and the same run parsing as pycocotools."""

from __future__ import annotations

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from transforms.codecs.class_mask import ClassMaskSettings
from transforms.rejects import RejectError
from transforms.sources.annotations import AnnotatedImage, AnnotatedShape
from transforms.sources.rasterize import _runs, annotation_rles, draw_order, rasterize

SETTINGS = ClassMaskSettings("classes", 200, ignore_index=255)
# pycocotools 2.0.11's own numpy 2 deprecation (rasterize.py says why it is harmless).
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def _decoded_painting(image: AnnotatedImage, fill: int) -> np.ndarray:
    """The reference: each shape decoded at full size by pycocotools, painted in order."""
    rles = annotation_rles(image)
    mask = np.full((image.height, image.width), fill, np.uint8)
    for index in range(len(rles)) if image.ordered else draw_order(rles):
        shape = image.annotations[index]
        value = SETTINGS.ignore_index if shape.iscrowd else shape.class_id
        np.copyto(mask, value, where=mask_utils.decode(rles[index]).view(bool))
    return mask


def _random_image(rng: np.random.Generator, ordered: bool) -> AnnotatedImage:
    height, width = int(rng.integers(1, 120)), int(rng.integers(1, 120))
    shapes = []
    for number in range(int(rng.integers(1, 9))):
        class_id, crowd = int(rng.integers(0, 200)), bool(rng.random() < 0.2)
        if rng.random() < 0.3:
            bits = np.asfortranarray((rng.random((height, width)) < rng.random()).astype(np.uint8))
            rle = {"size": [height, width], "counts": mask_utils.encode(bits)["counts"].decode()}
            shapes.append(AnnotatedShape(number, class_id, crowd, rle=rle))
        else:
            points = int(rng.integers(3, 6))
            xs = rng.uniform(-0.2 * width, 1.2 * width, points)
            ys = rng.uniform(-0.2 * height, 1.2 * height, points)
            polygon = np.column_stack([xs, ys]).ravel()
            shapes.append(AnnotatedShape(number, class_id, crowd, polygons=(polygon,)))
    return AnnotatedImage("x.jpg", 1, height, width, tuple(shapes), ordered=ordered)


@pytest.mark.parametrize("ordered", [False, True])
def test_painting_runs_equals_painting_decoded_shapes(ordered):
    rng = np.random.default_rng(7 + ordered)
    painted_images = 0
    for _ in range(200):
        image = _random_image(rng, ordered)
        try:
            expected = _decoded_painting(image, fill=0)
        except RejectError:  # outlines over the image's budget: a reject either way
            with pytest.raises(RejectError):
                rasterize(image, image.height, image.width, SETTINGS, fill=0)
            continue
        painted = rasterize(image, image.height, image.width, SETTINGS, fill=0)
        assert painted.flags.c_contiguous
        np.testing.assert_array_equal(painted, expected)
        painted_images += 1
    assert painted_images > 100


def test_runs_are_pycocotools_runs():
    rng = np.random.default_rng(3)
    for _ in range(300):
        height, width = int(rng.integers(1, 90)), int(rng.integers(1, 90))
        bits = (rng.random((height, width)) < rng.random()).astype(np.uint8)
        counts = mask_utils.encode(np.asfortranarray(bits))["counts"].decode()
        flat = bits.ravel(order="F")
        changes = np.flatnonzero(np.diff(flat)) + 1
        edges = np.concatenate(([0], changes, [flat.size]))
        expected = np.diff(edges).tolist()
        if flat[0]:  # runs start with zeros
            expected = [0, *expected]
        assert _runs(counts).tolist() == expected


@pytest.mark.parametrize(
    ("counts", "runs"),
    [
        ("", []),
        ("PPPPPPP0", [0]),  # extra zero characters: pycocotools reads 0
        ("PPPPPPPP1", None),  # past 32 bits
        ("PPPPPPP@", None),  # negative first run
        ("1/", None),  # not a RLE character
        ("1P", None),  # ends inside a run
        ("1é", None),
        ("12", [1, 2]),
        ("150oooooooO", [1, 5, 0, 4]),  # a negative difference of 8 characters, exact
        ("1" + "P" * 12 + "0", None),  # 13 characters: past pycocotools' 64-bit value
    ],
)
def test_runs_of_odd_strings(counts, runs):
    found = _runs(counts)
    assert (found if found is None else found.tolist()) == runs
