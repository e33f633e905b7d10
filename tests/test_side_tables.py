"""Side tables (digest and hash tables) are checked against metadata.json before use: an
append never stores a key twice, a leakage check never checks part of a test set."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
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


def test_a_restamped_unsorted_digest_table_refuses_the_append(prepared, tmp_path, capsys):
    """Two lines swapped and the sha256 in metadata.json restamped: the table matches its
    sha256, but the job's bisection would miss the key moved down and store it again."""
    out = tmp_path / "out"
    shutil.copytree(prepared["out"], out)
    table = out / "index" / "train.digests.jsonl"
    lines = table.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 4
    lines[1], lines[2] = lines[2], lines[1]
    table.write_bytes(b"".join(lines))
    metadata = out / "metadata.json"
    old = _metadata(out)["dataset_versions"][0]["digest_tables"]["train"]["sha256"]
    new = hashlib.sha256(table.read_bytes()).hexdigest()
    metadata.write_text(metadata.read_text().replace(old, new))
    before = _snapshot(out)

    assert _prepare(prepared["inputs"], out, "--append") == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert "index/train.digests.jsonl: not sorted at line 3" in error
    assert "nothing was appended" in error and "segprep verify" in error
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


# ---- the leakage check ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def leakage(tmp_path_factory):
    """A test output, and inputs holding an exact copy of each of its images (`leakNNNNN`)."""
    from beam_pipeline.commands.sample_data import write_sample_data

    root = tmp_path_factory.mktemp("leakage")
    write_sample_data(root / "test", count=10, seed=3, broken_fraction=0.0, height=32, width=24)
    test_out = root / "test_out"
    assert _prepare(root / "test", test_out) == 0
    write_sample_data(root / "train", count=4, seed=4, broken_fraction=0.0, height=32, width=24)
    leaks = []
    for image in sorted((root / "test" / "images").iterdir()):
        shutil.copy(image, root / "train" / "images" / f"leak{image.name}")
        for mask in (root / "test" / "masks").glob(f"{image.stem}[._]*"):
            shutil.copy(mask, root / "train" / "masks" / f"leak{mask.name}")
        leaks.append(f"leak{image.stem}")
    return {"test_out": test_out, "train": root / "train", "leaks": leaks}


def _leakage_run(leakage, test_out: Path, out: Path) -> int:
    return _prepare(
        leakage["train"], out, "--leakage_check", str(test_out), "--max_reject_fraction", "1"
    )


def _relist(test_out: Path, split: str = "train", **changes) -> None:
    """metadata.json's hashes entry of `split` changed, or (no changes) made to list the
    table's bytes as they are now."""
    info = _metadata(test_out)
    entry = info["splits"][split]["hashes"]
    if changes:
        entry.update(changes)
    else:
        data = (test_out / entry["file"]).read_bytes()
        entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (test_out / "metadata.json").write_text(json.dumps(info))


def test_the_intact_test_set_finds_every_leak(leakage, tmp_path):
    out = tmp_path / "out"
    assert _leakage_run(leakage, leakage["test_out"], out) == 0
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    leaked = {row["key"] for row in rejects if row["reason"] == "leaks_into"}
    assert set(leakage["leaks"]) <= leaked


def _damage_hashes(test_out: Path, how: str) -> None:
    table = test_out / "index" / "train.hashes.jsonl"
    data = table.read_bytes()
    if how == "truncated":
        table.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        table.write_bytes(b"")
    elif how == "fifo":
        table.unlink()
        os.mkfifo(table)
    elif how == "link_to_dev_zero":
        table.unlink()
        table.symlink_to("/dev/zero")
    elif how == "link_to_a_copy":
        table.unlink()
        outside = test_out.parent / "copy.hashes.jsonl"
        outside.write_bytes(data)
        table.symlink_to(outside)
    elif how == "index_folder_a_link":
        shutil.move(test_out / "index", test_out.parent / "elsewhere")
        (test_out / "index").symlink_to(test_out.parent / "elsewhere")
    elif how == "name_outside":
        (test_out.parent.parent / "file").write_bytes(data)
        _relist(test_out, file="../../file")
    elif how == "long_line_listed":
        table.write_bytes(data + b'{"key": "' + b"x" * (1 << 20) + b'"}\n')
        _relist(test_out)
    elif how == "padded_listed":  # one row's copies under new keys: far more rows than records
        row = json.loads(data.splitlines()[0])
        records = _metadata(test_out)["splits"]["train"]["num_examples"]
        padding = (json.dumps({**row, "key": f"zz{n:07d}"}) + "\n" for n in range(100 * records))
        table.write_bytes(data + "".join(padding).encode())
        _relist(test_out)
    elif how == "negative_phash_listed":  # int(x, 16) would read it as -1
        rows = [json.loads(line) for line in data.splitlines()]
        rows[0]["phash"] = "-000000000000001"
        table.write_bytes(b"".join(json.dumps(row).encode() + b"\n" for row in rows))
        _relist(test_out)


