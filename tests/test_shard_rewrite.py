"""A shard the duplicate search changed is rewritten from this run's staged files
(job/shard_rewrite.py): the records that leave are gone, the ones that come are there in key
order with the bytes their first writer made, and the shard's tables follow."""

from __future__ import annotations

import hashlib

import pytest

from beam_pipeline.job.attempts import attempt_name
from beam_pipeline.job.hash_tables import staged_hash_rows
from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.job.shard_rewrite import Incoming, StagedShard, rewrite_shard
from beam_pipeline.job.shard_work import staged_digest_rows, staged_facts, write_shard
from transforms import files
from transforms.format import record_formats
from transforms.pairing import Pair, SourceFile
from transforms.rejects import Reason
from transforms.splits import ShardSpec


def _pair(dataset, key: str) -> Pair:
    image, mask = dataset.image_dir / f"{key}.jpg", dataset.mask_dir / f"{key}_mask.mat"
    return Pair(key, SourceFile(str(image), image.stat().st_size), SourceFile(str(mask), 1))


def _records(staging: str, shard) -> dict[str, bytes]:
    staged = StagedShard(staging, shard.spec.name, shard.attempt, shard.spec.record_format)
    try:
        return {key: staged.record(n).serialized for n, key in enumerate(staged.keys)}
    finally:
        staged.close()


@pytest.mark.parametrize("record_format", record_formats.names())
def test_a_rewrite_moves_and_rejects_records_and_keeps_their_bytes(
    sample_dataset, tmp_path, record_format
):
    staging = tmp_path / "staging"
    (staging / "index").mkdir(parents=True)
    settings = ShardWriterSettings(files.normalize_dir(str(staging)), store_hashes=True)
    train, validation = (ShardSpec(split, 0, 1, record_format) for split in ("train", "validation"))
    first, _, hashes = write_shard(
        settings, train, [_pair(sample_dataset, k) for k in ("00001", "00002", "00006")]
    )
    second, _, _ = write_shard(
        settings, validation, [_pair(sample_dataset, k) for k in ("00003", "00007")]
    )
    assert [h.key for h in hashes] == ["00001", "00002", "00006"]  # made in the same decode
    before = {**_records(settings.staging_dir, first), **_records(settings.staging_dir, second)}

    leaving = {"00001": None, "00006": (Reason.DUPLICATE_IMAGE.value, "exact duplicate of 00002")}
    shrunk, rejects = rewrite_shard(settings, train, first.attempt, leaving, [])
    grown, none = rewrite_shard(
        settings,
        validation,
        second.attempt,
        {},
        [Incoming("00001", train.name, first.attempt, record_format)],
    )

    assert none == ()
    assert [(r.key, r.reason, r.image) for r in rejects] == [
        ("00006", Reason.DUPLICATE_IMAGE, str(sample_dataset.image_dir / "00006.jpg"))
    ]
    assert shrunk.attempt not in ("", first.attempt)  # a new attempt: the first stays whole
    assert _records(settings.staging_dir, shrunk) == {"00002": before["00002"]}
    grown_records = _records(settings.staging_dir, grown)
    assert list(grown_records) == ["00001", "00003", "00007"]  # key order
    assert grown_records == {key: before[key] for key in grown_records}
    assert (shrunk.num_examples, grown.num_examples) == (1, 3)
    for shard in (shrunk, grown):
        data = (staging / attempt_name(shard.spec.name, shard.attempt)).read_bytes()
        assert (shard.bytes, shard.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        for table in (staged_digest_rows, staged_hash_rows, staged_facts):
            rows = (staging / attempt_name(table(shard.spec.name), shard.attempt)).read_bytes()
            assert len(rows.splitlines()) == shard.num_examples
    grown_hashes = staging / attempt_name(staged_hash_rows(validation.name), grown.attempt)
    assert b'"00001"' in grown_hashes.read_bytes().splitlines()[0]


def test_a_rewrite_that_finds_no_record_to_move_fails(sample_dataset, tmp_path):
    staging = tmp_path / "staging"
    (staging / "index").mkdir(parents=True)
    settings = ShardWriterSettings(files.normalize_dir(str(staging)), store_hashes=True)
    train, validation = ShardSpec("train", 0, 1), ShardSpec("validation", 0, 1)
    first, _, _ = write_shard(settings, train, [_pair(sample_dataset, "00001")])
    with pytest.raises(OSError, match="holds no record '00002'"):
        rewrite_shard(
            settings,
            validation,
            None,
            {},
            [Incoming("00002", train.name, first.attempt, "tfrecord")],
        )


def test_tampered_facts_fail_the_rewrite_naming_the_file(sample_dataset, tmp_path):
    staging = tmp_path / "staging"
    (staging / "index").mkdir(parents=True)
    settings = ShardWriterSettings(files.normalize_dir(str(staging)), store_hashes=True)
    train = ShardSpec("train", 0, 1)
    first, _, _ = write_shard(
        settings, train, [_pair(sample_dataset, k) for k in ("00001", "00002")]
    )
    facts = staging / attempt_name(staged_facts(train.name), first.attempt)
    facts.write_bytes(b"[1, 2]\n[1, 2]\n")  # as many lines as records, none a record's
    with pytest.raises(OSError, match="facts do not decode"):
        rewrite_shard(settings, train, first.attempt, {"00001": None}, [])


def test_records_from_many_shards_are_gathered_one_source_at_a_time(
    sample_dataset, tmp_path, monkeypatch
):
    """A shard that receives records from many shards holds one source shard open at a
    time (its tables and descriptor), besides its own: memory and descriptors stay flat in
    the number of shards that send records."""
    from beam_pipeline.job import shard_rewrite

    staging = tmp_path / "staging"
    (staging / "index").mkdir(parents=True)
    settings = ShardWriterSettings(files.normalize_dir(str(staging)), store_hashes=True)
    keys = ["00001", "00002", "00003", "00005", "00006", "00007"]
    sources = []
    for number, key in enumerate(keys[1:]):
        spec = ShardSpec("train", number, len(keys) - 1)
        shard, _, _ = write_shard(settings, spec, [_pair(sample_dataset, key)])
        sources.append((key, spec, shard))
    validation = ShardSpec("validation", 0, 1)
    own, _, _ = write_shard(settings, validation, [_pair(sample_dataset, keys[0])])
    before = {key: _records(settings.staging_dir, shard)[key] for key, _, shard in sources}

    open_now, most = [0], [0]
    real_init, real_close = shard_rewrite.StagedShard.__init__, shard_rewrite.StagedShard.close

    def counted_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        open_now[0] += 1
        most[0] = max(most[0], open_now[0])

    def counted_close(self):
        open_now[0] -= 1
        real_close(self)

    monkeypatch.setattr(shard_rewrite.StagedShard, "__init__", counted_init)
    monkeypatch.setattr(shard_rewrite.StagedShard, "close", counted_close)
    incoming = [Incoming(key, spec.name, shard.attempt, "tfrecord") for key, spec, shard in sources]
    grown, _ = rewrite_shard(settings, validation, own.attempt, {}, incoming)
    monkeypatch.undo()
    assert most[0] <= 2 and open_now[0] == 0
    records = _records(settings.staging_dir, grown)
    assert list(records) == keys
    assert all(records[key] == data for key, data in before.items())
