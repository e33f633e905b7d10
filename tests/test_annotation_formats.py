"""CVAT, Label Studio and labelme exports through the real CLI into shards.

Each export is written here in the tool's own format. The expected class ids are an
independent rasterisation: PIL's ImageDraw fills the polygons and boxes in the stated draw
order, and pixels within 2 pixels of any polygon or box outline are left out of the
comparison (the two rasterisers may differ on edge pixels only); RLE masks (CVAT's and Label
Studio's brush) are placed from plain numpy and compared exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from beam_pipeline import cli
from tests.helpers.class_outputs import metadata, rejects, stored_masks
from tests.helpers.runs import RUNNER_ARGS

H, W = 40, 60


def _images(folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.fromarray(np.full((H, W, 3), 100, np.uint8)).save(folder / name, quality=95)


def _run(images: Path, out: Path, *flags: str) -> int:
    argv = ["prepare", "--image_dir", str(images), "--output_dir", str(out)]
    split = ["--train_size", "1", "--validation_size", "0"]
    return cli.main([*argv, "--mask_type", "classes", *split, *flags, *RUNNER_ARGS])


class _Reference:
    """Class ids drawn with PIL in draw order, and the band near outlines left uncompared."""

    def __init__(self, fill: int = 0) -> None:
        self.ids = Image.new("L", (W, H), fill)
        self.edges = Image.new("1", (W, H), 0)

    def polygon(self, xy: list[tuple[float, float]], class_id: int) -> None:
        ImageDraw.Draw(self.ids).polygon(xy, fill=class_id)
        ImageDraw.Draw(self.edges).line([*xy, xy[0]], fill=1, width=5)

    def bitmap(self, bitmap: np.ndarray, top: int, left: int, class_id: int) -> None:
        ids = np.array(self.ids)
        region = ids[top : top + bitmap.shape[0], left : left + bitmap.shape[1]]
        region[bitmap] = class_id
        self.ids = Image.fromarray(ids)

    def check(self, stored: np.ndarray) -> None:
        keep = ~np.array(self.edges, dtype=bool)
        expected = np.array(self.ids)
        assert keep.sum() > H * W / 2
        np.testing.assert_array_equal(stored[keep], expected[keep])


def _one_line_error(capsys, images: Path, out: Path, *flags: str) -> str:
    assert _run(images, out, *flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("segprep: error: "), err
    assert not out.exists()
    return err


# --- CVAT --------------------------------------------------------------------------------------

CVAT_MASK = np.array([[0, 1, 1], [1, 1, 0], [0, 1, 0]], dtype=bool)


def _cvat_rle(bitmap: np.ndarray) -> str:
    """CVAT's runs: alternating unset/set, starting with unset, row by row."""
    flat = bitmap.reshape(-1).tolist()
    runs, current, length = [], False, 0
    for value in flat:
        if value == current:
            length += 1
        else:
            runs.append(length)
            current, length = value, 1
    runs.append(length)
    return ", ".join(map(str, runs))


def _cvat(path: Path) -> None:
    path.write_text(
        f"""<?xml version="1.0" encoding="utf-8"?>
<annotations>
  <version>1.1</version>
  <meta><task><labels>
    <label><name>road</name></label><label><name>car</name></label>
  </labels></task></meta>
  <image id="0" name="a.jpg" width="{W}" height="{H}">
    <box label="car" xtl="20" ytl="8" xbr="45" ybr="30" z_order="1"/>
    <polygon label="road" points="5,5;55,5;55,35;5,35" z_order="0"/>
    <mask label="road" rle="{_cvat_rle(CVAT_MASK)}" left="30" top="15" width="3" height="3"
          z_order="2"/>
    <polyline label="road" points="1,1;9,9" z_order="5"/>
  </image>
  <image id="1" name="b.jpg" width="{W}" height="{H}"></image>
  <image id="2" name="gone.jpg" width="{W}" height="{H}"></image>
</annotations>
"""
    )


