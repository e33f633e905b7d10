"""The one file layer: local paths and gs:// objects, read bounded, written whole or not at all.

Every read of a file segprep did not just write (metadata, index files, key tables, shards,
rejects, class files, inputs) goes through here, so a FIFO never blocks a reader, a link to
/dev/zero is never read until memory runs out, and a file over its cap is refused by its
size before a byte is read.

Local paths go to the OS; gs:// objects to google-cloud-storage, imported on first use (an
anonymous client when STORAGE_EMULATOR_HOST names an emulator). Chosen over Beam's
FileSystems (0.6 s and ~1,900 modules to import, 4-6 ms a call against the emulator, against
0.12 s and ~1 ms here), etils.epath (gs:// through tf.io.gfile) and fsspec (needs gcsfs): the
tools and readers that use it need neither Beam nor TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob as local_glob
import hashlib
import io
import os
import re
import shutil
import stat as stat_module
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

_CHUNK = 8 << 20
_OWN_FILE_LIMIT = 1 << 62  # read_own: files this run wrote bound themselves
_EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"


class NotAFileError(OSError):
    """The path is a FIFO, device, socket or folder: never read (a FIFO would block)."""


class WouldBlockError(NotAFileError):
    """A "regular" file whose read would wait (/proc/kmsg, a kernel tracing pipe): never
    waited on. The descriptor stays non-blocking, which true regular files ignore."""


class TooLargeError(OSError):
    """The file is larger than the caller's limit: refused before it is read."""


class LineTooLongError(ValueError):
    """A line longer than the reader's limit: refused once that many bytes are read."""


@dataclasses.dataclass(frozen=True)
class FileStat:
    size: int  # bytes
    mtime_ns: int  # last modification, nanoseconds since the epoch


def is_remote(path: str | os.PathLike) -> bool:
    return "://" in str(path)


def is_local(path: str | os.PathLike) -> bool:
    return not is_remote(path)


def normalize_dir(path: str | os.PathLike) -> str:
    """An absolute local folder or a gs:// prefix, always ending in one slash: the form every
    folder of a run (inputs, output, staging) is kept in."""
    return (str(path) if is_remote(path) else os.path.abspath(path)).rstrip("/") + "/"


def join(directory: str | os.PathLike, name: str) -> str:
    """`name` (relative, with '/') inside `directory`, local or gs://."""
    return f"{str(directory).rstrip('/')}/{name}"


# --- local --------------------------------------------------------------------------------


class _NonBlockingFile(io.FileIO):
    """A file whose descriptor stays non-blocking: a read the kernel would make wait is a
    WouldBlockError (FileIO's answer is None, which a caller takes for the end or a short
    read), never a wait. Regular files ignore O_NONBLOCK, so their reads are as ever."""

    def __init__(self, descriptor: int, path: str | os.PathLike) -> None:
        super().__init__(descriptor, "rb", closefd=True)
        self._path = path

    def _would_block(self) -> WouldBlockError:
        return WouldBlockError(
            f"{self._path}: reading it would wait (a kernel file such as /proc/kmsg, not "
            "a file's bytes)"
        )

    def readinto(self, buffer) -> int:  # type: ignore[override]
        count = super().readinto(buffer)
        if count is None:
            raise self._would_block()
        return count

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        if data is None:
            raise self._would_block()
        return data

    def readall(self) -> bytes:
        chunks = []
        while data := self.read(_CHUNK):
            chunks.append(data)
        return b"".join(chunks)


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """A local regular file opened for reading, never blocking on a FIFO or device.

    The check is made with fstat on the open descriptor, so a file swapped for a FIFO or a
    link to a device after any earlier check is still refused. The descriptor stays
    non-blocking: a "regular" file of the kernel's whose read waits (/proc/kmsg) is a
    WouldBlockError, never a hang (it once was set blocking before the read, and hung).
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat_module.S_ISREG(os.fstat(descriptor).st_mode):
            raise NotAFileError(f"{path}: not a regular file (FIFO, device, socket or folder)")
        raw = _NonBlockingFile(descriptor, path)
    except BaseException:
        os.close(descriptor)
        raise
    return io.BufferedReader(raw)  # type: ignore[return-value]


def read_bounded_local(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of a local regular file of at most `limit` bytes (see open_regular). A file
    that states no bytes is read for one byte: an empty file gives none, a kernel file
    (/proc/self/mem's I/O error, /proc/kmsg's next byte or WouldBlockError) what it gives."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise TooLargeError(f"{path}: {size:,} bytes, more than the {limit:,} allowed")
        data = handle.read(min(limit, size) + 1)  # grown since fstat: still caught below
    if len(data) > limit:
        raise TooLargeError(f"{path}: more than the {limit:,} bytes allowed")
    return data


# --- gs:// ----------------------------------------------------------------------------------

_clients: dict[tuple[int, str | None], Any] = {}
_clients_lock = threading.Lock()


def emulator_host() -> str | None:
    """The storage emulator's address when one is configured (STORAGE_EMULATOR_HOST)."""
    return os.environ.get(_EMULATOR_VARIABLE) or None


