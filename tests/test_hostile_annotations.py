"""Hostile CVAT, Label Studio, labelme and COCO files through the real CLI, with the
launcher's address space capped and a timeout as a guard against a hang (never a speed
check): every case ends as its entry's reject with a reason, or, when the file as a whole
cannot be read, as a one-line usage error (exit 2). Never a traceback, a hang or an
allocation the file's few bytes merely asked for.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import resource
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.helpers.images import rgb_jpeg
from tests.helpers.process_tree import SEGPREP

ADDRESS_SPACE = 6 << 30  # Beam and numpy load in well under this; the blow-ups asked for more
TIMEOUT = 600  # a guard against a hang, not a speed check
H, W = 40, 50
LONG_STRING = 65 << 20  # one JSON string over InputLimits.json_string_bytes (64 MB)
LONG_XML = 33 << 20  # one XML attribute over InputLimits.xml_token_bytes (32 MB)
DIGITS = "9" * 5000  # past Python's 4300-digit int conversion limit


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _prepare(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    argv = ["prepare", "--image_dir", str(tmp_path / "images"), "--output_dir"]
    return subprocess.run(
        [*SEGPREP, *argv, str(tmp_path / "out"), "--mask_type", "classes", *flags]
        + ["--max_reject_fraction", "1", "--runner", "FnApiRunner", "--writer_processes", "1"],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=TIMEOUT,
        preexec_fn=_capped,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


def _images(tmp_path: Path, *names: str) -> None:
    folder = tmp_path / "images"
    folder.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names):
        (folder / name).write_bytes(rgb_jpeg(H, W, seed=index))


def _usage_error(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "int_max_str_digits" not in err
    for word in words:
        assert word in err, err
    return err


def _rejects(tmp_path: Path, done: subprocess.CompletedProcess) -> dict[str, dict]:
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out/rejects.jsonl").read_text()
    assert "int_max_str_digits" not in text and "Traceback" not in done.stderr
    return {entry["key"]: entry for entry in map(json.loads, text.splitlines())}


def _stored(tmp_path: Path) -> int:
    metadata = json.loads((tmp_path / "out/metadata.json").read_text())
    return sum(split["num_examples"] for split in metadata["splits"].values())


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


# --- not regular files -------------------------------------------------------------------------


def test_a_fifo_as_annotations_is_refused_before_detection_opens_it(tmp_path):
    _images(tmp_path, "a.jpg")
    fifo = _fifo(tmp_path / "export.json")
    done = _prepare(tmp_path, "--annotations", str(fifo))
    _usage_error(done, "--annotations", "not a regular file")


@pytest.mark.parametrize("flags", [["--annotation_format", "cvat"], ["--coco_annotations"]])
def test_a_fifo_with_its_format_says_it_is_not_a_regular_file(tmp_path, flags):
    _images(tmp_path, "a.jpg")
    fifo = str(_fifo(tmp_path / "export.json"))
    given = [*flags, fifo] if flags == ["--coco_annotations"] else ["--annotations", fifo, *flags]
    err = _usage_error(_prepare(tmp_path, *given), "not a regular file")
    assert "no such file" not in err


# --- tokens too long for a parser --------------------------------------------------------------


def _coco(images: list[str], extra: str = "") -> str:
    records = [{"id": i, "file_name": n, "height": H, "width": W} for i, n in enumerate(images)]
    return (
        '{"info": {"note": "' + extra + '"}, "images": ' + json.dumps(records)
        + ', "annotations": [], "categories": [{"id": 1, "name": "thing"}]}'
    )  # fmt: skip


def test_an_absolute_file_name_is_its_own_reject_beside_a_file_of_that_path(tmp_path):
    """A record naming the image folder's extension-less file `zz` by its absolute path
    (`.../images/zz.jpg`) got the key `.../images/zz`, the key of that file's own
    unrecognized_file reject: two rejects of one key failed the whole run."""
    _images(tmp_path, "a.jpg", "zz")
    absolute = str(tmp_path / "images" / "zz.jpg")
    export = tmp_path / "coco.json"
    export.write_text(_coco(["a.jpg", absolute]))
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(export)))
    assert rejects[f"{export}#{absolute}"]["reason"] == "bad_file_name"
    assert rejects[str(tmp_path / "images" / "zz")]["reason"] == "unrecognized_file"


def test_a_coco_file_name_listed_twice_is_one_duplicate_key_reject(tmp_path):
    """Two image entries of one file_name ended the run (exit 2, "is listed twice"), where
    two CVAT <image>, two Label Studio tasks or two labelme files of one image are one
    duplicate_key reject and every other image is published; a doubled id still ends it."""
    _images(tmp_path, "a.jpg", "b.jpg", "c.jpg")
    export = tmp_path / "coco.json"
    export.write_text(_coco(["a.jpg", "b.jpg", "c.jpg", "a.jpg"]))
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(export)))
    assert {key: entry["reason"] for key, entry in rejects.items()} == {"a": "duplicate_key"}
    assert "coco.json image 0 (a.jpg), coco.json image 3 (a.jpg)" in rejects["a"]["detail"]
    assert _stored(tmp_path) == 2

    doubled_id = json.loads(_coco(["a.jpg", "b.jpg"]))
    doubled_id["images"][1]["id"] = 0
    export.write_text(json.dumps(doubled_id))
    done = _prepare(tmp_path, "--annotations", str(export), "--overwrite")
    _usage_error(done, "coco.json", "image id 0 is listed twice")


def test_a_coco_string_over_the_token_cap_is_one_line(tmp_path):
    """A 64 MB string took ijson 107 s; over the cap it is refused before ijson reads it."""
    _images(tmp_path, "a.jpg")
    (tmp_path / "coco.json").write_text(_coco(["a.jpg"], "x" * LONG_STRING))
    done = _prepare(tmp_path, "--coco_annotations", str(tmp_path / "coco.json"))
    _usage_error(done, "coco.json", "a string of more than 67,108,864 bytes")


def test_a_5000_digit_coco_number_is_one_line_without_pythons_hint(tmp_path):
    _images(tmp_path, "a.jpg")
    text = _coco(["a.jpg"]).replace('"height": 40', '"height": ' + DIGITS)
    (tmp_path / "coco.json").write_text(text)
    done = _prepare(tmp_path, "--coco_annotations", str(tmp_path / "coco.json"))
    _usage_error(done, "coco.json", "a number or literal of more than 100 characters")


def test_a_label_studio_string_over_the_token_cap_is_one_line(tmp_path):
    _images(tmp_path, "a.jpg")
    tasks = [{"id": 1, "data": {"image": "a.jpg", "note": "x" * LONG_STRING}, "annotations": []}]
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    done = _prepare(tmp_path, "--annotations", str(tmp_path / "tasks.json"))
    _usage_error(done, "tasks.json", "a string of more than 67,108,864 bytes")


def test_a_cvat_attribute_over_the_token_cap_is_one_line(tmp_path):
    """An 8 MB attribute took expat 7 s (quadratic); 33 MB is refused before expat sees it."""
    _images(tmp_path, "a.jpg")
    note = "x" * LONG_XML
    xml = _cvat([f'<image id="0" name="a.jpg" width="{W}" height="{H}" note="{note}"/>'])
    (tmp_path / "cvat.xml").write_text(xml)
    done = _prepare(tmp_path, "--annotations", str(tmp_path / "cvat.xml"))
    _usage_error(done, "cvat.xml", "more than 33,554,432 bytes")


# --- CVAT --------------------------------------------------------------------------------------


def _cvat(images: list[str], labels: tuple[str, ...] = ("cat",)) -> str:
    meta = "".join(f"<label><name>{name}</name></label>" for name in labels)
    meta = f"<meta><task><labels>{meta}</labels></task></meta>" if labels else ""
    body = f"<version>1.1</version>{meta}{''.join(images)}"
    return f'<?xml version="1.0"?><annotations>{body}</annotations>'


def _cvat_image(name: str, inner: str, height: int | str = H, width: int | str = W) -> str:
    return f'<image id="0" name="{name}" width="{width}" height="{height}">{inner}</image>'


def test_cvat_hostile_images_are_each_their_own_reject(tmp_path):
    _images(tmp_path, "ok.jpg", "box.jpg", "huge.jpg", "negative.jpg", "digits.jpg")
    square = '<polygon label="cat" points="5,5;30,5;30,30;5,30" z_order="0"/>'
    box = '<mask label="cat" rle="3000000000" left="0" top="0" width="60000" height="50000"/>'
    images = [
        _cvat_image("ok.jpg", square),
        # a few hundred bytes that asked for 60000x50000 pixels (MemoryError, or 6 GB)
        _cvat_image("box.jpg", box, 60000, 50000),
        # a stated size of 10^9 x 10^9 asked numpy for 888 PiB
        _cvat_image("huge.jpg", box.replace("60000", "2"), 10**9, 10**9),
        _cvat_image("negative.jpg", '<mask label="cat" rle="-10,50" left="0" top="0" '
                    'width="5" height="8"/>'),
        _cvat_image("digits.jpg", square.replace('z_order="0"', f'z_order="{DIGITS}"')),
    ]  # fmt: skip
    (tmp_path / "cvat.xml").write_text(_cvat(images))
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(tmp_path / "cvat.xml")))
    reasons = {key: entry["reason"] for key, entry in rejects.items()}
    assert reasons == {
        "box": "mask_too_large",
        "huge": "mask_too_large",
        "negative": "mask_unreadable",
        "digits": "mask_unreadable",
    }
    assert "40,000,000" in rejects["box"]["detail"]
    assert "negative run" in rejects["negative"]["detail"]
    assert _stored(tmp_path) == 1


def test_cvat_without_meta_labels_says_what_the_file_lacks(tmp_path):
    """It said `--num_classes must be an integer from 2 to 65535, got 1`, a flag never given."""
    _images(tmp_path, "a.jpg")
    (tmp_path / "cvat.xml").write_text(_cvat([_cvat_image("a.jpg", "")], labels=()))
    err = _usage_error(_prepare(tmp_path, "--annotations", str(tmp_path / "cvat.xml")), "<meta>")
    assert "--num_classes" not in err


def test_cvat_nested_deeper_than_the_format_is_one_line(tmp_path):
    _images(tmp_path, "a.jpg")
    nested = "<a>" * 100_000 + "</a>" * 100_000
    (tmp_path / "cvat.xml").write_text(_cvat([_cvat_image("a.jpg", nested)]))
    done = _prepare(tmp_path, "--annotations", str(tmp_path / "cvat.xml"))
    _usage_error(done, "cvat.xml", "nested deeper than 32 levels")


def test_cvat_declaring_an_unknown_encoding_is_one_line(tmp_path):
    """It ended `failed: LookupError` (exit 1), not the usage error of other malformed XML."""
    _images(tmp_path, "a.jpg")
    text = _cvat([_cvat_image("a.jpg", "")]).replace(
        'version="1.0"', 'version="1.0" encoding="x-nonexistent"'
    )
    (tmp_path / "cvat.xml").write_text(text)
    done = _prepare(tmp_path, "--annotations", str(tmp_path / "cvat.xml"))
    _usage_error(done, "cvat.xml", "not valid XML", "x-nonexistent")


@pytest.mark.parametrize("encoding", ["shift_jis", "idna"])
def test_cvat_declaring_an_encoding_the_parser_cannot_read_is_one_line_naming_it(
    tmp_path, encoding
):
    """pyexpat reads only single-byte declared encodings: its ValueError ("multi-byte
    encodings are not supported", or the codec's own) was the whole line, naming no file."""
    _images(tmp_path, "a.jpg")
    text = _cvat([_cvat_image("a.jpg", "")], labels=("猫",)).replace(
        'version="1.0"', f'version="1.0" encoding="{encoding}"'
    )
    (tmp_path / "cvat.xml").write_bytes(text.encode("shift_jis"))
    done = _prepare(tmp_path, "--annotations", str(tmp_path / "cvat.xml"))
    _usage_error(done, "cvat.xml", "not valid XML", "declared encoding", "UTF-8")


# --- Label Studio ------------------------------------------------------------------------------


def _brush_header(height: int, width: int) -> list[int]:
    """A brush stream's header (value count, word size, run sizes) and one repeat run."""
    bits = f"{height * width * 4:032b}" + f"{7:05b}" + f"{15:04b}" * 4 + "1" + "11" + "0" * 24
    bits += "0" * (-len(bits) % 8)
    return [int(bits[k : k + 8], 2) for k in range(0, len(bits), 8)]


def _task(image: str, results: list) -> dict:
    return {"id": image, "data": {"image": image}, "annotations": [{"result": results}]}


def _polygon_result(width: object = W, height: object = H) -> dict:
    points = [[10, 10], [60, 10], [60, 60]]
    return {
        "type": "polygonlabels",
        "original_width": width,
        "original_height": height,
        "value": {"points": points, "polygonlabels": ["cat"]},
    }


def test_label_studio_hostile_tasks_are_each_their_own_reject(tmp_path):
    _images(tmp_path, "ok.jpg", "brush.jpg", "long.jpg", "many.jpg", "digits.jpg")
    side = 16384  # a brush for 16384^2 took 1.7 GB before its runs were read
    brush = {
        "type": "brushlabels",
        "original_width": side,
        "original_height": side,
        "value": {"format": "rle", "rle": _brush_header(side, side), "brushlabels": ["cat"]},
    }
    # a brush stream of 1.1 MB of one-value runs: decoded run by run in Python
    long_brush = {**brush, "original_width": W, "original_height": H}
    long_brush["value"] = {**brush["value"], "rle": _brush_header(H, W) + [0] * 1_100_000}
    tasks = [
        _task("ok.jpg", [_polygon_result()]),
        _task("brush.jpg", [brush]),
        _task("long.jpg", [long_brush]),
        _task("many.jpg", [{"type": "choices"}] * 1_000_000),  # took 2.0 GB
        _task("digits.jpg", [_polygon_result(DIGITS)]),
    ]
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(tmp_path / "tasks.json")))
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        "brush": "mask_too_large",
        "long": "mask_too_large",
        "many": "mask_too_large",
        "digits": "mask_unreadable",
    }
    assert "2,500,000 JSON values" in rejects["many"]["detail"]
    assert "1,048,576 one brush may have" in rejects["long"]["detail"]
    assert _stored(tmp_path) == 1


