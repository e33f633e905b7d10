"""job/describe.describe: metadata.json as a pure function of the settled shards, the staged
tables and the run's accounting (the commit's I/O is tested end to end elsewhere)."""

from __future__ import annotations

import dataclasses
import json

from beam_pipeline.job.commit import final_names
from beam_pipeline.job.describe import Accounting, StagedTables, describe
from beam_pipeline.job.settings import AppendSettings, CommitSettings
from beam_pipeline.job.shard_work import WrittenShard
from transforms.format.dataset_info import DatasetInfo, FileRef, RejectCounts
from transforms.format.naming import digest_table_name, hashes_name, key_table_name
from transforms.record_spec import RecordSpec
from transforms.rejects import Reason, Reject
from transforms.splits import ShardSpec

STARTED = 1_700_000_000.0


def _shard(split: str, index: int, of: int, records: int, fmt: str = "tfrecord", **fields):
    spec = ShardSpec(split, index, of, fmt)
    return WrittenShard(
        spec,
        num_examples=records,
        bytes=1000 * records + 16,
        sha256=f"{spec.name}-sha",
        image_shapes=((4, 3),) if records else (),
        transcoded_images=0,
        index_bytes=9 * records,
        index_sha256=f"{spec.name}-idx" if records else "",
        **fields,
    )


def _tables(splits, version=1, hashes=False) -> StagedTables:
    def ref(name):
        return FileRef(name, 7, f"{name}-sha")

    return StagedTables(
        key_tables={s: ref(key_table_name(s, version)) for s in splits},
        digest_tables={s: ref(digest_table_name(s, version)) for s in splits},
        hash_tables={s: ref(hashes_name(s, version)) for s in splits} if hashes else {},
        duplicates_file=ref("duplicates.jsonl") if hashes else None,
    )


def _accounting(rejects, discovered, **fields) -> Accounting:
    counts = RejectCounts.count((r.key, r.reason.value) for r in sorted(rejects))
    values = dict(
        discovered=discovered,
        rejects=rejects,
        unlabeled=0,
        skipped=0,
        num_rejected=counts,
        duplicates=None,
        packages={"segprep": "test"},
        finished_at=STARTED + 10,
    )
    return Accounting(**{**values, **fields})


def _first(tmp_path, fmt="tfrecord") -> tuple[DatasetInfo, dict]:
    # train: shard 1 lost every record while written, so shard 2 is published as 1 of 2
    shards = [_shard("train", 0, 3, 2, fmt), _shard("train", 1, 3, 0, fmt)]
    shards += [_shard("train", 2, 3, 3, fmt), _shard("validation", 0, 1, 1, fmt)]
    shards[0] = dataclasses.replace(shards[0], exif_ignored_images=1)
    rejects = [Reject("z", Reason.MISSING_MASK, "no mask"), Reject("a", Reason.MISSING_MASK, "")]
    settings = CommitSettings(
        str(tmp_path), "run-1", {"output_dir": "/first/"}, RecordSpec(record_format=fmt)
    )
    settings = dataclasses.replace(settings, started_at=STARTED)
    published = final_names(shards)
    report = {"mode": "group", "groups": 0, "moved": {"train": -1, "validation": 1}}
    report.update(dropped=0, leaks=2, in_output_matches=0, leakage_checked=["/test/"])
    run = _accounting(rejects, discovered=8, duplicates=report)
    tables = _tables(["train", "validation"], hashes=True)
    return describe(shards, published, tables, run, settings), published


