"""Exactly-once output when a writer bundle is retried or runs twice (job/attempts.py).

Dataflow re-runs a failed bundle and may run one twice; every attempt writes. The writer
(`write_shard`, the DoFn's one call per shard) stages each attempt's files under names of
their own, and the commit publishes one attempt per shard. These tests run real bundles on
real files, then the real commit, and read the published output back.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from beam_pipeline.commands.sample_data import write_sample_data
from beam_pipeline.job import attempts
from beam_pipeline.job.commit import commit
from beam_pipeline.job.settings import CommitSettings, ShardWriterSettings
from beam_pipeline.job.shard_work import write_shard
from beam_pipeline.runtime import output_protocol
from shard_reader.source import RecordSource
from transforms.files import normalize_dir
from transforms.format.dataset_info import DatasetInfo
from transforms.format.naming import MANIFEST_FILE, METADATA_FILE, REJECTS_FILE
from transforms.pairing import Pair, SourceFile
from transforms.splits import ShardSpec

RUN_ID = "20260101T000000-retry"
SPECS = (ShardSpec("train", 0, 2), ShardSpec("train", 1, 2))
BAD_KEY = "00005"  # its image is no JPEG: a reject of the writer


class Run:
    """A staged run over 12 entries in two shards, one entry a writer reject."""

    def __init__(self, root: Path) -> None:
        self.data = write_sample_data(
            root / "raw", count=12, seed=3, broken_fraction=0.0, height=64, width=48
        )
        (self.data.image_dir / f"{BAD_KEY}.jpg").write_bytes(b"not a jpeg")
        self.out = normalize_dir(str(root / "out"))
        self.staged = Path(output_protocol.make_staging_dir(self.out, RUN_ID))
        self.settings = ShardWriterSettings(str(self.staged) + "/")

    def pairs(self, spec: ShardSpec) -> list[Pair]:
        images = sorted(self.data.image_dir.glob("*.jpg"))[spec.index :: len(SPECS)]
        return [
            Pair(image.stem, _source(image), _source(self.data.mask_dir / f"{image.stem}_mask.mat"))
            for image in images
        ]

    def bundle(self):
        """One bundle of the writer: every shard, as the DoFn calls write_shard."""
        return [write_shard(self.settings, spec, self.pairs(spec)) for spec in SPECS]

    def commit(self, *bundles) -> DatasetInfo:
        shards = [shard for bundle in bundles for shard, _, _ in bundle]
        rejects = [reject for bundle in bundles for _, found, _ in bundle for reject in found]
        settings = CommitSettings(self.out, RUN_ID, {"train_size": 1.0})
        return commit(None, shards, rejects, 12, settings)


def _source(path: Path) -> SourceFile:
    return SourceFile(str(path), path.stat().st_size)


def _is_attempt_file(name: str) -> bool:
    return attempts.ATTEMPT_MARK in name.rsplit("/", 1)[-1]


def _files(folder: str) -> list[str]:
    root = Path(folder)
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def _assert_each_key_once_and_nothing_stray(run: Run) -> dict:
    info = json.loads(Path(run.out, METADATA_FILE).read_text())
    source = RecordSource(run.out, "train")
    keys = [source[i]["key"] for i in range(len(source))]
    wanted = sorted(p.key for spec in SPECS for p in run.pairs(spec) if p.key != BAD_KEY)
    assert sorted(keys) == wanted  # each accepted key exactly once
    rejects = [json.loads(line) for line in Path(run.out, REJECTS_FILE).read_text().splitlines()]
    assert [reject["key"] for reject in rejects] == [BAD_KEY]
    for shard in info["splits"]["train"]["shards"]:
        data = Path(run.out, shard["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard["sha256"]
    listed = DatasetInfo.from_json(info).listed_files()
    published = [name for name in _files(run.out) if not name.startswith(".segprep/")]
    assert sorted(published) == sorted([*listed, METADATA_FILE, REJECTS_FILE])
    assert not [name for name in _files(run.out) if _is_attempt_file(name)]
    assert _files(os.path.join(run.out, ".segprep")) == [MANIFEST_FILE.split("/", 1)[1]]
    return info


@pytest.fixture
def run(tmp_path) -> Run:
    return Run(tmp_path)


def test_a_bundle_run_twice_publishes_each_key_once(run):
    first, second = run.bundle(), run.bundle()
    staged_shards = [name for name in _files(run.staged) if name.startswith("train-")]
    assert len(staged_shards) == 4  # both attempts of both shards, side by side
    # Worst case: the runner delivers both attempts of every shard to the commit.
    info = run.commit(second, first)
    _assert_each_key_once_and_nothing_stray(run)
    assert sum(split.num_examples for split in info.splits.values()) == 11
    chosen = {s.spec.name: s for s in attempts.one_per_shard(s for s, _, _ in [*first, *second])}
    assert sorted(shard.sha256 for shard in info.splits["train"].shards) == sorted(
        shard.sha256 for shard in chosen.values()
    )


def test_a_doubled_bundle_whose_shards_the_search_rewrote_publishes_each_reject_once(run):
    """Both attempts of a bundle brought their rejects, then the duplicate search rewrote
    the shards (job/relocate.py): one attempt per shard reaches the commit, the rejects
    twice. Identical rows are one, whether or not a shard came twice."""
    first, second = run.bundle(), run.bundle()
    shards = [shard for shard, _, _ in first]
    rejects = [reject for _, found, _ in [*first, *second] for reject in found]
    assert [reject.key for reject in rejects] == [BAD_KEY, BAD_KEY]
    settings = CommitSettings(run.out, RUN_ID, {"train_size": 1.0})
    commit(None, shards, rejects, 12, settings)
    _assert_each_key_once_and_nothing_stray(run)
    lines = (Path(run.out) / REJECTS_FILE).read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == [BAD_KEY]


def test_the_choice_of_attempt_does_not_depend_on_delivery_order(run):
    first, second = run.bundle(), run.bundle()
    shards = [shard for shard, _, _ in [*first, *second]]
    forward = {s.spec.name: s.attempt for s in attempts.one_per_shard(shards)}
    backward = {s.spec.name: s.attempt for s in attempts.one_per_shard(reversed(shards))}
    assert forward == backward and len(forward) == len(SPECS)


def test_a_bundle_that_failed_halfway_then_ran_again_publishes_each_key_once(run):
    # The first attempt dies halfway: its shard file is staged, then its index rows cannot
    # be (a writer never creates folders, and the index folder is gone for the moment).
    index = run.staged / "index"
    index.rename(run.staged / "index-away")
    with pytest.raises(FileNotFoundError):
        run.bundle()
    (run.staged / "index-away").rename(index)
    stray = [name for name in _files(run.staged) if _is_attempt_file(name)]
    assert len(stray) == 1 and stray[0].startswith(SPECS[0].name)
    retried = run.bundle()
    run.commit(retried)  # the runner delivers only the attempt that succeeded
    _assert_each_key_once_and_nothing_stray(run)
    assert not (run.staged).exists()  # the failed attempt's file went with the staging folder


def test_a_late_attempt_never_overwrites_the_one_that_reached_the_commit(run):
    delivered = run.bundle()
    # A zombie attempt of the same bundle finishes after it, having read changed inputs
    # (another image under one key): its bytes differ, and must not be what is published.
    images = sorted(run.data.image_dir.glob("*.jpg"))
    shutil.copyfile(images[2], images[0])
    (zombie, _, _), _ = run.bundle()
    assert zombie.sha256 != delivered[0][0].sha256
    info = run.commit(delivered)
    _assert_each_key_once_and_nothing_stray(run)
    published = {shard.sha256 for shard in info.splits["train"].shards}
    assert published == {shard.sha256 for shard, _, _ in delivered}
