"""`segprep verify` on damaged files: each damage is a problem (exit 1), never a crash.

One case per code site a fuzz of metadata.json, the manifest, rejects.jsonl and
duplicates.jsonl (values swapped for null, lists, tables, strings, huge, negative and
infinite numbers, keys deleted) found raising an exception, and a few generic type swaps.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from beam_pipeline import cli
from beam_pipeline.commands.verify import verify_output
from transforms.format.naming import (
    DUPLICATES_FILE,
    MANIFEST_FILE,
    METADATA_FILE,
    REJECTS_FILE,
    UNLABELED_FILE,
)


def _edit_json(path: Path, steps: tuple, value) -> None:
    data = json.loads(path.read_text())
    parent = data
    for step in steps[:-1]:
        parent = parent[step]
    parent[steps[-1]] = value
    path.write_text(json.dumps(data))


def meta(*steps, value):
    def damage(directory: Path) -> None:
        _edit_json(directory / METADATA_FILE, steps, value)

    return damage


def manifest(field: str, value):
    def damage(directory: Path) -> None:
        _edit_json(directory / MANIFEST_FILE, (field,), value)

    return damage


def reject_row(field: str, value):
    """rejects.jsonl's first line with `field` swapped."""

    def damage(directory: Path) -> None:
        path = directory / REJECTS_FILE
        lines = path.read_text().splitlines()
        row = json.loads(lines[0])
        row[field] = value
        path.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")

    return damage


def group_split(value):
    """duplicates.jsonl as one group of two stored keys whose split is `value`."""

    def damage(directory: Path) -> None:
        table = json.loads((directory / METADATA_FILE).read_text())["splits"]["train"]
        keys = (directory / table["key_table"]["file"]).read_text().splitlines()[:2]
        group = {
            "keys": [json.loads(line)[0] for line in keys],
            "split": value,
            "kind": "exact",
            "max_distance": 0,
            "conflicting_masks": False,
        }
        (directory / DUPLICATES_FILE).write_text(json.dumps(group) + "\n")

    return damage


def train_split(**fields):
    """The train split's entry with `fields` set, as an append's would be (one version)."""

    def damage(directory: Path) -> None:
        path = directory / METADATA_FILE
        data = json.loads(path.read_text())
        data["splits"]["train"].update(fields)
        path.write_text(json.dumps(data))

    return damage


def latest_version_huge(directory: Path) -> None:
    """The last version numbered past what a table name can hold, beside an append's table."""
    train_split(appended_key_tables=[{"file": "index/train.v2.keys.jsonl"}])(directory)
    _edit_json(directory / METADATA_FILE, ("dataset_versions", -1, "version"), 10**40)


def unlabeled_key_list(directory: Path) -> None:
    _edit_json(directory / METADATA_FILE, ("num_unlabeled",), {"total": 1})
    (directory / UNLABELED_FILE).write_text(json.dumps({"key": ["x"]}) + "\n")


DAMAGES = {
    # one per crash site fixed
    "manifest_files_number": manifest("files", 7),  # output_protocol: not iterable
    "manifest_files_numbers": manifest("files", [1, "x"]),  # output_protocol: sorted str/int
    "shard_count_string": meta("splits", "train", "shards", 0, "num_examples", value="3"),
    "image_shape_number": meta("splits", "train", "image_shape", value=7),
    "shards_number": meta("splits", "train", "shards", value=7),  # lists_index
    "tfds_files_number": meta("tfds_files", value=7),  # lists_index
    "dataset_versions_number": meta("dataset_versions", value=1.5),  # lists_index
    "parameters_string": meta("parameters", value="x"),  # duplicates
    "num_unlabeled_number": meta("num_unlabeled", value=3),  # accounting._unlabeled
    "hashes_file_list": meta("splits", "train", "hashes", "file", value=["x"]),
    "duplicates_file_table": meta("duplicates", "file", "file", value={"x": 1}),
    "mask_format_list": meta("mask_format", value=["jpeg"]),  # records._check_mask
    "reject_reason_null": reject_row("reason", None),  # accounting: sorted reasons
    "reject_key_list": reject_row("key", ["x"]),  # accounting: unhashable key
    "group_split_table": group_split({"x": 1}),  # parse_groups
    "appended_key_tables_number": train_split(appended_key_tables=7),  # duplicates, indexes
    "appended_key_table_file_list": train_split(
        appended_hashes=[{"file": "index/train.v2.hashes.jsonl", "bytes": 1, "sha256": "0"}],
        appended_key_tables=[{"file": ["x"]}],
    ),  # duplicates._check_appended_hashes
    "latest_version_huge": latest_version_huge,  # duplicates: key_table_name's ValueError
    "unlabeled_key_list": unlabeled_key_list,  # accounting._unlabeled
    # generic type swaps (handled before the fuzz, kept so they stay so)
    "splits_train_list": meta("splits", "train", value=[]),
    "shard_entry_string": meta("splits", "train", "shards", 0, value="x"),
    "num_rejected_string": meta("num_rejected", value="x"),
    "key_table_number": meta("splits", "train", "key_table", value=10**40),
    "classes_number": meta("classes", value=-7),
    "duplicates_list": meta("duplicates", value=[]),
    "record_format_table": meta("record_format", value={}),
}