def test_a_first_version_is_described_from_its_shards_and_tables(tmp_path):
    info, published = _first(tmp_path)
    train = info.split("train")
    assert [s.file for s in train.shards] == [
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    assert published["train-00002-of-00003.tfrecord"] == "train-00001-of-00002.tfrecord"
    assert train.num_examples == 5 and train.image_shape == (4, 3)
    assert train.shards[1].index == FileRef(
        "index/train-00001-of-00002.tfrecord.idx", 27, "train-00002-of-00003.tfrecord-idx"
    )
    assert train.key_table.file == "index/train.keys.jsonl" and train.has_index
    assert train.extra["hashes"]["file"] == "index/train.hashes.jsonl"
    assert info.num_discovered == 8 and info.exif_orientation_ignored == 1
    assert info.num_rejected == RejectCounts(2, {"missing_mask": 2}, {"missing_mask": "a"})
    assert info.duplicates == {
        "mode": "group",
        "groups": 0,
        "moved": {"train": -1, "validation": 1},
        **{"dropped": 0, "leaks": 2, "in_output_matches": 0, "leakage_checked": ["/test/"]},
        "file": {"file": "duplicates.jsonl", "bytes": 7, "sha256": "duplicates.jsonl-sha"},
    }
    assert info.run.wall_seconds == 10.0 and info.run.records_per_second == 0.6
    assert info.run.bytes_written == 6 * 1000 + 4 * 16  # every settled shard's bytes
    (version,) = info.dataset_versions
    assert version.added == {"train": 5, "validation": 1} and version.num_rejected == {
        "missing_mask": 2
    }
    assert version.created_at == "2023-11-14T22:13:30+00:00"
    # What the commit publishes is what every reader loads back, field for field.
    assert DatasetInfo.from_json(json.loads(info.to_bytes())) == info


def test_a_format_without_offsets_lists_no_index(tmp_path):
    info, _ = _first(tmp_path, "array_record")
    assert all(shard.index is None for shard in info.split("train").shards)
    assert info.record_format == "array_record" and info.split("train").has_index


def test_an_append_extends_the_previous_version(tmp_path):
    previous, _ = _first(tmp_path)
    shards = [_shard("train", 0, 1, 2), _shard("validation", 0, 1, 0)]
    rejects = [Reject("b", Reason.KEY_EXISTS, "other bytes")]
    settings = CommitSettings(
        str(tmp_path) + "/moved/",
        "run-2",
        {"output_dir": "/second/"},
        append=AppendSettings(version=2, previous_sha256="x"),
    )
    published = final_names(shards, version=2)
    merged = RejectCounts(
        5, {"key_exists": 1, "leaks_into": 2, "missing_mask": 2}, {"key_exists": "b"}
    )
    report = {"mode": "group", "groups": 3, "in_output_matches": 1, "dropped": 0, "leaks": 0}
    report.update(moved={"train": 1, "validation": -1}, leakage_checked=[])
    run = _accounting(rejects, discovered=3, skipped=1, num_rejected=merged, duplicates=report)
    tables = _tables(["train", "validation"], 2, hashes=True)
    info = describe(shards, published, tables, run, settings, previous)
    train = info.split("train")
    assert [s.file for s in train.shards][-1] == "train_v00002-00000-of-00001.tfrecord"
    assert train.num_examples == 7 and train.appended_key_tables == (tables.key_tables["train"],)
    assert info.split("validation").shards == previous.split("validation").shards
    # each key of the latest version once: 7 stored, 1 unlabeled, 4 rejected (the key_exists
    # reject's key is one of the 7 stored; it was counted twice)
    assert info.num_discovered == 7 + 1 + 4
    assert info.exif_orientation_ignored == 1  # the first version's, carried on
    assert info.parameters == {"output_dir": str(tmp_path) + "/moved/"}  # the first run's flags
    # the whole dataset's groups (the append searched the stored images too); what each run
    # did adds up (the first run's move and this one's cancel out); drops and leaks are the
    # merged rejects.jsonl's (the first run's two leaks are still rejects there)
    assert info.duplicates["latest_append"] == report and info.duplicates["groups"] == 3
    assert info.duplicates["file"] == tables.duplicates_file.to_json()
    assert info.duplicates["moved"] == {} and info.duplicates["leaks"] == 2
    assert info.duplicates["leakage_checked"] == ["/test/"]
    assert info.duplicates["in_output_matches"] == 1
    first, second = info.dataset_versions
    assert first == previous.dataset_versions[0]
    assert second.added == {"train": 2, "validation": 0} and second.skipped_identical == 1
    assert second.num_examples == {"train": 7, "validation": 1}
    assert DatasetInfo.from_json(json.loads(info.to_bytes())) == info


def test_an_appends_hash_tables_follow_the_first_versions(tmp_path):
    previous, _ = _first(tmp_path)
    shards = [_shard("train", 0, 1, 2), _shard("validation", 0, 1, 1)]
    settings = CommitSettings(
        str(tmp_path), "run-2", {}, append=AppendSettings(version=2, previous_sha256="x")
    )
    run = _accounting([], discovered=3, duplicates={"mode": "group"})
    tables = _tables(["train", "validation"], 2, hashes=True)
    info = describe(shards, final_names(shards, version=2), tables, run, settings, previous)
    for name in ("train", "validation"):
        split = info.split(name)
        assert split.extra["hashes"] == previous.split(name).extra["hashes"]  # as it was
        assert split.appended_hashes == (
            FileRef(hashes_name(name, 2), 7, f"{hashes_name(name, 2)}-sha"),
        )
        assert split.to_json()["appended_hashes"][0]["file"] == f"index/{name}.v2.hashes.jsonl"
    assert "appended_hashes" not in previous.split("train").to_json()
    assert DatasetInfo.from_json(json.loads(info.to_bytes())) == info
