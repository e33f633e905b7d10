"""The record index: its format, `segprep index` (atomic, never touching foreign files), verify."""

from __future__ import annotations

import glob
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import tensorflow as tf

from beam_pipeline import cli
from beam_pipeline.commands.index import index_output
from beam_pipeline.commands.verify import verify_output
from shard_reader.source import unframe
from tests.helpers.class_outputs import metadata as _metadata
from tests.helpers.class_outputs import write_metadata as _write_metadata
from tests.helpers.outputs import published
from transforms.format import record_index
from transforms.format.dataset_info import DatasetInfo
from transforms.format.naming import (
    INDEX_DIR,
    METADATA_FILE,
    SEGPREP_DIR,
    TFDS_FILES,
    index_name,
    is_output_name,
    key_table_name,
    parse_shard_name,
    shard_name,
)


def _snapshot(directory: Path) -> dict[str, bytes]:
    """Every published file's bytes (segprep's own .segprep folder records the run id)."""
    return {name: (directory / name).read_bytes() for name in published(directory)}


@pytest.fixture
def copy_of(tmp_path):
    def make(source: Path) -> Path:
        target = tmp_path / "out"
        shutil.copytree(source, target)
        return target

    return make


# --- the format -----------------------------------------------------------------------------


def test_index_offsets_match_the_bytes_tensorflow_writes(tmp_path):
    payloads = [b"", b"x", bytes(range(256)) * 40, "ключ".encode()]
    path = tmp_path / shard_name("train", 2, 5)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for payload in payloads:
            writer.write(payload)
    keys = ["a", "tab\tkey", 'quote"and\nnewline', "ключ"]
    indexed = record_index.index_shard(path.name, list(zip(keys, map(len, payloads), strict=True)))
    data = path.read_bytes()
    frames = record_index.parse_index(indexed.index_bytes)
    assert [unframe(data[o : o + n], "test") for o, n in frames] == payloads
    assert frames[-1][0] + frames[-1][1] == len(data)
    assert indexed.index_file == f"{INDEX_DIR}/{path.name}.idx"
    # The tfrecord2idx format: "offset length" per line.
    assert indexed.index_bytes.decode().splitlines()[1] == f"{len(payloads[0]) + 16} 17"
    rows = record_index.parse_key_table(record_index.key_table_bytes(indexed.key_rows))
    assert rows == [record_index.KeyRow(key, 2, number) for number, key in enumerate(keys)]


@pytest.mark.parametrize(
    "data",
    [b"0 20\n25 20\n", b"0 20\n20\n", b"0 -4\n", b"0 10\n", b"0 20\n20 20", b"\xff\n", b"a b\n"],
)
def test_malformed_index_files_are_refused(data):
    with pytest.raises(record_index.IndexFormatError):
        record_index.parse_index(data)


@pytest.mark.parametrize(
    "line", [b'["k", -1, 0]\n', b'["k", 0]\n', b"[1, 0, 0]\n", b"{}\n", b"x\n"]
)
def test_malformed_key_tables_are_refused(line):
    with pytest.raises(record_index.IndexFormatError):
        record_index.parse_key_table(line)


def test_index_names_stay_out_of_a_shard_glob(indexed):
    assert index_name("train-00001-of-00003.tfrecord") == "index/train-00001-of-00003.tfrecord.idx"
    assert key_table_name("validation") == "index/validation.keys.jsonl"
    for bad in ("../train-00001-of-00003.tfrecord", "train.tfrecord"):
        with pytest.raises(ValueError):
            index_name(bad)
    with pytest.raises(ValueError):
        key_table_name("../train")
    shards = {shard["file"] for shard in _metadata(indexed)["splits"]["train"]["shards"]}
    assert {Path(p).name for p in glob.glob(str(indexed / "train-*-of-*.tfrecord"))} == shards
    recursive = glob.glob(str(indexed / "**" / "train-*-of-*.tfrecord"), recursive=True)
    assert {Path(p).name for p in recursive} == shards
    assert (indexed / INDEX_DIR).is_dir() and all(
        is_output_name(n) for n in [INDEX_DIR, *TFDS_FILES]
    )
    assert not any(parse_shard_name(path.name) for path in (indexed / INDEX_DIR).iterdir())


# --- segprep index --------------------------------------------------------------------------