CREDENTIALS_DEADLINE = 20.0  # seconds: google.auth probes a metadata server that may not exist


def missing_credentials() -> str | None:
    """Why gs:// cannot be read, in one line, found within CREDENTIALS_DEADLINE seconds; None
    when it can: an emulator needs nothing, else Application Default Credentials. The search
    runs in a thread so that a metadata server that never answers cannot hold the caller."""
    if emulator_host() is not None:
        return None
    outcome: list[BaseException | None] = []

    def look() -> None:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            google.auth.default()
            outcome.append(None)
        except DefaultCredentialsError as error:
            outcome.append(error)

    thread = threading.Thread(target=look, name="segprep-credentials", daemon=True)
    thread.start()
    thread.join(CREDENTIALS_DEADLINE)
    if outcome and outcome[0] is None:
        return None
    why = "none were found" if outcome else f"none were found within {CREDENTIALS_DEADLINE:g} s"
    return (
        f"gs:// paths need Google Cloud credentials and {why}: run `gcloud auth "
        "application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
        "service-account key file"
    )


def unreachable(path: str) -> str | None:
    """Why Cloud Storage cannot be reached for gs:// `path`, in one line, after one request
    of at most CREDENTIALS_DEADLINE seconds and no retries; None when it answers (with any
    status: a missing bucket or a refusal is for the caller's own checks). Without this, the
    client's retries keep a closed port or a dead network silent for two minutes."""
    import requests
    from google.api_core import exceptions
    from google.auth.exceptions import GoogleAuthError

    try:
        gcs_client().lookup_bucket(split_gcs(path)[0], timeout=CREDENTIALS_DEADLINE, retry=None)
    except exceptions.GoogleAPICallError:
        return None
    # GoogleAuthError: a token that cannot be refreshed (a metadata server gone with the
    # network) is as unreachable; this runs in failure paths, where it must not raise.
    except (requests.exceptions.RequestException, GoogleAuthError) as error:
        where = emulator_host() or "storage.googleapis.com"
        setting = " (STORAGE_EMULATOR_HOST)" if emulator_host() else ""
        return (
            f"Cloud Storage at {where}{setting} cannot be reached for {path}: "
            f"{type(error).__name__}; check the network, proxy or endpoint and run again"
        )
    return None


def storage_gone(path: str | os.PathLike) -> bool:
    """Whether `path` is on a Cloud Storage that no longer answers (files.unreachable): after
    a failure, the cleanup that would need it is skipped rather than retried for minutes."""
    return is_remote(path) and unreachable(str(path)) is not None


