"""Public layouts on gs://: the job lists the bucket itself (job/listing.py), so its side of
the pairing rule gets the same flags: suffixes, --ignore_files, --unlabeled_images skip,
--split_by_folder; --split_file is refused there (a listed key missing on disk is found by
the launcher's local listing)."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from beam_pipeline import cli
from tests.helpers.class_outputs import stored_masks
from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture
from tests.helpers.images import encode
from tests.helpers.runs import RUNNER_ARGS
from transforms.format.naming import METADATA_FILE, REJECTS_FILE, UNLABELED_FILE


def _upload_cityscapes(gcs, root) -> dict[str, tuple[str, np.ndarray]]:  # noqa: F811
    expected = {}
    for seed, (folder, city) in enumerate(
        [("train", "aachen"), ("train", "bremen"), ("val", "lindau")]
    ):
        stem = f"{city}_000000_000019"
        image = root / "leftImg8bit" / folder / city / f"{stem}_leftImg8bit.png"
        image.parent.mkdir(parents=True)
        pixels = np.random.default_rng(seed).integers(0, 256, (8, 16, 3), np.uint8)
        image.write_bytes(encode(Image.fromarray(pixels), "PNG"))
        gt = root / "gtFine" / folder / city
        gt.mkdir(parents=True)
        ids = np.random.default_rng(seed).integers(0, 34, (8, 16)).astype(np.uint8)
        (gt / f"{stem}_gtFine_labelIds.png").write_bytes(encode(Image.fromarray(ids, "L"), "PNG"))
        (gt / f"{stem}_gtFine_polygons.json").write_text("{}")
        # Not matched by --ignore_files: a side file of the mask folder, listed by the job.
        (gt / f"{stem}_gtFine_color.png").write_bytes(encode(Image.fromarray(ids, "L"), "PNG"))
        expected[f"{folder}/{city}/{stem}"] = ({"val": "validation"}.get(folder, folder), ids)
    # An image with no annotation: unlabeled, not a reject.
    lone = root / "leftImg8bit" / "train" / "aachen" / "aachen_000001_000019_leftImg8bit.png"
    lone.write_bytes(encode(Image.fromarray(np.zeros((8, 16, 3), np.uint8)), "PNG"))
    assert gcs.upload_tree(root, "cityscapes")
    return expected


def test_cityscapes_from_a_bucket(gcs, tmp_path, capsys):  # noqa: F811
    expected = _upload_cityscapes(gcs, tmp_path / "raw")
    common = [
        "prepare",
        "--image_dir",
        gcs.url("cityscapes/leftImg8bit"),
        "--mask_dir",
        gcs.url("cityscapes/gtFine"),
        "--mask_type",
        "classes",
        "--num_classes",
        "34",
        "--image_suffix",
        "_leftImg8bit.png",
        "--mask_suffix",
        "_gtFine_labelIds.png",
        "--ignore_files",
        "*_polygons.json",
        "--unlabeled_images",
        "skip",
        *RUNNER_ARGS,
    ]
    assert cli.main([*common, "--output_dir", gcs.url("out"), "--split_by_folder"]) == 0
    out = tmp_path / "out"
    gcs.download_prefix("out", out)
    stored = stored_masks(out)
    assert {key: split for key, (split, _) in stored.items()} == {
        key: split for key, (split, _) in expected.items()
    }
    for key, (_, ids) in stored.items():
        np.testing.assert_array_equal(ids, expected[key][1])
    info = json.loads((out / METADATA_FILE).read_text())
    assert info["num_rejected"]["total"] == 0 and not (out / REJECTS_FILE).read_text()
    unlabeled = [json.loads(line) for line in (out / UNLABELED_FILE).read_text().splitlines()]
    assert [line["key"] for line in unlabeled] == ["train/aachen/aachen_000001_000019"]
    assert info["num_unlabeled"]["total"] == 1

    listed = tmp_path / "train.txt"
    listed.write_text("train/aachen/aachen_000000_000019\n")
    argv = [*common, "--output_dir", gcs.url("out2"), "--split_file", f"train={listed}"]
    assert cli.main(argv) == 2
    assert "--split_file needs local data folders" in capsys.readouterr().err