def test_label_studio_tasks_with_odd_annotations_or_an_unparsable_url_are_their_rejects(tmp_path):
    """`"annotations": 5` crashed the run with a TypeError; an image URL urllib cannot parse
    (`http://[bad/url.jpg`, an invalid IPv6 host) ended it with `error: Invalid IPv6 URL`,
    naming neither the file nor the task."""
    _images(tmp_path, "ok.jpg", "five.jpg", "url.jpg")
    tasks = [
        _task("ok.jpg", [_polygon_result()]),
        {"id": 7, "data": {"image": "five.jpg"}, "annotations": 5},
        _task("http://[bad/url.jpg", [_polygon_result()]),
    ]
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(tmp_path / "tasks.json")))
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        "five": "mask_unreadable",
        "url": "mask_unreadable",
    }
    assert "task 7: annotations is not a list" in rejects["five"]["detail"]
    assert "http://[bad/url.jpg" in rejects["url"]["detail"], rejects["url"]
    assert "Invalid IPv6 URL" in rejects["url"]["detail"]
    assert _stored(tmp_path) == 1


def test_label_studio_annotations_or_results_that_are_not_objects_or_lists_are_rejects(tmp_path):
    """An annotation that is no JSON object was dropped uncounted: `[5]` left the task an
    image without shapes (stored as all background), `["x", {...}]` used the next one; a
    falsy `"annotations": {}` or `"result": ""` was read as an empty list."""
    names = ("ok", "number", "mixed", "empty", "result")
    _images(tmp_path, *(f"{name}.jpg" for name in names))
    tasks = [
        _task("ok.jpg", [_polygon_result()]),
        {"id": 2, "data": {"image": "number.jpg"}, "annotations": [5]},
        {"id": 3, "data": {"image": "mixed.jpg"}, "annotations": ["x", {"result": []}]},
        {"id": 4, "data": {"image": "empty.jpg"}, "annotations": {}},
        {"id": 5, "data": {"image": "result.jpg"}, "annotations": [{"result": ""}]},
    ]
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(tmp_path / "tasks.json")))
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        "number": "mask_unreadable",
        "mixed": "mask_unreadable",
        "empty": "mask_unreadable",
        "result": "mask_unreadable",
    }
    assert "task 2: annotation 0 is not an object but int" in rejects["number"]["detail"]
    assert "task 3: annotation 0 is not an object but str" in rejects["mixed"]["detail"]
    assert "task 4: annotations is not a list but dict" in rejects["empty"]["detail"]
    assert "result must be a list" in rejects["result"]["detail"], rejects["result"]
    assert _stored(tmp_path) == 1


