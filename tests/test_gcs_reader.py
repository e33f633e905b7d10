"""Training from gs://: RecordSource, the PyTorch loader and Grain read an output in the
storage emulator through the bounded shard cache (shard_reader/remote_cache.py)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from google.api_core.exceptions import NotFound

torch = pytest.importorskip("torch")
grain = pytest.importorskip("grain")

from shard_reader import grain as grain_reader  # noqa: E402
from shard_reader import read_order, remote_cache  # noqa: E402
from shard_reader import torch as torch_reader  # noqa: E402
from shard_reader.source import RecordSource  # noqa: E402
from tests.helpers.gcs_server import NO_METADATA_SERVER, gcs  # noqa: E402, F401 - the fixture
from tests.helpers.handmade import write_output  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARDS, PER_SHARD = 8, 6
DOC = ROOT / "docs" / "frameworks.md"
GS_PLACEHOLDER = "gs://my-bucket/output"


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Path:
    """8 shards of 6 records at 64x48: a local output, the reference for every gs:// read."""
    out = tmp_path_factory.mktemp("local") / "out"
    write_output(out, [[(64, 48)] * PER_SHARD for _ in range(SHARDS)])
    return out


def upload(gcs, local: Path, prefix: str) -> str:  # noqa: F811
    gcs.upload_tree(local, prefix)
    return gcs.url(prefix)


@pytest.fixture(scope="module")
def remote(gcs, local) -> str:  # noqa: F811
    return upload(gcs, local, "reader")


def largest_shard(local: Path) -> int:
    return max(path.stat().st_size for path in local.glob("train-*"))


def cached_bytes(cache_dir: Path) -> int:
    """What the cache holds on disk, counted from the file system itself."""
    total = 0
    for sub in ("objects", "partial"):
        for path in (cache_dir / sub).iterdir():
            try:
                total += path.stat().st_size
            except FileNotFoundError:  # evicted or renamed while counting
                pass
    return total


def loader_keys(loader) -> list[str]:
    return [key for batch in loader for key in batch[2]]


@pytest.mark.parametrize("shuffle", [True, "window"])
@pytest.mark.parametrize("workers", [0, 2])
def test_an_epoch_over_gs_equals_the_local_epoch(remote, local, tmp_path, shuffle, workers):
    options = dict(shuffle=shuffle, seed=3, with_keys=True, window_shards=2, num_workers=workers)
    here = torch_reader.make_loader(local, "train", 5, **options)
    there = torch_reader.make_loader(
        remote, "train", 5, cache_dir=tmp_path, cache_limit_bytes=10 << 20, **options
    )
    source = RecordSource(local, "train")
    for epoch in (0, 1):
        here.set_epoch(epoch)
        there.set_epoch(epoch)
        expected = loader_keys(here)
        seen = []
        for images, masks, keys in there:
            for row, key in enumerate(keys):
                item = source[source.index_of(key)]
                assert np.array_equal(images[row].permute(1, 2, 0).numpy(), item["image"])
                assert np.array_equal(masks[row].permute(1, 2, 0).numpy(), item["mask"])
            seen.extend(keys)
        assert seen == expected
        assert sorted(seen) == sorted(source[i]["key"] for i in range(len(source)))
    # Every shard was fetched once into the cache, under its sha256.
    assert len(list((tmp_path / "objects").iterdir())) == SHARDS


def test_the_window_order_reads_one_window_of_shards_at_a_time(local):
    source = RecordSource(local, "train")
    order = read_order.epoch_order(len(source), 5, 2, "window", source.shard_sizes, 3)
    assert sorted(order.tolist()) == list(range(len(source)))
    width = 3 * PER_SHARD
    windows = [order[first : first + width] for first in range(0, len(order), width)]
    for window in windows:
        assert len(set(source.shard_of(window).tolist())) == len(window) // PER_SHARD
    again = read_order.epoch_order(len(source), 5, 2, "window", source.shard_sizes, 3)
    other = read_order.epoch_order(len(source), 5, 3, "window", source.shard_sizes, 3)
    assert np.array_equal(order, again) and not np.array_equal(order, other)


