"""A real Cloud Storage server for tests: gcp-storage-emulator on 127.0.0.1, in this process.

The fixture `gcs` starts it on a free loopback port, creates a bucket and points
STORAGE_EMULATOR_HOST at it, so Beam's gs:// file system (google-cloud-storage underneath) and
the test's own client talk to the same server. Nothing here mocks GCS: every call is HTTP.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from google.cloud import storage

LOOPBACK = "127.0.0.1"
BUCKET = "segprep-test"
# Where google.auth would look for a GCE metadata server: a closed loopback port, so a broken
# fast path still never sends a packet off this machine (read when google.auth is imported,
# so it binds subprocesses such as the CLI).
NO_METADATA_SERVER = f"{LOOPBACK}:9"


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


@dataclasses.dataclass
class GcsEmulator:
    endpoint: str
    bucket: str

    def client(self) -> storage.Client:
        """An anonymous client of the emulator (STORAGE_EMULATOR_HOST must be set)."""
        from google.cloud.storage import Client

        return Client.create_anonymous_client()

    def url(self, name: str = "") -> str:
        return f"gs://{self.bucket}/{name}"

    def upload_tree(self, local_dir: Path, prefix: str) -> list[str]:
        """Upload every file under local_dir to PREFIX/relative/path; the object names."""
        bucket = self.client().bucket(self.bucket)
        names = []
        for path in sorted(Path(local_dir).rglob("*")):
            if path.is_file():
                name = f"{prefix.rstrip('/')}/{path.relative_to(local_dir).as_posix()}"
                bucket.blob(name).upload_from_filename(str(path))
                names.append(name)
        return names

    def put(self, name: str, data: bytes) -> None:
        self.client().bucket(self.bucket).blob(name).upload_from_string(data)

    def names(self, prefix: str = "") -> list[str]:
        return sorted(blob.name for blob in self.client().list_blobs(self.bucket, prefix=prefix))

    def read(self, name: str) -> bytes:
        return self.client().bucket(self.bucket).blob(name).download_as_bytes()

    def download_prefix(self, prefix: str, local_dir: Path) -> list[Path]:
        """Copy PREFIX/* to local_dir (TensorFlow's own gs:// does not follow the emulator)."""
        paths = []
        for name in self.names(prefix):
            target = Path(local_dir) / name[len(prefix) :].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.read(name))
            paths.append(target)
        return paths


class _Refuse(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.server.requests.append(self.client_address)
        self.request.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")


@contextlib.contextmanager
def metadata_server_watch() -> Iterator[tuple[str, list]]:
    """A stand-in GCE metadata server on loopback that records every connection and answers
    404 (not a GCE machine). Yields (host:port, connections): a credential search that
    reaches google.auth's metadata probe shows up there, however fast it fails."""
    server = socketserver.ThreadingTCPServer((LOOPBACK, 0), _Refuse)
    server.daemon_threads = True
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{LOOPBACK}:{server.server_address[1]}", server.requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def running_emulator(bucket: str = BUCKET) -> Iterator[GcsEmulator]:
    """The emulator on a free loopback port, in memory, with `bucket` created."""
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    port = free_loopback_port()
    server = create_server(LOOPBACK, port, in_memory=True, default_bucket=bucket)
    server.start()
    try:
        yield GcsEmulator(f"http://{LOOPBACK}:{port}", bucket)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsEmulator]:
    """One emulator per test module, with STORAGE_EMULATOR_HOST set while the module runs."""
    with pytest.MonkeyPatch.context() as patch, running_emulator() as emulator:
        patch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
        patch.setenv("GCE_METADATA_HOST", NO_METADATA_SERVER)
        patch.setenv("GCE_METADATA_IP", NO_METADATA_SERVER)
        from beam_pipeline.launch import credentials

        assert credentials.use_storage_emulator_if_set()
        yield emulator
