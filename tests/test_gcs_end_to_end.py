"""The whole job gs:// -> gs:// against a real GCS server, in-process and through the CLI.

Raw sample data is uploaded with google-cloud-storage; the job lists, reads and writes only
the bucket; the shards are read back after download, since TensorFlow's own gs:// client does
not follow STORAGE_EMULATOR_HOST.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

import shard_reader
from beam_pipeline.commands.sample_data import write_sample_data
from beam_pipeline.launch import launcher
from tests.helpers.gcs_server import gcs, metadata_server_watch  # noqa: F401 - gcs: the fixture
from tests.helpers.runs import RUNNER_ARGS, expected_rejects
from transforms.format.dataset_info import DatasetInfo
from transforms.format.naming import MANIFEST_FILE, METADATA_FILE, REJECTS_FILE, parse_shard_name

COUNT = 30
SEGPREP = [sys.executable, "-m", "beam_pipeline"]


@pytest.fixture(scope="module")
def raw(gcs, tmp_path_factory):  # noqa: F811
    """30 entries at 160x120, 10% broken, uploaded to gs://BUCKET/raw/{images,masks}/."""
    root = tmp_path_factory.mktemp("raw")
    summary = write_sample_data(
        root, count=COUNT, seed=11, broken_fraction=0.1, height=160, width=120
    )
    assert gcs.upload_tree(root, "raw")
    return summary


@pytest.fixture(scope="module")
def job(gcs, raw):  # noqa: F811
    """One FnApiRunner run from the bucket to the bucket."""
    result = launcher.run(
        [
            "--image_dir",
            gcs.url("raw/images"),
            "--mask_dir",
            gcs.url("raw/masks"),
            "--output_dir",
            gcs.url("prepared"),
            "--num_shards",
            "3",
            *RUNNER_ARGS,
        ]
    )
    return result


def test_output_is_published_in_the_bucket_and_nothing_else(gcs, job):  # noqa: F811
    names = gcs.names("prepared/")
    files = [name.removeprefix("prepared/") for name in names]
    shards = [name for name in files if parse_shard_name(name)]
    assert shards, files
    # No staged or temporary object is left behind: shards, the two reports, the manifest;
    # the run's lock is released.
    listed = DatasetInfo.from_json(json.loads(gcs.read(f"prepared/{METADATA_FILE}")))
    published = sorted([*listed.listed_files(), METADATA_FILE, REJECTS_FILE])
    assert sorted(files) == sorted([*published, MANIFEST_FILE])
    manifest = json.loads(gcs.read(f"prepared/{MANIFEST_FILE}"))
    assert manifest["state"] == "committed" and sorted(manifest["files"]) == published
    metadata = json.loads(gcs.read(f"prepared/{METADATA_FILE}"))
    assert metadata == job.metadata
    listed = {shard["file"] for split in metadata["splits"].values() for shard in split["shards"]}
    assert listed == set(shards)
    assert metadata["parameters"]["output_dir"] == gcs.url("prepared/")


def test_every_entry_is_accounted_for_with_the_right_reason(gcs, raw, job):  # noqa: F811
    rejects = [json.loads(line) for line in gcs.read(f"prepared/{REJECTS_FILE}").splitlines()]
    assert {r["key"]: r["reason"] for r in rejects} == {
        key: reason.value for key, reason in expected_rejects(raw).items()
    }
    for reject in rejects:
        if reject["image"]:
            assert reject["image"].startswith(gcs.url("raw/images/"))
    accepted = sum(split["num_examples"] for split in job.metadata["splits"].values())
    assert accepted == COUNT - len(raw.broken)
    assert job.metadata["num_discovered"] == COUNT


def test_shards_match_metadata_and_read_back_after_download(gcs, job, tmp_path):  # noqa: F811
    gcs.download_prefix("prepared/", tmp_path)
    for split in job.metadata["splits"].values():
        for shard in split["shards"]:
            data = (tmp_path / shard["file"]).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (
                shard["bytes"],
                shard["sha256"],
            )
    train = job.metadata["splits"]["train"]["num_examples"]
    dataset = shard_reader.make_dataset(
        str(tmp_path), "train", batch_size=4, training=False, with_keys=True
    )
    keys = []
    for images, masks, batch_keys in dataset:
        assert tuple(images.shape[1:3]) == (160, 120)
        assert tuple(masks.shape[1:3]) == (160, 120)
        keys.extend(key.decode() for key in batch_keys.numpy())
    assert len(keys) == len(set(keys)) == train