def test_cvat_is_drawn_by_z_order_with_exact_masks(tmp_path):
    _images(tmp_path / "img", "a.jpg", "b.jpg")
    _cvat(tmp_path / "cvat.xml")
    out = tmp_path / "out"
    flags = ["--annotations", str(tmp_path / "cvat.xml"), "--annotation_format", "cvat"]
    assert _run(tmp_path / "img", out, *flags) == 0
    stored = stored_masks(out)
    assert sorted(stored) == ["a", "b"]
    reference = _Reference()  # ids: background 0, road 1, car 2 (the meta labels' order)
    reference.polygon([(5, 5), (55, 5), (55, 35), (5, 35)], 1)
    reference.polygon([(20, 8), (45, 8), (45, 30), (20, 30)], 2)  # z 1: over the road
    reference.bitmap(CVAT_MASK, 15, 30, 1)  # z 2: on top, exact
    reference.check(stored["a"][1])
    np.testing.assert_array_equal(stored["a"][1][15:18, 30:33][CVAT_MASK], 1)
    assert not stored["b"][1].any()  # listed with no shapes: all background
    assert rejects(out)["gone"]["reason"] == "missing_image"
    info = metadata(out)
    assert info["classes"]["names"] == ["background", "road", "car"]
    assert info["classes"]["coco"]["format"] == "cvat"
    assert info["classes"]["coco"]["ignored_shapes"] == {"polyline": 1}


def test_cvat_is_told_from_its_content(tmp_path):
    _images(tmp_path / "img", "a.jpg", "b.jpg")
    _cvat(tmp_path / "cvat.xml")
    out = tmp_path / "out"
    assert _run(tmp_path / "img", out, "--annotations", str(tmp_path / "cvat.xml")) == 0
    assert sorted(stored_masks(out)) == ["a", "b"]


def test_an_xml_bomb_is_one_line(tmp_path, capsys):
    _images(tmp_path / "img", "a.jpg")
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(
        '<?xml version="1.0"?><!DOCTYPE annotations [<!ENTITY a "aaaaaaaaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><annotations>&b;</annotations>'
    )
    err = _one_line_error(capsys, tmp_path / "img", tmp_path / "out", "--annotations", str(bomb))
    assert "refused" in err


# --- Label Studio -----------------------------------------------------------------------------


def _brush_rle(alpha: np.ndarray) -> list[int]:
    """Label Studio's brush stream of an RGBA canvas whose alpha is `alpha`, written with
    repeat runs only (16-bit lengths): the format's header and run layout, independently."""
    rgba = np.zeros((*alpha.shape, 4), np.uint8)
    rgba[..., 3] = alpha
    values = rgba.reshape(-1).tolist()
    bits = f"{len(values):032b}" + f"{7:05b}" + f"{15:04b}" * 4
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i] and j - i < 65536:
            j += 1
        bits += "1" + "00" + f"{j - i - 1:016b}" + f"{values[i]:08b}"
        i = j
    bits += "0" * (-len(bits) % 8)
    return [int(bits[k : k + 8], 2) for k in range(0, len(bits), 8)]


BRUSH = np.zeros((H, W), np.uint8)
BRUSH[20:26, 10:14] = 255


def _result(kind: str, value: dict) -> dict:
    return {
        "original_width": W,
        "original_height": H,
        "image_rotation": 0,
        "from_name": "tag",
        "to_name": "image",
        "type": kind,
        "value": value,
    }


def _labelstudio(path: Path) -> None:
    polygon = [[x / W * 100, y / H * 100] for x, y in ((5, 5), (55, 5), (30, 35))]
    tasks = [
        {
            "id": 1,
            "data": {"image": "/data/upload/3/1a2b3c4d-a.jpg"},
            "annotations": [
                {"id": 9, "was_cancelled": True, "result": [
                    _result("rectanglelabels", {"x": 0, "y": 0, "width": 100, "height": 100,
                                                "rotation": 0, "rectanglelabels": ["tree"]})]},
                {"id": 10, "was_cancelled": False, "result": [
                    _result("polygonlabels", {"points": polygon, "polygonlabels": ["sky"]}),
                    _result("rectanglelabels", {"x": 40 / W * 100, "y": 20 / H * 100,
                                                "width": 15 / W * 100, "height": 15 / H * 100,
                                                "rotation": 0, "rectanglelabels": ["tree"]}),
                    _result("brushlabels", {"format": "rle", "rle": _brush_rle(BRUSH),
                                            "brushlabels": ["sky"]}),
                    _result("keypointlabels", {"x": 1, "y": 1, "keypointlabels": ["sky"]}),
                ]},
            ],
        },
        {"id": 2, "data": {"image": "/data/local-files/?d=b.jpg"}, "annotations": []},
        {"id": 3, "data": {"image": "s3://bucket/gone.jpg"}, "annotations": []},
    ]  # fmt: skip
    path.write_text(json.dumps(tasks))


