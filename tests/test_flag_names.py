"""Flags named for what they do; the old names still work and say, in one line, what to use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.helpers.runs import RUNNER_ARGS

SEGPREP = [sys.executable, "-m", "beam_pipeline"]  # `segprep prepare`


@pytest.fixture(scope="module")
def coco_set(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("names")
    (root / "img").mkdir()
    Image.fromarray(np.full((20, 30, 3), 90, np.uint8)).save(root / "img" / "a.jpg")
    Image.fromarray(np.full((20, 30, 3), 90, np.uint8)).save(root / "img" / "b.jpg")
    square = [[5.0, 5.0, 15.0, 5.0, 15.0, 15.0, 5.0, 15.0]]
    coco = {
        "images": [{"id": 1, "file_name": "a.jpg", "height": 20, "width": 30}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 7, "iscrowd": 0, "segmentation": square}
        ],
        "categories": [{"id": 7, "name": "thing"}, {"id": 8, "name": "other"}],
    }
    (root / "coco.json").write_text(json.dumps(coco))
    return root


def _prepare(root: Path, out: str, *flags: str) -> subprocess.CompletedProcess:
    argv = ["--image_dir", str(root / "img"), "--output_dir", str(root / out)]
    split = ["--train_size", "1", "--validation_size", "0", "--max_reject_fraction", "1"]
    coco = ["--mask_type", "classes", "--coco_annotations", str(root / "coco.json")]
    command = [*SEGPREP, *argv, *coco, *split, *flags, *RUNNER_ARGS]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(
    ("old", "new", "value"),
    [
        ("--coco_unlabeled", "--unlabeled_pixels", "ignore"),
        ("--unlabeled", "--unlabeled_pixels", "ignore"),
        ("--unlabeled_images", "--images_without_mask", "skip"),
    ],
)
def test_old_flag_names_are_aliases_with_one_deprecation_line(coco_set, old, new, value):
    done = _prepare(coco_set, f"out-{old.strip('-')}", old, value)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "deprecated" in line]
    assert warned == [f"segprep: warning: {old} is deprecated, use {new} (same values)"]
    info = json.loads((coco_set / f"out-{old.strip('-')}" / "metadata.json").read_text())
    if new == "--unlabeled_pixels":
        assert info["classes"]["coco"]["unlabeled"] == "ignore"
    else:
        assert info["parameters"]["unlabeled_images"] == "skip"


def test_new_flag_names_print_no_deprecation(coco_set):
    done = _prepare(
        coco_set, "out-new", "--unlabeled_pixels", "ignore", "--images_without_mask", "skip"
    )
    assert done.returncode == 0, done.stderr
    assert "deprecated" not in done.stderr
    help_text = subprocess.run(
        [*SEGPREP, "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--unlabeled_pixels" in help_text and "--images_without_mask" in help_text
    assert "--coco_unlabeled" not in help_text and "--unlabeled_images" not in help_text


def test_planning_reads_the_flags_as_one_frozen_value(sample_dataset, tmp_path, monkeypatch):
    """Every planning step gets the same parsed flags, and none of them can change them."""
    import dataclasses

    from beam_pipeline.launch import masks, plan
    from tests.helpers.runs import job_args

    seen = []
    real = masks.plan_masks

    def recording(args, export):
        seen.append(args)
        return real(args, export)

    monkeypatch.setattr(masks, "plan_masks", recording)
    argv = job_args(sample_dataset, tmp_path / "out", "--dry_run", "--num_shards", "3")
    made = plan.make_plan(argv)
    (args,) = seen
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.num_shards = 4
    assert args.num_shards == 3 and made.job.planning.num_shards == 3
    parsed, _ = plan.build_parser().parse_known_args(argv)
    assert args == plan.frozen_args(parsed)
