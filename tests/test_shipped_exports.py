"""Annotation exports as the tools ship them, through the real CLI into shards: COCO with
--class_names, CVAT's "Segmentation mask 1.1" labelmap, Label Studio names that match two
images, and every tool's export read from gs:// (the loopback Cloud Storage server)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from beam_pipeline import cli
from tests.helpers.class_outputs import metadata, rejects, stored_masks
from tests.helpers.runs import RUNNER_ARGS

H, W = 40, 60
SQUARE = [10.0, 10.0, 30.0, 10.0, 30.0, 30.0, 10.0, 30.0]  # 20 x 20 at (10, 10)


def _images(folder: Path, *names: str) -> None:
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((H, W, 3), 100, np.uint8)).save(folder / name, quality=95)


def _run(images: Path | str, out: Path | str, *flags: str) -> int:
    argv = ["prepare", "--image_dir", str(images), "--output_dir", str(out)]
    split = ["--train_size", "1", "--validation_size", "0", "--max_reject_fraction", "1"]
    return cli.main([*argv, "--mask_type", "classes", *split, *flags, *RUNNER_ARGS])


def _coco(path: Path) -> None:
    """cat (id 1) on a.jpg, dog (id 2) on b.jpg, bird (id 3) on c.jpg."""
    images = [
        {"id": n, "file_name": f"{key}.jpg", "height": H, "width": W}
        for n, key in enumerate("abc", start=1)
    ]
    annotations = [
        {"id": 10 + n, "image_id": n, "category_id": n, "iscrowd": 0, "segmentation": [SQUARE]}
        for n in (1, 2, 3)
    ]
    categories = [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}, {"id": 3, "name": "bird"}]
    coco = {"images": images, "annotations": annotations, "categories": categories}
    path.write_text(json.dumps(coco))


def test_coco_class_names_set_the_ids_as_for_every_source(tmp_path):
    """--class_names orders COCO's classes; a category it leaves out rejects its images."""
    _images(tmp_path / "img", "a.jpg", "b.jpg", "c.jpg")
    _coco(tmp_path / "instances.json")
    (tmp_path / "names.txt").write_text("dog\nbackground\ncat\n")
    flags = ["--annotations", str(tmp_path / "instances.json"), "--annotation_format", "coco"]
    out = tmp_path / "out"
    assert _run(tmp_path / "img", out, *flags, "--class_names", str(tmp_path / "names.txt")) == 0
    stored = stored_masks(out)
    assert sorted(stored) == ["a", "b"]
    for key, class_id in (("a", 2), ("b", 0)):
        ids = stored[key][1]
        assert ids[20, 20] == class_id and ids[2, 2] == 1, key  # unlabeled: background's id 1
    reject = rejects(out)["c"]
    assert reject["reason"] == "mask_unreadable" and "'bird'" in reject["detail"], reject
    classes = metadata(out)["classes"]
    assert classes["names"] == ["dog", "background", "cat"]
    assert classes["coco"]["label_order"] == "--class_names"


