"""Side tables (digest and hash tables) are checked against metadata.json before use: an
append never stores a key twice, a leakage check never checks part of a test set."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from beam_pipeline.cli import main
from tests.helpers.outputs import published
from tests.helpers.runs import job_args
from transforms.splits import SplitFractions


class _Inputs:
    def __init__(self, root: Path) -> None:
        self.image_dir = root / "images"
        self.mask_dir = root / "masks"


def _prepare(inputs: Path, out: Path, *extra: str) -> int:
    return main(["prepare", *job_args(_Inputs(inputs), out, "--num_shards", "2", *extra)])


def _snapshot(out: Path) -> dict[str, str]:
    return {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in published(out)}


def _metadata(out: Path) -> dict:
    return json.loads((out / "metadata.json").read_text())


def _plant_copy_across_splits(root: Path) -> tuple[str, str]:
    """Make one entry an exact copy of another whose key hashes to the other split: the
    duplicate group stores both in the split of the smaller key."""
    keys = sorted(path.stem for path in (root / "images").iterdir())
    fractions = SplitFractions(0.9, 0.1)
    validation = next(key for key in keys if fractions.split_of(key) == "validation")
    train = next(key for key in keys if fractions.split_of(key) == "train" and key != validation)
    for folder in ("images", "masks"):
        source = next((root / folder).glob(f"{validation}*"))
        target = next((root / folder).glob(f"{train}*"))
        shutil.copy(source, target)
    return train, validation


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from beam_pipeline.commands.sample_data import write_sample_data

    root = tmp_path_factory.mktemp("side_tables")
    write_sample_data(root / "in", count=16, seed=5, broken_fraction=0.0, height=32, width=24)
    moved = _plant_copy_across_splits(root / "in")
    out = root / "out"
    assert _prepare(root / "in", out) == 0
    return {"inputs": root / "in", "out": out, "moved": moved}


def _damage(table: Path, how: str) -> None:
    lines = table.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 4
    if how == "truncated":
        table.write_bytes(b"".join(lines[: len(lines) // 2]))
    elif how == "line_dropped":
        table.write_bytes(b"".join(lines[:1] + lines[2:]))
    elif how == "reversed":
        table.write_bytes(b"".join(reversed(lines)))


@pytest.mark.parametrize("how", ["truncated", "line_dropped", "reversed"])
def test_a_damaged_digest_table_refuses_the_append(prepared, tmp_path, capsys, how):
    out = tmp_path / "out"
    shutil.copytree(prepared["out"], out)
    _damage(out / "index" / "train.digests.jsonl", how)
    before = _snapshot(out)
    assert _prepare(prepared["inputs"], out, "--append") == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert "index/train.digests.jsonl" in error and "segprep verify" in error
    assert _snapshot(out) == before
    assert len(_metadata(out)["dataset_versions"]) == 1


def test_an_append_finds_a_key_a_duplicate_group_moved(prepared, tmp_path):
    """Issue #30: the key whose group moved it out of its own hash's split is found there."""
    out = tmp_path / "out"
    shutil.copytree(prepared["out"], out)
    train_key, validation_key = prepared["moved"]
    info = _metadata(out)
    stored = {
        split: {
            json.loads(line)[0]
            for line in (out / info["dataset_versions"][0]["digest_tables"][split]["file"])
            .read_text()
            .splitlines()
        }
        for split in ("train", "validation")
    }
    moved = [
        key
        for key in prepared["moved"]
        if key not in stored[SplitFractions(0.9, 0.1).split_of(key)]
    ]
    assert moved, f"the planted copies {train_key}, {validation_key} were not grouped"
    assert _prepare(prepared["inputs"], out, "--append") == 0
    latest = _metadata(out)["dataset_versions"][-1]
    assert latest["skipped_identical"] == 16
    assert all(not names for names in latest["shards"].values())
    assert main(["verify", str(out)]) == 0
