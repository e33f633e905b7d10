"""Datasets as they ship, beyond the four of tests/test_public_layouts.py: SBD's struct .mat
masks, Oxford-IIIT Pet's trimaps, CamVid's sibling folders and class_dict.csv, Lost and
Found; miniatures in the real layouts, through the real CLI, ids checked pixel for pixel."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse
from PIL import Image

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


# --- the recipes of docs/public-datasets.md, each on its miniature --------------------------

DOC = Path(__file__).resolve().parent.parent / "docs" / "public-datasets.md"


def _doc_commands() -> dict[str, list[str]]:
    """--output_dir -> argv of each `segprep prepare` block of docs/public-datasets.md."""
    commands = {}
    for block in re.findall(r"```bash\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        argv = shlex.split(block.replace("\\\n", " "))
        commands[argv[argv.index("--output_dir") + 1]] = [*argv[1:], *RUNNER_ARGS]
    return commands


def _png_bytes(jpeg: bytes) -> bytes:
    """A distinct photo-like image as PNG (flat images would be near-duplicates)."""
    import io

    buffer = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).save(buffer, format="PNG")
    return buffer.getvalue()


def _grey_png(ids: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(ids.astype(np.uint8)).save(path)


def _lists_take_the_first_field(tmp_path: Path) -> bool:
    """Split lists read `Abyssinian_1 1 1 1` as key Abyssinian_1 (the split-list parsing)."""
    from beam_pipeline.launch.official_splits import read_split_files
    from transforms.pairing import Layout

    listed = tmp_path / "probe.txt"
    listed.write_text("Abyssinian_1 1 1 1\n")
    layout = Layout(str(tmp_path) + "/", str(tmp_path) + "/")
    return set(read_split_files([f"train={listed}"], layout).keys) == {"Abyssinian_1"}


def test_sbd_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = _sbd(tmp_path, SBD_KEYS)
    assert cli.main(_doc_commands()["out/sbd"]) == 0
    stored = stored_masks(tmp_path / "out/sbd")
    assert set(stored) == set(expected)
    for key, (_, ids) in stored.items():
        np.testing.assert_array_equal(ids, expected[key])
    assert metadata(tmp_path / "out/sbd")["classes"]["names"][15] == "person"


def _pet(root: Path) -> dict[str, tuple[str, np.ndarray]]:
    """images/BREED_N.jpg (and a stray .mat), annotations/trimaps/BREED_N.png of 1/2/3 with
    the tarball's hidden ._ files, and the lists' four-column lines."""
    pet = root / "oxford-iiit-pet"
    (pet / "images").mkdir(parents=True)
    expected, lines = {}, {"trainval": [], "test": []}
    for seed, key in enumerate(["Abyssinian_1", "Abyssinian_2", "beagle_3", "pug_4"]):
        (pet / "images" / f"{key}.jpg").write_bytes(rgb_jpeg(H, W, seed))
        trimap = np.full((H, W), 2, np.uint8)
        trimap[3:9, 4 + seed : 12] = 1
        trimap[3, 4 + seed : 12] = 3
        _grey_png(trimap, pet / "annotations" / "trimaps" / f"{key}.png")
        (pet / "annotations" / "trimaps" / f"._{key}.png").write_bytes(b"\0\5\26\7")
        split = "test" if seed == 3 else "trainval"
        lines[split].append(f"{key} {seed + 1} {1 + seed % 2} {seed + 1}\n")
        stored = np.select([trimap == 1, trimap == 2], [1, 0], 255)
        expected[key] = ("test" if split == "test" else "train", stored)
    (pet / "images" / "beagle_116.mat").write_bytes(b"MATLAB 5.0 MAT-file")
    for split, listed in lines.items():
        (pet / "annotations" / f"{split}.txt").write_text("".join(listed))
    return expected


def test_oxford_pet_recipe(tmp_path, monkeypatch, capsys):
    if not _lists_take_the_first_field(tmp_path):
        pytest.skip("split lists do not take the first field of `Abyssinian_1 1 1 1` yet")
    monkeypatch.chdir(tmp_path)
    expected = _pet(tmp_path)
    assert cli.main(_doc_commands()["out/pet"]) == 0
    summary = capsys.readouterr().out
    stored = stored_masks(tmp_path / "out/pet")
    assert set(stored) == set(expected)
    for key, (split, ids) in stored.items():
        assert split == expected[key][0], key
        np.testing.assert_array_equal(ids, expected[key][1])
    info = metadata(tmp_path / "out/pet")
    assert info["classes"]["names"] == ["background", "pet"]
    assert info["num_rejected"]["total"] == 0
    assert "most frequent: background" in summary


def _lost_and_found(root: Path) -> dict[str, tuple[str, np.ndarray]]:
    laf = root / "lostandfound"
    expected = {}
    for seed, (folder, city) in enumerate([("train", "01_Hanns_Klemm_Str_45")] * 2
                                          + [("test", "02_Hanns_Klemm_Str_44")]):  # fmt: skip
        stem = f"{city}_000000_{seed:06d}"
        image = laf / "leftImg8bit" / folder / city / f"{stem}_leftImg8bit.png"
        image.parent.mkdir(parents=True, exist_ok=True)
        image.write_bytes(_png_bytes(rgb_jpeg(H, W, seed)))
        label = np.zeros((H, W), np.uint8)
        label[6:, :] = 1  # free space
        label[7:9, 3:6] = 2 + seed  # an obstacle
        gt = laf / "gtCoarse" / folder / city
        _grey_png(label, gt / f"{stem}_gtCoarse_labelIds.png")
        _grey_png(label * 40, gt / f"{stem}_gtCoarse_color.png")
        _grey_png(label, gt / f"{stem}_gtCoarse_instanceIds.png")
        (gt / f"{stem}_gtCoarse_polygons.json").write_text("{}")
        stored = np.select([label == 0, label == 1], [255, 0], 1)
        expected[f"{folder}/{city}/{stem}"] = (folder, stored)
    (root / "laf_obstacles.json").write_text('{"0": 255, "1": 0, "*": 1}')
    (root / "laf_names.txt").write_text("free space\nobstacle\n")
    return expected


def test_lost_and_found_recipe(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    expected = _lost_and_found(tmp_path)
    assert cli.main(_doc_commands()["out/lostandfound"]) == 0
    assert "side files: 9 in the mask folder" in capsys.readouterr().out
    stored = stored_masks(tmp_path / "out/lostandfound")
    assert set(stored) == set(expected)
    for key, (split, ids) in stored.items():
        assert split == expected[key][0], key
        np.testing.assert_array_equal(ids, expected[key][1])
    assert metadata(tmp_path / "out/lostandfound")["classes"]["names"] == ["free space", "obstacle"]


CAMVID_CLASSES = [("Animal", (64, 128, 64)), ("Road", (128, 64, 128)), ("Sky", (128, 128, 128))]


def _camvid(root: Path) -> dict[str, dict[str, np.ndarray]]:
    camvid = root / "CamVid"
    rows = "".join(f"{name},{r},{g},{b}\n" for name, (r, g, b) in CAMVID_CLASSES)
    camvid.mkdir()
    (camvid / "class_dict.csv").write_text("name,r,g,b\n" + rows)
    colours = np.array([rgb for _, rgb in CAMVID_CLASSES], np.uint8)
    expected: dict[str, dict[str, np.ndarray]] = {}
    for split in ("train", "val", "test"):
        expected[split] = {}
        for seed in range(2):
            key = f"0001TP_{seed + 10 * len(split):06d}"
            image = camvid / split / f"{key}.png"
            image.parent.mkdir(parents=True, exist_ok=True)
            image.write_bytes(_png_bytes(rgb_jpeg(H, W, seed + 10 * len(split))))
            ids = np.random.default_rng(seed + len(split)).integers(0, 3, (H, W))
            label = camvid / f"{split}_labels" / f"{key}_L.png"
            label.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(colours[ids]).save(label)
            expected[split][key] = ids
    return expected


def test_camvid_recipes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = _camvid(tmp_path)
    commands = _doc_commands()
    for split, stored_split in (("train", "train"), ("val", "validation")):
        out = tmp_path / f"out/camvid-{split}"
        assert cli.main(commands[f"out/camvid-{split}"]) == 0, split
        stored = stored_masks(out)
        assert set(stored) == set(expected[split])
        for key, (name, ids) in stored.items():
            assert name == stored_split
            np.testing.assert_array_equal(ids, expected[split][key])
        assert metadata(out)["classes"]["names"] == [name for name, _ in CAMVID_CLASSES]


def test_cvat_segmentation_mask_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    export = tmp_path / "cvat-export"
    colours = np.array([[0, 0, 0], [250, 50, 83], [51, 221, 255]], np.uint8)
    (export / "ImageSets" / "Segmentation").mkdir(parents=True)
    (export / "labelmap.txt").write_text(
        "# label:color_rgb:parts:actions\nbackground:0,0,0::\ncat:250,50,83::\ndog:51,221,255::\n"
    )
    expected = {}
    for seed, key in enumerate(["frame_000000", "frame_000001"]):
        image = export / "JPEGImages" / f"{key}.jpg"
        image.parent.mkdir(parents=True, exist_ok=True)
        image.write_bytes(rgb_jpeg(H, W, seed))
        ids = np.random.default_rng(seed).integers(0, 3, (H, W))
        for folder in ("SegmentationClass", "SegmentationObject"):
            (export / folder).mkdir(exist_ok=True)
            Image.fromarray(colours[ids]).save(export / folder / f"{key}.png")
        expected[key] = ids
    (export / "ImageSets" / "Segmentation" / "default.txt").write_text("\n".join(expected) + "\n")
    assert cli.main(_doc_commands()["out/cvat-masks"]) == 0
    stored = stored_masks(tmp_path / "out/cvat-masks")
    assert set(stored) == set(expected)
    for key, (_, ids) in stored.items():
        np.testing.assert_array_equal(ids, expected[key])
