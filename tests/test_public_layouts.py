"""Public datasets as they ship (issue 25), through the real CLI on miniature trees laid out
like the real ones: VOC's official lists and unlabeled images, side files, Cityscapes'
suffixes and split folders."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shard_reader
from beam_pipeline import cli
from beam_pipeline.job.commit import percent
from tests.helpers.class_outputs import metadata, rejects, stored_masks
from tests.helpers.images import encode, rgb_jpeg
from tests.helpers.runs import RUNNER_ARGS
from transforms.format.naming import UNLABELED_FILE, is_output_name

VOC_TRAIN = ["2007_000032", "2007_000039", "2007_000063"]
VOC_VAL = ["2007_000033", "2007_000042"]
VOC_UNLABELED = [f"2008_00{n:04d}" for n in range(7)]


def _png(array: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(Image.fromarray(array.astype(np.uint8), "L"), "PNG"))


def _ids(seed: int, classes: int, height: int = 12, width: int = 10) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, classes, size=(height, width))
    ids[0, :] = 255  # VOC's object borders: the ignore index
    return ids


def _voc(root: Path, *, listed_missing: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """VOCdevkit/VOC2012: JPEGImages (more images than masks), SegmentationClass,
    ImageSets/Segmentation/{train,val}.txt."""
    voc = root / "VOC2012"
    (voc / "JPEGImages").mkdir(parents=True)
    masks = {}
    for seed, key in enumerate(VOC_TRAIN + VOC_VAL):
        (voc / "JPEGImages" / f"{key}.jpg").write_bytes(rgb_jpeg(12, 10, seed))
        masks[key] = _ids(seed, 3)
        _png(masks[key], voc / "SegmentationClass" / f"{key}.png")
    for seed, key in enumerate(VOC_UNLABELED):
        (voc / "JPEGImages" / f"{key}.jpg").write_bytes(rgb_jpeg(12, 10, 100 + seed))
    lists = voc / "ImageSets" / "Segmentation"
    lists.mkdir(parents=True)
    (lists / "train.txt").write_text("\n".join(VOC_TRAIN + list(listed_missing)) + "\n")
    # The image extension is optional in a list.
    (lists / "val.txt").write_text("\n".join(f"{key}.jpg" for key in VOC_VAL) + "\n")
    return masks


def _voc_args(root: Path, out: Path, *extra: str, classes: int = 3) -> list[str]:
    voc = root / "VOC2012"
    return [
        "prepare",
        "--image_dir",
        str(voc / "JPEGImages"),
        "--mask_dir",
        str(voc / "SegmentationClass"),
        "--output_dir",
        str(out),
        "--mask_type",
        "classes",
        "--num_classes",
        str(classes),
        *extra,
        *RUNNER_ARGS,
    ]


def _split_files(root: Path) -> list[str]:
    lists = root / "VOC2012" / "ImageSets" / "Segmentation"
    return [
        "--split_file",
        f"train={lists / 'train.txt'}",
        "--split_file",
        f"validation={lists / 'val.txt'}",
    ]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_voc_official_lists_with_unlabeled_images_skipped(tmp_path, capsys):
    masks = _voc(tmp_path, listed_missing=("2007_000099",))
    out = tmp_path / "out"
    argv = _voc_args(tmp_path, out, *_split_files(tmp_path), "--unlabeled_images", "skip")
    assert cli.main(argv) == 0
    summary = capsys.readouterr().out

    stored = stored_masks(out)
    assert {key for key, (split, _) in stored.items() if split == "train"} == set(VOC_TRAIN)
    assert {key for key, (split, _) in stored.items() if split == "validation"} == set(VOC_VAL)
    for key, (_, ids) in stored.items():
        np.testing.assert_array_equal(ids, masks[key])

    unlabeled = _jsonl(out / UNLABELED_FILE)
    assert sorted(line["key"] for line in unlabeled) == VOC_UNLABELED
    assert {line["reason"] for line in unlabeled} == {"unlabeled"}
    info = metadata(out)
    assert info["num_unlabeled"] == {"total": len(VOC_UNLABELED), "file": UNLABELED_FILE}
    # A listed key the folders lack is a reject; unlabeled images are none.
    assert {key: r["reason"] for key, r in rejects(out).items()} == {"2007_000099": "missing_image"}
    assert info["num_rejected"]["total"] == 1
    assert info["num_discovered"] == len(VOC_TRAIN + VOC_VAL + VOC_UNLABELED) + 1
    assert "unlabeled" in summary and UNLABELED_FILE in summary
    assert is_output_name(UNLABELED_FILE)
    assert cli.main(["verify", str(out)]) == 0


def test_voc_unlabeled_images_are_rejects_by_default(tmp_path, capsys):
    _voc(tmp_path)
    out = tmp_path / "out"
    assert cli.main(_voc_args(tmp_path, out, *_split_files(tmp_path))) == 1
    error = capsys.readouterr().err
    assert "7 of 12 entries rejected" in error and "missing_mask 7" in error
    assert not (out / UNLABELED_FILE).exists() and not (out / "metadata.json").exists()


def test_a_listed_image_without_mask_is_missing_mask_even_when_skipping(tmp_path):
    _voc(tmp_path)
    lists = tmp_path / "VOC2012" / "ImageSets" / "Segmentation"
    with (lists / "train.txt").open("a") as handle:
        handle.write(VOC_UNLABELED[0] + "\n")
    out = tmp_path / "out"
    argv = _voc_args(tmp_path, out, *_split_files(tmp_path), "--unlabeled_images", "skip")
    assert cli.main(argv) == 0
    assert {key: r["reason"] for key, r in rejects(out).items()} == {
        VOC_UNLABELED[0]: "missing_mask"
    }
    assert len(_jsonl(out / UNLABELED_FILE)) == len(VOC_UNLABELED) - 1


def test_entries_in_no_list_are_not_in_split_and_not_bad(tmp_path):
    _voc(tmp_path)
    lists = tmp_path / "VOC2012" / "ImageSets" / "Segmentation"
    (lists / "train.txt").write_text(VOC_TRAIN[0] + "\n")
    out = tmp_path / "out"
    # 4 of 12 entries in no list, 7 unlabeled: nothing bad, so even a limit of 0 publishes.
    argv = _voc_args(
        tmp_path,
        out,
        *_split_files(tmp_path),
        "--unlabeled_images",
        "skip",
        "--max_reject_fraction",
        "0",
    )
    assert cli.main(argv) == 0
    left_out = {key for key, r in rejects(out).items() if r["reason"] == "not_in_split"}
    assert left_out == set(VOC_TRAIN[1:])
    assert metadata(out)["splits"]["train"]["num_examples"] == 1


def test_a_listed_key_with_spaces_is_the_whole_line(tmp_path):
    """File names with spaces are keys like any other; a list naming them (`my photo 01`)
    lists the whole line; a key followed by number columns only (VOC's, Pet's) is still its
    first field. The first field `my` stored none of these and left all `not_in_split`."""
    voc = tmp_path / "VOC2012"
    spaced = [f"my photo {n:02d}" for n in range(4)]
    for seed, key in enumerate(spaced):
        (voc / "JPEGImages" / f"{key}.jpg").parent.mkdir(parents=True, exist_ok=True)
        (voc / "JPEGImages" / f"{key}.jpg").write_bytes(rgb_jpeg(12, 10, seed))
        _png(_ids(seed, 3), voc / "SegmentationClass" / f"{key}.png")
    lists = voc / "ImageSets" / "Segmentation"
    lists.mkdir(parents=True)
    (lists / "train.txt").write_text(f"{spaced[0]}\r\n  {spaced[1]}.jpg \n{spaced[2]}\n")
    (lists / "val.txt").write_text(f"{spaced[3]}\n")
    out = tmp_path / "out"
    assert cli.main(_voc_args(tmp_path, out, *_split_files(tmp_path))) == 0
    stored = stored_masks(out)
    assert {key: split for key, (split, _) in stored.items()} == {
        spaced[0]: "train",
        spaced[1]: "train",
        spaced[2]: "train",
        spaced[3]: "validation",
    }
    assert not rejects(out)


def test_a_key_in_two_lists_stops_the_run_naming_it(tmp_path, capsys):
    _voc(tmp_path)
    lists = tmp_path / "VOC2012" / "ImageSets" / "Segmentation"
    with (lists / "val.txt").open("a") as handle:
        handle.write(VOC_TRAIN[1] + "\n")
    out = tmp_path / "out"
    assert cli.main(_voc_args(tmp_path, out, *_split_files(tmp_path))) == 2
    assert VOC_TRAIN[1] in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("sized", ["--train_size", "--validation_size"])
@pytest.mark.parametrize("official", ["file", "folder"])
def test_official_splits_refuse_split_sizes(tmp_path, capsys, sized, official):
    _voc(tmp_path)
    flags = _split_files(tmp_path) if official == "file" else ["--split_by_folder"]
    argv = _voc_args(tmp_path, tmp_path / "out", *flags, sized, "0.5")
    assert cli.main(argv) == 2
    assert sized in capsys.readouterr().err


def test_side_files_are_ignored_counted_and_never_read(tmp_path, capsys):
    _voc(tmp_path)
    voc = tmp_path / "VOC2012"
    for key in VOC_TRAIN:  # labelme JSONs beside the images, and a README
        (voc / "JPEGImages" / f"{key}.json").write_text("{not json at all")
    (voc / "JPEGImages" / "README.txt").write_text("hello")
    (voc / "SegmentationClass" / "notes").mkdir()
    (voc / "SegmentationClass" / "notes" / "todo.txt").write_text("x")
    out = tmp_path / "out"
    argv = _voc_args(
        tmp_path,
        out,
        *_split_files(tmp_path),
        "--unlabeled_images",
        "skip",
        "--ignore_files",
        "*.json",
        "--ignore_files",
        "*.txt",
        "--max_reject_fraction",
        "0",
    )
    assert cli.main(argv) == 0
    summary = capsys.readouterr().out
    assert "ignored 5 files matching --ignore_files" in summary
    assert not (out / "rejects.jsonl").read_text()
    assert metadata(out)["parameters"]["ignore_files"] == ["*.json", "*.txt"]


def test_the_reject_limit_shows_a_decimal_when_rounding_would_hide_it(tmp_path, capsys):
    _voc(tmp_path)
    voc = tmp_path / "VOC2012"
    out = tmp_path / "out"
    # 6 labelled + 1 stray file = 7 judged entries, the stray 14.3 %, which whole percents
    # would show as the limit itself; the 7 unlabeled images count in neither part.
    (voc / "JPEGImages" / "2007_000077.jpg").write_bytes(rgb_jpeg(12, 10, 77))
    _png(_ids(77, 3), voc / "SegmentationClass" / "2007_000077.png")
    (voc / "JPEGImages" / "stray.txt").write_text("x")
    argv = _voc_args(tmp_path, out, "--unlabeled_images", "skip", "--max_reject_fraction", "0.14")
    assert cli.main(argv) == 1
    assert (
        "1 of 7 entries rejected (14.3 %; 7 unlabeled or not_in_split not counted), more than "
        "--max_reject_fraction 0.14" in capsys.readouterr().err
    )
    assert percent(61 / 121, 0.5) == "50.4 %"
    assert percent(811 / 1111, 0.5) == "73 %"


CITIES = {"train": ["aachen", "bremen"], "val": ["frankfurt"], "test": ["berlin"]}


def _cityscapes(root: Path) -> dict[str, tuple[str, np.ndarray]]:
    """leftImg8bit/{train,val,test}/CITY/CITY_S_F_leftImg8bit.png and gtFine/... with
    labelIds, color, instanceIds and polygons side files; test masks are all unlabeled."""
    expected = {}
    seed = 0
    for folder, cities in CITIES.items():
        for city in cities:
            for frame in (19, 20):
                seed += 1
                stem = f"{city}_000000_{frame:06d}"
                image = root / "leftImg8bit" / folder / city / f"{stem}_leftImg8bit.png"
                image.parent.mkdir(parents=True, exist_ok=True)
                pixels = np.random.default_rng(seed).integers(0, 256, (8, 16, 3), np.uint8)
                image.write_bytes(encode(Image.fromarray(pixels), "PNG"))
                ids = np.full((8, 16), 255) if folder == "test" else _ids(seed, 34, 8, 16)
                gt = root / "gtFine" / folder / city
                _png(ids, gt / f"{stem}_gtFine_labelIds.png")
                _png(np.zeros((8, 16)), gt / f"{stem}_gtFine_color.png")
                _png(np.ones((8, 16)), gt / f"{stem}_gtFine_instanceIds.png")
                (gt / f"{stem}_gtFine_polygons.json").write_text("{}")
                split = {"val": "validation"}.get(folder, folder)
                expected[f"{folder}/{city}/{stem}"] = (split, ids)
    return expected


def _cityscapes_args(root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "prepare",
        "--image_dir",
        str(root / "leftImg8bit"),
        "--mask_dir",
        str(root / "gtFine"),
        "--output_dir",
        str(out),
        "--mask_type",
        "classes",
        "--num_classes",
        "34",
        "--image_suffix",
        "_leftImg8bit.png",
        "--mask_suffix",
        "_gtFine_labelIds.png",
        *extra,
        *RUNNER_ARGS,
    ]


def test_cityscapes_suffixes_and_split_folders_are_one_command(tmp_path, capsys):
    expected = _cityscapes(tmp_path)
    out = tmp_path / "out"
    side_files = [
        flag
        for glob in ("*_gtFine_color.png", "*_gtFine_instanceIds.png", "*_gtFine_polygons.json")
        for flag in ("--ignore_files", glob)
    ]
    argv = _cityscapes_args(tmp_path, out, "--split_by_folder", *side_files)
    assert cli.main(argv) == 0
    assert "ignored 24 files matching" in capsys.readouterr().out
    stored = stored_masks(out)
    assert set(stored) == set(expected)
    for key, (split, ids) in stored.items():
        assert split == expected[key][0], key
        np.testing.assert_array_equal(ids, expected[key][1])
    info = metadata(out)
    assert info["num_rejected"]["total"] == 0
    assert {name: split["num_examples"] for name, split in info["splits"].items()} == {
        "train": 4,
        "validation": 2,
        "test": 2,
    }
    # Every reader takes the test split; its all-unlabeled masks have no class weights.
    source = shard_reader.RecordSource(str(out), "test")
    assert len(source) == 2
    batches = shard_reader.make_dataset(str(out), "test", 2, training=False, with_keys=True)
    keys = {key.decode() for batch in batches for key in batch[-1].numpy()}
    assert keys == {key for key, (split, _) in expected.items() if split == "test"}
    assert shard_reader.class_weights(out, "train").shape == (34,)
    with pytest.raises(ValueError, match="no labelled pixels"):
        shard_reader.class_weights(out, "test")
    assert cli.main(["verify", str(out)]) == 0


def test_cityscapes_side_files_are_counted_never_rejects(tmp_path, capsys):
    """--mask_suffix says what a mask is: gtFine's other files are side files, not rejects."""
    expected = _cityscapes(tmp_path)
    out = tmp_path / "out"
    assert cli.main(_cityscapes_args(tmp_path, out, "--split_by_folder")) == 0
    summary = capsys.readouterr().out
    assert not (out / "rejects.jsonl").read_text()
    assert set(stored_masks(out)) == set(expected)
    line = next(line for line in summary.splitlines() if "side files" in line)
    assert line.strip() == (
        "side files: 24 in the mask folder (not masks: *_gtFine_color.png 8, "
        "*_gtFine_instanceIds.png 8, *_gtFine_polygons.json 8; not read)"
    )
    assert metadata(out)["num_rejected"]["total"] == 0


