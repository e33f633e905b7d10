"""Hostile COCO files and class flags through the real CLI, with memory capped and a timeout:
each is a one-line usage error (exit 2) or a reject with its reason, never a blow-up."""

from __future__ import annotations

import json
import os
import resource
import subprocess
from pathlib import Path

import pytest

from tests.helpers.images import rgb_jpeg
from tests.helpers.process_tree import SEGPREP

# Address space for the whole launcher: Beam and numpy load in well under this, while the
# unbounded paths measured before the caps took 1 GB (depth 20,000) to 23 GB.
ADDRESS_SPACE = 6 << 30
TIMEOUT = 300  # a guard against a hang, not a speed check
H, W = 40, 50


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _prepare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SEGPREP, "prepare", *args, "--runner", "FnApiRunner", "--writer_processes", "1"],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=TIMEOUT,
        preexec_fn=_capped,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


def _images(folder: Path, count: int = 2) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(count):
        (folder / f"{index}.jpg").write_bytes(rgb_jpeg(H, W, seed=index))
        records.append({"id": index, "file_name": f"{index}.jpg", "height": H, "width": W})
    return records


def _square(image_id: int, number: int = 0) -> dict:
    return {
        "id": 1000 + image_id * 10 + number,
        "image_id": image_id,
        "category_id": 1,
        "iscrowd": 0,
        "segmentation": [[5, 5, 30, 5, 30, 30, 5, 30]],
    }


def _coco_run(tmp_path: Path, text: bytes | str, *extra: str) -> subprocess.CompletedProcess:
    annotations = tmp_path / "coco.json"
    if isinstance(text, str):
        text = text.encode()
    annotations.write_bytes(text)
    return _prepare(
        "--image_dir",
        str(tmp_path / "images"),
        "--coco_annotations",
        str(annotations),
        "--output_dir",
        str(tmp_path / "out"),
        "--mask_type",
        "classes",
        "--max_reject_fraction",
        "1",
        *extra,
    )


def _usage_error(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err
    return err


def test_deeply_nested_coco_is_refused_before_parsing(tmp_path):
    """60,000 brackets in `info` (123 KB) took ijson 23.7 GB; now a one-line usage error."""
    images = _images(tmp_path / "images")
    nested = "[" * 60_000 + "]" * 60_000
    text = (
        '{"info": ' + nested + ', "images": ' + json.dumps(images) + ', "annotations": [], '
        '"categories": [{"id": 1, "name": "thing"}]}'
    )
    _usage_error(_coco_run(tmp_path, text), "--coco_annotations", "nested deeper than")
    assert not (tmp_path / "out").exists()


def test_bad_utf8_in_coco_is_one_clean_line(tmp_path):
    images = _images(tmp_path / "images")
    images[0]["file_name"] = "caf\udcff.jpg"  # becomes a lone 0xff byte below
    text = json.dumps({"images": images, "annotations": [], "categories": [{"id": 1, "name": "a"}]})
    raw = text.replace("\\udcff", "\udcff").encode("utf-8", "surrogateescape")
    assert b"\xff" in raw
    err = _usage_error(_coco_run(tmp_path, raw), "not UTF-8")
    assert "\\xff" not in err and "b'" not in err  # no raw bytes in the message


def test_a_huge_polygon_and_a_huge_rle_are_rejects_and_the_run_finishes(tmp_path):
    """A polygon of 10^7 identical points (no outline length at all) and an RLE string of
    5x10^7 characters stalled the job's text reader; now each is a mask_too_large reject."""
    images = _images(tmp_path / "images", 3)
    huge_polygon = {**_square(1), "segmentation": [[7.0, 7.0] * 10_000_000]}
    huge_rle = {**_square(2), "segmentation": {"size": [H, W], "counts": "0" * 50_000_000}}
    annotations = [_square(0), huge_polygon, huge_rle]
    text = json.dumps(
        {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "a"}]}
    )
    done = _coco_run(tmp_path, text)
    assert done.returncode == 0, done.stderr
    rejects = {
        entry["key"]: entry
        for entry in map(json.loads, (tmp_path / "out/rejects.jsonl").read_text().splitlines())
    }
    assert {key: entry["reason"] for key, entry in rejects.items()} == {
        "1": "mask_too_large",
        "2": "mask_too_large",
    }
    assert "10,000,000 points" in rejects["1"]["detail"]
    assert "50,000,000 counts" in rejects["2"]["detail"]
    metadata = json.loads((tmp_path / "out/metadata.json").read_text())
    assert sum(split["num_examples"] for split in metadata["splits"].values()) == 1