def _cli(args: list[str], **env: str) -> subprocess.CompletedProcess:
    """The real CLI in a fresh process (nothing cached), with this test's environment."""
    return subprocess.run(
        [*SEGPREP, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,  # a hang guard only
    )


def test_cli_reaches_the_emulator_without_a_credential_search(gcs, raw, tmp_path):  # noqa: F811
    """No credential search: without the fast path Beam retries google.auth.default() with
    back-off, and each attempt probes the metadata server, here a loopback stand-in."""
    with metadata_server_watch() as (address, connections):
        completed = _cli(
            [
                "--image_dir",
                gcs.url("raw/nothing-here"),
                "--mask_dir",
                gcs.url("raw/masks"),
                "--output_dir",
                gcs.url("cli-empty"),
                "--runner",
                "FnApiRunner",
            ],
            # Nothing else to find credentials in: a search would reach the metadata probe.
            GOOGLE_APPLICATION_CREDENTIALS="",
            CLOUDSDK_CONFIG=str(tmp_path),
            GCE_METADATA_HOST=address,
            GCE_METADATA_IP=address,
        )
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"segprep: error: --image_dir {gcs.url('raw/nothing-here/')} has no")
    assert connections == [], "Beam searched for credentials: the emulator fast path is gone"


def test_cli_job_with_worker_threads_against_the_emulator(gcs, raw):  # noqa: F811
    """Beam's multi-threaded local mode against the emulator, through the real CLI."""
    completed = _cli(
        [
            "--image_dir",
            gcs.url("raw/images"),
            "--mask_dir",
            gcs.url("raw/masks"),
            "--output_dir",
            gcs.url("cli-out"),
            "--num_shards",
            "2",
            "--runner",
            "FnApiRunner",
            "--direct_running_mode",
            "multi_threading",
            "--direct_num_workers",
            "2",
        ]
    )
    assert completed.returncode == 0, completed.stderr
    metadata = json.loads(gcs.read(f"cli-out/{METADATA_FILE}"))
    assert metadata["num_discovered"] == COUNT
    assert sum(split["num_shards"] for split in metadata["splits"].values()) >= 2


def test_array_record_job_writes_the_bucket_and_reads_back(gcs, raw, job, tmp_path):  # noqa: F811
    """--record_format array_record to gs://: shards written locally, then uploaded."""
    from shard_reader.source import RecordSource

    result = launcher.run(
        [
            "--image_dir", gcs.url("raw/images"),
            "--mask_dir", gcs.url("raw/masks"),
            "--output_dir", gcs.url("array_record"),
            "--num_shards", "3",
            "--record_format", "array_record",
            *RUNNER_ARGS,
        ]
    )  # fmt: skip
    files = [name.removeprefix("array_record/") for name in gcs.names("array_record/")]
    assert sorted(name for name in files if name.endswith(".array_record")) == sorted(
        shard["file"].replace(".tfrecord", ".array_record")
        for split in job.metadata["splits"].values()
        for shard in split["shards"]
    )
    assert not [name for name in files if name.endswith(".idx")]
    gcs.download_prefix("array_record/", tmp_path)
    train = RecordSource(tmp_path, "train")
    assert len(train) == result.metadata["splits"]["train"]["num_examples"]
    assert {train[i]["key"] for i in range(len(train))} == {
        row[0]
        for row in map(
            json.loads, (tmp_path / "index" / "train.keys.jsonl").read_text().splitlines()
        )
    }


