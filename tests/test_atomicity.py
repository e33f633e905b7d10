"""Atomic, repeatable output: a failed job publishes nothing, a retried shard writes once."""

from __future__ import annotations

import json
import time

import pytest

from beam_pipeline.job.shard_work import ShardWriterSettings
from beam_pipeline.job.write_shards import _WriteShard
from beam_pipeline.launch import launcher
from beam_pipeline.runtime import storage
from segcore.pairing import Pair, SourceFile
from segcore.splits import ShardSpec
from tests.conftest import job_args


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
    # A real I/O error in whichever process reads the file: /proc/self/mem fails with EIO.
    victim.unlink()
    victim.symlink_to("/proc/self/mem")
    try:
        with pytest.raises(Exception, match="Input/output error"):
            launcher.run(args)
        # Nothing is still being written once the error is out.
        snapshot = sorted(str(p) for p in out.rglob("*"))
        time.sleep(0.5)
        assert sorted(str(p) for p in out.rglob("*")) == snapshot
    finally:
        victim.unlink()
        victim.write_bytes(original)
    assert not (out / "metadata.json").exists()
    for shard in out.glob("*.tfrecord"):  # whatever sits under a final name is complete
        assert shard.read_bytes() == (clean_dir / shard.name).read_bytes()

    again = launcher.run(args)  # an unfinished run needs no --overwrite
    assert again.metadata["splits"] == clean.metadata["splits"]
    assert (out / "rejects.jsonl").read_bytes() == (clean_dir / "rejects.jsonl").read_bytes()
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean_dir.iterdir())
    for shard in clean_dir.glob("*.tfrecord"):
        assert (out / shard.name).read_bytes() == shard.read_bytes()


def test_retried_shard_is_written_once_with_the_same_bytes(sample_dataset, tmp_path):
    out = storage.normalize_dir(str(tmp_path / "out"))
    temp = out + "_tmp/"
    spec = ShardSpec("train", 0, 1)
    pairs = [
        Pair(
            key,
            SourceFile(str(sample_dataset.image_dir / f"{key}.jpg"), 1),
            SourceFile(str(sample_dataset.mask_dir / f"{key}_mask.mat"), 1),
        )
        for key in ("00001", "00002", "00004")
    ]
    element = (spec.name, {"spec": [spec], "pairs": pairs})
    writer = _WriteShard(ShardWriterSettings(out, temp))
    writer.setup()
    first = [r for r in writer.process(element) if not hasattr(r, "tag")]
    data = (tmp_path / "out" / spec.name).read_bytes()
    second = [r for r in writer.process(element) if not hasattr(r, "tag")]  # the retry
    assert first == second and first[0].num_examples == 3
    assert (tmp_path / "out" / spec.name).read_bytes() == data
    assert sorted(p.name for p in (tmp_path / "out").glob("*.tfrecord")) == [spec.name]
    assert not list((tmp_path / "out" / "_tmp").glob("*.tfrecord*"))  # no stray temporaries
