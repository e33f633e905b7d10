"""File access through Beam FileSystems, so local paths and gs:// behave alike.

Beam is imported on first use, and a shard's own reads, staging and publishing go straight
to the OS for local paths: a local writer process (writer_pool.py) never loads Beam.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apache_beam.io.filesystem import MatchResult

_CHUNK = 8 << 20


def _filesystems():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def _uncompressed() -> str:
    """Never guess a codec from a file name: a mask named x.gz stays x.gz."""
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.UNCOMPRESSED


def is_local(path: str) -> bool:
    return "://" not in path


def normalize_dir(path: str) -> str:
    """Absolute local directory or gs:// prefix, always ending in one slash."""
    if is_local(path):
        return os.path.abspath(path).rstrip("/") + "/"
    return path.rstrip("/") + "/"


def join(directory: str, name: str) -> str:
    if is_local(directory):
        return os.path.join(directory, name)
    return _filesystems().join(directory, name)


def read_bytes(path: str) -> bytes:
    if is_local(path):
        with open(path, "rb") as handle:
            return handle.read()
    with _filesystems().open(path, compression_type=_uncompressed()) as handle:
        return handle.read()


def write_bytes_atomically(data: bytes, final_path: str, temp_dir: str) -> None:
    """Write under a unique temporary name, then rename: readers never see half a file."""
    filesystems = _filesystems()
    temp_path = filesystems.join(temp_dir, f"{os.path.basename(final_path)}.{uuid.uuid4().hex}")
    with filesystems.create(temp_path, compression_type=_uncompressed()) as handle:
        handle.write(data)
    filesystems.rename([temp_path], [final_path])


def local_staging_path(final_path: str, temp_dir: str) -> str:
    """Where a shard is written first: in the output's temp dir when local, else /tmp."""
    unique = f"{os.path.basename(final_path)}.{uuid.uuid4().hex}"
    if is_local(temp_dir):
        os.makedirs(temp_dir, exist_ok=True)
        return os.path.join(temp_dir, unique)
    return os.path.join(tempfile.gettempdir(), unique)


def publish_file(staging_path: str, final_path: str, temp_dir: str) -> tuple[int, str]:
    """Move a finished local file to its final (local or gs://) name; (bytes, sha256).

    A retried task publishes identical bytes under the same name, so the rename is
    idempotent and a retry never leaves a duplicate.
    """
    digest = hashlib.sha256()
    size = 0
    if is_local(final_path):
        with open(staging_path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        os.replace(staging_path, final_path)
        return size, digest.hexdigest()
    filesystems = _filesystems()
    remote_temp = filesystems.join(temp_dir, os.path.basename(staging_path))
    with (
        open(staging_path, "rb") as source,
        filesystems.create(remote_temp, compression_type=_uncompressed()) as target,
    ):
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            target.write(chunk)
    os.remove(staging_path)
    filesystems.rename([remote_temp], [final_path])
    return size, digest.hexdigest()


def list_dir(path: str) -> list[str]:
    """Paths of every file under a directory (recursively), [] when there is none.

    Errors (no credentials, no such bucket) propagate: they must not read as "empty".
    """
    result = _match(normalize_dir(path) + "**")
    return [meta.path for meta in result.metadata_list] if result else []


def delete_paths(paths: list[str]) -> None:
    if paths:
        _filesystems().delete(paths)


def delete_tree(path: str) -> None:
    """Remove a directory (local) or every object under a prefix (gs://), if any."""
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    delete_paths(list_dir(path))


def has_files(path: str) -> bool:
    """True when at least one file lies under the directory; cheap on huge buckets."""
    result = _match(normalize_dir(path) + "**", limit=1)
    return bool(result and result.metadata_list)


def _match(pattern: str, limit: int | None = None) -> MatchResult | None:
    """Beam's match, with "no such bucket" as nothing found; other errors (credentials,
    network) propagate so that they never read as an empty folder."""
    from apache_beam.io.filesystem import BeamIOError

    try:
        return _filesystems().match([pattern], limits=None if limit is None else [limit])[0]
    except BeamIOError as error:
        if _is_not_found(error):
            return None
        raise


def _is_not_found(error: BaseException) -> bool:
    if type(error).__name__ in ("NotFound", "FileNotFoundError"):
        return True
    details = getattr(error, "exception_details", None) or {}
    return bool(details) and all(_is_not_found(inner) for inner in details.values())