def test_split_by_folder_names_the_folders_it_found(tmp_path, capsys):
    _cityscapes(tmp_path)
    (tmp_path / "leftImg8bit" / "extra" / "x").mkdir(parents=True)
    (tmp_path / "gtFine" / "extra" / "x").mkdir(parents=True)
    stem = "x/x_000000_000001"
    image = tmp_path / "leftImg8bit" / "extra" / f"{stem}_leftImg8bit.png"
    image.write_bytes(encode(Image.fromarray(np.zeros((8, 16, 3), np.uint8)), "PNG"))
    _png(np.zeros((8, 16)), tmp_path / "gtFine" / "extra" / f"{stem}_gtFine_labelIds.png")
    argv = _cityscapes_args(
        tmp_path, tmp_path / "out", "--split_by_folder", "--max_reject_fraction", "1"
    )
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert "--split_by_folder" in error and "extra" in error


DOC = Path(__file__).resolve().parent.parent / "docs" / "public-datasets.md"


def _doc_commands() -> dict[str, list[str]]:
    """--output_dir -> argv of each `segprep prepare` command of docs/public-datasets.md."""
    commands = {}
    for block in re.findall(r"```bash\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        argv = shlex.split(block.replace("\\\n", " "))
        assert argv[:2] == ["segprep", "prepare"], block
        commands[argv[argv.index("--output_dir") + 1]] = argv[1:]
    return commands


def _palette_png(ids: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(ids.astype(np.uint8), "P")
    image.putpalette([value for index in range(256) for value in (index, 0, 255 - index)])
    path.write_bytes(encode(image, "PNG"))


def _ade20k(root: Path) -> dict[str, tuple[str, np.ndarray]]:
    expected = {}
    for seed, (folder, split) in enumerate(
        [("training", "train")] * 3 + [("validation", "validation")] * 2
    ):
        name = f"ADE_{'train' if split == 'train' else 'val'}_{seed + 1:08d}"
        image = root / "ADEChallengeData2016" / "images" / folder / f"{name}.jpg"
        image.parent.mkdir(parents=True, exist_ok=True)
        image.write_bytes(rgb_jpeg(10, 14, seed))
        ids = np.random.default_rng(seed).integers(0, 151, (10, 14))  # 0: "other"
        _png(ids, root / "ADEChallengeData2016" / "annotations" / folder / f"{name}.png")
        expected[f"{folder}/{name}"] = (split, ids)
    return expected


def _cocostuff(root: Path) -> dict[str, tuple[str, np.ndarray]]:
    expected = {}
    dataset = root / "cocostuff" / "dataset"
    for seed, (folder, split) in enumerate(
        [("train2017", "train")] * 3 + [("val2017", "validation")] * 2
    ):
        name = f"{seed + 9:012d}"
        image = dataset / "images" / folder / f"{name}.jpg"
        image.parent.mkdir(parents=True, exist_ok=True)
        image.write_bytes(rgb_jpeg(10, 14, seed))
        ids = np.random.default_rng(seed).integers(0, 182, (10, 14))
        ids[:, 0] = 255  # unlabeled
        _png(ids, dataset / "annotations" / folder / f"{name}.png")
        expected[f"{folder}/{name}"] = (split, ids)
    return expected


def test_every_documented_dataset_command_runs_on_its_miniature(tmp_path, monkeypatch):
    commands = _doc_commands()  # the other datasets' commands: tests/test_dataset_recipes.py
    assert {"out/voc", "out/cityscapes", "out/ade20k", "out/cocostuff"} <= set(commands)
    monkeypatch.chdir(tmp_path)

    devkit = tmp_path / "VOCdevkit"
    voc_masks = _voc(devkit)
    for key, ids in voc_masks.items():  # VOC's masks are palette PNGs
        _palette_png(ids, devkit / "VOC2012" / "SegmentationClass" / f"{key}.png")
    assert cli.main([*commands["out/voc"], *RUNNER_ARGS]) == 0
    stored = stored_masks(tmp_path / "out/voc")
    assert {key: split for key, (split, _) in stored.items()} == {
        **dict.fromkeys(VOC_TRAIN, "train"),
        **dict.fromkeys(VOC_VAL, "validation"),
    }
    for key, (_, ids) in stored.items():
        np.testing.assert_array_equal(ids, voc_masks[key])
    assert metadata(tmp_path / "out/voc")["num_unlabeled"]["total"] == len(VOC_UNLABELED)

    maps = {
        "cityscapes": (_cityscapes, lambda v: CITYSCAPES_TRAIN_IDS.get(v, 255), 19),
        "ade20k": (_ade20k, lambda v: 255 if v in (0, 255) else v - 1, 150),
        "cocostuff": (_cocostuff, lambda v: v, 182),
    }
    for name, (build, stored_id, classes) in maps.items():
        expected = build(tmp_path / name if name == "cityscapes" else tmp_path)
        assert cli.main([*commands[f"out/{name}"], *RUNNER_ARGS]) == 0, name
        stored = stored_masks(tmp_path / "out" / name)
        assert set(stored) == set(expected), name
        for key, (split, ids) in stored.items():
            assert split == expected[key][0], key
            np.testing.assert_array_equal(ids, np.vectorize(stored_id)(expected[key][1]))
        info = metadata(tmp_path / "out" / name)
        assert info["num_rejected"]["total"] == 0, name
        assert info["classes"]["num_classes"] == classes
        # the presets bring the datasets' own class names
        first = {"cityscapes": "road", "ade20k": "wall"}.get(name)
        assert (info["classes"].get("names") or [None])[0] == first, name
        assert info["classes"].get("class_map", {}).get("source") == {
            "cityscapes": "cityscapes_trainids",
            "ade20k": "ade20k_reduce_zero",
        }.get(name)


# cityscapesScripts helpers/labels.py: labelId -> trainId of the 19 evaluated classes.
CITYSCAPES_TRAIN_IDS = {
    7: 0,
    8: 1,
    11: 2,
    12: 3,
    13: 4,
    17: 5,
    19: 6,
    20: 7,
    21: 8,
    22: 9,  # fmt: skip
    23: 10,
    24: 11,
    25: 12,
    26: 13,
    27: 14,
    28: 15,
    31: 16,
    32: 17,
    33: 18,  # fmt: skip
}


def test_a_class_map_file_maps_ids_before_the_range_check(tmp_path, capsys):
    masks = _voc(tmp_path)
    # Source ids 0, 1, 2 and 255: 2 -> 0, 1 -> 1, 0 is left as it is; no "*".
    mapping = tmp_path / "map.json"
    mapping.write_text('{"2": 0, "1": 1}')
    out = tmp_path / "out"
    argv = _voc_args(
        tmp_path, out, "--unlabeled_images", "skip", "--class_map", str(mapping), classes=2
    )
    assert cli.main(argv) == 0
    stored = stored_masks(out)
    for key, (_, ids) in stored.items():
        np.testing.assert_array_equal(ids, np.where(masks[key] == 2, 0, masks[key]))
    info = metadata(out)
    assert info["classes"]["class_map"] == {"source": str(mapping), "map": {"1": 1, "2": 0}}
    # Statistics are of stored ids: no pixel of class 2 could be counted.
    counted = sum(info["classes"]["splits"][split]["pixels"][0] for split in info["splits"])
    assert counted == sum(int(((m == 0) | (m == 2)).sum()) for m in masks.values())


def test_a_map_leaving_ids_out_of_range_rejects_those_masks(tmp_path):
    masks = _voc(tmp_path)
    mapping = tmp_path / "map.json"
    mapping.write_text('{"0": 1, "1": 0}')  # 2 stays 2: out of range for 2 classes
    out = tmp_path / "out"
    argv = _voc_args(
        tmp_path,
        out,
        "--unlabeled_images",
        "skip",
        "--class_map",
        str(mapping),
        "--max_reject_fraction",
        "1",
        classes=2,
    )
    assert cli.main(argv) == 0
    assert {key: r["reason"] for key, r in rejects(out).items()} == {
        key: "mask_values" for key, ids in masks.items() if (ids == 2).any()
    }


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"1": 7}', "stores ids [7]"),
        ('{"x": 1}', "not an integer id"),
        ('{"1": 0, "1": 1}', "given twice"),
        ("[1, 2]", "expected a JSON object"),
        ('{"1_0": 1}', "key '1_0' is not an integer id"),  # int() would read 10
        ('{"\u0663": 1}', "is not an integer id"),  # ARABIC-INDIC DIGIT THREE
        ('{"1": ' + "9" * 5000 + "}", "a number or literal of more than 100 characters"),
        (b'{"1": 1, "\xff": 2}', "map.json: not UTF-8 text"),
    ],
)
def test_a_bad_class_map_is_a_usage_error(tmp_path, capsys, content, words):
    _voc(tmp_path)
    mapping = tmp_path / "map.json"
    if isinstance(content, bytes):
        mapping.write_bytes(content)
    else:
        mapping.write_text(content)
    argv = _voc_args(tmp_path, tmp_path / "out", "--class_map", str(mapping))
    assert cli.main(argv) == 2
    assert words in capsys.readouterr().err


