"""docs/classes.md runs as written: each documented command, through the CLI, on data laid out
at the documented paths, publishes exact masks and statistics equal to a direct count."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from beam_pipeline import cli
from beam_pipeline.commands import inspect_sheet
from beam_pipeline.commands.inspect_sheet.drawing import _tile_box
from beam_pipeline.commands.sample_data import write_sample_data
from tests.helpers.class_outputs import (
    check_output,
    expected_coco_masks,
    metadata,
    rejects,
    stored_masks,
    write_coco_set,
)
from tests.helpers.images import encode, rgb_jpeg
from tests.helpers.runs import expected_rejects
from transforms.class_stats import ClassStats
from transforms.codecs.class_mask import class_mask_settings, parse_class_names, parse_colormap
from transforms.format.dataset_info import ClassesInfo
from transforms.format.naming import SEGPREP_DIR

# pycocotools' own decode trips a numpy 2 deprecation (filtered in transforms.sources.rasterize;
# pytest shows every DeprecationWarning again).
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

DOC = (Path(__file__).resolve().parent.parent / "docs" / "classes.md").read_text(encoding="utf-8")
H, W = 36, 28
VOC_NAMES = (
    "background aeroplane bicycle bird boat bottle bus car cat chair cow diningtable dog "
    "horse motorbike person pottedplant sheep sofa train tvmonitor"
).split()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.S)


def _commands() -> list[list[str]]:
    """Every `segprep ...` command of the bash blocks, as argv."""
    commands = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                argv = shlex.split(line)
                assert argv[0] == "segprep", line
                commands.append(argv[1:])
    return commands


def test_the_example_files_parse():
    names = parse_class_names(_blocks("text")[0], "names.txt")
    assert names == ("background", "aeroplane", "bicycle")
    colormap = parse_colormap(_blocks("json")[0], "colormap.json")
    assert [name for name, _ in colormap] == ["sky", "building", "road", "car"]


def test_the_metadata_example_has_the_sections_keys():
    settings = class_mask_settings("classes", num_classes=21)
    section = ClassesInfo.of(settings, {"train": ClassStats.empty(21)}).to_json()
    example = _blocks("json")[1]
    for key in [*section, *section["splits"]["train"]]:
        assert f'"{key}"' in example, key


# --- the datasets the commands expect, at the documented paths -------------------------------


def _blocks_with_ids(rng: np.random.Generator, num_classes: int, dtype) -> np.ndarray:
    """A few rectangles of random ids on class 0, runs of every length."""
    ids = np.zeros((H, W), dtype=dtype)
    for _ in range(5):
        top, left = rng.integers(0, H - 4), rng.integers(0, W - 4)
        ids[top : top + rng.integers(2, 14), left : left + rng.integers(2, 14)] = rng.integers(
            0, num_classes
        )
    ids[0, :3] = num_classes - 1  # the highest id, always present
    return ids


def _pair_folders(root: Path, images: str, masks: str) -> tuple[Path, Path]:
    (root / images).mkdir(parents=True)
    (root / masks).mkdir(parents=True)
    return root / images, root / masks


def _voc(root: Path) -> tuple[dict, dict]:
    made = write_sample_data(
        root / "voc-sample", count=24, seed=5, broken_fraction=0.15, height=H, width=W, classes=21
    )
    (root / "VOCdevkit/VOC2012").mkdir(parents=True)
    made.image_dir.rename(root / "VOCdevkit/VOC2012/JPEGImages")
    made.mask_dir.rename(root / "VOCdevkit/VOC2012/SegmentationClass")
    expected = {
        path.stem: np.asarray(Image.open(path))  # palette INDICES
        for path in (root / "VOCdevkit/VOC2012/SegmentationClass").iterdir()
        if path.stem not in made.broken
    }
    return expected, {key: reason.value for key, reason in expected_rejects(made).items()}


def _grey(
    root: Path, folder: str, labels: str, num_classes: int, ignore: int, dtype
) -> tuple[dict, dict]:
    images, masks = _pair_folders(root, f"{folder}/images", f"{folder}/{labels}")
    rng = np.random.default_rng(num_classes)
    expected = {}
    for index in range(10):
        key = f"{folder}{index:02d}"
        ids = _blocks_with_ids(rng, num_classes, dtype)
        ids[-2:, -5:] = ignore
        (images / f"{key}.jpg").write_bytes(rgb_jpeg(H, W, seed=index))
        (masks / f"{key}.png").write_bytes(encode(Image.fromarray(ids), "PNG"))
        expected[key] = ids
    bad = expected.pop(f"{folder}03").copy()
    bad[5, 5] = num_classes  # the first id out of range
    (masks / f"{folder}03.png").write_bytes(encode(Image.fromarray(bad), "PNG"))
    return expected, {f"{folder}03": "mask_values"}


def _ade(root: Path) -> tuple[dict, dict]:
    """ADE20K's ids: 0 "other", 1..150 the classes, read through ade20k_reduce_zero."""
    expected, rejected = _grey(root, "ade", "annotations", 151, 255, np.uint8)
    reduce_zero = np.arange(256)
    reduce_zero[0], reduce_zero[1:151] = 255, np.arange(150)
    return {key: reduce_zero[ids] for key, ids in expected.items()}, rejected