def gcs_client():
    """This process's google-cloud-storage client: anonymous against an emulator
    (STORAGE_EMULATOR_HOST), else the default credentials'. One per process (fork-safe) and
    emulator address (the client reads it once, when it is made)."""
    identity = (os.getpid(), emulator_host())
    with _clients_lock:
        client = _clients.get(identity)
        if client is None:
            from google.cloud import storage

            if identity[1] is not None:
                client = storage.Client.create_anonymous_client()
            else:
                client = storage.Client()
            _clients.clear()
            _clients[identity] = client
    return client


def split_gcs(path: str) -> tuple[str, str]:
    """(bucket, object name) of gs://BUCKET/NAME; ValueError for another scheme."""
    if not str(path).startswith("gs://"):
        raise ValueError(f"{path}: only local paths and gs:// are supported")
    bucket, _, name = str(path)[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"{path}: no bucket name")
    return bucket, name


def _blob(path: str):
    """The object's metadata, or FileNotFoundError."""
    from google.api_core import exceptions

    bucket, name = split_gcs(path)
    if not name or name.endswith("/"):
        raise NotAFileError(f"{path}: a folder, not an object")
    try:
        blob = gcs_client().bucket(bucket).get_blob(name)
    except exceptions.NotFound:
        blob = None
    if blob is None:
        raise FileNotFoundError(f"{path}: no such object")
    return blob


def _prefix(name: str) -> str:
    return name.rstrip("/") + "/" if name.strip("/") else ""


def _pages(path: str, delimiter: str | None, max_results: int | None = None):
    """The listing's pages under the prefix `path` names; none for a missing bucket (other
    errors, such as no credentials, propagate: they must not read as "empty")."""
    from google.api_core import exceptions

    bucket, name = split_gcs(path)
    listing = gcs_client().list_blobs(
        bucket, prefix=_prefix(name), delimiter=delimiter, max_results=max_results
    )
    try:
        yield from listing.pages
    except exceptions.NotFound:
        return


def _any_under(path: str) -> bool:
    return any(page.num_items for page in _pages(path, None, max_results=1))


def bucket_exists(path: str) -> bool:
    """Whether the bucket of a gs:// path exists (one metadata request)."""
    from google.api_core import exceptions

    try:
        return gcs_client().lookup_bucket(split_gcs(path)[0]) is not None
    except exceptions.Forbidden:  # it exists; these credentials may still write objects
        return True


def first_names(path: str, count: int) -> list[str]:
    """The names of the first `count` objects under a gs:// folder, relative to it (one
    listing call): a sample to tell what a folder holds without listing it all."""
    prefix = _prefix(split_gcs(normalize_dir(path))[1])
    names: list[str] = []
    for page in _pages(normalize_dir(path), None, max_results=count):
        names += [blob.name[len(prefix) :] for blob in page]
    return names[:count]


# --- the layer --------------------------------------------------------------------------------


def read_bounded(path: str | os.PathLike, limit: int, listed_size: int | None = None) -> bytes:
    """The bytes of a regular file or object of at most `limit` bytes: refused by its size
    before a byte is read, never more than limit + 1 bytes read (a `listed_size` over the
    limit is refused without a request). FileNotFoundError when missing, NotAFileError for a
    FIFO, device or folder, TooLargeError over the limit."""
    if listed_size is not None and listed_size > limit:
        raise TooLargeError(f"{listed_size:,} bytes, more than the {limit:,} allowed")
    if not is_remote(path):
        return read_bounded_local(path, limit)
    blob = _blob(str(path))
    if blob.size > limit:
        raise TooLargeError(f"{path}: {blob.size:,} bytes, more than the {limit:,} allowed")
    if blob.size == 0:
        return b""
    end = min(limit, blob.size)  # inclusive: one byte past the listed size, if it is there
    data = blob.download_as_bytes(start=0, end=end, if_generation_match=blob.generation)
    if len(data) > limit:
        raise TooLargeError(f"{path}: more than the {limit:,} bytes allowed")
    return data