# --- labelme -----------------------------------------------------------------------------------


def _png(array: np.ndarray, keep: float = 1.0) -> str:
    """A base64 PNG of `array`, cut to `keep` of its bytes."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    raw = buffer.getvalue()
    return base64.b64encode(raw[: int(len(raw) * keep)]).decode()


def _bomb_png(side: int) -> str:
    """A 1-bit PNG of side x side zeros: a few KB that decode to side^2 bytes."""
    buffer = io.BytesIO()
    Image.new("1", (side, side)).save(buffer, format="PNG", optimize=True)
    return base64.b64encode(buffer.getvalue()).decode()


def _labelme(name: str, shapes: object, height: object = H, width: object = W, **more) -> str:
    fields = {
        "imagePath": f"../images/{name}",
        "imageHeight": height,
        "imageWidth": width,
        "shapes": shapes,
    }
    return json.dumps({**more, **fields})


def _mask_shape(data: str) -> dict:
    return {"label": "cat", "shape_type": "mask", "points": [[0, 0], [9, 9]], "mask": data}


def test_labelme_hostile_files_are_each_their_own_reject(tmp_path):
    names = ["ok", "fifo", "deep", "wide", "declared", "bomb", "truncated", "odd", "data"]
    _images(tmp_path, *(f"{name}.jpg" for name in names))
    folder = tmp_path / "labelme"
    folder.mkdir()
    square = {"label": "cat", "shape_type": "polygon", "points": [[5, 5], [30, 5], [30, 30]]}
    good_png = _png(np.full((10, 10), 255, np.uint8))
    truncated_png = _png(np.arange(100, dtype=np.uint8).reshape(10, 10), keep=0.6)
    files = {
        "ok": _labelme("ok.jpg", [square]),
        # 100,000 levels took 2.8 GB: no depth pre-scan
        "deep": '{"imagePath": "../images/deep.jpg", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "wide": _labelme("wide.jpg", [_mask_shape(good_png)], 40000, 40000),  # SIGSEGV
        "declared": _labelme("declared.jpg", [square], 10**6, 10**6),  # MemoryError 888 PiB
        "bomb": _labelme("bomb.jpg", [_mask_shape(_bomb_png(20000))]),  # DecompressionBombError
        "truncated": _labelme("truncated.jpg", [_mask_shape(truncated_png)]),
        "odd": _labelme("odd.jpg", [1, "x"]),  # AttributeError
        "data": _labelme("data.jpg", [square], imageData="A" * LONG_STRING),  # 60 MB took 28 s
    }
    for name, text in files.items():
        (folder / f"{name}.json").write_text(text)
    _fifo(folder / "fifo.json")  # opening it hung the run
    done = _prepare(tmp_path, "--annotations", str(folder))
    rejects = _rejects(tmp_path, done)
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        "fifo": "not_a_file",
        "deep": "mask_too_large",
        "wide": "mask_too_large",
        "declared": "mask_too_large",
        "bomb": "mask_too_large",
        "truncated": "mask_unreadable",
        "odd": "mask_unreadable",
        "data": "mask_too_large",
    }
    for name in ("fifo", "deep", "truncated", "odd", "data"):
        assert f"{name}.json" in rejects[name]["detail"], rejects[name]
    assert _stored(tmp_path) == 1


# --- shapes whose RLE segprep makes ----------------------------------------------------------

STRIPES = 4100  # 4100 one-row stripes on 4100x4100: an RLE of 16,810,000 counts, over the cap


def _stripes_brush() -> list[int]:
    """A Label Studio brush of STRIPES x STRIPES, every other row set: one run per row."""
    side = STRIPES
    bits = f"{side * side * 4:032b}" + f"{7:05b}" + f"{15:04b}" * 4
    bits += "".join(
        "1" + "00" + f"{side * 4 - 1:016b}" + f"{255 * (r % 2):08b}" for r in range(side)
    )
    bits += "0" * (-len(bits) % 8)
    return [int(bits[k : k + 8], 2) for k in range(0, len(bits), 8)]


def _stripes_export(tmp_path: Path, tool: str) -> Path:
    side = STRIPES
    if tool == "cvat":
        rle = ",".join([str(side)] * side)
        mask = f'<mask label="cat" rle="{rle}" left="0" top="0" width="{side}" height="{side}"/>'
        images = [_cvat_image("big.jpg", mask, side, side), _cvat_image("ok.jpg", "")]
        (tmp_path / "cvat.xml").write_text(_cvat(images))
        return tmp_path / "cvat.xml"
    if tool == "labelstudio":
        brush = {
            "type": "brushlabels",
            "original_width": side,
            "original_height": side,
            "value": {"format": "rle", "rle": _stripes_brush(), "brushlabels": ["cat"]},
        }
        tasks = [_task("big.jpg", [brush]), _task("ok.jpg", [_polygon_result()])]
        (tmp_path / "tasks.json").write_text(json.dumps(tasks))
        return tmp_path / "tasks.json"
    folder = tmp_path / "labelme"
    folder.mkdir()
    stripes = np.zeros((side, side), np.uint8)
    stripes[1::2] = 255
    buffer = io.BytesIO()
    Image.fromarray(stripes).convert("1").save(buffer, format="PNG", optimize=True)
    shape = _mask_shape(base64.b64encode(buffer.getvalue()).decode())
    (folder / "big.json").write_text(_labelme("big.jpg", [shape], side, side))
    square = {"label": "cat", "shape_type": "polygon", "points": [[5, 5], [30, 5], [30, 30]]}
    (folder / "ok.json").write_text(_labelme("ok.jpg", [square]))
    return folder


@pytest.mark.parametrize("tool", ["cvat", "labelstudio", "labelme"])
def test_a_mask_shape_whose_rle_segprep_makes_over_the_cap_is_its_images_reject(tmp_path, tool):
    """Horizontal stripes made an RLE of 16,810,000 counts (COCO runs go column by column)
    that the job then refused as its own staged record: the whole run failed (exit 1)."""
    _images(tmp_path, "big.jpg", "ok.jpg")
    done = _prepare(tmp_path, "--annotations", str(_stripes_export(tmp_path, tool)))
    rejects = _rejects(tmp_path, done)
    assert {key: entry["reason"] for key, entry in rejects.items()} == {"big": "mask_too_large"}
    assert "16,810,000 counts" in rejects["big"]["detail"], rejects["big"]
    assert _stored(tmp_path) == 1


def test_a_stated_full_image_mask_is_encoded_without_an_int64_per_pixel():
    """`<mask rle="0, 36000000" width="6000" height="6000">`, a few bytes, took the launcher
    1 GB per shape: an int64 run length per pixel. Measured by tracemalloc (numpy reports
    its buffers to it), on 4000x4000 to keep the test small."""
    import tracemalloc

    from pycocotools import mask as mask_utils

    from transforms.sources.labelled_shapes import rle_of_bitmap

    side = 4000
    bitmap = np.ones((side, side), dtype=bool)
    bitmap[: side // 2, side // 3 :] = False
    tracemalloc.start()
    try:
        rle = rle_of_bitmap(bitmap, 0, 0, side, side)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * side * side, f"{peak:,} bytes"  # the int64s alone took 8 a pixel
    expected = mask_utils.encode(np.asfortranarray(bitmap.astype(np.uint8)))
    assert rle["counts"] == expected["counts"].decode()


# --- records of one export that share a key that is no image's ---------------------------------


def test_export_records_sharing_a_key_that_names_no_image_are_one_duplicate_key_reject(tmp_path):
    """Two such records were two rejects of one key: AccountingError failed the whole run. And
    a record's key `EXPORT#name` was the key of a listed file named so (labelme's folder as
    the image folder, holding `#notes.txt`)."""
    _images(tmp_path, "ok.jpg")
    (tmp_path / "images" / "#notes.txt").write_text("a listed file named like a record's key")
    cvat = tmp_path / "cvat.xml"
    odd = ["", "", "notes.txt", "notes.txt", "/abs/x.jpg", "/abs/x.jpg"]
    cvat.write_text(_cvat([_cvat_image("ok.jpg", "")] + [_cvat_image(n, "") for n in odd]))
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(cvat)))
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        str(tmp_path / "images" / "#notes.txt"): "unrecognized_file",
        f"{cvat}#": "duplicate_key",
        f"{cvat}#notes.txt": "duplicate_key",
        f"{cvat}#/abs/x.jpg": "duplicate_key",
    }
    assert (
        "image 3 (notes.txt), cvat.xml image 4 (notes.txt)"
        in rejects[f"{cvat}#notes.txt"]["detail"]
    )
    assert _stored(tmp_path) == 1

    tasks = tmp_path / "tasks.json"
    no_image = {"id": 5, "data": {"text": "no image"}, "annotations": []}
    tasks.write_text(json.dumps([no_image, no_image, _task("ok.jpg", [_polygon_result()])]))
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(tasks), "--overwrite"))
    assert rejects[f"{tasks}#task-5"]["reason"] == "duplicate_key"
    assert len(rejects) == 2 and _stored(tmp_path) == 1

    # labelme files in the image folder, beside the file `#notes.txt`
    folder = tmp_path / "images"
    for name in ("a", "b"):
        (folder / f"{name}.json").write_text(_labelme("notes.txt", []).replace("../images/", ""))
    square = {"label": "cat", "shape_type": "polygon", "points": [[5, 5], [30, 5], [30, 30]]}
    (folder / "ok.json").write_text(_labelme("ok.jpg", [square]).replace("../images/", ""))
    done = _prepare(tmp_path, "--annotations", str(folder), "--overwrite")
    rejects = _rejects(tmp_path, done)
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        str(folder / "#notes.txt"): "unrecognized_file",
        f"{folder}#notes.txt": "duplicate_key",
    }
    assert _stored(tmp_path) == 1


def test_a_file_named_like_an_export_records_key_beside_the_export_is_one_reject_with_it(tmp_path):
    """A record naming no image is keyed `EXPORT#file_name`; a listed file's reject is keyed
    by its full path, so a file named `cvat.xml#notes.bmp` beside `cvat.xml` had that key
    too: two rejects of one key, AccountingError, nothing published."""
    _images(tmp_path, "ok.jpg")
    folder = tmp_path / "images"
    cvat = folder / "cvat.xml"
    Image.new("RGB", (W, H)).save(folder / "cvat.xml#notes.bmp", format="BMP")
    (folder / "cvat.xml#alone.txt").write_text("a file named so, with no record of its key")
    names = ["ok.jpg", "notes.bmp", "twice.txt", "twice.txt"]
    cvat.write_text(_cvat([_cvat_image(name, "") for name in names]))
    (folder / "cvat.xml#twice.txt").write_text("named like two records' key")
    rejects = _rejects(tmp_path, _prepare(tmp_path, "--annotations", str(cvat)))
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        f"{cvat}#notes.bmp": "duplicate_key",
        f"{cvat}#alone.txt": "unrecognized_file",
        f"{cvat}#twice.txt": "duplicate_key",
    }
    both = rejects[f"{cvat}#notes.bmp"]
    assert both["detail"].endswith("cvat.xml#notes.bmp, cvat.xml image 1 (notes.bmp)")
    assert both["image"] == f"{cvat}#notes.bmp" and both["mask"] == str(cvat)
    assert "3 files and records" in rejects[f"{cvat}#twice.txt"]["detail"]
    assert _stored(tmp_path) == 1


# --- the bounded reader itself -----------------------------------------------------------------


class _Pieces:
    """A stream that returns `data` in pieces cut at `cut`, so a token spans the edge."""

    def __init__(self, data: bytes, cut: int) -> None:
        self.pieces = [data[:cut], data[cut:]]

    def read(self, size: int = -1) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


@pytest.mark.parametrize("cut", range(1, 30))
def test_the_json_reader_measures_escaped_strings_and_numbers_across_chunk_edges(cut):
    from transforms.bounded_text import JsonReader, TextLimitError
    from transforms.limits import InputLimits

    limits = InputLimits(json_string_bytes=10, number_chars=5)
    fits = b'{"k": "a\\"b\\\\c\\"d", "n": 12345}'  # a 10-byte string, a 5-digit number
    JsonReader(_Pieces(fits, cut), "s", 4, limits).drain()
    for over, words in (
        (fits.replace(b'a\\"b', b'a\\"bb'), "a string of more than 10 bytes"),
        (fits.replace(b"12345", b"123456"), "a number or literal of more than 5"),
    ):
        with pytest.raises(TextLimitError, match=words):
            JsonReader(_Pieces(over, cut), "s", 4, limits).drain()


# --- half a UTF-16 surrogate pair in a JSON escape ---------------------------------------------


def test_half_a_surrogate_pair_in_a_labelme_file_is_its_images_reject(tmp_path):
    """yajl (ijson's C backend) raised UnicodeDecodeError on `\\udc00`, which ended the run
    with "'utf-8' codec can't decode byte 0xed", naming no file; it made `\\ud800` a "?", so
    the label "x\\ud800" became "x?", the class of another file's label."""
    _images(tmp_path, "ok.jpg", "low.jpg", "high.jpg", "pair.jpg")
    folder = tmp_path / "labelme"
    folder.mkdir()
    points = [[5, 5], [30, 5], [30, 30]]
    for name, label in (("ok", "x?"), ("low", "x\udc00"), ("high", "x\ud800"), ("pair", "x😀")):
        shapes = [{"label": label, "shape_type": "polygon", "points": points}]
        (folder / f"{name}.json").write_text(_labelme(f"{name}.jpg", shapes))  # ASCII escapes
    done = _prepare(tmp_path, "--annotations", str(folder))
    rejects = _rejects(tmp_path, done)
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        "low": "mask_unreadable",
        "high": "mask_unreadable",
    }
    low = rejects["low"]["detail"]
    assert "low.json: the escape \\udc00 is half a UTF-16 surrogate pair" in low, low
    assert "high.json: the escape \\ud800 is half" in rejects["high"]["detail"]
    metadata = json.loads((tmp_path / "out/metadata.json").read_text())
    assert sorted(metadata["classes"]["names"]) == ["background", "x?", "x😀"], metadata["classes"]
    assert _stored(tmp_path) == 2


