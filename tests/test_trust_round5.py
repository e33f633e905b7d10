"""Trust, round 5: what a probe of the commit, the lock and verify found (eighteenth and
nineteenth sessions). Each case goes through the real CLI on a real output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.runs import RUNNER_ARGS

SEGPREP = str(Path(sys.executable).parent / "segprep")


def segprep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SEGPREP, *args], capture_output=True, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip


def prepare(dataset, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return segprep(
        "prepare", "--image_dir", str(dataset.image_dir), "--mask_dir", str(dataset.mask_dir),
        "--output_dir", str(out), *extra, *RUNNER_ARGS,
    )  # fmt: skip


def one_line_refusal(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.fixture
def output_copy(prepared, tmp_path) -> Path:
    return Path(shutil.copytree(prepared[0], tmp_path / "out"))


@pytest.mark.parametrize("state", ["committed", "committing"])
def test_a_manifest_without_a_finished_output_deletes_nothing(sample_dataset, tmp_path, state):
    """A manifest that lists a user's file, with no metadata.json beside it (forged, or
    metadata.json removed) or in state `committing` without a journal: segprep cannot tell
    the files are its own, so it refuses instead of cleaning them, with and without
    --overwrite."""
    out = tmp_path / "out"
    (out / ".segprep").mkdir(parents=True)
    precious = out / "train-00000-of-00001.tfrecord"
    precious.write_bytes(b"MY PRECIOUS")
    manifest = {"state": state, "run_id": "", "files": [precious.name]}
    (out / ".segprep" / "manifest.json").write_text(json.dumps(manifest))
    for extra in ((), ("--overwrite",)):
        said = one_line_refusal(prepare(sample_dataset, out, *extra))
        assert "cannot tell they are its own" in said
        assert precious.read_bytes() == b"MY PRECIOUS"


def test_a_complete_output_whose_manifest_says_committing_is_not_deleted(
    sample_dataset, output_copy
):
    manifest_path = output_copy / ".segprep" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["state"] = "committing"
    manifest_path.write_text(json.dumps(manifest))
    before = sorted(p.name for p in output_copy.iterdir())
    one_line_refusal(prepare(sample_dataset, output_copy))
    assert sorted(p.name for p in output_copy.iterdir()) == before


@pytest.mark.parametrize("command", ["prepare", "repair"])
def test_a_hard_link_at_the_lock_is_refused_and_its_file_kept(
    sample_dataset, output_copy, tmp_path, command
):
    """O_NOFOLLOW stops a symbolic link at .segprep/lock, not a hard one: the lock would
    have truncated and rewritten the user's file outside the output."""
    victim = tmp_path / "hard.txt"
    victim.write_bytes(b"IMPORTANT USER DATA")
    lock = output_copy / ".segprep" / "lock"
    lock.unlink(missing_ok=True)
    os.link(victim, lock)
    if command == "prepare":
        done = prepare(sample_dataset, output_copy, "--overwrite")
    else:
        done = segprep("verify", "--repair", str(output_copy))
    assert "hard link" in one_line_refusal(done)
    assert victim.read_bytes() == b"IMPORTANT USER DATA"


def test_a_users_file_at_an_index_name_an_append_would_write_is_refused(
    sample_dataset, output_copy
):
    """index/ is segprep's folder, but a file in it that no manifest lists is not its file:
    an append that would publish index/train.v2.keys.jsonl over it is refused."""
    theirs = output_copy / "index" / "train.v2.keys.jsonl"
    theirs.write_text("USERDATA\n")
    said = one_line_refusal(prepare(sample_dataset, output_copy, "--append"))
    assert "index/train.v2.keys.jsonl" in said and "segprep did not write" in said
    assert theirs.read_text() == "USERDATA\n"


def test_a_users_file_at_an_index_name_an_overwrite_would_write_is_refused(
    sample_dataset, output_copy
):
    theirs = output_copy / "index" / "train-00000-of-00009.tfrecord.idx"
    theirs.write_text("USER DATA\n")
    said = one_line_refusal(prepare(sample_dataset, output_copy, "--overwrite"))
    assert "index/train-00000-of-00009.tfrecord.idx" in said
    assert theirs.read_text() == "USER DATA\n"


@pytest.mark.parametrize("name", ["shard", "index/train.keys.jsonl", "metadata.json"])
def test_verify_reports_a_link_at_a_name_the_output_lists(output_copy, tmp_path, name):
    """Moved out and linked back, a file reads the same, but segprep never wrote a link:
    verify names it instead of calling the output OK."""
    if name == "shard":
        name = next(path.name for path in output_copy.glob("train-*.tfrecord"))
    inside = output_copy / name
    outside = tmp_path / "elsewhere"
    shutil.move(inside, outside)
    inside.symlink_to(outside)
    done = segprep("verify", str(output_copy))
    assert done.returncode == 1, done.stdout
    assert f"{name}: a link (to {outside}), not a regular file segprep wrote" in done.stdout


def test_verify_streams_a_key_table_inflated_to_its_cap(output_copy):
    """A key table grown to 1 GB (sparse: nothing on disk) was read whole and split, about
    3.2 GB of memory; streamed, verify names it and stays small."""
    from tests.helpers.process_tree import run_measured

    table = output_copy / "index" / "train.keys.jsonl"
    os.truncate(table, 1 << 30)
    done, peak = run_measured([SEGPREP, "verify", str(output_copy)])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "index/train.keys.jsonl" in done.stdout and "Traceback" not in done.stderr
    assert peak < 400 << 20, f"peak PSS {peak >> 20} MB"


