"""Breaks found by probing today's features through the real CLI, as an outside user would.

Each test states what should happen and fails while the break is there. Small synthetic data
(`segprep sample-data`), the real `segprep` console script as a process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from beam_pipeline.runtime.commit_journal import HOOK_VARIABLE

SEGPREP = [str(Path(os.environ.get("VIRTUAL_ENV", "/work/main/.venv")) / "bin" / "segprep")]
REPO = Path(__file__).resolve().parent.parent


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    full_env.update(env or {})
    return subprocess.run(
        [*SEGPREP, *map(str, args)], capture_output=True, text=True, env=full_env, timeout=600
    )


def _rename_keys(root: Path, prefix: str) -> None:
    for folder in ("images", "masks"):
        for path in (root / folder).iterdir():
            path.rename(path.with_name(prefix + path.name))


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> tuple[Path, Path]:
    """A first batch of 40 binary entries and a second of 20 under other keys."""
    root = tmp_path_factory.mktemp("probe")
    first, second = root / "first", root / "second"
    assert _run("sample-data", first, "--count", "40").returncode == 0
    assert _run("sample-data", second, "--count", "20", "--seed", "7").returncode == 0
    _rename_keys(second, "n")
    return first, second


def _prepare(inputs: Path, out: Path, *extra: str, env: dict | None = None):
    return _run(
        "prepare",
        "--image_dir",
        inputs / "images",
        "--mask_dir",
        inputs / "masks",
        "--output_dir",
        out,
        *extra,
        env=env,
    )


# 1. An append killed once its journal is written leaves a pending commit. The next
# `prepare --append` does not recover it (a plain prepare does) and says the folder holds no
# output at all, advising a fresh prepare; a user who then adds --overwrite loses every
# version. It should recover (roll back) and append, or at least point to `verify --repair`.
def test_an_append_after_a_killed_append_recovers_or_points_to_repair(batches, tmp_path):
    first, second = batches
    out = tmp_path / "out"
    assert _prepare(first, out).returncode == 0
    killed = _prepare(second, out, "--append", env={HOOK_VARIABLE: "journal:kill"})
    assert killed.returncode == -9
    again = _prepare(second, out, "--append")
    assert "without --append first" not in again.stderr, again.stderr
    assert again.returncode == 0 or "--repair" in again.stderr, again.stderr


# 2. The summary of an append names the output folder stored in the earlier run's parameters,
# not the folder this run wrote: an output copied (or moved) elsewhere and appended to there
# prints `output: <old folder>`.
def test_an_appends_summary_names_the_folder_it_wrote(batches, tmp_path):
    first, second = batches
    original, moved = tmp_path / "original", tmp_path / "moved"
    assert _prepare(first, original).returncode == 0
    shutil.copytree(original, moved)
    appended = _prepare(second, moved, "--append")
    assert appended.returncode == 0, appended.stderr
    output_lines = [line for line in appended.stdout.splitlines() if "output:" in line]
    assert output_lines, appended.stdout
    assert str(moved) in output_lines[0], output_lines[0]


# 3. A CVAT polygon with a huge but finite coordinate (1e300) is neither drawn (clipped to
# the image, as docs/classes.md promises) nor rejected: the image is published with an
# all-background mask, its label silently lost. 1e12 draws the same triangle correctly.
def test_a_cvat_polygon_with_a_huge_coordinate_is_drawn_or_rejected(tmp_path):
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (60, 80), (90, 120, 30)).save(images / "a.jpg")
    Image.new("RGB", (60, 80), (90, 120, 30)).save(images / "b.jpg")
    shapes = {"a": "1e12", "b": "1e300"}
    body = "".join(
        f'<image id="{i}" name="{key}.jpg" width="60" height="80">'
        f'<polygon label="cat" points="0,0;{m},0;{m},{m}" z_order="0"/></image>'
        for i, (key, m) in enumerate(shapes.items())
    )
    export = tmp_path / "cvat.xml"
    export.write_text(
        '<?xml version="1.0" encoding="utf-8"?><annotations><version>1.1</version>'
        "<meta><task><labels><label><name>cat</name></label></labels></task></meta>"
        f"{body}</annotations>"
    )
    out = tmp_path / "out"
    result = _run(
        "prepare",
        "--image_dir",
        images,
        "--annotations",
        export,
        "--mask_type",
        "classes",
        "--output_dir",
        out,
        "--train_size",
        "1",
        "--validation_size",
        "0",
        "--max_reject_fraction",
        "1",
    )
    assert result.returncode == 0, result.stderr
    from shard_reader.source import RecordSource

    source = RecordSource(out, "train")
    cat_pixels = {}
    for i in range(len(source)):
        batch = source.read_batch([i])
        cat_pixels[batch["key"][0]] = int((np.asarray(batch["mask"][0]) == 1).sum())
    assert cat_pixels.get("a", 0) > 0
    rejected = (out / "rejects.jsonl").read_text() if (out / "rejects.jsonl").exists() else ""
    assert cat_pixels.get("b", 0) == cat_pixels["a"] or '"key": "b"' in rejected, (
        cat_pixels,
        rejected,
    )


# 4. The class summary prints a share of 100 % in scientific notation: "background 1e+02 %".
def test_the_class_summary_prints_a_whole_share_as_a_percentage(tmp_path):
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (40, 30), (10, 20, 30)).save(images / "a.jpg")
    export = tmp_path / "cvat.xml"
    export.write_text(
        '<?xml version="1.0" encoding="utf-8"?><annotations><version>1.1</version>'
        "<meta><task><labels><label><name>cat</name></label></labels></task></meta>"
        '<image id="0" name="a.jpg" width="40" height="30"></image></annotations>'
    )
    result = _run(
        "prepare",
        "--image_dir",
        images,
        "--annotations",
        export,
        "--mask_type",
        "classes",
        "--output_dir",
        tmp_path / "out",
        "--train_size",
        "1",
        "--validation_size",
        "0",
    )
    assert result.returncode == 0, result.stderr
    assert "e+02 %" not in result.stdout, result.stdout
    assert "100 %" in result.stdout, result.stdout


# 5. `prepare --help` sends readers of --annotations to docs/annotation_tools.md, which does
# not exist (the section is in docs/classes.md).
def test_every_doc_prepare_help_names_exists():
    import re

    result = _run("prepare", "--help")
    named = set(re.findall(r"docs/[\w./-]+?\.md", result.stdout.replace("\n", " ")))
    assert named
    missing = sorted(name for name in named if not (REPO / name).exists())
    assert not missing, missing


# 6. A manifest that is valid JSON but not an object (`[1, 2]`) crashes `segprep verify`
# (and `verify --repair`) with "failed: AttributeError: 'list' object has no attribute 'get'";
# a manifest that is not JSON at all is reported as a problem. It should be reported too.
@pytest.mark.parametrize("repair", [False, True])
def test_verify_reports_a_manifest_that_is_a_json_list(batches, tmp_path, repair):
    first, _ = batches
    out = tmp_path / "out"
    assert _prepare(first, out).returncode == 0
    (out / ".segprep" / "manifest.json").write_text("[1, 2]\n")
    result = _run("verify", out, *(["--repair"] if repair else []))
    assert "AttributeError" not in result.stderr, result.stderr
    assert "manifest.json" in result.stdout + result.stderr, result.stdout + result.stderr


# 7. With a damaged manifest, `prepare --append` (and `--overwrite`) blame duplicates.jsonl,
# "which segprep did not write": it did write it, and the advice (move it away) would not
# help. The message should name the damaged manifest.
@pytest.mark.parametrize("mode", ["--append", "--overwrite"])
def test_a_damaged_manifest_is_named_not_a_file_segprep_wrote(batches, tmp_path, mode):
    first, second = batches
    out = tmp_path / "out"
    assert _prepare(first, out).returncode == 0
    (out / ".segprep" / "manifest.json").write_text('{"state":')
    result = _prepare(second, out, mode)
    # A manifest segprep wrote is never half written: one that is not JSON is no manifest,
    # and metadata.json (read by DatasetInfo, which knows every file kind) says what is ours.
    assert "which segprep did not write" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr


# 8. `--leakage_check` naming the --output_dir itself (with --overwrite) compares the new run
# with the output it replaces: every entry is a `leaks_into` reject of itself and the run is
# refused at 100 %. It should be a usage error (exit 2) naming the mistake.
def test_leakage_check_of_the_output_itself_is_a_usage_error(batches, tmp_path):
    first, _ = batches
    out = tmp_path / "out"
    assert _prepare(first, out).returncode == 0
    result = _prepare(first, out, "--overwrite", "--leakage_check", out)
    assert result.returncode == 2, result.stderr
    assert "leaks_into" not in result.stderr, result.stderr


def _split_lists(folder: Path, lists: dict[str, list[str]]) -> list[str]:
    args = []
    for split, keys in lists.items():
        path = folder / f"{split}.txt"
        path.write_text("".join(key + "\n" for key in keys))
        args += ["--split_file", f"{split}={path}"]
    return args


# 9. `prepare --append --split_file ...` crashes before anything runs:
# "failed: AttributeError: 'SplitLists' object has no attribute 'train'"
# (beam_pipeline/launch/append.py parameter_differences reads fractions.train). An output
# split by lists (VOC) cannot grow at all: without --split_file the append is refused with
# "train_size: output null, this run 0.9", a flag the user never gave (item 11).
def test_an_append_with_split_files_runs_or_is_refused_in_one_line(batches, tmp_path):
    first, second = batches
    out = tmp_path / "out"
    base = _split_lists(tmp_path, {"train": ["00001", "00002", "00003"], "validation": ["00004"]})
    assert _prepare(first, out, *base).returncode == 0
    lists = tmp_path / "v2"
    lists.mkdir()
    more = _split_lists(lists, {"train": ["n00001", "n00002"], "validation": ["n00003"]})
    result = _prepare(second, out, "--append", *more)
    assert "AttributeError" not in result.stderr, result.stderr
    assert result.returncode in (0, 2), result.stderr


# 10. The same crash with --split_by_folder: "'FolderSplits' object has no attribute 'train'".
def test_an_append_with_split_by_folder_runs_or_is_refused_in_one_line(batches, tmp_path):
    first, _ = batches
    tree = tmp_path / "tree"
    for split, keys in {"train": ["00001", "00002", "00003"], "val": ["00004"]}.items():
        for key in keys:
            for folder, pattern in (("images", f"{key}.jpg"), ("masks", f"{key}*.mat")):
                (tree / folder / split).mkdir(parents=True, exist_ok=True)
                for path in (first / folder).glob(pattern):
                    shutil.copy(path, tree / folder / split / path.name)
    out = tmp_path / "out"
    assert _prepare(tree, out, "--split_by_folder").returncode == 0
    for folder, pattern in (("images", "00005.jpg"), ("masks", "00005*.mat")):
        for path in (first / folder).glob(pattern):
            shutil.copy(path, tree / folder / "train" / path.name)
    result = _prepare(tree, out, "--split_by_folder", "--append")
    assert "AttributeError" not in result.stderr, result.stderr
    assert result.returncode in (0, 2), result.stderr


# 11. Appending to a list-split output without --split_file is refused naming train_size and
# validation_size ("output null, this run 0.9"), flags the user did not give; the message
# should say the output was split by --split_file.
def test_an_append_to_a_list_split_output_names_split_file(batches, tmp_path):
    first, second = batches
    out = tmp_path / "out"
    base = _split_lists(tmp_path, {"train": ["00001", "00002", "00003"], "validation": ["00004"]})
    assert _prepare(first, out, *base).returncode == 0
    result = _prepare(second, out, "--append")
    assert result.returncode == 2
    assert "split_file" in result.stderr, result.stderr


# 12. A Label Studio task whose image is not an image name is rejected with a detail that
# calls the export COCO ("COCO image 2: file_name 'etc/passwd' ..."), not Label Studio's.
def test_a_label_studio_reject_names_label_studio(tmp_path):
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (40, 30)).save(images / "a.jpg")
    export = tmp_path / "ls.json"
    export.write_text(
        '[{"id": 1, "data": {"image": "/data/local-files/?d=a.jpg"}, "annotations": [{"result":'
        ' [{"type": "rectanglelabels", "original_width": 40, "original_height": 30, "value":'
        ' {"x": 0, "y": 0, "width": 50, "height": 50, "rotation": 0,'
        ' "rectanglelabels": ["cat"]}}]}]},'
        ' {"id": 2, "data": {"image": "file:///etc/passwd"}, "annotations": []}]'
    )
    out = tmp_path / "out"
    result = _run(
        "prepare",
        "--image_dir",
        images,
        "--annotations",
        export,
        "--annotation_format",
        "labelstudio",
        "--mask_type",
        "classes",
        "--output_dir",
        out,
        "--max_reject_fraction",
        "1",
    )
    assert result.returncode == 0, result.stderr
    rejects = (out / "rejects.jsonl").read_text()
    assert "passwd" in rejects
    assert "COCO" not in rejects, rejects
