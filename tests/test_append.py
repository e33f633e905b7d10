"""`segprep prepare --append`: a dataset grows by versions, never rewriting an earlier byte,
and readers pin a version.

A class-id sample set of 40 entries: version 1 is prepared from the first 30, version 2
appends the whole folder (30 identical keys skipped, 10 added). Everything runs through the
real CLI (in process, or as a process where it is killed or raced) and the real readers.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from beam_pipeline.cli import main
from beam_pipeline.runtime.commit_journal import HOOK_VARIABLE
from tests.helpers.outputs import published
from tests.helpers.process_tree import start_cli
from tests.helpers.runs import job_args

CLASSES = ("--mask_type", "classes", "--num_classes", "4", "--num_shards", "3")
FIRST = 30


def _copy_entries(source: Path, target: Path, keys: list[str]) -> Path:
    for folder in ("images", "masks"):
        (target / folder).mkdir(parents=True, exist_ok=True)
        for path in sorted((source / folder).iterdir()):
            if path.name.split(".")[0] in keys:
                shutil.copy(path, target / folder / path.name)
    return target


class _Inputs:
    def __init__(self, root: Path) -> None:
        self.image_dir = root / "images"
        self.mask_dir = root / "masks"


def _prepare(inputs: Path, out: Path, *extra: str) -> int:
    return main(["prepare", *job_args(_Inputs(inputs), out, *CLASSES, *extra)])


def _snapshot(out: Path) -> dict[str, tuple[int, str]]:
    """Every published file: (inode, sha256)."""
    return {
        name: (os.stat(out / name).st_ino, hashlib.sha256((out / name).read_bytes()).hexdigest())
        for name in published(out)
    }


def _metadata(out: Path) -> dict:
    return json.loads((out / "metadata.json").read_text())


def _keys_by_split(out: Path, version: int | None = None) -> dict[str, list[str]]:
    from shard_reader.source import RecordSource

    keys = {}
    for split in ("train", "validation"):
        source = RecordSource(out, split, version=version)
        keys[split] = [source.read_batch([i])["key"][0] for i in range(len(source))]
    return keys


def _reader_orders(out: Path, version: int | None = None) -> dict[str, list[str]]:
    """The epoch order of each reader with seed 3: tf.data, PyTorch, Grain."""
    from shard_reader import make_dataset
    from shard_reader.grain import make_loader as grain_loader
    from shard_reader.torch import make_loader as torch_loader

    dataset = make_dataset(
        str(out), "train", 4, seed=3, with_keys=True, version=version, training=True
    )
    tf_order = [key.decode() for _, _, keys in dataset for key in keys.numpy()]
    torch = torch_loader(out, "train", 4, seed=3, num_workers=0, with_keys=True, version=version)
    torch.set_epoch(1)
    torch_order = [key for batch in torch for key in batch[2]]
    grain = grain_loader(out, "train", 4, seed=3, version=version)
    grain_order = [str(key) for batch in grain for key in batch["key"]]
    return {"tf": tf_order, "torch": torch_order, "grain": grain_order}


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """Version 1 (a copy kept as it was, its key orders read then), and the output after
    the append of the whole folder."""
    from beam_pipeline.commands.sample_data import write_sample_data

    root = tmp_path_factory.mktemp("append")
    write_sample_data(
        root / "all", count=40, seed=11, broken_fraction=0.0, height=32, width=24, classes=4
    )
    keys = sorted(p.stem for p in (root / "all" / "images").iterdir())
    first = _copy_entries(root / "all", root / "first", keys[:FIRST])
    out = root / "out"
    assert _prepare(first, out) == 0
    before = root / "before"
    shutil.copytree(out, before)
    state = {
        "root": root,
        "all": root / "all",
        "out": out,
        "before": before,
        "v1_snapshot": _snapshot(out),
        "v1_keys": _keys_by_split(out),
        "v1_orders": _reader_orders(out),
        "new_keys": set(keys[FIRST:]),
    }
    assert _prepare(root / "all", out, "--append") == 0
    return state


def test_append_adds_only_new_keys_and_touches_no_earlier_file(grown):
    out = grown["out"]
    after = _snapshot(out)
    replaced = {"metadata.json", "rejects.jsonl", "dataset_info.json", "features.json"}
    for name, (inode, digest) in grown["v1_snapshot"].items():
        if name not in replaced:
            assert after[name] == (inode, digest), name
    info = _metadata(out)
    latest = info["dataset_versions"][-1]
    assert latest["version"] == 2 and latest["skipped_identical"] == FIRST
    keys = _keys_by_split(out)
    old = {k for split in grown["v1_keys"].values() for k in split}
    added = {k for split in keys.values() for k in split} - old
    assert added == grown["new_keys"]
    # Each split's records: version 1's, in their order, then the added ones.
    for split, earlier in grown["v1_keys"].items():
        assert keys[split][: len(earlier)] == earlier
    added_files = [f for files in latest["shards"].values() for f in files]
    assert added_files and all("_v00002-" in name for name in added_files)
    assert "index/train.v2.keys.jsonl" in after and "index/train.v2.digests.jsonl" in after
    assert main(["verify", str(out)]) == 0


def test_the_latest_version_equals_a_prepare_of_the_union(grown, tmp_path):
    union = tmp_path / "union"
    assert _prepare(grown["all"], union) == 0
    grown_keys, union_keys = _keys_by_split(grown["out"]), _keys_by_split(union)
    for split in ("train", "validation"):
        assert sorted(grown_keys[split]) == sorted(union_keys[split])
    appended, fresh = _metadata(grown["out"]), _metadata(union)
    assert appended["classes"]["splits"] == fresh["classes"]["splits"]
    for split in ("train", "validation"):
        assert appended["splits"][split]["num_examples"] == fresh["splits"][split]["num_examples"]
    assert appended["num_rejected"] == fresh["num_rejected"]
    assert appended["num_discovered"] == fresh["num_discovered"]


def test_readers_pin_a_version_with_the_same_order(grown):
    out = grown["out"]
    assert _keys_by_split(out, version=1) == grown["v1_keys"]
    assert _reader_orders(out, version=1) == grown["v1_orders"]
    latest = _keys_by_split(out, version=2)
    assert latest == _keys_by_split(out)
    assert sum(map(len, latest.values())) == 40
    from shard_reader.source import RecordSource
    from transforms.format.dataset_info import MetadataError

    source = RecordSource(out, "train", version=1)
    assert source.index_of(grown["v1_keys"]["train"][-1]) == len(source) - 1
    with pytest.raises(MetadataError, match="version 3"):
        RecordSource(out, "train", version=3)
    # Class statistics as of version 1 are version 1's own.
    from transforms.format import dataset_info

    pinned = dataset_info.load(out, 1)
    before = dataset_info.load(grown["before"])
    assert pinned.classes.stats == before.classes.stats


def test_tfds_reads_the_latest_version_as_split_sum(grown):
    tfds = pytest.importorskip("tensorflow_datasets")
    from transforms.format import dataset_info, tfds_info

    out = grown["out"]
    info = dataset_info.load(out)
    names = tfds_info.tfds_split_names(info, "train")
    assert names == ["train", "train_v00002"]
    builder = tfds.builder_from_directory(str(out))
    keys = [
        example["key"].numpy().decode()
        for example in builder.as_dataset(split="+".join(names), shuffle_files=False)
    ]
    assert sorted(keys) == sorted(_keys_by_split(out)["train"])


def test_identical_keys_are_skipped_and_changed_keys_rejected(grown, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    keys = sorted(grown["v1_keys"]["train"])
    same, changed = keys[0], keys[1]
    batch = _copy_entries(grown["all"], tmp_path / "batch", [same, changed])
    image = batch / "images" / f"{changed}.jpg"
    image.write_bytes(image.read_bytes() + b"\0")  # other bytes, same picture
    before = _snapshot(out)
    assert _prepare(batch, out, "--append") == 0
    info = _metadata(out)
    latest = info["dataset_versions"][-1]
    assert latest["version"] == 3
    assert latest["skipped_identical"] == 1
    assert latest["num_rejected"] == {"key_exists": 1}
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    (reject,) = [r for r in rejects if r["reason"] == "key_exists"]
    assert reject["key"] == changed and "version 1" in reject["detail"]
    assert all(not files for files in latest["shards"].values())
    for name, value in before.items():
        if name not in {"metadata.json", "rejects.jsonl", "dataset_info.json", "features.json"}:
            assert _snapshot(out)[name] == value
    # The changed key is stored (version 1) and rejected: discovered counts it once (it
    # said 41 of the 40 keys), and the summary adds up.
    assert info["num_discovered"] == 40 == sum(s["num_examples"] for s in info["splits"].values())
    printed = capsys.readouterr().out
    assert "40 entries discovered, 40 accepted, 0 rejected (and 1 key_exists" in printed
    assert main(["verify", str(out)]) == 0
    # verify takes the count an earlier segprep wrote (the key twice), and no other
    info["num_discovered"] = 41
    (out / "metadata.json").write_text(json.dumps(info))
    assert main(["verify", str(out)]) == 0
    info["num_discovered"] = 39
    (out / "metadata.json").write_text(json.dumps(info))
    capsys.readouterr()
    assert main(["verify", str(out)]) == 1
    assert "num_discovered 39 but 40 records + 1 rejects - 1 key_exists" in capsys.readouterr().out


@pytest.mark.parametrize("unlabeled", ["reject", "skip"])
def test_a_stored_key_whose_mask_is_gone_stays_stored_and_is_not_rejected_twice(
    grown, tmp_path, unlabeled
):
    """An append whose input lost a stored key's mask rejected it as missing_mask while its
    record stayed in a shard: verify then found the key stored and rejected at once. With
    --images_without_mask skip it was stored and listed unlabeled at once, and counted twice
    in num_discovered."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    lost, emptied = sorted(grown["v1_keys"]["train"])[:2]
    batch = _copy_entries(grown["all"], tmp_path / "batch", [lost, emptied])
    for mask in (batch / "masks").iterdir():
        if mask.name.split(".")[0] == lost:
            mask.unlink()
    (next((batch / "images").glob(f"{emptied}.*"))).write_bytes(b"")
    flags = ("--images_without_mask", unlabeled)
    assert _prepare(batch, out, "--append", "--max_reject_fraction", "1", *flags) == 0
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    mine = {r["key"]: r for r in rejects if r["key"] in (lost, emptied)}
    assert {key: r["reason"] for key, r in mine.items()} == {
        lost: "key_exists",
        emptied: "key_exists",
    }
    assert ("missing_mask" if unlabeled == "reject" else "unlabeled") in mine[lost]["detail"]
    assert not (out / "unlabeled.jsonl").exists() and not _metadata(out).get("num_unlabeled")
    assert main(["verify", str(out)]) == 0


