"""`segprep verify`, `inspect` and `index` on a gs:// output, against the storage emulator.

The commands run as real processes; their only way to the bucket is the file layer
(transforms.files) over google-cloud-storage, which follows STORAGE_EMULATOR_HOST.
"""

from __future__ import annotations

import json

import pytest
from PIL import Image

from tests.helpers.gcs_server import gcs  # noqa: F401 - the fixture
from tests.helpers.process_tree import SEGPREP
from transforms import files
from transforms.format.naming import METADATA_FILE


def _run(*args: str, cwd):
    import subprocess

    return subprocess.run([*SEGPREP, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.fixture
def remote(gcs, indexed, request):  # noqa: F811
    """The indexed sample output uploaded under its own prefix; its gs:// url."""
    prefix = f"commands/{request.node.name}"
    assert gcs.upload_tree(indexed, prefix)
    return gcs.url(prefix)


def test_verify_a_gcs_output(remote, tmp_path):
    done = _run("verify", remote, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"OK {remote}") and "record index" in done.stdout


def test_verify_finds_a_damaged_gcs_shard(gcs, remote, tmp_path):  # noqa: F811
    prefix = remote.removeprefix(f"gs://{gcs.bucket}/")
    metadata = json.loads(gcs.read(f"{prefix}/{METADATA_FILE}"))
    name = metadata["splits"]["train"]["shards"][0]["file"]
    data = bytearray(gcs.read(f"{prefix}/{name}"))
    data[len(data) // 2] ^= 0xFF
    gcs.put(f"{prefix}/{name}", bytes(data))
    done = _run("verify", remote, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{name}: sha256 " in done.stdout and "fails the tfrecord check" in done.stdout


def test_inspect_a_gcs_output(remote, tmp_path):
    done = _run("inspect", remote, "--count", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    sheet = done.stdout.strip().splitlines()[-1]
    assert sheet.startswith(str(tmp_path))  # a gs:// dataset's sheet lands here
    assert Image.open(sheet).format == "PNG"
    done = _run("inspect", remote, "--rejects", "--out", str(tmp_path / "r.png"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert Image.open(tmp_path / "r.png").format == "PNG"


def test_index_a_gcs_output(gcs, remote, tmp_path):  # noqa: F811
    prefix = remote.removeprefix(f"gs://{gcs.bucket}/")
    before = json.loads(gcs.read(f"{prefix}/{METADATA_FILE}"))
    done = _run("index", remote, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"indexed {remote}")
    after = json.loads(gcs.read(f"{prefix}/{METADATA_FILE}"))
    assert after["splits"] == before["splits"]  # the same index, rebuilt from the shards
    assert not [name for name in gcs.names(prefix) if "/.segprep/runs/" in name]
    assert _run("verify", remote, cwd=tmp_path).returncode == 0


def test_missing_gcs_output_is_a_usage_error(gcs, tmp_path):  # noqa: F811
    for command in ("verify", "inspect", "index"):
        done = _run(command, gcs.url("nothing/here"), cwd=tmp_path)
        assert done.returncode == 2, (command, done.stderr)
        assert "is not a directory" in done.stderr, (command, done.stderr)


def test_file_layer_on_gcs(gcs):  # noqa: F811
    gcs.put("layer/a/x.json", b"12345")
    gcs.put("layer/a/sub/y.json", b"")
    assert files.isdir(gcs.url("layer/a")) and not files.isdir(gcs.url("layer/none"))
    assert files.listdir(gcs.url("layer/a")) == ["sub", "x.json"]
    assert files.glob(gcs.url("layer/*/x.json")) == [gcs.url("layer/a/x.json")]
    assert files.glob(gcs.url("layer/*.json")) == []  # * never crosses a '/'
    assert files.read_bounded(gcs.url("layer/a/x.json"), 5) == b"12345"
    with pytest.raises(files.TooLargeError):
        files.read_bounded(gcs.url("layer/a/x.json"), 4)
    with pytest.raises(FileNotFoundError):
        files.read_bounded(gcs.url("layer/a/none.json"), 4)
    assert files.stat(gcs.url("layer/a/x.json")).size == 5
    assert files.write_new(gcs.url("layer/new"), b"one")
    assert not files.write_new(gcs.url("layer/new"), b"two")  # taken: never overwritten
    assert gcs.read("layer/new") == b"one"
    assert files.list_files("gs://no-such-bucket/x") == []