def test_a_group_that_moves_is_rewritten_inside_the_bucket(gcs, tmp_path):  # noqa: F811
    """An exact copy named so that its key alone would put it in the other split follows its
    original: the shards it leaves and joins are rewritten from the staged objects (ranged
    reads of their frames), and the output verifies."""
    from tests.helpers.process_tree import SEGPREP as CLI
    from transforms.splits import SplitFractions

    fractions = SplitFractions(0.5, 0.5)
    root = tmp_path / "moving"
    write_sample_data(root, count=12, seed=3, broken_fraction=0.0, height=160, width=120)
    original = sorted(path.stem for path in (root / "images").glob("*.jpg"))[0]
    copy = next(
        name
        for name in (f"{original}-copy{n}" for n in range(100))
        if fractions.split_of(name) != fractions.split_of(original)
    )
    (root / "images" / f"{copy}.jpg").write_bytes(
        (root / "images" / f"{original}.jpg").read_bytes()
    )
    mask = root / "masks" / f"{original}_mask.mat"
    (root / "masks" / f"{copy}_mask.mat").write_bytes(mask.read_bytes())
    assert gcs.upload_tree(root, "moving-raw")
    out = gcs.url("moving-out")
    result = launcher.run(
        [
            "--image_dir",
            gcs.url("moving-raw/images"),
            "--mask_dir",
            gcs.url("moving-raw/masks"),
            "--output_dir",
            out,
            "--train_size",
            "0.5",
            "--validation_size",
            "0.5",
            *RUNNER_ARGS,
        ]
    )
    assert sum(abs(step) for step in result.metadata["duplicates"]["moved"].values()) == 2
    split_of = {}
    for split in result.metadata["splits"]:
        for line in gcs.read(f"moving-out/index/{split}.keys.jsonl").splitlines():
            split_of[json.loads(line)[0]] = split
    assert split_of[copy] == split_of[original] == fractions.split_of(original)
    done = subprocess.run(
        [*CLI, "verify", out], capture_output=True, text=True, timeout=600, env=os.environ
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_swapped_gcs_folders_are_one_line_before_the_job(gcs, raw):  # noqa: F811
    """As locally: masks given as images and images as masks are named from a sample of
    each folder's names, before any job runs or anything is staged."""
    completed = _cli(
        ["--image_dir", gcs.url("raw/masks"), "--mask_dir", gcs.url("raw/images"),
         "--output_dir", gcs.url("swapped"), *RUNNER_ARGS]
    )  # fmt: skip
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.strip().splitlines()
    assert "the folders look swapped" in line
    assert gcs.names("swapped/") == []


def test_an_output_bucket_that_does_not_exist_is_one_line(gcs, raw):  # noqa: F811
    completed = _cli(
        ["--image_dir", gcs.url("raw/images"), "--mask_dir", gcs.url("raw/masks"),
         "--output_dir", "gs://no-such-bucket-here/out", *RUNNER_ARGS]
    )  # fmt: skip
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.strip().splitlines()
    assert "there is no bucket no-such-bucket-here" in line


def _writer_end(fifo, process: subprocess.Popen) -> int:
    """The FIFO opened for writing once the commit hook opens it for reading; a run that
    ends before reaching the hook fails the test instead of blocking it."""
    import errno

    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        try:
            process.wait(timeout=0.05)  # returns at once when the run ends
            break
        except subprocess.TimeoutExpired:
            continue
    raise AssertionError("the run ended before its commit (its stderr is in the test's folder)")


def test_cloud_storage_gone_mid_commit_is_reported_at_once(tmp_path, monkeypatch):
    """The storage stops answering while the commit moves files: the run fails at once with
    the first error and says the folder's state is unknown and how to finish it, instead of
    minutes of retried rollback and lock deletes ending in an error about the lock."""
    from tests.helpers.gcs_server import NO_METADATA_SERVER, running_emulator

    root = tmp_path / "raw"
    write_sample_data(root, count=6, seed=3, broken_fraction=0.0, height=64, width=48)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    errors = open(tmp_path / "stderr", "w")  # a file: a pipe nobody reads could block the run
    monkeypatch.setenv("GCE_METADATA_HOST", NO_METADATA_SERVER)
    with running_emulator() as emulator:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
        assert emulator.upload_tree(root, "raw")
        env = dict(os.environ, SEGPREP_TEST_COMMIT_HOOK=f"publish-1:{fifo}")
        process = subprocess.Popen(
            [*SEGPREP, "--image_dir", emulator.url("raw/images"), "--mask_dir",
             emulator.url("raw/masks"), "--output_dir", emulator.url("out"), *RUNNER_ARGS],
            env=env, stderr=errors, text=True,
        )  # fmt: skip
        paused = _writer_end(fifo, process)  # once the commit waits after its first move
    os.close(paused)  # the emulator is stopped: the commit goes on against a closed port
    process.wait(timeout=600)
    errors.close()
    err = (tmp_path / "stderr").read_text()
    assert process.returncode == 1, err
    (line,) = err.strip().splitlines()
    assert "Connection refused" in line and ".segprep%2Flock" not in line
    assert "Cloud Storage stopped answering, so what gs://" in line
    assert "`segprep verify --repair gs://" in line
