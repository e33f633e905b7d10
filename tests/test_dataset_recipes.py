"""Datasets as they ship, beyond the four of tests/test_public_layouts.py: SBD's struct .mat
masks, Oxford-IIIT Pet's trimaps, CamVid's sibling folders and class_dict.csv, Lost and
Found; miniatures in the real layouts, through the real CLI, ids checked pixel for pixel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse

from beam_pipeline import cli
from tests.helpers.class_outputs import metadata, rejects, stored_masks
from tests.helpers.images import rgb_jpeg
from tests.helpers.runs import RUNNER_ARGS

H, W = 12, 16


def _sbd(root: Path, keys: list[str]) -> dict[str, np.ndarray]:
    """benchmark_RELEASE/dataset/{img,cls}: cls/KEY.mat holds struct GTcls with fields
    Segmentation (0-20), Boundaries (a cell of sparse matrices), CategoriesPresent."""
    dataset = root / "benchmark_RELEASE" / "dataset"
    (dataset / "img").mkdir(parents=True)
    (dataset / "cls").mkdir()
    expected = {}
    for seed, key in enumerate(keys):
        (dataset / "img" / f"{key}.jpg").write_bytes(rgb_jpeg(H, W, seed))
        ids = np.random.default_rng(seed).integers(0, 21, (H, W)).astype(np.uint8)
        boundaries = np.empty((20, 1), dtype=object)
        for index in range(20):
            boundaries[index, 0] = scipy.sparse.csc_matrix((H, W))
        struct = {
            "Segmentation": ids,
            "Boundaries": boundaries,
            "CategoriesPresent": np.unique(ids[ids > 0]).astype(np.uint8),
        }
        scipy.io.savemat(dataset / "cls" / f"{key}.mat", {"GTcls": struct}, do_compression=True)
        expected[key] = ids
    (dataset / "train.txt").write_text("".join(f"{key}\n" for key in keys[:-1]))
    (dataset / "val.txt").write_text(f"{keys[-1]}\n")
    return expected


SBD_KEYS = ["2008_000002", "2008_000003", "2008_000007"]


def _sbd_args(root: Path, out: Path, mask_key: str) -> list[str]:
    dataset = root / "benchmark_RELEASE" / "dataset"
    return [
        "prepare",
        "--image_dir",
        str(dataset / "img"),
        "--mask_dir",
        str(dataset / "cls"),
        "--output_dir",
        str(out),
        "--mask_type",
        "classes",
        "--num_classes",
        "21",
        "--mask_key",
        mask_key,
        "--split_file",
        f"train={dataset / 'train.txt'}",
        "--split_file",
        f"validation={dataset / 'val.txt'}",
        *RUNNER_ARGS,
    ]


def test_sbd_struct_field_masks_read_with_a_dotted_mask_key(tmp_path):
    expected = _sbd(tmp_path, SBD_KEYS)
    out = tmp_path / "out"
    assert cli.main(_sbd_args(tmp_path, out, "GTcls.Segmentation")) == 0
    stored = stored_masks(out)
    assert {key: split for key, (split, _) in stored.items()} == {
        "2008_000002": "train",
        "2008_000003": "train",
        "2008_000007": "validation",
    }
    for key, (_, ids) in stored.items():
        np.testing.assert_array_equal(ids, expected[key])
    assert metadata(out)["num_rejected"]["total"] == 0
    assert not rejects(out)


def test_a_struct_named_without_its_field_is_one_line_error_listing_the_fields(tmp_path, capsys):
    _sbd(tmp_path, SBD_KEYS)
    for key, words in (
        ("GTcls", "pass --mask_key GTcls.FIELD, one of ['Boundaries', 'CategoriesPresent',"),
        ("GTcls.Segmentaton", "has no field 'Segmentaton'; fields: ['Boundaries',"),
    ):
        out = tmp_path / f"out-{key}"
        assert cli.main(_sbd_args(tmp_path, out, key)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "--mask_key" in err, err
        assert not out.exists()