def test_a_coco_file_name_of_half_a_surrogate_pair_is_one_line_not_a_question_mark(tmp_path):
    """`"file_name": "\\ud800.jpg"` reached segprep as "?.jpg" and took the annotations to
    the image folder's `?.jpg`, an image the file never named."""
    _images(tmp_path, "a.jpg", "?.jpg")
    export = tmp_path / "coco.json"
    export.write_text(_coco(["a.jpg", "\ud800.jpg"]))
    assert "\\ud800" in export.read_text()
    done = _prepare(tmp_path, "--coco_annotations", str(export))
    _usage_error(done, "coco.json", "the escape \\ud800 is half a UTF-16 surrogate pair")


@pytest.mark.parametrize("cut", range(1, 24))
def test_the_json_reader_finds_half_a_surrogate_pair_across_chunk_edges(cut):
    from transforms.bounded_text import JsonReader, TextLimitError

    whole = b'["\\ud83d\\ude00", "\\\\ud800", "\\\\\\\\udc00"]'  # a pair; backslash + text
    JsonReader(_Pieces(whole, cut), "s", 4).drain()
    halves = (b'["a\\ud800b"]', b'["\\ud83d\\ud83d"]', b'["\\\\\\udc00"]', b'["\\ude00\\ud83d"]')
    for half in halves:
        with pytest.raises(TextLimitError, match="half a UTF-16 surrogate pair"):
            JsonReader(_Pieces(half, cut), "s", 4).drain()