def test_too_many_points_in_one_image_is_a_reject(tmp_path):
    """Many polygons each under the per-polygon cap still add up per image."""
    images = _images(tmp_path / "images", 2)
    polygon = [5.0, 5.0, 30.0, 5.0, 30.0, 30.0] * 30_000  # 90,000 points
    many = [
        {**_square(1, number), "segmentation": [polygon]} for number in range(12)
    ]  # 1,080,000 points in image 1
    text = json.dumps(
        {
            "images": images,
            "annotations": [_square(0), *many],
            "categories": [{"id": 1, "name": "a"}],
        }
    )
    done = _coco_run(tmp_path, text)
    assert done.returncode == 0, done.stderr
    (line,) = (tmp_path / "out/rejects.jsonl").read_text().splitlines()
    reject = json.loads(line)
    assert (reject["key"], reject["reason"]) == ("1", "mask_too_large")
    assert "1,080,000 points" in reject["detail"]


def test_seventy_thousand_categories_name_the_categories_not_num_classes(tmp_path):
    images = _images(tmp_path / "images")
    categories = [{"id": n, "name": f"c{n}"} for n in range(1, 70_001)]
    text = json.dumps({"images": images, "annotations": [], "categories": categories})
    err = _usage_error(_coco_run(tmp_path, text, "--dry_run"), "categories", "65,535 classes")
    assert "--num_classes" not in err


def test_sixty_five_thousand_category_names_are_checked_in_bounded_time(tmp_path):
    """The duplicate-name check was quadratic (27 s); the timeout guards a regression."""
    images = _images(tmp_path / "images")
    categories = [{"id": n, "name": f"c{n}"} for n in range(1, 65_001)]
    text = json.dumps({"images": images, "annotations": [], "categories": categories})
    done = _coco_run(tmp_path, text, "--dry_run", "--ignore_index", "65535")
    assert done.returncode == 0, done.stderr
    assert '"num_classes": 65001' in done.stdout


@pytest.mark.parametrize("count", [65_000])
def test_sixty_five_thousand_class_names_complete(tmp_path, count):
    data = tmp_path / "data"
    data.mkdir()
    (data / "0.jpg").write_bytes(rgb_jpeg(H, W))
    (data / "0_mask.mat").write_bytes(b"")  # planning only: never decoded in a dry run
    names = tmp_path / "names.txt"
    names.write_text("\n".join(f"class {n}" for n in range(count)))
    done = _prepare(
        "--data_dir",
        str(data),
        "--output_dir",
        str(tmp_path / "out"),
        "--mask_type",
        "classes",
        "--class_names",
        str(names),
        "--ignore_index",
        "65535",
        "--dry_run",
    )
    assert done.returncode == 0, done.stderr
    assert f'"num_classes": {count}' in done.stdout


@pytest.mark.parametrize(
    "flag, text",
    [
        ("--class_names", "[" * 100_000 + "]" * 100_000),
        ("--colormap", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ],
)
def test_deeply_nested_class_flags_are_usage_errors(tmp_path, flag, text):
    data = tmp_path / "data"
    data.mkdir()
    (data / "0.jpg").write_bytes(rgb_jpeg(H, W))
    (data / "0_mask.mat").write_bytes(b"")
    path = tmp_path / "flag.json"
    path.write_text(text)
    done = _prepare(
        "--data_dir",
        str(data),
        "--output_dir",
        str(tmp_path / "out"),
        "--mask_type",
        "classes",
        flag,
        str(path),
        "--dry_run",
    )
    err = _usage_error(done, flag, "nested deeper than")
    assert "RecursionError" not in err
