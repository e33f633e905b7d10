"""`segprep sample-data` (portraits): distinct images, a few planted copies of named
originals, and a duplicate search that finds exactly those copies."""

from __future__ import annotations

import io
import json
import os
import re

import numpy as np
import pytest
import scipy.io
from PIL import Image

from beam_pipeline.cli import main
from beam_pipeline.commands.sample_data import (
    COPY_KINDS,
    MIN_DISTINCT_DISTANCE,
    write_sample_data,
)
from tests.helpers.runs import RUNNER_ARGS
from transforms.duplicates import hamming, perceptual_hash

_MAT_HEADER = 128  # MATLAB v5's text header holds the time the file was written
_PLANTED = re.compile(r"  (\d{5}): (.+) of (\d{5})")


def _run_sample_data(root, capsys, *extra: str) -> list[str]:
    assert main(["sample-data", str(root), *extra]) == 0
    return capsys.readouterr().out.splitlines()


def _hashes(image_dir) -> dict[str, int]:
    hashes = {}
    for path in sorted(image_dir.glob("*.jpg")):
        data = path.read_bytes()
        try:
            hashes[path.stem] = perceptual_hash(data)
        except ValueError:
            continue  # a broken-on-purpose image
    return hashes


def test_the_output_names_each_planted_copy_and_its_original(tmp_path, capsys):
    lines = _run_sample_data(tmp_path / "s", capsys, "--count", "200")
    summary = write_sample_data(tmp_path / "again", count=200)  # the same seed: the same plan
    assert len(summary.planted) == 4  # 2 % of 200
    originals = ", ".join(copy.original for copy in summary.planted)
    assert f"planted 4 near copies (of {originals}):" in lines
    for copy in summary.planted:
        assert f"  {copy.key}: {copy.kind} of {copy.original}" in lines
    assert {copy.kind for copy in summary.planted} == set(COPY_KINDS)
    assert not {c.key for c in summary.planted} & set(summary.broken)  # copies are intact
    assert not {c.original for c in summary.planted} & set(summary.broken)


def test_planted_copies_are_near_and_every_other_pair_is_far(tmp_path):
    summary = write_sample_data(tmp_path, count=150, seed=11, height=400, width=300)
    hashes = _hashes(summary.image_dir)
    pairs = {frozenset((c.key, c.original)) for c in summary.planted}
    for copy in summary.planted:
        assert hamming(hashes[copy.key], hashes[copy.original]) <= 6, copy
    keys = sorted(hashes)
    closest = min(
        hamming(hashes[a], hashes[b])
        for i, a in enumerate(keys)
        for b in keys[i + 1 :]
        if frozenset((a, b)) not in pairs
    )
    assert closest >= MIN_DISTINCT_DISTANCE


def test_copies_share_their_originals_mask_and_size(tmp_path):
    summary = write_sample_data(tmp_path, count=150, seed=2, height=160, width=120)
    for copy in summary.planted:
        mask_file = summary.mask_dir / f"{copy.key}_mask.mat"
        assert (
            mask_file.read_bytes() == (summary.mask_dir / f"{copy.original}_mask.mat").read_bytes()
        )
        image = Image.open(summary.image_dir / f"{copy.key}.jpg")
        assert image.size == (120, 160) and image.format == "JPEG"
        same_bytes = (summary.image_dir / f"{copy.key}.jpg").read_bytes() == (
            summary.image_dir / f"{copy.original}.jpg"
        ).read_bytes()
        assert same_bytes == (copy.kind == "exact copy")


def test_masks_are_0_1_figures_of_the_image_size(tmp_path):
    summary = write_sample_data(tmp_path, count=20, seed=4, broken_fraction=0.0)
    fractions = []
    for index in range(1, 21):
        key = f"{index:05d}"
        mask = scipy.io.loadmat(summary.mask_dir / f"{key}_mask.mat")["mask"]
        image = Image.open(summary.image_dir / f"{key}.jpg")
        assert mask.shape == (image.height, image.width) == (800, 600)
        assert set(np.unique(mask).tolist()) == {0, 1}
        fractions.append(mask.mean())
    assert 0.05 < min(fractions) and max(fractions) < 0.9  # a figure, never the whole frame