def test_label_studio_polygons_rectangles_and_brush(tmp_path):
    _images(tmp_path / "img", "a.jpg", "b.jpg")
    _labelstudio(tmp_path / "export.json")
    out = tmp_path / "out"
    assert _run(tmp_path / "img", out, "--annotations", str(tmp_path / "export.json")) == 0
    stored = stored_masks(out)
    assert sorted(stored) == ["a", "b"]
    reference = _Reference()  # labels sorted by name: background 0, sky 1, tree 2
    reference.polygon([(5, 5), (55, 5), (30, 35)], 1)
    reference.polygon([(40, 20), (55, 20), (55, 35), (40, 35)], 2)
    reference.bitmap(BRUSH > 0, 0, 0, 1)  # result order: the brush is on top, exact
    reference.check(stored["a"][1])
    np.testing.assert_array_equal(stored["a"][1][20:26, 10:14], 1)
    assert not stored["b"][1].any()
    assert rejects(out)["gone"]["reason"] == "missing_image"
    info = metadata(out)
    assert info["classes"]["names"] == ["background", "sky", "tree"]
    assert info["classes"]["coco"]["skipped"] == {"cancelled_annotations": 1}


# --- labelme ----------------------------------------------------------------------------------


def _labelme(folder: Path, name: str, shapes: list[dict]) -> None:
    data = {
        "version": "5.5.0",
        "flags": {},
        "shapes": shapes,
        "imagePath": name,
        "imageData": None,
        "imageHeight": H,
        "imageWidth": W,
    }
    (folder / (Path(name).stem + ".json")).write_text(json.dumps(data))


def _shape(label: str, kind: str, points: list) -> dict:
    return {"label": label, "points": points, "group_id": None, "shape_type": kind, "flags": {}}


def test_labelme_json_beside_its_images(tmp_path):
    images = tmp_path / "img"
    _images(images, "a.jpg", "b.jpg")
    _labelme(
        images,
        "a.jpg",
        [
            _shape("water", "polygon", [[5, 5], [55, 5], [55, 35], [5, 35]]),
            _shape("boat", "rectangle", [[40, 30], [20, 10]]),
            _shape("water", "line", [[0, 0], [9, 9]]),
        ],
    )
    _labelme(images, "b.jpg", [_shape("kraken", "polygon", [[1, 1], [30, 1], [30, 30]])])
    _labelme(images, "gone.jpg", [])
    names = tmp_path / "names.txt"
    names.write_text("background\nboat\nwater\n")
    out = tmp_path / "out"
    flags = ["--annotations", str(images), "--class_names", str(names)]
    assert _run(images, out, *flags, "--max_reject_fraction", "1") == 0
    stored = stored_masks(out)
    assert sorted(stored) == ["a"]
    reference = _Reference()  # --class_names: boat 1, water 2; shape order, later on top
    reference.polygon([(5, 5), (55, 5), (55, 35), (5, 35)], 2)
    reference.polygon([(20, 10), (40, 10), (40, 30), (20, 30)], 1)
    reference.check(stored["a"][1])
    found = rejects(out)
    assert found["b"]["reason"] == "mask_unreadable" and "kraken" in found["b"]["detail"]
    assert found["gone"]["reason"] == "missing_image"
    assert sorted(found) == ["b", "gone"]  # the .json files are inputs, not unrecognized files


# --- detection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"images": [], "shapes": []}', "ambiguous"),
        ('{"hello": 1}', "not an annotation format"),
        ("<svg></svg>", "not CVAT"),
    ],
)
def test_unknown_or_ambiguous_formats_are_one_line(tmp_path, capsys, content, words):
    _images(tmp_path / "img", "a.jpg")
    path = tmp_path / "export.dat"
    path.write_text(content)
    err = _one_line_error(capsys, tmp_path / "img", tmp_path / "out", "--annotations", str(path))
    assert words in err