def test_the_lookup_table_and_the_sorted_path_map_alike():
    from transforms.codecs.class_map import load_preset

    preset = load_preset("cityscapes_trainids")
    small = np.arange(40).reshape(5, 8)
    with_negative = np.concatenate([small, np.full((1, 8), -1)])  # license plate's -1
    expected = np.vectorize(lambda v: CITYSCAPES_TRAIN_IDS.get(v, 255))(with_negative)
    np.testing.assert_array_equal(preset.apply(small), expected[:5])
    np.testing.assert_array_equal(preset.apply(with_negative), expected)


def test_unlabeled_images_never_dilute_the_reject_fraction(tmp_path, capsys):
    _voc(tmp_path)
    for key in VOC_TRAIN:  # 3 of the 5 labelled entries broken: 60 % of the judged ones
        (tmp_path / "VOC2012" / "SegmentationClass" / f"{key}.png").write_bytes(b"not a png")
    out = tmp_path / "out"
    argv = _voc_args(tmp_path, out, *_split_files(tmp_path), "--unlabeled_images", "skip")
    assert cli.main(argv) == 1
    assert "3 of 5 entries rejected (60 %; 7 unlabeled" in capsys.readouterr().err
    assert not (out / "metadata.json").exists()


def test_a_test_split_gets_shards_in_the_plan_and_its_own_names():
    from transforms.splits import FolderSplits, SplitSize, plan_num_shards

    sizes = {"train": SplitSize(40, 4000), "validation": SplitSize(8, 800), "test": SplitSize(8, 1)}
    plan = plan_num_shards(sizes, num_shards=7)
    assert list(plan) == ["train", "validation", "test"]
    assert sum(plan.values()) == 7 and plan["test"] >= 1
    splits = FolderSplits()
    assert [splits.split_of(k) for k in ("training/a", "VAL/b", "test/c", "trainval/d")] == [
        "train",
        "validation",
        "test",
        None,
    ]
    assert "'trainval'" in splits.left_out_detail("trainval/d")
