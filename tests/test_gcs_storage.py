"""The file layer (transforms/files.py), listing and the launcher's output checks on gs://,
against a real GCS server.

Every call goes over HTTP to gcp-storage-emulator on 127.0.0.1 (tests/helpers/gcs_server.py).
"""

from __future__ import annotations

import hashlib

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.errors import UsageError
from beam_pipeline.job.listing import REJECTS, ListAndPair
from beam_pipeline.launch import credentials, preflight
from beam_pipeline.runtime import output_protocol
from beam_pipeline.runtime.refusal import Refusal
from tests.helpers.gcs_server import gcs, metadata_server_watch  # noqa: F401 - gcs: the fixture
from tests.helpers.runs import RUNNER_ARGS
from transforms import files
from transforms.pairing import Layout
from transforms.settings_error import as_flag


def test_beam_gcs_client_is_anonymous_and_never_searches_for_credentials(
    gcs,  # noqa: F811
    monkeypatch,
    tmp_path,
):
    """The fast path: no credential search (it would probe the metadata server), an anonymous
    client aimed at the emulator."""
    from apache_beam.internal.gcp import auth
    from apache_beam.io.gcp import gcsio
    from google.auth.credentials import AnonymousCredentials

    # Nothing else to find credentials in: a search would reach the metadata probe.
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    with metadata_server_watch() as (address, connections):
        monkeypatch.setenv("GCE_METADATA_IP", address)
        assert credentials.use_storage_emulator_if_set()
        assert auth.get_service_credentials(PipelineOptions()) is None
        client = gcsio.create_storage_client(PipelineOptions())
    assert isinstance(client._credentials, AnonymousCredentials)
    assert client._connection.API_BASE_URL == gcs.endpoint
    assert connections == []


def test_atomic_write_read_and_no_temp_left(gcs):  # noqa: F811
    data = bytes(range(256)) * 1000
    final = gcs.url("atomic/out/blob.bin")
    files.write_bytes(final, data)
    assert files.read_own(final) == data
    assert gcs.names("atomic/") == ["atomic/out/blob.bin"]


def test_read_bytes_never_decompresses(gcs):  # noqa: F811
    """A file named .gz is returned as stored: no codec is guessed from a gs:// name."""
    import gzip

    packed = gzip.compress(b"mask bytes")
    gcs.put("codec/mask.gz", packed)
    assert files.read_own(gcs.url("codec/mask.gz")) == packed


def test_upload_and_bounded_read_of_a_gcs_object(gcs, tmp_path):  # noqa: F811
    payload = b"tfrecord bytes " * 50_000  # larger than one upload chunk of the emulator client
    staging = tmp_path / "shard.staging"
    staging.write_bytes(payload)
    staged = gcs.url("publish/.segprep/runs/r1/train-00000-of-00001.tfrecord")
    files.upload_file(str(staging), staged)
    assert gcs.names("publish/") == ["publish/.segprep/runs/r1/train-00000-of-00001.tfrecord"]
    assert hashlib.sha256(files.read_bounded(staged, len(payload))).hexdigest() == (
        hashlib.sha256(payload).hexdigest()
    )
    with pytest.raises(files.TooLargeError):
        files.read_bounded(staged, len(payload) - 1)  # refused after limit + 1 bytes
    with pytest.raises(files.TooLargeError):
        files.read_bounded(staged, 10, listed_size=len(payload))  # refused unread


def test_list_has_files_and_delete_tree_stay_inside_their_prefix(gcs):  # noqa: F811
    for name in ("tree/a/1.jpg", "tree/a/b/2.jpg", "tree2/keep.jpg"):
        gcs.put(name, b"x")
    assert sorted(files.list_dir(gcs.url("tree"))) == [
        gcs.url("tree/a/1.jpg"),
        gcs.url("tree/a/b/2.jpg"),
    ]
    assert files.has_files(gcs.url("tree/a/b"))
    assert not files.has_files(gcs.url("tree/missing"))
    assert not files.has_files("gs://segprep-no-such-bucket/images")
    files.delete_tree(gcs.url("tree"))
    assert gcs.names("tree") == ["tree2/keep.jpg"]