def test_a_chunk_grows_past_a_run_of_backslashes_by_a_string_limit_at_most():
    """A chunk is extended while a backslash stands in its last bytes (an escape whole in
    one chunk); a file of backslashes must not be read whole into memory for that."""
    import io

    from transforms.bounded_text import CHUNK_BYTES, JsonReader
    from transforms.limits import DEFAULT_LIMITS

    limits = dataclasses.replace(DEFAULT_LIMITS, json_string_bytes=1 << 16)
    # valid JSON, a backslash every 5 bytes: short strings of one escaped backslash each
    reader = JsonReader(io.BytesIO(b"[" + b'"\\\\",' * (2 << 20)), "s", 4, limits)
    first = reader.read(CHUNK_BYTES)
    assert CHUNK_BYTES < len(first) <= CHUNK_BYTES + (1 << 16) + 4096


# --- a UTF-8 byte order mark ------------------------------------------------------------------


BOM = b"\xef\xbb\xbf"


def test_a_utf8_byte_order_mark_before_coco_labelme_or_label_studio_json_is_skipped(tmp_path):
    """Windows tools write a BOM before JSON (RFC 8259 lets a parser ignore it). A COCO file
    with one, or a Label Studio export, ended the run "not valid JSON (lexical error: invalid
    char in json text.)"; a labelme file with one yielded no shape, so a folder of them was
    "no labels"."""
    _images(tmp_path, "a.jpg", "b.jpg")
    coco = tmp_path / "coco.json"
    coco.write_bytes(BOM + _coco(["a.jpg", "b.jpg"]).encode())
    _rejects(tmp_path, _prepare(tmp_path, "--coco_annotations", str(coco)))
    assert _stored(tmp_path) == 2

    folder = tmp_path / "labelme"
    folder.mkdir()
    shapes = [{"label": "cat", "shape_type": "polygon", "points": [[5, 5], [30, 5], [30, 30]]}]
    (folder / "a.json").write_bytes(BOM + _labelme("a.jpg", shapes).encode())
    (folder / "b.json").write_text(_labelme("b.jpg", shapes))
    done = _prepare(tmp_path, "--annotations", str(folder), "--overwrite")
    assert _rejects(tmp_path, done) == {}
    metadata = json.loads((tmp_path / "out/metadata.json").read_text())
    assert metadata["classes"]["names"] == ["background", "cat"], metadata["classes"]
    assert _stored(tmp_path) == 2

    tasks = tmp_path / "tasks.json"
    tasks.write_bytes(
        BOM + json.dumps([_task(f"{n}.jpg", [_polygon_result()]) for n in "ab"]).encode()
    )
    done = _prepare(tmp_path, "--annotations", str(tasks), "--overwrite")
    assert _rejects(tmp_path, done) == {}
    assert _stored(tmp_path) == 2

    from transforms.bounded_text import JsonReader, TextLimitError

    with pytest.raises(TextLimitError, match="byte 7:"):  # offsets stay the file's
        JsonReader(io.BytesIO(BOM + b'["ab\xff"]'), "s", 4).drain()
    with pytest.raises(TextLimitError, match="byte 4:"):  # a BOM anywhere else is no skip
        JsonReader(io.BytesIO(b'["ab\xff"]' + BOM), "s", 4).drain()