@contextlib.contextmanager
def opened(path: str | os.PathLike) -> Iterator[tuple[BinaryIO, int]]:
    """(handle, size) of a regular file or object, for streaming reads (shards).

    The size is that of the open file (local fstat) or of the object's generation being
    read (gs://), so a reader bounded by it never reads past what was checked.
    """
    if not is_remote(path):
        with open_regular(path) as handle:
            yield handle, os.fstat(handle.fileno()).st_size
        return
    blob = _blob(str(path))
    with blob.open("rb", chunk_size=_CHUNK, if_generation_match=blob.generation) as handle:
        yield handle, blob.size


def bounded_lines(handle: BinaryIO, limit: int, source: str) -> Iterator[bytes]:
    """The lines of `handle` one at a time (newline kept), each at most `limit` bytes: memory
    stays one line whatever the file's size, and a longer line is a LineTooLongError naming
    `source` and the line, raised after reading `limit` + 1 bytes of it, never the rest."""
    number = 0
    while line := handle.readline(limit + 1):
        number += 1
        if len(line) > limit:
            raise LineTooLongError(f"{source} line {number}: longer than {limit:,} bytes")
        yield line


class RangeReader:
    """Ranged reads of one regular file or object of a fixed size: `read_at(offset, length)`
    (a gs:// object's generation is pinned, so every read sees the bytes first checked)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._path = str(path)
        if is_remote(self._path):
            self._blob = _blob(self._path)
            self.size = int(self._blob.size)
        else:
            self._blob = None
            with open_regular(self._path) as handle:
                self.size = os.fstat(handle.fileno()).st_size

    def read_at(self, offset: int, length: int) -> bytes:
        end = min(offset + length, self.size)
        if end <= offset:
            return b""
        if self._blob is None:
            with open_regular(self._path) as handle:
                return os.pread(handle.fileno(), end - offset, offset)
        return self._blob.download_as_bytes(
            start=offset, end=end - 1, if_generation_match=self._blob.generation
        )


def sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a regular file or object, read into one reused buffer (fresh chunks
    cost a third more: each is new memory the kernel must zero)."""
    with opened(path) as (handle, _):
        return hashlib.file_digest(handle, "sha256").hexdigest()


def check_no_hole(path: str | os.PathLike) -> None:
    """OSError when a local file has a hole (bytes never written) before its end: segprep
    writes every byte of its files, and a sparse file costs nothing to make yet would be
    hashed for as long as its size says (a 1 TiB shard, 24 minutes). File systems that
    cannot tell report none."""
    if is_remote(path):
        return
    with open_regular(path) as handle:
        check_no_hole_at(handle.fileno())


def check_no_hole_at(descriptor: int) -> None:
    """check_no_hole of an open local file; its offset is left where the check put it
    (read it with pread, or seek back)."""
    size = os.fstat(descriptor).st_size
    try:
        hole = os.lseek(descriptor, 0, os.SEEK_HOLE)
    except OSError:
        return
    if hole < size:
        raise OSError(f"it has unwritten bytes (a hole) from byte {hole:,} of {size:,}")


def exists(path: str | os.PathLike) -> bool:
    """A file, folder or object at `path` (a link counts even when broken: it is there)."""
    if not is_remote(path):
        return os.path.lexists(path)
    try:
        _blob(str(path))
    except (FileNotFoundError, NotAFileError):
        return isdir(path)
    return True


def isdir(path: str | os.PathLike) -> bool:
    """A local folder, or a gs:// prefix with at least one object under it (or a bucket)."""
    if not is_remote(path):
        return os.path.isdir(path)
    bucket, name = split_gcs(str(path))
    if not name.strip("/"):
        from google.api_core import exceptions

        try:
            return gcs_client().bucket(bucket).exists()
        except exceptions.Forbidden:  # listing may still be allowed
            pass
    return _any_under(str(path))