def test_index_command_lists_every_file_with_its_sha256(unindexed, indexed):
    before, after = _metadata(unindexed), _metadata(indexed)
    info = DatasetInfo.from_json(after)
    assert info.has_index and sorted(ref.file for ref in info.tfds_files) == sorted(TFDS_FILES)
    listed = [ref for ref in info.tfds_files]
    for split in info.splits.values():
        listed += [split.key_table, *(shard.index for shard in split.shards)]
    for ref in listed:
        data = (indexed / ref.file).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (ref.bytes, ref.sha256)
    # Everything else in metadata.json is kept as it was.
    for key, value in before.items():
        if key != "splits":
            assert after[key] == value, key
    for split, entry in before["splits"].items():
        for shard_before, shard_after in zip(
            entry["shards"], after["splits"][split]["shards"], strict=True
        ):
            assert {k: v for k, v in shard_after.items() if k != "index"} == shard_before
    # The staging area is gone; the manifest lists every published name, the new ones too.
    assert not list((indexed / SEGPREP_DIR / "runs").iterdir())
    manifest = json.loads((indexed / SEGPREP_DIR / "manifest.json").read_text())
    assert manifest["state"] == "committed" and "index/train.keys.jsonl" in manifest["files"]
    assert verify_output(str(indexed)) == []


def test_index_keys_are_the_records_keys(indexed):
    info = DatasetInfo.from_json(_metadata(indexed))
    for split in info.splits.values():
        rows = record_index.parse_key_table((indexed / split.key_table.file).read_bytes())
        expected = []
        for number, shard in enumerate(split.shards):
            for record_number, record in enumerate(
                tf.data.TFRecordDataset(str(indexed / shard.file))
            ):
                key = tf.train.Example.FromString(record.numpy()).features.feature["key"]
                expected.append((key.bytes_list.value[0].decode(), number, record_number))
        assert [(row.key, row.shard, row.record) for row in rows] == expected


def test_index_again_changes_nothing(indexed, copy_of, capsys):
    out = copy_of(indexed)
    before = _snapshot(out)
    assert cli.main(["index", str(out)]) == 0
    assert "indexed" in capsys.readouterr().out
    assert _snapshot(out) == before


def test_a_foreign_file_at_an_index_name_is_never_overwritten(unindexed, copy_of, capsys):
    out = copy_of(unindexed)
    name = json.loads((out / METADATA_FILE).read_text())["splits"]["train"]["shards"][1]["file"]
    (out / INDEX_DIR).mkdir()
    (out / INDEX_DIR / f"{name}.idx").write_text("my own notes\n")
    before = _snapshot(out)
    assert cli.main(["index", str(out)]) == 2
    err = capsys.readouterr().err
    assert "segprep did not write" in err and len(err.strip().splitlines()) == 1
    assert _snapshot(out) == before
    assert not list((out / SEGPREP_DIR / "runs").glob("*"))


def test_a_users_file_inside_index_is_kept(indexed, copy_of):
    """segprep deletes and replaces only the index files its manifest lists. A file under a
    name segprep never publishes is the user's, as beside the shards: verify failed every
    output holding one, though index, --overwrite and --append keep it and succeed."""
    out = copy_of(indexed)
    (out / INDEX_DIR / "README.txt").write_text("a user's file beside ours\n")
    index_output(str(out))
    assert (out / INDEX_DIR / "README.txt").read_text() == "a user's file beside ours\n"
    assert verify_output(str(out)) == []


