"""The google-cloud-storage client for direct gs:// object access outside Beam's FileSystems:
the run lock's object, and metadata and index reads by readers that run without TensorFlow.

Against a storage emulator (STORAGE_EMULATOR_HOST, which google-cloud-storage follows) the
client is anonymous: an emulator needs no credentials, and a credential search on a machine
without any retries for tens of seconds.
"""

from __future__ import annotations

import functools
import os

EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"


def emulator_host() -> str | None:
    """The storage emulator's address when one is configured, else None."""
    return os.environ.get(EMULATOR_VARIABLE) or None


def storage_client():
    """A google-cloud-storage client: anonymous against the emulator, else the default one."""
    return _client(emulator_host())


@functools.cache
def _client(emulator: str | None):
    # One client per emulator address (None: the real service), so repeated reads do not
    # repeat the credential search; keyed by the address because tests start emulators.
    from google.cloud import storage

    if emulator is not None:
        return storage.Client.create_anonymous_client()
    return storage.Client()


def split(path: str) -> tuple[str, str]:
    """gs://BUCKET/NAME -> (BUCKET, NAME)."""
    if not path.startswith("gs://"):
        raise ValueError(f"{path}: only local paths and gs:// objects can be read")
    bucket, _, name = path[len("gs://") :].partition("/")
    if not bucket or not name:
        raise ValueError(f"{path} names no object (gs://BUCKET/NAME)")
    return bucket, name


def blob(path: str):
    """The object at gs://BUCKET/NAME (nothing is fetched yet)."""
    bucket, name = split(path)
    return storage_client().bucket(bucket).blob(name)


def read_object(path: str) -> bytes:
    """The bytes of the object at `path`; FileNotFoundError if there is none."""
    from google.api_core import exceptions

    try:
        return blob(path).download_as_bytes()
    except exceptions.NotFound:
        raise FileNotFoundError(f"{path} not found") from None


def object_exists(path: str) -> bool:
    return blob(path).exists()