def test_index_leaves_a_grown_output_as_it_is(grown, tmp_path, capsys):
    """`segprep index` on an appended output wrote one key table per split over the
    versions' own: verify failed and the next append was refused."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    before = _snapshot(out)
    assert main(["index", str(out)]) == 0
    assert "nothing done" in capsys.readouterr().out
    assert _snapshot(out) == before
    assert main(["verify", str(out)]) == 0
    table = next((out / "index").glob("*.keys.jsonl"))
    table.unlink()
    assert main(["index", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"its index file index/{table.name} is missing" in err and "Traceback" not in err


def test_an_index_started_before_an_append_commits_keeps_the_appended_version(
    grown, tmp_path, monkeypatch
):
    """`segprep index` published the metadata.json it had read before taking the lock: an
    append that committed in between was undone and its version's files deleted. The append
    runs here at the exact moment index goes for its lock."""
    from beam_pipeline.commands.index import index_output
    from beam_pipeline.runtime import output_protocol

    out = tmp_path / "out"
    shutil.copytree(grown["before"], out)
    batch = _copy_entries(grown["all"], tmp_path / "batch", [])
    _extra_entry(grown, batch)
    real_enter = output_protocol.RunLock.__enter__

    def append_first(lock):
        monkeypatch.setattr(output_protocol.RunLock, "__enter__", real_enter)
        assert _prepare(batch, out, "--append") == 0
        return real_enter(lock)

    monkeypatch.setattr(output_protocol.RunLock, "__enter__", append_first)
    result = index_output(str(out))
    info = _metadata(out)
    assert [version["version"] for version in info["dataset_versions"]] == [1, 2]
    appended = [name for names in info["dataset_versions"][1]["shards"].values() for name in names]
    assert appended and all((out / name).is_file() for name in appended)
    assert result.files == ()  # under the lock index saw the grown output: nothing to do
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize("listed", ["appended_key_tables", "appended_hashes"])
def test_index_names_a_sparse_table_of_a_grown_output(grown, tmp_path, capsys, listed):
    """A version-2 table truncated up to 1 GiB (its listed size edited to match) costs no
    disk: index said "nothing done" (exit 0) over it, as if every index file were there."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    metadata = json.loads((out / "metadata.json").read_text())
    splits = [split for split in metadata["splits"].values() if split.get(listed)]
    ref = splits[0][listed][0]
    os.truncate(out / ref["file"], 1 << 30)
    ref["bytes"] = 1 << 30
    (out / "metadata.json").write_text(json.dumps(metadata))
    assert main(["index", str(out)]) == 2
    err = capsys.readouterr().err
    assert ref["file"] in err and len(err.strip().splitlines()) == 1, err
    if listed == "appended_hashes":
        assert "unwritten bytes (a hole)" in err, err
    else:  # a key table listed at 1 GiB is over its records' bound, refused at loading
        assert "key tables together" in err and "allowed" in err, err


