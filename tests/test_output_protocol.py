"""The output protocol through the real CLI: segprep never deletes, follows into or overwrites
what it did not write, and a commit cut short is cleaned of exactly what its manifest lists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beam_pipeline.cli import main
from tests.helpers.runs import job_args


def _prepare(dataset, out: Path, *extra: str) -> int:
    return main(["prepare", *job_args(dataset, out, "--num_shards", "3", *extra)])


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every path under root: file bytes, or the target of a link (never followed)."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            found[str(path.relative_to(root))] = f"-> {path.readlink()}"
        elif path.is_file():
            found[str(path.relative_to(root))] = path.read_bytes()
    return found


def test_another_tools_output_is_refused_and_never_deleted(sample_dataset, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train-00000-of-00003.tfrecord").write_bytes(b"their shard")
    (out / "rejects.jsonl").write_text('{"theirs": true}\n')
    before = _tree(out)
    assert _prepare(sample_dataset, out) == 2
    err = capsys.readouterr().err
    assert "segprep did not write" in err and len(err.strip().splitlines()) == 1
    assert _prepare(sample_dataset, out, "--overwrite") == 2  # would have to replace them
    assert _tree(out) == before


def test_foreign_files_stay_beside_an_output_written_with_overwrite(
    sample_dataset, tmp_path, capsys
):
    out = tmp_path / "out"
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("not segprep's")
    (out / "_tmp").mkdir(parents=True)  # the name of segprep's old temp folder
    (out / "_tmp" / "mine.txt").write_text("the user's")
    (out / "link_tmp").symlink_to(outside)
    (out / "notes.txt").write_text("notes")
    foreign = _tree(out)
    assert _prepare(sample_dataset, out) == 2  # foreign files and no marker: refused
    assert "--overwrite" in capsys.readouterr().err
    assert _prepare(sample_dataset, out, "--overwrite") == 0
    assert _prepare(sample_dataset, out, "--overwrite") == 0  # a second, replacing run
    after = _tree(out)
    assert {name: after[name] for name in foreign} == foreign
    assert (outside / "keep.txt").read_text() == "not segprep's"
    assert main(["verify", str(out)]) == 0


def test_a_segprep_folder_that_is_a_link_is_never_followed(sample_dataset, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "runs" / "r1").mkdir(parents=True)
    (elsewhere / "runs" / "r1" / "train-00000-of-00001.tfrecord").write_bytes(b"x")
    (out / ".segprep").symlink_to(elsewhere)
    before = _tree(elsewhere)
    assert _prepare(sample_dataset, out, "--overwrite") == 2
    assert ".segprep is not segprep's folder" in capsys.readouterr().err
    assert _tree(elsewhere) == before


def test_a_listed_name_replaced_by_a_link_is_refused_not_followed(
    sample_dataset, prepared, tmp_path, capsys
):
    out = tmp_path / "out"
    assert _prepare(sample_dataset, out) == 0
    target = tmp_path / "theirs.bin"
    target.write_bytes(b"theirs")
    shard = sorted(out.glob("train-*.tfrecord"))[0]
    shard.unlink()
    shard.symlink_to(target)
    assert _prepare(sample_dataset, out, "--overwrite") == 2
    assert "is not a file segprep wrote" in capsys.readouterr().err
    assert target.read_bytes() == b"theirs" and shard.is_symlink()


CRASHED = "20261204T120000-0123abcd"  # a run's id: its start time and 8 hex digits


def test_a_commit_cut_short_without_a_journal_is_refused_and_kept(sample_dataset, tmp_path):
    """A manifest 'committing' with no journal (an older segprep's crash, or an edit): some
    final names exist, metadata.json does not, and nothing proves they are segprep's. The
    next run refuses in one line and removes none of them, the user's files in
    .segprep/runs/ included; `verify --repair` refuses too."""
    out = tmp_path / "out"
    (out / ".segprep" / "runs" / "notes").mkdir(parents=True)  # the user's, not a run's
    (out / ".segprep" / "runs" / "README.txt").write_text("the user's")
    listed = ["train-00000-of-00009.tfrecord", "rejects.jsonl", "metadata.json"]
    (out / ".segprep" / "manifest.json").write_text(
        json.dumps({"state": "committing", "run_id": CRASHED, "files": listed})
    )
    (out / "train-00000-of-00009.tfrecord").write_bytes(b"half published")
    (out / ".segprep" / "runs" / CRASHED).mkdir(parents=True)
    (out / ".segprep" / "runs" / CRASHED / "train-00001-of-00009.tfrecord").write_bytes(b"s")
    before = _tree(out)
    assert _prepare(sample_dataset, out) == 2
    assert main(["verify", "--repair", str(out)]) == 2
    assert _tree(out) == before


@pytest.mark.parametrize("flag", [[], ["--overwrite"]])
def test_a_failed_run_leaves_the_earlier_output_intact(sample_dataset, tmp_path, flag):
    """--overwrite replaces a finished output at commit time: a run refused before that
    leaves the earlier dataset complete and verifiable."""
    out = tmp_path / "out"
    assert _prepare(sample_dataset, out) == 0
    before = {name: data for name, data in _tree(out).items() if not name.startswith(".")}
    assert _prepare(sample_dataset, out, *flag, "--max_reject_fraction", "0") == (1 if flag else 2)
    after = {name: data for name, data in _tree(out).items() if not name.startswith(".")}
    assert after == before
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize(
    "name, ours",
    [
        ("20261205T020527-6b009f7a", True),  # prepare
        ("index-20261205T020527-6b009f7a", True),  # segprep index
        ("index-20261130-112520-6b009f7a", True),  # segprep index before its ids had a T
        ("notes", False),
        ("README.txt", False),
        ("20261205T020527-6b009f7a.bak", False),
    ],
)
def test_only_run_ids_name_folders_segprep_removes(name, ours):
    from transforms.format.naming import is_run_id

    assert is_run_id(name) is ours