def test_a_metadata_json_naming_a_key_twice_is_refused(output_copy):
    """json.loads keeps the last of two `splits`: `segprep index` indexed an empty output
    and said so with exit 0. A key named twice is a tampered file to every reader."""
    path = output_copy / "metadata.json"
    text = path.read_text().rstrip()
    path.write_text(text[:-1] + ', "splits": {}}')
    said = one_line_refusal(segprep("index", str(output_copy)))
    assert "'splits' appears twice" in said
    done = segprep("verify", str(output_copy))
    assert done.returncode == 1 and "'splits' appears twice" in done.stdout


def test_sample_data_into_a_file_is_a_usage_error(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    said = one_line_refusal(segprep("sample-data", str(afile), "--count", "5"))
    assert "is a file, not a folder" in said
    assert afile.read_text() == "mine"


def test_a_metadata_json_no_reader_would_open_is_not_published(tmp_path):
    """Two COCO category names of 34 MB each (each under the 64 MB string cap) would make a
    metadata.json over the 64 MB every reader accepts: the run published it, failed, and
    left an output nothing could open. Now nothing is published and the line says why."""
    from tests.helpers.images import rgb_jpeg

    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(rgb_jpeg(24, 32, seed=1))
    long = "c" * (34 << 20)
    coco = tmp_path / "coco.json"
    coco.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "a.jpg", "height": 24, "width": 32}],
                "annotations": [],
                "categories": [{"id": 1, "name": long}, {"id": 2, "name": "x" + long}],
            }
        )
    )
    out = tmp_path / "out"
    done = segprep(
        "prepare", "--image_dir", str(images), "--coco_annotations", str(coco),
        "--output_dir", str(out), "--mask_type", "classes", *RUNNER_ARGS,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip().splitlines()[-1]  # after the progress lines
    assert "more than the 67,108,864 every reader accepts" in line
    assert "nothing was published" in line
    assert not (out / "metadata.json").exists()


def test_verify_names_a_split_that_is_no_split_name(output_copy):
    """A split named '../x' in metadata.json: verify reported a ValueError from the hash
    table's file name and exit 1 without naming the problem; now the problem line."""
    path = output_copy / "metadata.json"
    metadata = json.loads(path.read_text())
    metadata["splits"]["../x"] = metadata["splits"].pop("train")
    path.write_text(json.dumps(metadata))
    done = segprep("verify", str(output_copy))
    assert done.returncode == 1, done.stderr
    assert "metadata.json: split '../x' is not a split name" in done.stdout
    assert "ValueError" not in done.stdout + done.stderr


def test_a_sparse_shard_is_named_not_hashed_for_its_size(output_copy):
    """A shard grown with truncate to 10 GiB (its listed size edited to match) costs no
    disk, yet verify and index hashed it for as long as its size says (a 1 TiB one for 24
    minutes). segprep writes every byte of its files: a hole is named at once."""
    path = output_copy / "metadata.json"
    metadata = json.loads(path.read_text())
    shard = metadata["splits"]["train"]["shards"][0]
    os.truncate(output_copy / shard["file"], 10 << 30)
    shard["bytes"] = 10 << 30
    path.write_text(json.dumps(metadata))
    done = segprep("verify", str(output_copy))
    assert done.returncode == 1, done.stderr
    assert (
        f"{shard['file']}: not readable: it has unwritten bytes (a hole) from byte" in done.stdout
    )
    said = one_line_refusal(segprep("index", str(output_copy)))
    assert "unwritten bytes (a hole)" in said


def _grow_sparse(path: Path, size: int) -> None:
    """`path` grown to `size` bytes on a few MB of disk: a newline every 60,000 bytes (a line
    cap does not stop a read of it), holes between."""
    start = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size)
        for at in [*range(start + 60_000, size, 60_000), size - 1]:
            handle.seek(at)
            handle.write(b"\n")


@pytest.mark.parametrize("table", ["train.hashes.jsonl", "train.digests.jsonl"])
def test_a_sparse_side_table_is_named_not_read_for_its_size(output_copy, table):
    """A side table grown sparse to 1 GiB (its listed size edited to match): verify hashed
    all of it and said only that its sha256 differs, and index, which keeps it, published
    a metadata.json listing it again with exit 0. segprep writes every byte of its tables."""
    path = output_copy / "metadata.json"
    metadata = json.loads(path.read_text())
    name = f"index/{table}"
    refs = [metadata["splits"]["train"]["hashes"]]
    refs += [version["digest_tables"]["train"] for version in metadata["dataset_versions"]]
    (ref,) = [ref for ref in refs if ref["file"] == name]
    _grow_sparse(output_copy / name, 1 << 30)
    ref["bytes"] = 1 << 30
    path.write_text(json.dumps(metadata))
    done = segprep("verify", str(output_copy))
    assert done.returncode == 1, done.stderr
    assert f"{name}: it has unwritten bytes (a hole) from byte" in done.stdout
    said = one_line_refusal(segprep("index", str(output_copy)))
    assert f"{name}: it has unwritten bytes (a hole) from byte" in said
    assert "segprep verify" in said