def listdir(path: str | os.PathLike) -> list[str]:
    """Sorted names directly inside a folder or gs:// prefix (sub-folders without '/').
    FileNotFoundError when there is none."""
    if not is_remote(path):
        return sorted(os.listdir(path))
    _, name = split_gcs(str(path))
    prefix = _prefix(name)
    names = set()
    for page in _pages(str(path), "/"):
        names.update(blob.name[len(prefix) :] for blob in page)
        names.update(sub[len(prefix) :].rstrip("/") for sub in page.prefixes)
    names.discard("")
    if not names and not isdir(path):
        raise FileNotFoundError(f"{path}: no such folder")
    return sorted(names)


def list_files(path: str | os.PathLike) -> list[str]:
    """Paths of every file under a folder or gs:// prefix, recursively; [] when there is none.

    Errors (no credentials, network) propagate: they must not read as "empty".
    """
    if not is_remote(path):
        return sorted(
            os.path.join(root, name) for root, _, names in os.walk(path) for name in names
        )
    bucket, _ = split_gcs(str(path))
    return [f"gs://{bucket}/{blob.name}" for page in _pages(str(path), None) for blob in page]


def glob(pattern: str) -> list[str]:
    """Sorted paths matching `pattern`, whose * and ? never cross a '/'."""
    if not is_remote(pattern):
        return sorted(local_glob.glob(pattern))
    bucket, name = split_gcs(pattern)
    literal = re.split(r"[*?\[]", name, maxsplit=1)[0]
    regex = re.compile(
        "".join(
            "[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char) for char in name
        )
        + r"\Z"
    )
    from google.api_core import exceptions

    try:
        blobs = list(gcs_client().list_blobs(bucket, prefix=literal))
    except exceptions.NotFound:  # no such bucket
        return []
    return sorted(f"gs://{bucket}/{blob.name}" for blob in blobs if regex.match(blob.name))


def stat(path: str | os.PathLike) -> FileStat:
    """Size and modification time of a file or object (a local link is followed)."""
    if not is_remote(path):
        info = os.stat(path)
        return FileStat(info.st_size, info.st_mtime_ns)
    blob = _blob(str(path))
    updated = blob.updated
    mtime = int(updated.timestamp() * 1e9) if updated is not None else 0
    return FileStat(blob.size, mtime)


def makedirs(path: str | os.PathLike) -> None:
    """A local folder and its parents (gs:// has no folders: nothing to do)."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """A file, whole or not at all: local through a temporary name and a rename, gs:// as
    one object upload (an object is only visible once complete)."""
    if not is_remote(path):
        _write_local(path, lambda handle: handle.write(data))
        return
    bucket, name = split_gcs(str(path))
    gcs_client().bucket(bucket).blob(name).upload_from_string(data)


def write_new(path: str | os.PathLike, data: bytes) -> bool:
    """Write `data` at `path` whole, only if nothing is there; False when the name is taken.

    Local: written under a temporary name, then hard-linked to `path` (link fails if the name
    exists, so two writers never share it); gs://: an upload on the condition that no
    generation of the object exists.
    """
    if not is_remote(path):
        try:
            _write_local(path, lambda handle: handle.write(data), publish=os.link)
        except FileExistsError:
            return False
        return True
    from google.api_core import exceptions

    bucket, name = split_gcs(str(path))
    blob = gcs_client().bucket(bucket).blob(name)
    if blob.exists():  # the precondition alone decides on GCS; not every emulator checks it
        return False
    try:
        blob.upload_from_string(data, if_generation_match=0)
    except exceptions.PreconditionFailed:
        return False
    return True


def write_chunks(path: str | os.PathLike, chunks: Iterable[bytes]) -> tuple[int, str]:
    """A file written from `chunks` as they come, whole or not at all (local: under a
    temporary name renamed at the end; gs://: spooled to a local temporary file and
    uploaded as one object); (bytes, sha256) of what was written."""
    digest, size = hashlib.sha256(), 0

    def write(handle: BinaryIO) -> None:
        nonlocal size
        for chunk in chunks:
            handle.write(chunk)
            digest.update(chunk)
            size += len(chunk)

    if not is_remote(path):
        _write_local(path, write)
        return size, digest.hexdigest()
    import tempfile

    with tempfile.TemporaryFile() as spool:
        write(spool)
        spool.seek(0)
        bucket, name = split_gcs(str(path))
        gcs_client().bucket(bucket).blob(name).upload_from_file(spool, rewind=True)
    return size, digest.hexdigest()


def _write_local(
    path: str | os.PathLike,
    write: Callable[[BinaryIO], object],
    publish: Callable[[str, str | os.PathLike], None] = os.replace,
) -> None:
    """`write(handle)` into a temporary name beside `path`, then `publish`ed (renamed) to it."""
    partial = _partial_path(os.fspath(path))
    try:
        with open(partial, "xb") as handle:
            write(handle)
        publish(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)


def _partial_path(path: str) -> str:
    """`<path>.partial-<uuid>`, its last name cut so that it stays a name the file system
    takes: a legal name of 250 bytes and the 41 of the tag would fail "File name too long"."""
    folder, name = os.path.split(path)
    tag = f".partial-{uuid.uuid4().hex}"
    limit = name_max(folder or ".") - len(tag)
    while name and len(os.fsencode(name)) > limit:
        name = name[:-1]
    return os.path.join(folder, name + tag)


def name_max(folder: str) -> int:
    """The longest file name, in bytes, that the file system of local `folder` takes."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def upload_file(local_path: str | os.PathLike, remote_path: str) -> None:
    """Copy a finished local file to a gs:// object (created whole, or not at all)."""
    bucket, name = split_gcs(remote_path)
    gcs_client().bucket(bucket).blob(name).upload_from_filename(str(local_path))