def test_coco_class_names_without_background_is_one_line_error(tmp_path, capsys):
    _images(tmp_path / "img", "a.jpg")
    _coco(tmp_path / "instances.json")
    (tmp_path / "names.txt").write_text("cat\ndog\nbird\n")
    flags = ["--coco_annotations", str(tmp_path / "instances.json")]
    out = tmp_path / "out"
    assert _run(tmp_path / "img", out, *flags, "--class_names", str(tmp_path / "names.txt")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'background'" in err and "--unlabeled_pixels" in err, err
    assert not out.exists()
    flags += ["--unlabeled_pixels", "ignore", "--class_names", str(tmp_path / "names.txt")]
    assert _run(tmp_path / "img", out, *flags) == 0
    assert stored_masks(out)["a"][1][2, 2] == 255


# --- CVAT "Segmentation mask 1.1": VOC layout with labelmap.txt ---------------------------------

LABELMAP = """# label:color_rgb:parts:actions
background:0,0,0::
road:128,64,128::
car:0,0,142:wheel:
"""


def test_cvat_segmentation_mask_export_reads_its_labelmap(tmp_path):
    """RGB class PNGs in SegmentationClass/, the colours named by labelmap.txt."""
    root = tmp_path / "export"
    _images(root / "JPEGImages", "a.jpg", "b.jpg")
    (root / "SegmentationClass").mkdir(parents=True)
    (root / "SegmentationObject").mkdir()
    (root / "ImageSets" / "Segmentation").mkdir(parents=True)
    (root / "ImageSets" / "Segmentation" / "default.txt").write_text("a\nb\n")
    (root / "labelmap.txt").write_text(LABELMAP)
    expected = {}
    for n, key in enumerate("ab"):
        ids = np.zeros((H, W), np.uint8)
        ids[5:20, 5 + n : 40] = 1
        ids[25:35, 10:30] = 2
        colours = np.array([[0, 0, 0], [128, 64, 128], [0, 0, 142]], np.uint8)[ids]
        Image.fromarray(colours).save(root / "SegmentationClass" / f"{key}.png")
        Image.fromarray(colours).save(root / "SegmentationObject" / f"{key}.png")
        expected[key] = ids
    out = tmp_path / "out"
    labelmap = str(root / "labelmap.txt")
    flags = ["--mask_dir", str(root / "SegmentationClass"), "--colormap", labelmap]
    assert _run(root / "JPEGImages", out, *flags) == 0
    stored = stored_masks(out)
    assert sorted(stored) == ["a", "b"]
    for key, ids in expected.items():
        np.testing.assert_array_equal(stored[key][1], ids)
    assert metadata(out)["classes"]["names"] == ["background", "road", "car"]


def test_a_broken_labelmap_line_is_one_line_error_naming_it(tmp_path, capsys):
    _images(tmp_path / "img", "a.jpg")
    (tmp_path / "masks").mkdir()
    broken = LABELMAP.splitlines()[0] + "\nbackground:0,0,0::\nroad\n"
    (tmp_path / "labelmap.txt").write_text(broken)
    out = tmp_path / "out"
    flags = ["--mask_dir", str(tmp_path / "masks"), "--colormap", str(tmp_path / "labelmap.txt")]
    assert _run(tmp_path / "img", out, *flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 3" in err and "name:r,g,b" in err, err


# --- Label Studio: a file name that matches two images ------------------------------------------


def _polygon_task(task_id: int, image: str, label: str) -> dict:
    points = [[x / W * 100, y / H * 100] for x, y in zip(SQUARE[0::2], SQUARE[1::2], strict=True)]
    result = {
        "original_width": W,
        "original_height": H,
        "from_name": "tag",
        "to_name": "image",
        "type": "polygonlabels",
        "value": {"points": points, "polygonlabels": [label]},
    }
    return {"id": task_id, "data": {"image": image}, "annotations": [{"result": [result]}]}


def _label_studio_export(path: Path) -> None:
    tasks = [
        _polygon_task(1, "/data/upload/3/1a2b3c4d-dup.jpg", "cat"),  # sub1/ and sub2/ hold one
        _polygon_task(2, "/data/local-files/?d=photos/sub1/only.jpg", "dog"),  # sub1/only.jpg
        _polygon_task(3, "/data/upload/3/0badcafe-deep.jpg", "cat"),  # sub2/deeper/deep.jpg
    ]
    path.write_text(json.dumps(tasks))


def test_label_studio_name_matching_two_images_is_a_reject_naming_both(tmp_path):
    images = tmp_path / "img"
    _images(images, "sub1/dup.jpg", "sub2/dup.jpg", "sub1/only.jpg", "sub2/deeper/deep.jpg")
    _label_studio_export(tmp_path / "export.json")
    out = tmp_path / "out"
    assert _run(images, out, "--annotations", str(tmp_path / "export.json")) == 0
    stored = stored_masks(out)
    assert sorted(stored) == ["sub1/only", "sub2/deeper/deep"]
    assert stored["sub1/only"][1][20, 20] == 2 and stored["sub2/deeper/deep"][1][20, 20] == 1
    got = rejects(out)
    assert sorted(got) == ["sub1/dup", "sub2/dup"]
    detail = got["sub1/dup"]["detail"]
    assert got["sub1/dup"]["reason"] == "mask_unreadable", got
    assert "sub1/dup.jpg" in detail and "sub2/dup.jpg" in detail, detail
    assert got["sub2/dup"]["reason"] == "missing_mask"