def test_an_append_of_stored_keys_only_says_it_found_no_near_copy(grown, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    same = sorted(grown["v1_keys"]["train"])[0]
    batch = _copy_entries(grown["all"], tmp_path / "batch", [same])
    capsys.readouterr()
    assert _prepare(batch, out, "--append") == 0
    said = capsys.readouterr().out
    assert "this append: no new entry is a near copy of an image already in the output" in said
    assert "0 new entries" not in said


def test_parameters_that_shape_records_must_match(grown, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    before = _snapshot(out)
    argv = job_args(
        _Inputs(grown["all"]),
        out,
        "--mask_type",
        "classes",
        "--num_classes",
        "5",
        "--train_size",
        "0.8",
        "--append",
    )
    assert main(["prepare", *argv]) == 2
    err = capsys.readouterr().err
    assert "num_classes: output 4, this run 5" in err, err
    assert "train_size: output 0.9, this run 0.8" in err, err
    assert _snapshot(out) == before


def test_append_needs_a_finished_output(grown, tmp_path, capsys):
    assert _prepare(grown["all"], tmp_path / "empty", "--append") == 2
    assert "--append needs a finished segprep output" in capsys.readouterr().err


# Before the first new file moves in, a killed append rolls back; after, forward. Either way
# no earlier file is touched, and the folder verifies.
KILL_STEPS = {"accounted": 2, "journal": 2, "aside": 2, "publish-1": 3, "metadata": 3}


@pytest.mark.parametrize("step", list(KILL_STEPS))
def test_sigkill_during_an_append_leaves_the_earlier_output_intact(grown, tmp_path, step):
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    before = _snapshot(out)
    batch = _copy_entries(grown["all"], tmp_path / "batch", [])
    _extra_entry(grown, batch)
    args = ["prepare", *job_args(_Inputs(batch), out, *CLASSES, "--append")]
    process = start_cli(args, env={HOOK_VARIABLE: f"{step}:kill"})
    process.communicate(timeout=600)
    assert process.returncode == -9
    assert main(["verify", "--repair", str(out)]) == 0
    after = _snapshot(out)
    versions = _metadata(out)["dataset_versions"]
    assert len(versions) == KILL_STEPS[step]
    if KILL_STEPS[step] == 2:
        assert after == before  # byte-identical, same inodes
    else:
        for name, value in before.items():
            # the extra entry is a copy of a stored image: duplicates.jsonl gains its group
            replaced = {"metadata.json", "rejects.jsonl", "dataset_info.json", "features.json"}
            if name not in {*replaced, "duplicates.jsonl"}:
                assert after.get(name) == value, name
        groups = [json.loads(line) for line in (out / "duplicates.jsonl").read_text().splitlines()]
        assert any("zz-new" in group["keys"] for group in groups)


def _extra_entry(grown, batch: Path) -> None:
    """One new entry: an existing image and mask under a new key."""
    source = sorted((grown["all"] / "images").iterdir())[0]
    mask = next(p for p in (grown["all"] / "masks").iterdir() if p.stem == source.stem)
    shutil.copy(source, batch / "images" / f"zz-new{source.suffix}")
    shutil.copy(mask, batch / "masks" / f"zz-new{mask.suffix}")


@pytest.mark.parametrize("damage", ["version_1_missing", "version_2_shorter"])
def test_an_output_missing_a_listed_shard_refuses_the_append(grown, tmp_path, capsys, damage):
    """A listed shard gone (or not its listed size) is found by one stat before the job: the
    append published a version that counted the gone shard's keys as stored."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    if damage == "version_1_missing":
        shard = sorted(out.glob("train-*.tfrecord"))[1]
        shard.unlink()
    else:
        shard = sorted(out.glob("train_v00002-*.tfrecord"))[0]
        shard.write_bytes(shard.read_bytes()[:-1])
    before = _snapshot(out)
    batch = _copy_entries(grown["all"], tmp_path / "batch", [])
    _extra_entry(grown, batch)

    assert _prepare(batch, out, "--append") == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    said = "missing (listed in metadata.json)" if damage == "version_1_missing" else "bytes"
    assert f"--append: {shard.name}: " in error and said in error, error
    assert "nothing was appended" in error and f"segprep verify {out}" in error, error
    assert _snapshot(out) == before
    assert len(_metadata(out)["dataset_versions"]) == 2


@pytest.mark.parametrize(
    "line", [b"not json", b"[1, 2]", b'{"key": 3, "reason": "x"}', b'{"key": "k"}', b"\xff{"]
)
def test_a_rejects_line_the_commit_cannot_merge_refuses_the_append(grown, tmp_path, capsys, line):
    """A line of rejects.jsonl that is not a JSON object with a string key and reason: the
    append ran the whole job and failed at its commit (exit 1, a JSONDecodeError naming
    neither file nor line); it is refused before the job, naming both."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    rejects = out / "rejects.jsonl"
    number = len(rejects.read_bytes().splitlines()) + 1
    with rejects.open("ab") as handle:
        handle.write(line + b"\n")
    before = _snapshot(out)
    batch = _copy_entries(grown["all"], tmp_path / "batch", [])
    _extra_entry(grown, batch)

    assert _prepare(batch, out, "--append") == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert f"--append: rejects.jsonl line {number}: not a JSON object with a key and a reason" in (
        error
    ), error
    assert "nothing was appended" in error and f"segprep verify {out}" in error, error
    assert _snapshot(out) == before
    assert not list((out / ".segprep" / "runs").glob("*/*.tfrecord*")), "the job ran"


@pytest.mark.parametrize("output", ["before", "out"])
@pytest.mark.parametrize("count", ["num_examples", "added"])
def test_edited_counts_of_the_latest_version_refuse_the_append(
    grown, tmp_path, capsys, output, count
):
    """The latest version's train count edited (version 1 of a one-version output, or
    version 2): the append ran the whole job and failed at its commit; it is refused before
    the job, and verify, which said OK on the one-version output, names it."""
    out = tmp_path / "out"
    shutil.copytree(grown[output], out)
    info = _metadata(out)
    latest = info["dataset_versions"][-1]
    latest[count]["train"] = 10**9
    (out / "metadata.json").write_text(json.dumps(info))
    before = _snapshot(out)
    batch = _copy_entries(grown["all"], tmp_path / "batch", [])
    _extra_entry(grown, batch)

    assert _prepare(batch, out, "--append") == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert f"metadata.json: split 'train' version {latest['version']}: counts" in error, error
    assert "nothing was appended" in error and f"segprep verify {out}" in error, error
    assert _snapshot(out) == before
    assert main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert f"version {latest['version']} split 'train' says 1000000000 records" in printed


@contextlib.contextmanager
def _append_paused_at(grown, tmp_path: Path, step: str):
    """An append of one new entry to a copy of version 2, run as a process held at its
    commit's `step` (the journal's test hook): yields (out, batch, process) while it waits
    there, then lets it go on and checks that it finished."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    batch = _copy_entries(grown["all"], tmp_path / "batch", [])
    _extra_entry(grown, batch)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = ["prepare", *job_args(_Inputs(batch), out, *CLASSES, "--append")]
    append = start_cli(args, env={HOOK_VARIABLE: f"{step}:{fifo}"})
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(append.stderr.read()), daemon=True)
    reader.start()
    with open(fifo, "wb"):  # opens once the append waits at `step`
        yield out, batch, append
    append.wait(timeout=600)
    reader.join(60)
    assert append.returncode == 0, b"".join(errors).decode()


def test_verify_while_an_append_commits_says_so_in_one_line(grown, tmp_path, capsys):
    """verify reads without the lock: caught in an append's commit (its new shards moved
    in, metadata.json not yet), it reported 30 problems ("extra shard", rejects.jsonl and
    dataset_info.json not matching) of an output that was sound before and after."""
    with _append_paused_at(grown, tmp_path, "publish") as (out, _, first):
        assert main(["verify", str(out)]) == 1
        printed = capsys.readouterr().out.strip().splitlines()
        assert len(printed) == 2, printed
        assert printed[0].startswith(".segprep/lock: run "), printed
        assert f"(pid {first.pid} on " in printed[0], printed
        assert "is writing into this folder right now" in printed[0], printed
    assert main(["verify", str(out)]) == 0


def test_a_reader_caught_in_an_append_commit_is_told_to_open_it_again(grown, tmp_path):
    """Between the earlier metadata.json moved aside and the new one in place a reader finds
    no metadata.json: it was told the job failed or was still running and to re-run
    prepare (which, with --overwrite, would throw the dataset away)."""
    from shard_reader.source import RecordSource
    from transforms.format import dataset_info

    with _append_paused_at(grown, tmp_path, "aside") as (out, _, _):
        assert not (out / "metadata.json").exists()
        for load in (dataset_info.load, lambda path: RecordSource(path, "train")):
            with pytest.raises(dataset_info.IncompleteOutputError) as caught:
                load(out)
            message = str(caught.value)
            assert "is committing into" in message and "open it again in a moment" in message
            assert "re-run `segprep prepare`" not in message
    assert len(dataset_info.load(out).dataset_versions) == 3


def test_a_second_append_at_once_is_refused(grown, tmp_path, capsys):
    with _append_paused_at(grown, tmp_path, "accounted") as (out, batch, _):
        assert _prepare(batch, out, "--append") == 2
        assert "is in use by run" in capsys.readouterr().err
    assert len(_metadata(out)["dataset_versions"]) == 3
    assert main(["verify", str(out)]) == 0


def test_verify_checks_every_version(grown, tmp_path, capsys):
    """Version 1's digest table loses a key and metadata.json is made to agree with it:
    verify still finds that table disagrees with version 1's shards."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    table = out / "index" / "train.digests.jsonl"
    lines = table.read_bytes().splitlines(keepends=True)
    data = b"".join(lines[1:])
    table.write_bytes(data)
    info = _metadata(out)
    info["dataset_versions"][0]["digest_tables"]["train"].update(
        bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    (out / "metadata.json").write_text(json.dumps(info))
    assert main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "index/train.digests.jsonl" in printed and "its version's shards hold" in printed


def test_digest_table_lookups_bisect_a_sorted_file():
    from transforms.format import digest_table

    rows = [(f"key-{n:06d}", hashlib.sha256(str(n).encode()).hexdigest()) for n in range(5000)]
    data = digest_table.row_bytes(rows)
    reads: list[int] = []
    table = digest_table.SortedTable(
        lambda offset, length: reads.append(length) or data[offset : offset + length], len(data)
    )
    for key, digest in rows[::499] + rows[-1:]:
        reads.clear()
        assert table.get(key) == digest
        assert sum(reads) < 40 * 4096  # a few blocks, never the whole file
    for absent in ("key-", "zzz", "key-0000005", "key-000499x"):
        assert table.get(absent) is None


def test_inspect_and_report_take_a_version(grown, tmp_path):
    import re

    from beam_pipeline.commands.inspect_sheet import build_sheet

    out = grown["out"]
    v1_train = grown["v1_keys"]["train"]
    sheet = build_sheet(str(out), "train", 64, False, version=1)
    assert set(sheet.keys) <= set(v1_train) and len(sheet.keys) == len(v1_train)
    png = tmp_path / "sheet.png"
    argv = ["inspect", str(out), "--split", "train", "--version", "1", "--out", str(png)]
    assert main(argv) == 0 and png.exists()
    for version, keys in ((1, grown["v1_keys"]), (2, _keys_by_split(out))):
        page = tmp_path / f"report{version}.html"
        assert main(["report", str(out), "--version", str(version), "--out", str(page)]) == 0
        shown = re.search(r'data-count="accepted">([\d,]+)<', page.read_text())
        assert int(shown[1].replace(",", "")) == sum(map(len, keys.values()))
    assert main(["report", str(out), "--version", "3", "--out", str(tmp_path / "x.html")]) == 2


def test_an_append_that_adds_nothing_to_a_listed_test_split_keeps_it(tmp_path):
    """Official splits with a test list (VOC, Pet): an append that adds only train keys
    carries the test split over unchanged (it failed the commit with a KeyError)."""
    from beam_pipeline.commands.sample_data import write_sample_data

    write_sample_data(tmp_path / "all", count=6, seed=5, broken_fraction=0.0, height=16, width=12)
    keys = sorted(p.stem for p in (tmp_path / "all" / "images").iterdir())
    lists = {"train": keys[:3], "validation": keys[3:4], "test": keys[4:5]}

    def listed(train: list[str]) -> list[str]:
        args = []
        for split, names in {**lists, "train": train}.items():
            path = tmp_path / f"{split}-{len(train)}.txt"
            path.write_text("".join(f"{name}\n" for name in names))
            args += ["--split_file", f"{split}={path}"]
        return args

    out = tmp_path / "out"
    assert main(["prepare", *job_args(_Inputs(tmp_path / "all"), out, *listed(keys[:3]))]) == 0
    extended = listed(keys[:3] + keys[5:])
    assert main(["prepare", *job_args(_Inputs(tmp_path / "all"), out, *extended, "--append")]) == 0
    info = _metadata(out)
    assert {name: split["num_examples"] for name, split in info["splits"].items()} == {
        "train": 4,
        "validation": 1,
        "test": 1,
    }
    assert info["dataset_versions"][-1]["added"] == {"train": 1, "validation": 0, "test": 0}
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize("second", ["skip", "reject"])
def test_an_append_to_an_output_with_unlabeled_images_counts_each_key_once(tmp_path, second):
    """Unlabeled images (--images_without_mask skip) dropped out of an append's count of
    discovered entries, and one rejected by the next run stayed listed as unlabeled too:
    the published output failed verify. unlabeled.jsonl is merged as rejects.jsonl is."""
    from beam_pipeline.commands.sample_data import write_sample_data

    write_sample_data(tmp_path / "all", count=8, seed=5, broken_fraction=0.0, height=16, width=12)
    unlabeled = sorted((tmp_path / "all" / "masks").iterdir())[0]
    unlabeled.unlink()
    out = tmp_path / "out"
    flags = ("--images_without_mask", "skip")
    assert main(["prepare", *job_args(_Inputs(tmp_path / "all"), out, *flags)]) == 0
    again = flags if second == "skip" else ()
    assert main(["prepare", *job_args(_Inputs(tmp_path / "all"), out, *again, "--append")]) == 0
    assert main(["verify", str(out)]) == 0
    info = _metadata(out)
    listed = (out / "unlabeled.jsonl").read_text().splitlines() if second == "skip" else []
    rejected = [json.loads(line)["reason"] for line in (out / "rejects.jsonl").open()]
    assert len(listed) == (info.get("num_unlabeled") or {}).get("total", 0)
    assert len(listed) + rejected.count("missing_mask") == 1
    assert info["num_discovered"] == 8


def test_an_append_with_another_class_map_is_refused(grown, tmp_path, capsys):
    """--class_map decides which id a mask's value is stored as: an append with another
    map (none before) stored other ids for the same masks, unremarked."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    before = _snapshot(out)
    mapping = tmp_path / "swap.json"
    mapping.write_text('{"1": 2, "2": 1, "0": 0, "3": 3}')
    assert _prepare(grown["all"], out, "--append", "--class_map", str(mapping)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "class_map: output null, this run" in err, err
    assert _snapshot(out) == before


@pytest.mark.parametrize("distance", ["20", "4"])
def test_an_append_with_another_duplicate_distance_is_refused(grown, tmp_path, capsys, distance):
    """An append's search groups stored images with each other too: a wider distance
    grouped stored images of two splits (duplicates.jsonl named one split for records in
    two, and verify failed the published append), a narrower one left stored images placed
    together for a group that is gone. Without a search (--duplicates off) it is not used."""
    out = tmp_path / "out"
    shutil.copytree(grown["out"], out)
    before = _snapshot(out)
    assert _prepare(grown["all"], out, "--append", "--duplicate_distance", distance) == 2
    err = capsys.readouterr().err
    wanted = f"duplicate_distance: output 12, this run {distance}"
    assert len(err.strip().splitlines()) == 1 and wanted in err, err
    assert _snapshot(out) == before
    flags = ("--duplicate_distance", distance, "--duplicates", "off")
    assert _prepare(grown["all"], out, "--append", *flags) == 0


def test_an_append_whose_lists_move_a_stored_key_says_so(tmp_path):
    """Official splits: an append's --split_file naming a stored key in another split was
    accepted silently, the key kept where it was while the summary said every entry is in
    its listed split. The key is now a key_exists reject saying both splits."""
    from beam_pipeline.commands.sample_data import write_sample_data

    write_sample_data(tmp_path / "all", count=6, seed=5, broken_fraction=0.0, height=16, width=12)
    keys = sorted(p.stem for p in (tmp_path / "all" / "images").iterdir())

    def lists(train: list[str], validation: list[str]) -> list[str]:
        flags = []
        for split, names in (("train", train), ("validation", validation)):
            path = tmp_path / f"{split}-{len(names)}-{names[0]}.txt"
            path.write_text("".join(f"{name}\n" for name in names))
            flags += ["--split_file", f"{split}={path}"]
        return flags

    out = tmp_path / "out"
    first = lists(keys[:4], keys[4:])
    assert main(["prepare", *job_args(_Inputs(tmp_path / "all"), out, *first)]) == 0
    moved = lists(keys[1:], keys[:1])  # keys[0] "moved" to validation, keys[4:] to train
    assert main(["prepare", *job_args(_Inputs(tmp_path / "all"), out, *moved, "--append")]) == 0
    rejects = {
        row["key"]: row for row in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())
    }
    assert set(rejects) == {keys[0], *keys[4:]}
    assert all(row["reason"] == "key_exists" for row in rejects.values())
    assert (
        "listed in validation, but version 1 of the output stores it in train"
        in (rejects[keys[0]]["detail"])
    )
    assert _keys_by_split(out)["train"].count(keys[0]) == 1
    assert main(["verify", str(out)]) == 0


def _bridging_blends(first, second):
    """(a, c, b): blend weights of two portraits where c is a verified near copy of a and of
    b, closer to b, and a and b are no near copies of each other."""
    import io

    from PIL import Image

    from transforms import duplicates as dups

    def hashed(weight):
        data = io.BytesIO()
        Image.blend(first, second, weight).save(data, "PNG")
        image = Image.open(io.BytesIO(data.getvalue()))
        return dups.fingerprint(str(weight), data.getvalue(), dups.thumbnail(image))

    def near(x, y):
        return dups.hamming(x.phash, y.phash) <= 12 and dups.verified(x, y, 0.95)

    weights = [step / 40 for step in range(21)]
    hashes = {weight: hashed(weight) for weight in weights}
    for a, c, b in itertools.combinations(weights, 3):
        ha, hc, hb = hashes[a], hashes[c], hashes[b]
        closer = dups.hamming(hc.phash, hb.phash) < dups.hamming(hc.phash, ha.phash)
        if near(ha, hc) and near(hc, hb) and not near(ha, hb) and closer:
            return a, c, b
    raise AssertionError("no bridging blend")


def test_a_new_image_linking_stored_images_of_two_splits_joins_its_groups_split(tmp_path):
    """A new image that is a near copy of two stored images in two splits (which are not
    near copies of each other) was put in the split of the smaller stored key, while its
    group held the other: duplicates.jsonl named a split one member is not stored in, and
    verify failed the append it had just published."""
    from PIL import Image

    from beam_pipeline.commands.sample_data import write_sample_data
    from transforms.splits import SplitFractions

    write_sample_data(tmp_path / "src", count=8, seed=11, broken_fraction=0.0, height=64, width=48)
    portraits = [Image.open(p).convert("RGB") for p in sorted((tmp_path / "src/images").iterdir())]
    mask = sorted((tmp_path / "src/masks").iterdir())[0]
    first, second = portraits[2], portraits[7]
    rule = SplitFractions(0.9, 0.1)
    a_key = next(k for k in (f"a{i:03d}" for i in range(999)) if rule.split_of(k) == "train")
    b_key = next(k for k in (f"b{i:03d}" for i in range(999)) if rule.split_of(k) == "validation")
    c_key = next(k for k in (f"c{i:03d}" for i in range(999)) if rule.split_of(k) == "train")
    weights = dict(zip((a_key, c_key, b_key), _bridging_blends(first, second), strict=True))
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    (data / "masks").mkdir()
    for key in (a_key, b_key, c_key):
        if key == c_key:
            shutil.copytree(data, tmp_path / "first")
        Image.blend(first, second, weights[key]).save(data / "images" / f"{key}.png")
        shutil.copy(mask, data / "masks" / f"{key}_mask.mat")
    out = tmp_path / "out"
    flags = ("--num_shards", "2")
    assert main(["prepare", *job_args(_Inputs(tmp_path / "first"), out, *flags)]) == 0
    assert main(["prepare", *job_args(_Inputs(data), out, *flags, "--append")]) == 0
    (group,) = [json.loads(line) for line in (out / "duplicates.jsonl").read_text().splitlines()]
    assert group["keys"] == [b_key, c_key] and group["split"] == "validation"
    assert c_key in _keys_by_split(out)["validation"]
    assert main(["verify", str(out)]) == 0
    # A copy of the train image then made the stored train and validation images one group
    # (the copy's class took the validation image in), naming train: verify failed again.
    shutil.copy(data / "images" / f"{a_key}.png", data / "images" / "d000.png")
    shutil.copy(mask, data / "masks" / "d000_mask.mat")
    assert main(["prepare", *job_args(_Inputs(data), out, *flags, "--append")]) == 0
    groups = [json.loads(line) for line in (out / "duplicates.jsonl").read_text().splitlines()]
    assert {"d000", a_key} <= set(groups[0]["keys"]) and groups[0]["split"] == "train"
    assert all(not {a_key, c_key} <= set(group["keys"]) for group in groups)
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize("method", ["--split_file", "--split_by_folder"])
def test_an_append_naming_a_split_the_output_lacks_is_refused(tmp_path, capsys, method):
    """A test list (or test folder) added on an append ran the whole job and failed its
    commit (the new split's key table was not version 1's). Refused in one line before."""
    from beam_pipeline.commands.sample_data import write_sample_data

    write_sample_data(tmp_path / "src", count=6, seed=5, broken_fraction=0.0, height=16, width=12)
    keys = sorted(p.stem for p in (tmp_path / "src" / "images").iterdir())
    data = tmp_path / "data"
    folders = {"train": keys[:3], "val": keys[3:4], "test": keys[4:]}
    for folder, names in folders.items():
        where = f"{folder}/" if method == "--split_by_folder" else ""
        (data / "images" / where).mkdir(parents=True, exist_ok=True)
        (data / "masks" / where).mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy(tmp_path / "src/images" / f"{name}.jpg", data / "images" / where)
            shutil.copy(tmp_path / "src/masks" / f"{name}_mask.mat", data / "masks" / where)
    lists = []
    for split, folder in (("train", "train"), ("validation", "val"), ("test", "test")):
        path = tmp_path / f"{split}.txt"
        path.write_text("".join(f"{name}\n" for name in folders[folder]))
        lists += ["--split_file", f"{split}={path}"]
    out = tmp_path / "out"
    if method == "--split_file":
        first, again = lists[:4], lists
    else:
        first = again = ["--split_by_folder"]
        shutil.move(data / "images" / "test", tmp_path / "test_images")
    assert main(["prepare", *job_args(_Inputs(data), out, *first)]) == 0
    if method == "--split_by_folder":
        shutil.move(tmp_path / "test_images", data / "images" / "test")
    before = _snapshot(out)
    capsys.readouterr()
    assert main(["prepare", *job_args(_Inputs(data), out, *again, "--append")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "names split 'test', which the output does not have (it has train, validation)" in err
    assert _snapshot(out) == before
