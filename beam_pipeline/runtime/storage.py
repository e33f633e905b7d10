"""The job's file access: the file layer (transforms.files) with the output directory's
conventions (a directory always ends in one slash). No Beam: local paths go to the OS and
gs:// to google-cloud-storage, in the launcher, the writer processes and the commit alike."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import BinaryIO

from transforms import files
from transforms.files import NotAFileError, TooLargeError

__all__ = [
    "NotAFileError",
    "TooLargeError",
    "delete_paths",
    "delete_tree",
    "download_file",
    "has_files",
    "is_local",
    "join",
    "list_dir",
    "normalize_dir",
    "read_bounded",
    "read_bytes",
    "rename",
    "streamed",
    "upload_file",
    "write_bytes",
    "write_bytes_atomically",
]

_READ_ALL = 1 << 62  # read_bytes: files segprep itself wrote, no cap of their own


def is_local(path: str) -> bool:
    return not files.is_remote(path)


def normalize_dir(path: str) -> str:
    """Absolute local directory or gs:// prefix, always ending in one slash."""
    if is_local(path):
        return os.path.abspath(path).rstrip("/") + "/"
    return path.rstrip("/") + "/"


def join(directory: str, name: str) -> str:
    if is_local(directory):
        return os.path.join(directory, name)
    return files.join(directory, name)


def read_bytes(path: str) -> bytes:
    """A file segprep wrote itself (still never a FIFO or a device)."""
    return files.read_bounded(path, _READ_ALL)


def read_bounded(path: str, limit: int, listed_size: int | None = None) -> bytes:
    """The bytes of a regular file or object of at most `limit` bytes (files.read_bounded);
    a listed size over the limit is refused without a request."""
    if listed_size is not None and listed_size > limit:
        raise TooLargeError(f"{listed_size:,} bytes, more than the {limit:,} allowed")
    return files.read_bounded(path, limit)


def write_bytes_atomically(data: bytes, final_path: str, temp_dir: str) -> None:
    """Readers never see half a file: local through a temporary name in `temp_dir` and a
    rename, gs:// as one object upload (visible only once complete)."""
    del temp_dir  # the layer picks its own temporary name beside the target
    files.write_bytes(final_path, data)


def write_bytes(path: str, data: bytes) -> None:
    """A small file, whole or not at all (files.write_bytes)."""
    files.write_bytes(path, data)


@contextlib.contextmanager
def streamed(path: str) -> Iterator[BinaryIO]:
    """A file written in pieces, whole or not at all (files.streamed)."""
    with files.streamed(path) as handle:
        yield handle


def upload_file(local_path: str, remote_path: str) -> None:
    files.upload_file(local_path, remote_path)


def download_file(remote_path: str, local_path: str) -> None:
    files.download_file(remote_path, local_path)


def rename(sources: list[str], targets: list[str]) -> None:
    """Rename files within one file system (local: atomic replace; gs://: copy + delete)."""
    files.rename(sources, targets)


def list_dir(path: str) -> list[str]:
    """Paths of every file under a directory (recursively), [] when there is none.

    Errors (no credentials, network) propagate: they must not read as "empty".
    """
    return files.list_files(normalize_dir(path))


def delete_paths(paths: list[str]) -> None:
    files.delete(paths)


def delete_tree(path: str) -> None:
    """Remove a directory (local) or every object under a prefix (gs://), if any."""
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    delete_paths(list_dir(path))


def has_files(path: str) -> bool:
    """True when at least one file lies under the directory; cheap on huge buckets."""
    return files.has_files(normalize_dir(path))
