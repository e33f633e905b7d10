"""One TestPipeline test per composite transform, on tiny data, on a named real runner."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.commands.sample_data import mat_bytes as mat_v5
from beam_pipeline.job.commit import AccountingError, CommitOutput
from beam_pipeline.job.listing import REJECTS, ListAndPair
from beam_pipeline.job.planning import PlanShards, _SeedKeys
from beam_pipeline.job.settings import CommitSettings, PlanningSettings, ShardWriterSettings
from beam_pipeline.job.shard_work import WrittenShard, stage_index, staged_digest_rows
from beam_pipeline.job.write_shards import WriteShards
from beam_pipeline.runtime import output_protocol
from tests.helpers.images import blob_mask, rgb_jpeg
from tests.helpers.runs import RUNNER_ARGS
from tests.helpers.shard_plan import shard_specs
from transforms.files import normalize_dir
from transforms.format import digest_table
from transforms.format.naming import SPLITS
from transforms.pairing import Layout, Pair, SourceFile
from transforms.rejects import Reason, Reject
from transforms.splits import (
    ShardAssigner,
    ShardSpec,
    SplitFractions,
    SplitSize,
    plan_num_shards,
    seed_keys,
    shard_hash,
)


def _pipeline() -> BeamTestPipeline:
    return BeamTestPipeline(argv=RUNNER_ARGS, blocking=True)


def test_list_and_pair(tmp_path):
    images, masks = tmp_path / "img", tmp_path / "msk"
    (images / "sub").mkdir(parents=True)
    masks.mkdir()
    for name in ("a.jpg", "b.png", "sub/c.jpg", "d.jpg", "d.png", "readme.txt", ".DS_Store"):
        (images / name).write_bytes(b"x")
    (masks / "sub").mkdir()
    for name in ("a_mask.mat", "b.png", "sub/c_mask.mat", "d.mat", "e_mask.mat", ".DS_Store"):
        (masks / name).write_bytes(b"y")
    layout = Layout(normalize_dir(str(images)), normalize_dir(str(masks)))
    with _pipeline() as p:
        out = p | ListAndPair(layout)
        keys = out["pairs"] | "PairKeys" >> beam.Map(lambda pair: pair.key)
        reasons = out[REJECTS] | "Reasons" >> beam.Map(lambda r: (r.key, r.reason.value))
        assert_that(keys, equal_to(["a", "b", "sub/c"]), label="pairs")
        assert_that(
            reasons,
            equal_to(
                [
                    ("d", "duplicate_key"),
                    ("e", "missing_image"),
                    (str(images / "readme.txt"), "unrecognized_file"),
                ]
            ),
            label="rejects",
        )


def _pair(key: str) -> Pair:
    return Pair(key, SourceFile(f"/i/{key}.jpg", 100), SourceFile(f"/m/{key}.mat", 10))


def test_plan_shards_assigns_every_pair_and_plans_every_shard():
    """30 shards for 40 keys: hashing alone would leave shards empty, the seeds do not."""
    keys = [f"{i:03d}" for i in range(40)]
    fractions = SplitFractions(0.5, 0.3)
    with _pipeline() as p:
        planned = (
            p
            | beam.Create([[_pair(k) for k in keys[:25]], [_pair(k) for k in keys[25:]]])
            | PlanShards(PlanningSettings(fractions, num_shards=30))
        )
        specs = (
            planned["assigned"]
            | "Specs" >> beam.MapTuple(lambda name, batch: (name, batch[0]))
            | "DistinctSpecs" >> beam.Distinct()
        )
        assigned = planned["assigned"] | "Assigned" >> beam.FlatMapTuple(
            lambda name, batch: [(pair.key, name) for pair in batch[1]]
        )
        used = (
            planned["assigned"]
            | "UsedNames" >> beam.Map(lambda kv: kv[0])
            | "Distinct" >> beam.Distinct()
        )
        left_out = planned[REJECTS] | "LeftOut" >> beam.Map(lambda r: (r.key, r.reason.value))
        splits = {k: fractions.split_of(k) for k in keys}
        members = {s: [k for k, ks in splits.items() if ks == s] for s in SPLITS}
        plan = plan_num_shards(
            {s: SplitSize(len(m), 110 * len(m)) for s, m in members.items()}, num_shards=30
        )
        seeds = {s: seed_keys([(shard_hash(k), k) for k in m], plan[s]) for s, m in members.items()}
        assigner = ShardAssigner.from_seeds(plan, seeds)
        expected_specs = [spec.name for spec in shard_specs(plan)]
        # each batch carries the ShardSpec its name says
        assert_that(
            specs, equal_to([(spec.name, spec) for spec in shard_specs(plan)]), label="specs"
        )
        assert_that(used, equal_to(expected_specs), label="no_empty_shard")
        expected_assigned = [
            (k, assigner.assign(k, s).name) for k, s in splits.items() if s is not None
        ]
        assert_that(assigned, equal_to(expected_assigned), label="assigned")
        assert_that(
            left_out,
            equal_to([(k, "not_in_split") for k, s in splits.items() if s is None]),
            label="left_out",
        )


def test_seed_keys_combine_merges_partial_results_like_one_pass():
    """Bundles keep partial smallest-n lists; merged, they equal the pure seed_keys."""
    keys = [f"k{i}" for i in range(500)]
    combine = _SeedKeys()
    plan = {"train": 12, "validation": 2}  # the limit is the plan's most shards in a split
    parts = []
    for start in range(0, 500, 70):  # eight bundles of uneven sizes
        accumulator = combine.create_accumulator(plan)
        for key in keys[start : start + 70]:
            accumulator = combine.add_input(accumulator, [key], plan)
        assert len(accumulator) < 24
        parts.append(combine.compact(accumulator, plan))
    merged = combine.extract_output(combine.merge_accumulators(parts, plan), plan)
    assert merged == seed_keys([(shard_hash(k), k) for k in keys], 12)


def test_write_shards_writes_records_and_rejects(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.jpg").write_bytes(rgb_jpeg(24, 16))
    (src / "good.mat").write_bytes(mat_v5(blob_mask(24, 16)))
    (src / "bad.jpg").write_bytes(b"not an image")
    (src / "bad.mat").write_bytes(mat_v5(blob_mask(24, 16)))
    (src / "bad2.jpg").write_bytes(b"not an image either")
    (src / "bad2.mat").write_bytes(mat_v5(blob_mask(24, 16)))

    def pair(key):
        return Pair(
            key, SourceFile(str(src / f"{key}.jpg"), 1), SourceFile(str(src / f"{key}.mat"), 1)
        )

    staging = normalize_dir(str(tmp_path / "staging"))
    (tmp_path / "staging" / "index").mkdir(parents=True)  # what make_staging_dir makes
    spec = ShardSpec("train", 0, 2)
    empty = ShardSpec("train", 1, 2)  # every pair rejected: written, then left out by the commit
    with _pipeline() as p:
        batches = [(spec, [pair("good")]), (spec, [pair("bad")]), (empty, [pair("bad2")])]
        planned = {
            "assigned": p | "Pairs" >> beam.Create([(s.name, (s, b)) for s, b in batches]),
        }
        written = planned | WriteShards(ShardWriterSettings(staging))
        counts = written.shards | beam.Map(lambda r: (r.spec.name, r.num_examples))
        reasons = written[REJECTS] | "Reasons" >> beam.Map(lambda r: (r.key, r.reason.value))
        assert_that(counts, equal_to([(spec.name, 1), (empty.name, 0)]), label="counts")
        assert_that(
            reasons,
            equal_to([("bad", "image_unreadable"), ("bad2", "image_unreadable")]),
            label="rejects",
        )
    # Staged under their attempt's names (job/attempts.py), with their indexes; no partial
    # files left behind.
    staged = sorted(path.name for path in (tmp_path / "staging").iterdir())
    assert [name.split(".attempt-")[0] for name in staged] == [
        "index",
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    assert all(".attempt-" in name for name in staged[1:])
    assert len(list((tmp_path / "staging" / "index").iterdir())) == 6  # .idx, key and digest rows
    assert (tmp_path / "staging" / staged[2]).stat().st_size == 0


def _result(name: str, n: int) -> WrittenShard:
    return WrittenShard(ShardSpec("train", 0, 1), n, 90, "ab" * 32, ((4, 3),), 0, 5, "cd" * 32)


def _staged_run(tmp_path, run_id: str = "run1") -> str:
    out = normalize_dir(str(tmp_path / "out"))
    staged = output_protocol.make_staging_dir(out, run_id)
    # Five 2-byte records, framed: 5 x (2 + 16) bytes, as metadata.json will say.
    (tmp_path / "out" / ".segprep" / "runs" / run_id / "train-00000-of-00001.tfrecord").write_bytes(
        b"0123456789" * 9
    )
    stage_index(staged, ShardSpec("train", 0, 1), [(f"k{n}", 2) for n in range(5)])
    digests = digest_table.row_bytes((f"k{n}", "ef" * 32) for n in range(5))
    (Path(staged) / staged_digest_rows("train-00000-of-00001.tfrecord")).write_bytes(digests)
    assert staged.endswith(f"/.segprep/runs/{run_id}/")
    return out


def test_commit_publishes_the_staged_run_and_writes_metadata_last(tmp_path):
    out = _staged_run(tmp_path)
    settings = CommitSettings(out, "run1", {"train_size": 1.0})
    reject = Reject("k9", Reason.MISSING_MASK, "no mask", "/i/k9.jpg", None)
    with _pipeline() as p:
        shards = p | "Shards" >> beam.Create([_result("train", 5)])
        rejects = p | "Rejects" >> beam.Create([reject])
        discovered = p | "Discovered" >> beam.Create([6])
        info = {"shards": shards, "rejects": rejects, "discovered": discovered} | CommitOutput(
            settings
        )
        assert_that(info | beam.Map(lambda m: m.splits["train"].num_examples), equal_to([5]))
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert metadata["num_rejected"] == {
        "total": 1,
        "by_reason": {"missing_mask": 1},
        "example_key": {"missing_mask": "k9"},
    }
    assert metadata["splits"]["train"]["image_shape"] == [4, 3]
    line = json.loads((tmp_path / "out" / "rejects.jsonl").read_text())
    assert line == {
        "key": "k9",
        "image": "/i/k9.jpg",
        "mask": None,
        "reason": "missing_mask",
        "detail": "no mask",
    }
    assert (tmp_path / "out" / "train-00000-of-00001.tfrecord").read_bytes() == b"0123456789" * 9
    assert not (tmp_path / "out" / ".segprep" / "runs" / "run1").exists()
    manifest = json.loads((tmp_path / "out" / ".segprep" / "manifest.json").read_text())
    assert manifest["state"] == "committed"
    assert manifest["files"] == [
        "dataset_info.json",
        "features.json",
        "index/train-00000-of-00001.tfrecord.idx",
        "index/train.digests.jsonl",
        "index/train.keys.jsonl",
        "index/validation.digests.jsonl",
        "index/validation.keys.jsonl",
        "metadata.json",
        "rejects.jsonl",
        "train-00000-of-00001.tfrecord",
    ]


def test_commit_refuses_to_publish_when_keys_are_lost(tmp_path):
    out = _staged_run(tmp_path)
    settings = CommitSettings(out, "run1", {})
    with pytest.raises(Exception, match="refusing to publish") as caught:
        with _pipeline() as p:
            shards = p | "Shards" >> beam.Create([_result("train", 5)])
            rejects = p | "Rejects" >> beam.Create([], reshuffle=False).with_output_types(Reject)
            discovered = p | "Discovered" >> beam.Create([7])
            _ = {"shards": shards, "rejects": rejects, "discovered": discovered} | CommitOutput(
                settings
            )
    assert AccountingError.__name__ in str(caught.value) or "refusing" in str(caught.value)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".segprep"]
