"""File access through Beam FileSystems, so local paths and gs:// behave alike."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid

from apache_beam.io.filesystem import BeamIOError, CompressionTypes, MatchResult
from apache_beam.io.filesystems import FileSystems

_CHUNK = 8 << 20


def is_local(path: str) -> bool:
    return "://" not in path


def normalize_dir(path: str) -> str:
    """Absolute local directory or gs:// prefix, always ending in one slash."""
    if is_local(path):
        return os.path.abspath(path).rstrip("/") + "/"
    return path.rstrip("/") + "/"


def read_bytes(path: str) -> bytes:
    # UNCOMPRESSED: never guess a codec from the file name (a mask named x.gz stays x.gz).
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return handle.read()


def write_bytes_atomically(data: bytes, final_path: str, temp_dir: str) -> None:
    """Write under a unique temporary name, then rename: readers never see half a file."""
    temp_path = FileSystems.join(temp_dir, f"{os.path.basename(final_path)}.{uuid.uuid4().hex}")
    with FileSystems.create(temp_path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.write(data)
    FileSystems.rename([temp_path], [final_path])


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
        FileSystems.rename([staging_path], [final_path])
        return size, digest.hexdigest()
    remote_temp = FileSystems.join(temp_dir, os.path.basename(staging_path))
    with (
        open(staging_path, "rb") as source,
        FileSystems.create(remote_temp, compression_type=CompressionTypes.UNCOMPRESSED) as target,
    ):
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            target.write(chunk)
    os.remove(staging_path)
    FileSystems.rename([remote_temp], [final_path])
    return size, digest.hexdigest()


def list_dir(path: str) -> list[str]:
    """Paths of every file under a directory (recursively), [] when there is none.

    Errors (no credentials, no such bucket) propagate: they must not read as "empty".
    """
    result = _match(normalize_dir(path) + "**")
    return [meta.path for meta in result.metadata_list] if result else []


def delete_paths(paths: list[str]) -> None:
    if paths:
        FileSystems.delete(paths)


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
    try:
        return FileSystems.match([pattern], limits=None if limit is None else [limit])[0]
    except BeamIOError as error:
        if _is_not_found(error):
            return None
        raise


def _is_not_found(error: BaseException) -> bool:
    if type(error).__name__ in ("NotFound", "FileNotFoundError"):
        return True
    details = getattr(error, "exception_details", None) or {}
    return bool(details) and all(_is_not_found(inner) for inner in details.values())