@pytest.mark.parametrize("shuffle", [True, "window"])
def test_ranks_over_gs_are_disjoint_and_equal(remote, tmp_path, shuffle):
    parts = []
    for rank in range(3):
        loader = torch_reader.make_loader(
            remote,
            "train",
            4,
            shuffle=shuffle,
            rank=rank,
            world_size=3,
            num_workers=0,
            with_keys=True,
            window_shards=3,
            cache_dir=tmp_path,  # the ranks of one host share the cache
            cache_limit_bytes=10 << 20,
        )
        loader.set_epoch(4)
        parts.append(loader_keys(loader))
    assert [len(part) for part in parts] == [SHARDS * PER_SHARD // 3] * 3
    flat = [key for part in parts for key in part]
    assert len(set(flat)) == len(flat) == SHARDS * PER_SHARD


@pytest.mark.parametrize("shuffle", [True, "window"])
def test_resume_mid_epoch_over_gs(remote, tmp_path, shuffle):
    def make():
        return torch_reader.make_loader(
            remote,
            "train",
            4,
            shuffle=shuffle,
            seed=8,
            num_workers=2,
            with_keys=True,
            window_shards=2,
            cache_dir=tmp_path,
            cache_limit_bytes=10 << 20,
        )

    full = make()
    full.set_epoch(1)
    expected = loader_keys(full)
    first = make()
    first.set_epoch(1)
    head = []
    for _, _, keys in first:
        head.extend(keys)
        if len(head) == 12:
            break
    state = first.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert head + loader_keys(resumed) == expected


@pytest.mark.parametrize("shuffle", [True, "window"])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_cache_stays_within_its_limit_during_an_epoch(
    remote, local, tmp_path, shuffle, workers
):
    largest = largest_shard(local)
    limit = (max(1, workers) + 2) * largest  # the readers, a download, a prefetch: the least
    loader = torch_reader.make_loader(
        remote,
        "train",
        4,
        shuffle=shuffle,
        num_workers=workers,
        with_keys=True,
        window_shards=1,
        cache_dir=tmp_path,
        cache_limit_bytes=limit,
    )
    samples = []
    stop = threading.Event()

    def sample() -> None:  # also between batches, while the prefetcher downloads
        while not stop.is_set():
            samples.append(cached_bytes(tmp_path))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        keys = []
        for _, _, batch_keys in loader:
            samples.append(cached_bytes(tmp_path))
            keys.extend(batch_keys)
    finally:
        stop.set()
        sampler.join()
    assert len(keys) == SHARDS * PER_SHARD
    assert samples and max(samples) <= limit + largest, (max(samples), limit)
    assert len(list((tmp_path / "objects").iterdir())) < SHARDS  # shards were evicted


def test_a_limit_too_small_for_the_readers_is_refused(remote, local, tmp_path):
    with pytest.raises(ValueError, match="cache_limit_bytes=.*at least"):
        torch_reader.make_loader(
            remote, "train", 4, num_workers=2, cache_dir=tmp_path, cache_limit_bytes=1000
        )


KILLED_DOWNLOAD = """
import sys
from shard_reader import remote_cache

real = remote_cache._download_into

def half_then_hang(url, size, handle):
    import io
    whole = io.BytesIO()
    real(url, size, whole)
    handle.write(whole.getvalue()[: size // 2])
    handle.flush()
    print("half", flush=True)
    sys.stdin.read()  # killed here, midway

remote_cache._download_into = half_then_hang
cache = remote_cache.ShardCache.create(sys.argv[1], 10 << 20)
cache.fetch(remote_cache.RemoteShard(sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


def test_a_download_killed_midway_is_never_served(remote, local, tmp_path):
    source = RecordSource(remote, "train", cache_dir=tmp_path, cache_limit_bytes=10 << 20)
    shard = source.remote_shards()[0]
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_DOWNLOAD, str(tmp_path), *map(str, shard)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout.readline().strip() == "half"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (partial,) = (tmp_path / "partial").iterdir()
    assert partial.stat().st_size == shard.size // 2
    assert not (tmp_path / "objects" / shard.sha256).exists()
    reference = RecordSource(local, "train")
    for index in range(PER_SHARD):  # the first shard's records, fetched afresh
        assert source[index]["key"] == reference[index]["key"]
        assert np.array_equal(source[index]["image"], reference[index]["image"])
    data = (tmp_path / "objects" / shard.sha256).read_bytes()
    assert hashlib.sha256(data).hexdigest() == shard.sha256
    assert list((tmp_path / "partial").iterdir()) == []  # the dead download was cleared


def test_a_corrupt_download_is_fetched_again(remote, local, tmp_path, monkeypatch):
    """The bytes arrive damaged once (a flipped bit in transit): checked, refused, fetched
    again; what is served is the shard metadata.json describes."""
    real, calls = remote_cache._download_into, []

    def damaged_once(url, size, handle):
        calls.append(url)
        if len(calls) > 1:
            return real(url, size, handle)
        import io

        whole = io.BytesIO()
        real(url, size, whole)
        data = bytearray(whole.getvalue())
        data[len(data) // 3] ^= 0x01
        handle.write(bytes(data))

    monkeypatch.setattr(remote_cache, "_download_into", damaged_once)
    source = RecordSource(remote, "train", cache_dir=tmp_path, cache_limit_bytes=10 << 20)
    reference = RecordSource(local, "train")
    assert np.array_equal(source[2]["image"], reference[2]["image"])
    assert len(calls) == 2
    shard = source.remote_shards()[0]
    data = (tmp_path / "objects" / shard.sha256).read_bytes()
    assert hashlib.sha256(data).hexdigest() == shard.sha256


WARM_READ = """
import sys
from shard_reader.source import RecordSource
source = RecordSource(sys.argv[1], "train", cache_dir=sys.argv[2], cache_limit_bytes=10 << 20)
print(",".join(source[i]["key"] for i in range(len(source))))
"""


def test_a_second_process_reuses_a_warm_cache(gcs, local, tmp_path):  # noqa: F811
    url = upload(gcs, local, "warm")
    first = RecordSource(url, "train", cache_dir=tmp_path, cache_limit_bytes=10 << 20)
    keys = [first[i]["key"] for i in range(len(first))]
    # The shards leave the bucket: the second process can only read them from the cache.
    bucket = gcs.client().bucket(gcs.bucket)
    for name in gcs.names("warm/train-"):
        # A DELETE the client retries (its first answer lost) finds the object gone: a 404
        # is what this step wants. The listing below proves the shards left the bucket.
        with contextlib.suppress(NotFound):
            bucket.blob(name).delete()
    assert gcs.names("warm/train-") == []
    done = subprocess.run(
        [sys.executable, "-c", WARM_READ, url, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().split(",") == keys


def test_a_shard_changed_on_the_server_is_refused(gcs, local, tmp_path):  # noqa: F811
    url = upload(gcs, local, "changed")
    name = sorted(gcs.names("changed/train-"))[1]
    data = bytearray(gcs.read(name))
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    gcs.put(name, bytes(data))
    source = RecordSource(url, "train", cache_dir=tmp_path, cache_limit_bytes=10 << 20)
    assert source[0]["key"] == "k000"  # shard 0 is intact
    with pytest.raises(remote_cache.ShardChangedError, match="changed on the server"):
        source[PER_SHARD]
    assert sorted(p.name for p in (tmp_path / "objects").iterdir()) == [
        source.remote_shards()[0].sha256
    ]
    assert list((tmp_path / "partial").iterdir()) == []


NO_CREDENTIALS = """
import sys
from shard_reader.source import RecordSource
from shard_reader.remote_cache import MissingCredentialsError
try:
    RecordSource("gs://some-bucket/output", "train", cache_dir=sys.argv[1])
except MissingCredentialsError as error:
    print(error)
"""


def test_no_credentials_fail_fast_with_one_line(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")
    }
    env.update(
        PYTHONPATH=str(ROOT),
        CLOUDSDK_CONFIG=str(tmp_path),
        GCE_METADATA_HOST=NO_METADATA_SERVER,
        GCE_METADATA_IP=NO_METADATA_SERVER,
    )
    done = subprocess.run(
        [sys.executable, "-c", NO_CREDENTIALS, str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "need Google Cloud credentials" in done.stdout
    assert "gcloud auth application-default login" in done.stdout


def grain_keys(dataset) -> list[str]:
    return [str(key) for batch in dataset for key in batch["key"]]


@pytest.mark.parametrize("shuffle", [True, "window"])
def test_grain_over_gs_equals_local_and_resumes(remote, local, tmp_path, shuffle):
    options = dict(shuffle=shuffle, seed=2, num_epochs=2, window_shards=2)
    expected = grain_keys(grain_reader.make_loader(local, "train", 4, **options))
    there = grain_reader.make_loader(
        remote, "train", 4, cache_dir=tmp_path, cache_limit_bytes=10 << 20, **options
    )
    assert grain_keys(there) == expected
    assert sorted(expected[: SHARDS * PER_SHARD]) == sorted(expected[SHARDS * PER_SHARD :])
    iterator = iter(there)
    head = [str(key) for _ in range(5) for key in next(iterator)["key"]]
    state = iterator.get_state()
    resumed = iter(there)
    resumed.set_state(state)
    assert head + [str(key) for batch in resumed for key in batch["key"]] == expected


GS_SNIPPETS = [
    snippet
    for snippet in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    if GS_PLACEHOLDER in snippet
]


def test_the_doc_has_a_gs_snippet_for_torch_and_grain():
    assert any("shard_reader.torch" in snippet for snippet in GS_SNIPPETS)
    assert any("shard_reader.grain" in snippet for snippet in GS_SNIPPETS)


@pytest.mark.parametrize("number", range(len(GS_SNIPPETS)))
def test_gs_snippet_runs_against_the_emulator(remote, tmp_path, number):
    code = textwrap.dedent(GS_SNIPPETS[number]).replace(GS_PLACEHOLDER, remote)
    script = tmp_path / "snippet.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)},
        timeout=600,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "every snippet prints what it read"
    assert any((tmp_path / "segprep" / "shards" / "objects").iterdir())  # the default cache


def test_an_array_record_output_over_gs(gcs, sample_dataset, tmp_path):  # noqa: F811
    """The cache sits under the record-format adapter: ArrayRecord shards are read from
    their cached copies as TFRecord ones are."""
    from tests.helpers.process_tree import SEGPREP
    from tests.helpers.runs import job_args

    out = tmp_path / "out"
    args = job_args(sample_dataset, out, "--num_shards", "2", "--record_format", "array_record")
    done = subprocess.run(
        [*SEGPREP, "prepare", *args],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr[-2000:]
    url = upload(gcs, out, "array")
    here = RecordSource(out, "train")
    there = RecordSource(url, "train", cache_dir=tmp_path / "cache", cache_limit_bytes=10 << 20)
    assert there.record_format == "array_record" and len(there) == len(here)
    for index in range(len(here)):
        assert there[index]["key"] == here[index]["key"]
        assert np.array_equal(there[index]["mask"], here[index]["mask"])
    assert len(list((tmp_path / "cache" / "objects").iterdir())) == len(there.shard_sizes)
