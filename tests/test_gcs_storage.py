"""storage.py, listing and the launcher's output checks on gs://, against a real GCS server.

Every call goes over HTTP to gcp-storage-emulator on 127.0.0.1 (tests/gcs_server.py).
"""

from __future__ import annotations

import hashlib
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.errors import UsageError
from beam_pipeline.job.listing import REJECTS, ListAndPair
from beam_pipeline.job.pipeline import JobConfig
from beam_pipeline.launch import cloud, launcher, preflight
from beam_pipeline.runtime import storage
from segcore.splits import SplitFractions
from tests.conftest import RUNNER_ARGS
from tests.gcs_server import gcs  # noqa: F401 - the fixture


def test_beam_gcs_client_is_anonymous_and_instant(gcs):  # noqa: F811
    """The fast path: no credential search, an anonymous client aimed at the emulator."""
    from apache_beam.internal.gcp import auth
    from apache_beam.io.gcp import gcsio
    from google.auth.credentials import AnonymousCredentials

    started = time.monotonic()
    assert cloud.use_storage_emulator_if_set()
    assert auth.get_service_credentials(PipelineOptions()) is None
    client = gcsio.create_storage_client(PipelineOptions())
    assert isinstance(client._credentials, AnonymousCredentials)
    assert client._connection.API_BASE_URL == gcs.endpoint
    assert time.monotonic() - started < 2


def test_atomic_write_read_and_no_temp_left(gcs):  # noqa: F811
    data = bytes(range(256)) * 1000
    final = gcs.url("atomic/out/blob.bin")
    storage.write_bytes_atomically(data, final, gcs.url("atomic/out/_tmp/"))
    assert storage.read_bytes(final) == data
    assert gcs.names("atomic/") == ["atomic/out/blob.bin"]


def test_read_bytes_never_decompresses(gcs):  # noqa: F811
    """A file named .gz is returned as stored: no codec is guessed from a gs:// name."""
    import gzip

    packed = gzip.compress(b"mask bytes")
    gcs.put("codec/mask.gz", packed)
    assert storage.read_bytes(gcs.url("codec/mask.gz")) == packed


def test_publish_file_moves_a_local_file_to_its_final_gcs_name(gcs, tmp_path):  # noqa: F811
    payload = b"tfrecord bytes " * 50_000  # larger than one upload chunk of the emulator client
    staging = tmp_path / "shard.staging"
    staging.write_bytes(payload)
    final = gcs.url("publish/train-00000-of-00001.tfrecord")
    size, digest = storage.publish_file(str(staging), final, gcs.url("publish/_tmp/"))
    assert (size, digest) == (len(payload), hashlib.sha256(payload).hexdigest())
    assert not staging.exists()
    assert gcs.names("publish/") == ["publish/train-00000-of-00001.tfrecord"]
    assert gcs.read("publish/train-00000-of-00001.tfrecord") == payload


def test_list_has_files_and_delete_tree_stay_inside_their_prefix(gcs):  # noqa: F811
    for name in ("tree/a/1.jpg", "tree/a/b/2.jpg", "tree2/keep.jpg"):
        gcs.put(name, b"x")
    assert sorted(storage.list_dir(gcs.url("tree"))) == [
        gcs.url("tree/a/1.jpg"),
        gcs.url("tree/a/b/2.jpg"),
    ]
    assert storage.has_files(gcs.url("tree/a/b"))
    assert not storage.has_files(gcs.url("tree/missing"))
    assert not storage.has_files("gs://segprep-no-such-bucket/images")
    storage.delete_tree(gcs.url("tree"))
    assert gcs.names("tree") == ["tree2/keep.jpg"]


def test_listing_pairs_keys_in_nested_gcs_folders(gcs):  # noqa: F811
    """fileio.MatchFiles on gs:// is recursive; keys keep their sub-folders."""
    for name in ("pair/img/a/1.jpg", "pair/img/2.png", "pair/img/notes.txt", "pair/img/3.jpg"):
        gcs.put(name, b"i")
    for name in ("pair/msk/a/1_mask.mat", "pair/msk/2.png", "pair/msk/4_mask.mat"):
        gcs.put(name, b"m")
    with beam.Pipeline(argv=RUNNER_ARGS) as pipeline:
        listed = pipeline | ListAndPair(gcs.url("pair/img/"), gcs.url("pair/msk/"))
        keys = listed["pairs"] | "PairKeys" >> beam.Map(lambda pair: pair.key)
        reasons = listed[REJECTS] | "Reasons" >> beam.Map(lambda r: (r.key, r.reason.value))
        assert_that(keys, equal_to(["a/1", "2"]), label="pairs")
        assert_that(
            reasons,
            equal_to(
                [("notes.txt", "unrecognized_file"), ("3", "missing_mask"), ("4", "missing_image")]
            ),
            label="rejects",
        )


def _config(gcs, name: str) -> JobConfig:  # noqa: F811
    return JobConfig(
        image_dir=gcs.url(f"{name}/images/"),
        mask_dir=gcs.url(f"{name}/masks/"),
        output_dir=gcs.url(f"{name}/out/"),
        fractions=SplitFractions(0.9, 0.1),
        num_shards=None,
        shard_size_mb=1.0,
        mask_format="jpeg",
        mask_key=None,
    )


def test_missing_gcs_inputs_are_a_usage_error(gcs):  # noqa: F811
    gcs.put("inputs/images/1.jpg", b"x")
    config = _config(gcs, "inputs")
    with pytest.raises(UsageError, match=r"--mask_dir gs://segprep-test/inputs/masks/ has no"):
        preflight.check_inputs(config.image_dir, config.mask_dir, config.mask_key)


def test_output_dir_rules_on_gcs(gcs):  # noqa: F811
    """A finished output needs --overwrite; an unfinished one is cleared; foreign files stay."""
    done = ["done/out/metadata.json", "done/out/train-00000-of-00001.tfrecord"]
    for name in done:
        gcs.put(name, b"old")
    out = gcs.url("done/out/")
    with pytest.raises(UsageError, match="--overwrite"):
        launcher.prepare_output_dir(out, overwrite=False)
    assert gcs.names("done/") == sorted(done)
    launcher.prepare_output_dir(out, overwrite=True)
    assert gcs.names("done/") == []

    gcs.put("half/out/_tmp/train-00000-of-00001.tfrecord.123", b"partial")
    launcher.prepare_output_dir(gcs.url("half/out/"), overwrite=False)
    assert gcs.names("half/") == []

    gcs.put("mixed/out/metadata.json", b"old")
    gcs.put("mixed/out/notes.txt", b"mine")
    with pytest.raises(UsageError, match="did not write"):
        launcher.prepare_output_dir(gcs.url("mixed/out/"), overwrite=True)
    assert gcs.names("mixed/") == ["mixed/out/metadata.json", "mixed/out/notes.txt"]
