"""CVAT, Label Studio and labelme exports read from gs:// as COCO is, against the loopback
Cloud Storage server: images and export in the bucket, the same masks as from local disk."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.class_outputs import metadata, rejects, stored_masks
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture
from tests.test_shipped_exports import SQUARE, H, W, _images, _polygon_task, _run

CVAT = f"""<?xml version="1.0" encoding="utf-8"?>
<annotations>
  <version>1.1</version>
  <meta><task><labels><label><name>road</name></label><label><name>car</name></label>
  </labels></task></meta>
  <image id="0" name="a.jpg" width="{W}" height="{H}">
    <polygon label="car" points="10,10;30,10;30,30;10,30" z_order="0"/>
  </image>
  <image id="1" name="sub/b.jpg" width="{W}" height="{H}"></image>
  <image id="2" name="gone.jpg" width="{W}" height="{H}"></image>
</annotations>
"""


def _labelme(image_path: str) -> str:
    points = [[x, y] for x, y in zip(SQUARE[0::2], SQUARE[1::2], strict=True)]
    shape = {"label": "car", "points": points, "shape_type": "polygon", "flags": {}}
    return json.dumps(
        {"shapes": [shape], "imagePath": image_path, "imageHeight": H, "imageWidth": W}
    )


def _exports(root) -> dict[str, tuple[str, str]]:
    """format -> (object name of the export, --annotation_format), all uploaded by the test."""
    (root / "cvat.xml").write_text(CVAT)
    tasks = [
        _polygon_task(1, "/data/upload/3/1a2b3c4d-a.jpg", "car"),
        _polygon_task(2, "/data/local-files/?d=photos/sub/b.jpg", "road"),
        _polygon_task(3, "s3://bucket/gone.jpg", "car"),
    ]
    (root / "export.json").write_text(json.dumps(tasks))
    return {"cvat": "cvat.xml", "labelstudio": "export.json"}


@pytest.mark.parametrize("tool", ["cvat", "labelstudio", "labelme"])
def test_tool_exports_are_read_from_a_bucket(gcs, tmp_path, tool):  # noqa: F811
    local = tmp_path / "local"
    _images(local / "img", "a.jpg", "sub/b.jpg")
    prefix = f"{tool}/"
    if tool == "labelme":  # the JSON files beside their images, as labelme saves them
        (local / "img" / "a.json").write_text(_labelme("a.jpg"))
        (local / "img" / "sub" / "b.json").write_text(_labelme("b.jpg"))
        (local / "img" / "gone.json").write_text(_labelme("gone.jpg"))
        export = gcs.url(f"{prefix}img")
    else:
        name = _exports(local)[tool]
        gcs.put(f"{prefix}{name}", (local / name).read_bytes())
        export = gcs.url(f"{prefix}{name}")
    assert gcs.upload_tree(local / "img", f"{prefix}img")
    out = tmp_path / "out"
    flags = ["--annotations", export, "--annotation_format", tool]
    assert _run(gcs.url(f"{prefix}img"), out, *flags) == 0
    stored = stored_masks(out)
    assert sorted(stored) == ["a", "sub/b"]
    car = metadata(out)["classes"]["names"].index("car")
    assert stored["a"][1][20, 20] == car and stored["a"][1][2, 2] == 0
    assert metadata(out)["classes"]["coco"]["format"] == tool
    assert rejects(out)["gone"]["reason"] == "missing_image"
    if tool == "labelstudio":  # found under sub/ by its path with the leading folder dropped
        assert stored["sub/b"][1][20, 20] == metadata(out)["classes"]["names"].index("road")
    elif tool == "labelme":
        assert stored["sub/b"][1][20, 20] == car
    else:
        assert not np.any(stored["sub/b"][1])


def test_a_missing_export_in_a_bucket_is_one_line_error(gcs, tmp_path, capsys):  # noqa: F811
    _images(tmp_path / "img", "a.jpg")
    assert gcs.upload_tree(tmp_path / "img", "missing/img")
    flags = ["--annotations", gcs.url("missing/none.xml"), "--annotation_format", "cvat"]
    assert _run(gcs.url("missing/img"), tmp_path / "out", *flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err, err


def test_records_of_one_key_that_names_no_image_are_one_reject_from_a_bucket(gcs, tmp_path):  # noqa: F811
    """The job keys a bucket's records itself: two records of one such key were two rejects
    of one key there too (AccountingError)."""
    _images(tmp_path / "img", "a.jpg")
    unnamed = f'<image id="3" name="" width="{W}" height="{H}"></image>'
    notes = f'<image id="4" name="notes.txt" width="{W}" height="{H}"></image>'
    cvat = CVAT.replace("</annotations>", f"{unnamed * 2}{notes * 2}</annotations>")
    gcs.put("dup/cvat.xml", cvat.encode())
    assert gcs.upload_tree(tmp_path / "img", "dup/img")
    export = gcs.url("dup/cvat.xml")
    flags = ["--annotations", export, "--annotation_format", "cvat", "--max_reject_fraction", "1"]
    out = tmp_path / "out"
    assert _run(gcs.url("dup/img"), out, *flags) == 0
    reasons = {key: entry["reason"] for key, entry in rejects(out).items()}
    assert reasons[f"{export}#"] == reasons[f"{export}#notes.txt"] == "duplicate_key"


def test_a_file_named_like_a_records_key_beside_the_export_in_a_bucket_is_one_reject(gcs, tmp_path):  # noqa: F811
    """The job lists a bucket's files itself: an object `img/cvat.xml#notes.txt` beside the
    export `img/cvat.xml` had the key of the record `notes.txt` (AccountingError)."""
    _images(tmp_path / "img", "a.jpg")
    notes = f'<image id="4" name="notes.txt" width="{W}" height="{H}"></image>'
    (tmp_path / "img" / "cvat.xml").write_text(
        CVAT.replace("</annotations>", f"{notes}</annotations>")
    )
    (tmp_path / "img" / "cvat.xml#notes.txt").write_text("named like the record's key")
    (tmp_path / "img" / "cvat.xml#alone.txt").write_text("named so, no record of its key")
    assert gcs.upload_tree(tmp_path / "img", "beside/img")
    export = gcs.url("beside/img/cvat.xml")
    flags = ["--annotations", export, "--annotation_format", "cvat", "--max_reject_fraction", "1"]
    out = tmp_path / "out"
    assert _run(gcs.url("beside/img"), out, *flags) == 0
    found = rejects(out)
    assert found[f"{export}#notes.txt"]["reason"] == "duplicate_key"
    assert found[f"{export}#notes.txt"]["detail"].endswith(
        "cvat.xml#notes.txt, cvat.xml image 3 (notes.txt)"
    )
    assert found[f"{export}#alone.txt"]["reason"] == "unrecognized_file"