def test_the_same_seed_writes_the_same_bytes(tmp_path):
    first = write_sample_data(tmp_path / "a", count=30, seed=5, height=160, width=120)
    second = write_sample_data(tmp_path / "b", count=30, seed=5, height=160, width=120)
    other = write_sample_data(tmp_path / "c", count=30, seed=6, height=160, width=120)
    for folder in ("images", "masks"):
        names = sorted(p.name for p in (tmp_path / "a" / folder).iterdir())
        assert names == sorted(p.name for p in (tmp_path / "b" / folder).iterdir())
        for name in names:
            skip = _MAT_HEADER if name.endswith(".mat") else 0
            a = (tmp_path / "a" / folder / name).read_bytes()[skip:]
            assert a == (tmp_path / "b" / folder / name).read_bytes()[skip:], name
    assert first.planted == second.planted and first.broken == second.broken
    image = (first.image_dir / "00001.jpg").read_bytes()
    assert image != (other.image_dir / "00001.jpg").read_bytes()


def test_prepare_groups_exactly_the_planted_copies(tmp_path, capsys):
    """Through the real CLI: sample-data, then prepare with the default duplicate search."""
    data = tmp_path / "data"
    lines = _run_sample_data(data, capsys, "--count", "60", "--seed", "3")
    planted = [_PLANTED.fullmatch(line) for line in lines]
    planted = [match.groups() for match in planted if match]  # (copy, kind, original)
    assert len(planted) == 2 and "planted 2 near copies" in "\n".join(lines)
    out = tmp_path / "out"
    argv = ["prepare", "--image_dir", str(data / "images"), "--mask_dir", str(data / "masks")]
    assert main([*argv, "--output_dir", str(out), *RUNNER_ARGS]) == 0
    assert "duplicates: 2 groups of 4 entries" in capsys.readouterr().out
    lines = (out / "duplicates.jsonl").read_text().splitlines()
    groups = {tuple(json.loads(line)["keys"]): json.loads(line) for line in lines}
    expected = {tuple(sorted((copy, original))): kind for copy, kind, original in planted}
    assert set(groups) == set(expected)  # every copy found; no distinct image grouped
    for keys, kind in expected.items():
        assert groups[keys]["kind"] == ("exact" if kind == "exact copy" else "near")
        assert groups[keys]["max_distance"] <= 6


def test_copy_fraction_zero_plants_nothing(tmp_path):
    summary = write_sample_data(tmp_path, count=60, height=80, width=60, copy_fraction=0.0)
    assert summary.planted == ()
    hashes = list(_hashes(summary.image_dir).values())
    closest = min(hamming(a, b) for i, a in enumerate(hashes) for b in hashes[i + 1 :])
    assert closest >= MIN_DISTINCT_DISTANCE


def test_a_tiny_sample_plants_nothing_it_cannot_name(tmp_path):
    summary = write_sample_data(tmp_path, count=1, broken_fraction=0.0, height=40, width=30)
    assert summary.planted == ()
    assert summary.planted_lines() == ["planted 0 near copies: every image is distinct"]
    assert Image.open(io.BytesIO((summary.image_dir / "00001.jpg").read_bytes())).size == (30, 40)


@pytest.mark.parametrize("kind", ["file", "link", "fifo"])
def test_sample_data_never_writes_over_or_through_what_is_there(tmp_path, capsys, kind):
    """A file of the user's in images/ was replaced, a link there written through, a FIFO
    there opened (the run hung): sample-data writes only into new or empty folders."""
    target = tmp_path / "data"
    (target / "images").mkdir(parents=True)
    canary = tmp_path / "canary.txt"
    canary.write_text("the user's")
    if kind == "file":
        (target / "images" / "00003.jpg").write_text("the user's")
    elif kind == "link":
        (target / "images" / "00001.jpg").symlink_to(canary)
    else:
        os.mkfifo(target / "images" / "00001.jpg")
    assert main(["sample-data", str(target), "--count", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds files" in err, err
    assert canary.read_text() == "the user's" and not (target / "masks").exists()
    if kind == "file":
        assert (target / "images" / "00003.jpg").read_text() == "the user's"