@pytest.mark.parametrize(
    "how",
    [
        "truncated",
        "empty",
        "fifo",
        "link_to_dev_zero",
        "link_to_a_copy",
        "index_folder_a_link",
        "name_outside",
        "long_line_listed",
        "padded_listed",
    ],
)
def test_a_damaged_hash_table_refuses_the_leakage_check(leakage, tmp_path, capsys, how):
    test_out = tmp_path / "test_out"
    shutil.copytree(leakage["test_out"], test_out)
    _damage_hashes(test_out, how)
    out = tmp_path / "out"
    assert _leakage_run(leakage, test_out, out) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert f"--leakage_check {test_out}" in error
    assert "train.hashes.jsonl" in error or "../../file" in error
    assert "segprep verify" in error or how == "name_outside"
    assert "records can need" in error or how != "padded_listed"
    assert not (out / "metadata.json").exists()


def test_a_listed_row_with_a_signed_phash_fails_the_run_naming_its_line(leakage, tmp_path, capsys):
    """A table whose bytes metadata.json lists, one row's phash "-000000000000001" (which
    int(x, 16) reads as -1): the job refuses it by file and line, not with numpy's overflow
    in the band search, and publishes nothing."""
    test_out = tmp_path / "test_out"
    shutil.copytree(leakage["test_out"], test_out)
    _damage_hashes(test_out, "negative_phash_listed")
    out = tmp_path / "out"
    assert _leakage_run(leakage, test_out, out) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "train.hashes.jsonl line 1: phash '-000000000000001' is not 16 hex digits" in error
    assert "nothing was published" in error
    assert not (out / "metadata.json").exists()


def _without_credentials(tmp_path: Path, argv: list[str]):
    """`segprep argv` with no emulator and no credentials; (its result, metadata probes)."""
    from tests.helpers.gcs_server import metadata_server_watch
    from tests.helpers.process_tree import SEGPREP

    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")
    }
    with metadata_server_watch() as (address, connections):
        env.update(
            HOME=str(tmp_path),
            CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
            GCE_METADATA_HOST=address,
            GCE_METADATA_IP=address,
        )
        done = subprocess.run(
            [*SEGPREP, *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,  # a hang guard only
        )
        return done, list(connections)


def test_a_gcs_test_set_without_credentials_fails_fast(leakage, tmp_path):
    """One credential search, one line, exit 2: the probe every gs:// entry point uses."""
    args = job_args(_Inputs(leakage["train"]), tmp_path / "out")
    done, connections = _without_credentials(
        tmp_path, ["prepare", *args, "--leakage_check", "gs://segprep-x/test_out"]
    )
    assert done.returncode == 2, done.stderr
    assert "gcloud auth application-default login" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert len(connections) == 1, f"{len(connections)} metadata probes"


@pytest.mark.parametrize("command", ["verify", "index", "inspect", "report"])
def test_every_tool_given_gcs_without_credentials_fails_fast(tmp_path, command):
    done, connections = _without_credentials(tmp_path, [command, "gs://segprep-x/out"])
    assert done.returncode == 2, done.stderr
    assert "gcloud auth application-default login" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert len(connections) == 1, f"{len(connections)} metadata probes"


@pytest.mark.parametrize("listed", ["hashes", "duplicates"])
def test_verify_reads_no_file_a_metadata_name_puts_outside(prepared, tmp_path, capsys, listed):
    out = tmp_path / "out"
    shutil.copytree(prepared["out"], out)
    outside = tmp_path / "outside.jsonl"
    info = _metadata(out)
    if listed == "hashes":
        ref = info["splits"]["train"]["hashes"]
    else:
        ref = info["duplicates"]["file"]
    outside.write_bytes((out / ref["file"]).read_bytes())
    ref["file"] = "../outside.jsonl"
    (out / "metadata.json").write_text(json.dumps(info))
    assert main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "'../outside.jsonl'" in printed  # named as a bad name, not read as the table