def _camvid(root: Path) -> tuple[dict, dict]:
    images, masks = _pair_folders(root, "camvid/images", "camvid/labels")
    (root / "camvid_colormap.json").write_text(_blocks("json")[0])
    colours = np.array([colour for _, colour in parse_colormap(_blocks("json")[0], "c")], np.uint8)
    rng = np.random.default_rng(4)
    expected = {}
    for index in range(8):
        key = f"cv{index:02d}"
        ids = _blocks_with_ids(rng, len(colours), np.uint8)
        rgb = colours[ids]
        if index == 5:
            rgb[7, 7] = (7, 7, 7)  # a colour the map does not have
        else:
            expected[key] = ids
        (images / f"{key}.jpg").write_bytes(rgb_jpeg(H, W, seed=index))
        (masks / f"{key}_mask.png").write_bytes(encode(Image.fromarray(rgb), "PNG"))
    return expected, {"cv05": "mask_values"}


def _mat(root: Path) -> tuple[dict, dict]:
    images, masks = _pair_folders(root, "data/images", "data/masks")
    rng = np.random.default_rng(8)
    expected, broken = {}, {}
    for index in range(8):
        key = f"m{index:02d}"
        ids = _blocks_with_ids(rng, 8, np.uint8)
        ids[:2, -4:] = 255
        stored: np.ndarray = ids
        if index == 2:
            stored = ids.astype(np.float64)  # integral doubles, as MATLAB saves by default
        if index == 4:
            stored = ids.copy()
            stored[3, 3] = 9
            broken[key] = "mask_values"
        if index == 6:
            stored = ids.astype(np.float64)
            stored[1, 1] = 2.5
            broken[key] = "mask_values"
        (images / f"{key}.jpg").write_bytes(rgb_jpeg(H, W, seed=index))
        out = io.BytesIO()
        scipy.io.savemat(out, {"labels": stored, "mask": np.ones((2, 2))}, do_compression=True)
        (masks / f"{key}.mat").write_bytes(out.getvalue())
        if key not in broken:
            expected[key] = ids
    return expected, broken


def _coco(root: Path) -> tuple[dict, dict]:
    annotations = Path("coco/instances_val2017.json")
    outcome = write_coco_set(root / "coco/val2017", annotations)
    expected = expected_coco_masks(annotations, background=True)
    return expected, {key: value for key, value in outcome.items() if value != "ok"}


# output folder of each documented prepare command -> its data, written before it runs
BUILDERS = {
    "out/voc": _voc,
    "out/ade": _ade,
    "out/big": lambda root: _grey(root, "big", "labels", 1000, 65535, np.uint16),
    "out/camvid": _camvid,
    "out/mat": _mat,
    "out/coco": _coco,
}


@dataclasses.dataclass
class Run:
    argv: list[str]
    code: int
    stdout: str
    stderr: str
    expected: dict | None = None  # key -> source class ids of the entries to accept
    rejected: dict | None = None  # key -> reject reason


@pytest.fixture(scope="module")
def docs_runs(tmp_path_factory) -> dict[str, Run]:
    """Every documented command in the documented order, from a folder of the needed data."""
    root = tmp_path_factory.mktemp("docs")
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for argv in _commands():
            name = argv[argv.index("--output_dir") + 1] if "--output_dir" in argv else argv[0]
            expected = rejected = None
            if name in BUILDERS:
                expected, rejected = BUILDERS[name](root)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.main(argv)
            runs[name] = Run(argv, code, out.getvalue(), err.getvalue(), expected, rejected)
    return runs, root


def test_every_documented_command_runs(docs_runs):
    runs, root = docs_runs
    assert {name for name in runs if name.startswith("out/")} == set(BUILDERS)
    assert {"sample-data", "inspect"} <= set(runs)
    for name, run in runs.items():
        assert run.code == 0, (name, run.stderr)
    for name in BUILDERS:
        info = metadata(root / name)
        assert info["parameters"]["runner"] == "FnApiRunner"  # segprep's default, named
        assert info["parameters"]["mask_type"] == "classes"
        assert {"pycocotools", "ijson"} <= set(info["versions"])
        assert info["mask_format"] == "png"
        assert not list((root / name / SEGPREP_DIR / "runs").iterdir()), "staging left behind"
    assert len(list((root / "build/classes-inputs/images").iterdir())) > 50
    # The reading examples' output is the prepared one, never the inputs' folder.
    assert (root / "build/classes/metadata.json").exists()
    assert not (root / "build/classes/images").exists()


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_masks_are_exact_and_statistics_a_direct_count(docs_runs, name):
    runs, root = docs_runs
    run = runs[name]
    info = check_output(root / name, run.expected)
    got = {key: line["reason"] for key, line in rejects(root / name).items()}
    assert got == run.rejected
    assert info["num_discovered"] == len(run.expected) + len(run.rejected)
    classes = info["classes"]
    assert classes["ids"] == list(range(classes["num_classes"]))
    description = info["features"]["mask"]["description"]
    assert f"{classes['png_bit_depth']}-bit PNG of class ids" in description
    assert "most frequent" in run.stdout and "rarest" in run.stdout