def download_file(remote_path: str, local_path: str | os.PathLike) -> None:
    """Copy a gs:// object to a local file in chunks (never whole in memory)."""
    blob = _blob(remote_path)
    blob.download_to_filename(str(local_path), if_generation_match=blob.generation)


def delete(paths: list[str]) -> None:
    """Delete files or objects that are there (a missing one is already gone)."""
    from google.api_core import exceptions

    for path in paths:
        if not is_remote(path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            continue
        bucket, name = split_gcs(path)
        with contextlib.suppress(exceptions.NotFound):
            gcs_client().bucket(bucket).blob(name).delete()


def rename(sources: list[str], targets: list[str]) -> None:
    """Rename files within one file system (local: atomic replace; gs://: copy, then delete
    the source: a reader sees the target only once it is whole)."""
    for source, target in zip(sources, targets, strict=True):
        if not is_remote(source):
            os.replace(source, target)
            continue
        source_bucket, source_name = split_gcs(source)
        target_bucket, target_name = split_gcs(target)
        client = gcs_client()
        bucket = client.bucket(source_bucket)
        bucket.copy_blob(bucket.blob(source_name), client.bucket(target_bucket), target_name)
        bucket.blob(source_name).delete()


def read_own(path: str | os.PathLike) -> bytes:
    """A file segprep wrote itself in this run (still never a FIFO or a device): no cap of
    its own beyond what the writer made."""
    return read_bounded(path, _OWN_FILE_LIMIT)


def list_dir(path: str | os.PathLike) -> list[str]:
    """Paths of every file under a folder or prefix (recursively), [] when there is none.
    Errors (no credentials, network) propagate: they must not read as "empty"."""
    return list_files(normalize_dir(path))


def delete_tree(path: str | os.PathLike) -> None:
    """Remove a folder this run made (local) or every object under a prefix (gs://)."""
    if is_remote(path):
        delete(list_dir(path))
        return
    shutil.rmtree(path, ignore_errors=True)


def has_files(path: str | os.PathLike) -> bool:
    """True when at least one file lies under the folder or prefix; cheap on huge buckets."""
    if not is_remote(path):
        return any(names for _, _, names in os.walk(path))
    return _any_under(normalize_dir(path))