@pytest.fixture(scope="module")
def pristine(prepared, tmp_path_factory):
    """One copy of the session's output; each case damages and restores its own files."""
    copy = tmp_path_factory.mktemp("damage") / "out"
    shutil.copytree(prepared[0], copy)
    return copy


@pytest.fixture
def output(pristine):
    saved = {
        name: (pristine / name).read_bytes()
        for name in (METADATA_FILE, MANIFEST_FILE, REJECTS_FILE, DUPLICATES_FILE)
    }
    yield pristine
    for name, data in saved.items():
        (pristine / name).write_bytes(data)
    (pristine / UNLABELED_FILE).unlink(missing_ok=True)


def test_pristine_copy_passes(pristine):
    assert verify_output(str(pristine)) == []


@pytest.mark.parametrize("name", DAMAGES)
def test_damage_is_a_problem_not_a_crash(name, output, capsys):
    DAMAGES[name](output)

    problems = verify_output(str(output))  # raises nothing
    assert problems

    assert cli.main(["verify", str(output)]) == 1
    captured = capsys.readouterr()
    assert "segprep: failed" not in captured.err
    assert captured.out.strip().splitlines()[:-1] == problems


def test_a_reject_renamed_to_another_rejects_key_is_found(output):
    """A line's key edited to another reject's keeps the count and the reasons: verify said
    OK. A run rejects each key once."""
    path = output / REJECTS_FILE
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) >= 2
    rows[0]["key"] = rows[1]["key"]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert f"{REJECTS_FILE}: keys rejected more than once: {rows[1]['key']}" in verify_output(
        str(output)
    )


def test_every_kind_of_bad_rejects_line_is_named_a_few_times_then_counted(output):
    """One problem per bad line made verify's list (and memory) as long as rejects.jsonl:
    150,000 reversed lines printed 150,003 lines. Each kind names its first lines only."""
    stored = json.loads((output / "index" / "train.keys.jsonl").read_text().splitlines()[0])[0]
    lines = [{"key": "~", "reason": 5}] * 40  # 40 not a reject
    lines += [{"key": f"{9000 - n:05d}", "reason": "x"} for n in range(500)]  # 499 out of order
    lines += [{"key": stored, "reason": "x"}] * 30  # 1 more out of order, 29 twice, 30 stored
    lines += [{"key": f"~{n:03d}", "reason": "x"} for n in range(12) for _ in "ab"]  # 12 twice
    (output / REJECTS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))

    problems = verify_output(str(output))

    assert len(problems) < 100
    for kind in ("is out of key order", "is also in a shard", "not a JSON object with key"):
        assert sum(f"{REJECTS_FILE} line " in line and kind in line for line in problems) == 20
    assert {line for line in problems if " more lines: " in line} == {
        f"{REJECTS_FILE}: 20 more lines: not a JSON object with key and reason",
        f"{REJECTS_FILE}: 480 more lines: key out of key order",
        f"{REJECTS_FILE}: 10 more lines: key also in a shard",
    }
    twice = f"{REJECTS_FILE}: keys rejected more than once: {', '.join([stored] * 10)}"
    assert f"{twice} and 31 more" in problems


@pytest.mark.parametrize("count", ["num_examples", "added"])
def test_edited_counts_of_a_one_version_output_are_a_problem(output, capsys, count):
    """Version 1's train count edited on a one-version output: verify said OK (it checked
    only outputs of two versions or more), and an append then failed at its commit."""
    data = json.loads((output / METADATA_FILE).read_text())
    assert len(data["dataset_versions"]) == 1
    _edit_json(output / METADATA_FILE, ("dataset_versions", 0, count, "train"), 10**9)

    assert cli.main(["verify", str(output)]) == 1
    printed = capsys.readouterr().out
    assert "metadata.json: version 1 split 'train' says 1000000000 records" in printed
    assert "counts" in printed and "(an append refuses this output)" in printed
