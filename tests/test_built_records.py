"""A built record's bytes and facts come back from the spill file as they were built, and a
spill whose facts were tampered with fails the read instead of writing wrong tables."""

from __future__ import annotations

import pytest

from beam_pipeline.commands.sample_data import mat_bytes as mat_v5
from beam_pipeline.job.built_records import SpilledRecords, build_records
from beam_pipeline.job.settings import ShardWriterSettings
from beam_pipeline.job.shard_work import build_record
from tests.helpers.images import blob_mask, rgb_jpeg
from transforms.files import normalize_dir
from transforms.pairing import Pair, SourceFile
from transforms.rejects import Reason, RejectError


@pytest.fixture
def built(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for seed, key in enumerate(("a", "b")):
        (src / f"{key}.jpg").write_bytes(rgb_jpeg(24, 16, seed))
        (src / f"{key}.mat").write_bytes(mat_v5(blob_mask(24, 16, seed)))
    (src / "bad.jpg").write_bytes(b"not an image")
    (src / "bad.mat").write_bytes(mat_v5(blob_mask(24, 16)))
    pairs = [
        Pair(key, SourceFile(str(src / f"{key}.jpg"), 1), SourceFile(str(src / f"{key}.mat"), 1))
        for key in ("a", "bad", "b")
    ]
    (tmp_path / "staging").mkdir()
    settings = ShardWriterSettings(normalize_dir(str(tmp_path / "staging")), store_hashes=True)
    return settings, pairs, build_records(settings, pairs)


def test_a_spilled_record_reads_back_as_the_writer_would_build_it(built):
    settings, pairs, results = built
    assert [pair.key for pair, _ in results] == ["a", "bad", "b"]
    spilled = SpilledRecords(settings.staging_dir)
    for source, (pair, hashes) in zip(pairs, results, strict=True):
        back = spilled.record(pair)
        direct = build_record(settings, source)
        if source.key == "bad":
            assert hashes is None
            assert isinstance(back, RejectError) and back.reason == Reason.IMAGE_UNREADABLE
            continue
        record, digest, stored = back
        assert record.serialized == direct[0].serialized
        assert (record.height, record.width) == (direct[0].height, direct[0].width)
        assert digest == direct[1]
        assert stored.row() == hashes.row()


def test_tampered_facts_fail_the_read_naming_the_spill(built):
    settings, _, results = built
    pair, _ = results[0]
    spill = settings.staging_dir + pair.image.spill
    with open(spill, "r+b") as handle:  # the facts' JSON, same length, no longer JSON
        handle.seek(pair.image.offset + pair.image.length)
        handle.write(b"{" * pair.image.facts)
    with pytest.raises(OSError, match="facts do not decode") as raised:
        SpilledRecords(settings.staging_dir).record(pair)
    assert pair.image.spill in str(raised.value)