def test_bad_values_are_listed_in_the_rejects(docs_runs):
    _, root = docs_runs
    details = {
        "out/voc": "class ids {21} out of range",
        "out/ade": "class ids {151} out of range",
        "out/big": "class ids {1000} out of range",
        "out/camvid": "colours not in the colormap: [7, 7, 7]",
        "out/mat": "class ids {9} out of range",
    }
    for name, words in details.items():
        assert any(words in line["detail"] for line in rejects(root / name).values()), name
    assert any(
        "non-integer class ids {2.5}" in r["detail"] for r in rejects(root / "out/mat").values()
    )


def test_names_colormap_and_bit_depth_reach_the_metadata(docs_runs):
    _, root = docs_runs
    voc = metadata(root / "out/voc")["classes"]
    assert voc["names"] == VOC_NAMES and voc["png_bit_depth"] == 8
    camvid = metadata(root / "out/camvid")["classes"]
    assert camvid["names"] == ["sky", "building", "road", "car"]
    assert camvid["colormap"] == [[128, 128, 128], [128, 0, 0], [128, 64, 128], [64, 0, 128]]
    big = metadata(root / "out/big")["classes"]
    assert (big["png_bit_depth"], big["ignore_index"], big["num_classes"]) == (16, 65535, 1000)
    ids = next(iter(stored_masks(root / "out/big").values()))[1]
    assert ids.dtype == np.uint16 and ids.max() == 65535


def test_coco_mapping_and_orphans(docs_runs):
    runs, root = docs_runs
    info = metadata(root / "out/coco")
    coco = info["classes"]["coco"]
    assert info["classes"]["names"] == ["background", "bicycle", "airplane", "kite"]
    assert [(c["coco_id"], c["class_id"]) for c in coco["categories"]] == [(2, 1), (5, 2), (9, 3)]
    assert (coco["orphan_annotations"], coco["orphan_example_id"]) == (1, 10)
    assert "1 annotations name no image of the file (e.g. id 10)" in runs["out/coco"].stdout
    lines = rejects(root / "out/coco")
    assert lines["gone"]["mask"] == os.path.abspath(root / "coco/instances_val2017.json")
    assert "the image folder has swap.png" in lines["swap"]["detail"]
    assert "no image record in instances_val2017.json" in lines["extra"]["detail"]


def test_inspect_rejects_of_a_coco_run_never_read_the_annotations(docs_runs, tmp_path):
    _, root = docs_runs
    sheet = inspect_sheet.build_sheet(str(root / "out/coco"), "train", 8, rejects=True)
    entries, _, _ = inspect_sheet.reject_entries(str(root / "out/coco"), 8)
    gone = next(entry for entry in entries if entry.key == "gone")
    assert gone.mask is None and gone.mask_problem == "COCO annotations"
    assert len(sheet.keys) == len(rejects(root / "out/coco"))


def test_inspect_colours_classes_with_a_legend(docs_runs, monkeypatch):
    runs, root = docs_runs
    sheet_path = Path(runs["inspect"].stdout.strip().splitlines()[-1])
    assert sheet_path == root / "out" / "voc_inspect_train.png"
    written = np.asarray(Image.open(sheet_path).convert("RGB"))
    monkeypatch.chdir(root)  # the title names the folder as the command did
    sheet = inspect_sheet.build_sheet("out/voc", "train", 8, rejects=False)
    np.testing.assert_array_equal(written, np.asarray(sheet.image))
    classes = metadata(root / "out/voc")["classes"]
    colours = inspect_sheet.class_palette(classes)
    stored = stored_masks(root / "out/voc")
    shown = set()
    for index, key in enumerate(sheet.keys):
        ids = stored[key][1]
        shown |= set(np.unique(ids).tolist())
        left, top, right, bottom = _tile_box(index, 1, sheet.tile_size)
        tile = written[top:bottom, left:right]
        expected = np.asarray(
            Image.fromarray(colours[ids]).resize((right - left, bottom - top), Image.NEAREST)
        )
        np.testing.assert_array_equal(tile, expected, err_msg=key)
    assert len(shown) > 4  # several classes and colours: the check can fail
    labels = [label for label, _ in sheet.legend]
    assert labels == [f"{c} {VOC_NAMES[c]}" if c < 21 else f"{c} (ignored)" for c in sorted(shown)]
    assert [colour for _, colour in sheet.legend] == [tuple(colours[c]) for c in sorted(shown)]
    assert sheet.image.size == inspect_sheet.sheet_size(8, sheet.tile_size, len(labels))