def test_coordinates_that_overflow_are_rejects_without_numpy_warnings(tmp_path):
    """Label Studio points of 1e308 percent, a rotated box of 1e308 (Label Studio or CVAT):
    the image was refused ("a non-finite coordinate"), but numpy's RuntimeWarning, "overflow
    encountered in multiply" and the source line, went to stderr as two stray lines."""
    _images(tmp_path, "ok.jpg", "box.jpg")
    (tmp_path / "images/points.jpg").write_bytes(rgb_jpeg(200, 300, seed=7))  # over 100 px
    huge_points = _polygon_result(300, 200)  # points in percent: 1e308 x 3 overflows
    huge_points["value"]["points"] = [[1e308, 1], [-1e308, 1e308], [5, 5]]
    box = {"x": 1, "y": 1, "width": 1e308, "height": 1e308, "rotation": 30}
    huge_box = {"type": "rectanglelabels", "original_width": W, "original_height": H}
    huge_box["value"] = {**box, "rectanglelabels": ["cat"]}
    tasks = [
        _task("ok.jpg", [_polygon_result()]),
        _task("points.jpg", [huge_points]),
        _task("box.jpg", [huge_box]),
    ]
    export = tmp_path / "tasks.json"
    export.write_text(json.dumps(tasks))
    done = _prepare(tmp_path, "--annotations", str(export))
    rejects = _rejects(tmp_path, done)
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        "points": "mask_unreadable",
        "box": "mask_unreadable",
    }
    assert "non-finite coordinate" in rejects["box"]["detail"], rejects["box"]
    assert "Warning" not in done.stderr, done.stderr

    rotated = '<box label="cat" xtl="-1.7e308" ytl="-1.7e308" xbr="1.7e308" ybr="1.7e308" '
    rotated += 'rotation="30"/>'
    images = [_cvat_image("ok.jpg", ""), _cvat_image("box.jpg", rotated)]
    export = tmp_path / "cvat.xml"
    export.write_text(_cvat(images))
    done = _prepare(tmp_path, "--annotations", str(export), "--overwrite")
    rejects = _rejects(tmp_path, done)
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        "box": "mask_unreadable",
        "points": "missing_mask",
    }
    assert "Warning" not in done.stderr, done.stderr
