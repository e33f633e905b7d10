"""Atomic, repeatable output: a failed job publishes nothing, a retried shard stages once."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from beam_pipeline.job.attempts import attempt_name
from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.job.shard_work import write_shard
from beam_pipeline.launch import launcher
from tests.helpers.outputs import final_names
from tests.helpers.process_tree import descendants, holding_open, parent
from tests.helpers.runs import job_args
from transforms import files
from transforms.pairing import Pair, SourceFile
from transforms.splits import ShardSpec


def _args(dataset, out) -> list[str]:
    return job_args(dataset, out, "--num_shards", "3")


def _first_train_key(prepared_dir) -> str:
    rejected = {
        json.loads(line)["key"]
        for line in (prepared_dir / "rejects.jsonl").read_text().splitlines()
    }
    return min(f"{n:05d}" for n in range(1, 61) if f"{n:05d}" not in rejected)


@pytest.mark.parametrize("writer_processes", ["1", "2"])  # in the runner; writer processes
def test_failed_shard_publishes_nothing_and_rerun_matches_clean_run(
    sample_dataset, prepared, tmp_path, writer_processes
):
    clean_dir, clean = prepared
    victim = sample_dataset.image_dir / f"{_first_train_key(clean_dir)}.jpg"
    original = victim.read_bytes()
    out = tmp_path / "out"
    args = [*_args(sample_dataset, out), "--writer_processes", writer_processes]
    # A real I/O error in whichever process reads the file: /proc/self/mem fails with EIO,
    # an error of the storage itself, which fails the run instead of rejecting the entry.
    victim.unlink()
    victim.symlink_to("/proc/self/mem")
    try:
        with pytest.raises(Exception, match="Input/output error"):
            launcher.run(args)
        # Nothing is still being written once the error is out: no writer process lives on
        # (they are the fork server's children) and no process holds a file of the run open.
        assert not [pid for pid in descendants(os.getpid()) if parent(pid) != os.getpid()]
        assert holding_open(out) == {}
    finally:
        victim.unlink()
        victim.write_bytes(original)
    assert final_names(out) == []  # not one file under a final name
    assert not list(out.rglob("*.tfrecord*"))  # staged shards discarded too
    assert not (out / ".segprep" / "lock").exists()

    again = launcher.run(args)  # an unfinished run needs no --overwrite
    assert again.metadata["splits"] == clean.metadata["splits"]
    assert (out / "rejects.jsonl").read_bytes() == (clean_dir / "rejects.jsonl").read_bytes()
    assert final_names(out) == final_names(clean_dir)
    for shard in clean_dir.glob("*.tfrecord"):
        assert (out / shard.name).read_bytes() == shard.read_bytes()


def test_retried_shard_is_staged_per_attempt_with_the_same_bytes(sample_dataset, tmp_path):
    """Each attempt stages its own files (job/attempts.py; the commit settles one): the
    retry's bytes equal the first attempt's, and no partial file is left behind."""
    staging = tmp_path / "staging"
    (staging / "index").mkdir(parents=True)  # what make_staging_dir makes
    settings = ShardWriterSettings(files.normalize_dir(str(staging)))
    spec = ShardSpec("train", 0, 1)
    pairs = [
        Pair(
            key,
            SourceFile(str(sample_dataset.image_dir / f"{key}.jpg"), 1),
            SourceFile(str(sample_dataset.mask_dir / f"{key}_mask.mat"), 1),
        )
        for key in ("00001", "00002", "00004")
    ]
    first, _, _ = write_shard(settings, spec, pairs)
    second, _, _ = write_shard(settings, spec, pairs)  # the retry
    assert first.attempt != second.attempt and first.num_examples == 3
    assert dataclasses.replace(first, attempt="") == dataclasses.replace(second, attempt="")
    data = [(staging / attempt_name(spec.name, s.attempt)).read_bytes() for s in (first, second)]
    assert data[0] == data[1]
    # No stray partial files: per attempt, the shard, and its index, key rows and digests.
    assert sorted(p.name for p in staging.iterdir()) == sorted(
        ["index", *(attempt_name(spec.name, s.attempt) for s in (first, second))]
    )
    assert sorted(p.name for p in (staging / "index").iterdir()) == sorted(
        attempt_name(name, s.attempt)
        for s in (first, second)
        for name in (f"{spec.name}.digests.jsonl", f"{spec.name}.idx", f"{spec.name}.keys.jsonl")
    )