def test_a_damaged_shard_is_refused_and_nothing_written(unindexed, copy_of, capsys):
    out = copy_of(unindexed)
    shard = out / _metadata(out)["splits"]["train"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    before = _snapshot(out)
    assert cli.main(["index", str(out)]) == 2
    assert "sha256" in capsys.readouterr().err
    assert _snapshot(out) == before and not list((out / SEGPREP_DIR / "runs").glob("*"))


@pytest.mark.parametrize("what", ["missing", "unfinished"])
def test_index_of_a_non_output_is_a_usage_error(tmp_path, capsys, what):
    target = tmp_path / "nope"
    if what == "unfinished":
        target.mkdir()
    assert cli.main(["index", str(target)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert ("not a directory" if what == "missing" else "metadata.json not found") in err


def test_newer_metadata_is_refused(unindexed, copy_of, capsys):
    out = copy_of(unindexed)
    metadata = _metadata(out)
    metadata["format_version"] = 99
    _write_metadata(out, metadata)
    assert cli.main(["index", str(out)]) == 2
    assert "newer segprep" in capsys.readouterr().err


# --- segprep verify checks the index ----------------------------------------------------------


def _relist(out: Path, name: str) -> None:
    """Update metadata.json's size and sha256 of `name`: damage the sha256 check cannot see."""
    data = (out / name).read_bytes()
    metadata = _metadata(out)
    refs = list(metadata.get("tfds_files", []))
    for split in metadata["splits"].values():
        refs += [split.get("key_table")] + [s.get("index") for s in split["shards"]]
    for ref in refs:
        if ref and ref["file"] == name:
            ref.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    _write_metadata(out, metadata)


def _first_index(out: Path) -> str:
    return _metadata(out)["splits"]["train"]["shards"][0]["index"]["file"]


def shift_an_offset(out: Path) -> str:
    name = _first_index(out)
    lines = (out / name).read_text().splitlines()
    offset, length = map(int, lines[1].split())
    lines[1:3] = [f"{offset} {length - 1}", f"{offset + length - 1} {int(lines[2].split()[1]) + 1}"]
    (out / name).write_text("\n".join(lines) + "\n")
    _relist(out, name)
    return "offsets and lengths do not match"


def swap_two_keys(out: Path) -> str:
    name = _metadata(out)["splits"]["train"]["key_table"]["file"]
    lines = (out / name).read_text().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    first[0], second[0] = second[0], first[0]
    lines[:2] = [json.dumps(first), json.dumps(second)]
    (out / name).write_text("\n".join(lines) + "\n")
    _relist(out, name)
    return f"{name} line 1: key"


def edit_index_without_relisting(out: Path) -> str:
    name = _first_index(out)
    (out / name).write_text((out / name).read_text() + "999 99\n")
    return f"{name}: "


def remove_the_key_table(out: Path) -> str:
    name = _metadata(out)["splits"]["validation"]["key_table"]["file"]
    (out / name).unlink()
    return f"{name}: missing"


def stale_tfds_info(out: Path) -> str:
    path = out / "dataset_info.json"
    path.write_text(path.read_text().replace('"name": "train"', '"name": "training"'))
    _relist(out, "dataset_info.json")
    return "dataset_info.json: does not describe"


def extra_index_file(out: Path) -> str:
    (out / INDEX_DIR / "train-00009-of-00010.tfrecord.idx").write_text("0 20\n")
    return "index/train-00009-of-00010.tfrecord.idx: extra file"


def drop_one_index_listing(out: Path) -> str:
    metadata = _metadata(out)
    del metadata["splits"]["train"]["shards"][1]["index"]
    _write_metadata(out, metadata)
    return "lacks part of its record index"


@pytest.mark.parametrize(
    "damage",
    [
        shift_an_offset,
        swap_two_keys,
        edit_index_without_relisting,
        remove_the_key_table,
        stale_tfds_info,
        extra_index_file,
        drop_one_index_listing,
    ],
    ids=lambda damage: damage.__name__,
)
def test_verify_finds_index_damage(damage, indexed, copy_of):
    out = copy_of(indexed)
    expected = damage(out)
    problems = verify_output(str(out))
    assert any(expected in problem for problem in problems), problems


def test_verify_says_when_it_checked_the_index(indexed, unindexed, capsys):
    assert cli.main(["verify", str(indexed)]) == 0
    assert "record index checked" in capsys.readouterr().out
    assert cli.main(["verify", str(unindexed)]) == 0
    assert "record index" not in capsys.readouterr().out


def test_prepare_overwrite_replaces_an_indexed_output(indexed, sample_dataset, copy_of):
    """The index and TFDS files are segprep's: --overwrite replaces them with the shards."""
    from beam_pipeline.launch import launcher
    from tests.helpers.runs import job_args

    out = copy_of(indexed)
    old = DatasetInfo.from_json(_metadata(out)).listed_files()
    launcher.run(job_args(sample_dataset, out, "--num_shards", "2", "--overwrite"))
    info = DatasetInfo.from_json(_metadata(out))
    assert info.split("train").num_shards == 1 and info.has_index
    index_files = {f"{INDEX_DIR}/{path.name}" for path in (out / INDEX_DIR).iterdir()}
    assert index_files == {name for name in info.listed_files() if name.startswith(INDEX_DIR)}
    assert old - info.listed_files()  # the earlier output's shards and indexes are gone
    assert not any((out / name).exists() for name in old - info.listed_files())
    assert verify_output(str(out)) == []
