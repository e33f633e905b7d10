"""File access through Beam FileSystems, so local paths and gs:// behave alike.

Beam is imported on first use, and a shard's own reads, staging and publishing go straight
to the OS for local paths: a local writer process (writer_pool.py) never loads Beam.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

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


class NotAFileError(OSError):
    """The path is a FIFO, device, socket or folder: never read (a FIFO would block)."""


class TooLargeError(OSError):
    """The file is larger than the caller's limit: refused before it is read."""


def read_bounded(path: str, limit: int, listed_size: int | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes.

    Local files are opened non-blocking and checked with fstat on the open descriptor, so a
    FIFO, a link to /dev/zero or a file swapped since the listing is refused, and a sparse
    6 GB file is refused by its size before a byte is read. Remote objects are checked by
    their listed size, and read no further than limit + 1 bytes either way.
    """
    if not is_local(path):
        if listed_size is not None and listed_size > limit:
            raise TooLargeError(f"{listed_size:,} bytes, more than the {limit:,} allowed")
        try:
            with _filesystems().open(path, compression_type=_uncompressed()) as handle:
                data = handle.read(limit + 1)
        except Exception as error:
            if _is_not_found(error):
                raise FileNotFoundError(path) from error
            raise
    else:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(descriptor, "rb") as handle:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):
                raise NotAFileError("not a regular file (FIFO, device, socket or folder)")
            if info.st_size > limit:
                raise TooLargeError(f"{info.st_size:,} bytes, more than the {limit:,} allowed")
            data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLargeError(f"more than the {limit:,} bytes allowed")
    return data


def write_bytes_atomically(data: bytes, final_path: str, temp_dir: str) -> None:
    """Write under a unique temporary name, then rename: readers never see half a file."""
    filesystems = _filesystems()
    temp_path = filesystems.join(temp_dir, f"{os.path.basename(final_path)}.{uuid.uuid4().hex}")
    with filesystems.create(temp_path, compression_type=_uncompressed()) as handle:
        handle.write(data)
    filesystems.rename([temp_path], [final_path])


def write_bytes(path: str, data: bytes) -> None:
    """A small file, whole or not at all: local through a temporary name and a rename (no
    Beam import: writer processes call this), gs:// as one object upload."""
    if is_local(path):
        partial = f"{path}.partial-{uuid.uuid4().hex}"
        with open(partial, "wb") as handle:
            handle.write(data)
        os.replace(partial, path)
        return
    with _filesystems().create(path, compression_type=_uncompressed()) as handle:
        handle.write(data)


@contextlib.contextmanager
def streamed(path: str) -> Iterator[BinaryIO]:
    """A file written in pieces, whole or not at all (as write_bytes)."""
    if is_local(path):
        partial = f"{path}.partial-{uuid.uuid4().hex}"
        try:
            with open(partial, "wb") as handle:
                yield handle
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
        return
    with _filesystems().create(path, compression_type=_uncompressed()) as handle:
        yield handle


def upload_file(local_path: str, remote_path: str) -> None:
    """Copy a finished local file to a gs:// object (created whole, or not at all)."""
    with (
        open(local_path, "rb") as source,
        _filesystems().create(remote_path, compression_type=_uncompressed()) as target,
    ):
        while chunk := source.read(_CHUNK):
            target.write(chunk)


def download_file(remote_path: str, local_path: str) -> None:
    """Copy a gs:// object to a local file in chunks (never whole in memory)."""
    try:
        with (
            _filesystems().open(remote_path, compression_type=_uncompressed()) as source,
            open(local_path, "wb") as target,
        ):
            while chunk := source.read(_CHUNK):
                target.write(chunk)
    except Exception as error:
        if _is_not_found(error):
            raise FileNotFoundError(remote_path) from error
        raise


def rename(sources: list[str], targets: list[str]) -> None:
    """Rename files within one file system (local: atomic replace; gs://: copy + delete)."""
    if sources and is_local(sources[0]):
        for source, target in zip(sources, targets, strict=True):
            os.replace(source, target)
    elif sources:
        _filesystems().rename(sources, targets)


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