def test_listing_pairs_keys_in_nested_gcs_folders(gcs):  # noqa: F811
    """fileio.MatchFiles on gs:// is recursive; keys keep their sub-folders."""
    for name in ("pair/img/a/1.jpg", "pair/img/2.png", "pair/img/notes.txt", "pair/img/3.jpg"):
        gcs.put(name, b"i")
    for name in ("pair/msk/a/1_mask.mat", "pair/msk/2.png", "pair/msk/4_mask.mat"):
        gcs.put(name, b"m")
    with beam.Pipeline(argv=RUNNER_ARGS) as pipeline:
        layout = Layout(gcs.url("pair/img/"), gcs.url("pair/msk/"))
        listed = pipeline | ListAndPair(layout)
        keys = listed["pairs"] | "PairKeys" >> beam.Map(lambda pair: pair.key)
        reasons = listed[REJECTS] | "Reasons" >> beam.Map(lambda r: (r.key, r.reason.value))
        assert_that(keys, equal_to(["a/1", "2"]), label="pairs")
        assert_that(
            reasons,
            equal_to(
                [
                    (gcs.url("pair/img/notes.txt"), "unrecognized_file"),
                    ("3", "missing_mask"),
                    ("4", "missing_image"),
                ]
            ),
            label="rejects",
        )


def test_missing_gcs_inputs_are_a_usage_error(gcs):  # noqa: F811
    gcs.put("inputs/images/1.jpg", b"x")
    layout = Layout(gcs.url("inputs/images/"), gcs.url("inputs/masks/"))
    with pytest.raises(UsageError, match=r"--mask_dir gs://segprep-test/inputs/masks/ has no"):
        preflight.check_remote_inputs(layout, ("--image_dir", "--mask_dir"))


def test_output_protocol_on_gcs(gcs):  # noqa: F811
    """A finished output needs --overwrite; an unfinished one without a journal is refused
    and kept whole; foreign files are never deleted; the lock is exclusive."""
    done = ["done/out/metadata.json", "done/out/train-00000-of-00001.tfrecord"]
    gcs.put(
        done[0],
        b'{"versions": {"segprep": "0.1.0"}, "splits": {"train": {"shards": '
        b'[{"file": "train-00000-of-00001.tfrecord"}]}}}',
    )
    gcs.put(done[1], b"old")
    state = output_protocol.inspect_output(gcs.url("done/out/"))
    assert state.finished and set(state.ours) == {"metadata.json", "train-00000-of-00001.tfrecord"}
    with pytest.raises(Refusal, match="overwrite") as refused:
        output_protocol.check_output(state, overwrite=False)
    assert "--overwrite" in refused.value.worded(as_flag)
    output_protocol.check_output(state, overwrite=True)
    assert gcs.names("done/") == sorted(done)  # --overwrite replaces at commit, not before

    gcs.put(
        "half/out/.segprep/manifest.json",
        b'{"state": "committing", "run_id": "20261204T120000-0123abcd", '
        b'"files": ["train-00000-of-00002.tfrecord"]}',
    )
    gcs.put("half/out/train-00000-of-00002.tfrecord", b"partial")
    gcs.put(
        "half/out/.segprep/runs/20261204T120000-0123abcd/train-00001-of-00002.tfrecord", b"staged"
    )
    gcs.put("half/out/notes.txt", b"mine")
    half = output_protocol.inspect_output(gcs.url("half/out/"))
    before = gcs.names("half/out/")
    for overwrite in (False, True):  # no journal: nothing proves the listed files segprep's
        with pytest.raises(Refusal, match="cannot tell they are its own"):
            output_protocol.check_output(half, overwrite=overwrite)
    assert gcs.names("half/out/") == before

    gcs.put("theirs/out/train-00000-of-00003.tfrecord", b"another tool's")
    theirs = output_protocol.inspect_output(gcs.url("theirs/out/"))
    with pytest.raises(Refusal, match="segprep did not write"):
        output_protocol.check_output(theirs, overwrite=True)

    out = gcs.url("locked/out/")
    with output_protocol.RunLock(out, "first"):
        assert output_protocol.current_holder(out).run_id == "first"
        with pytest.raises(Refusal, match="in use by run first"):
            output_protocol.RunLock(out, "second").__enter__()
    assert gcs.names("locked/") == []  # released
