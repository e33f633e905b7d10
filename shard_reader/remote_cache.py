"""A bounded local cache of gs:// shards, shared by the processes of one training host.

RecordSource reads a gs:// output through this: each shard is downloaded whole into the
cache, checked against its sha256 from metadata.json, and then read with the same one
pread per record as a local output. Layout under the cache directory (mode 0700):

    objects/<sha256>                 a shard, only ever renamed here after its check
    partial/<sha256>.<size>.<pid>    a download in progress, locked by its process
    locks/<sha256>                   one downloader per shard across processes
    .lock                            accounting and eviction, one process at a time

The cache deletes and opens only what it wrote: a regular file (checked with lstat, opened
with O_NOFOLLOW) whose name follows the layout above. Anything else a user keeps in these
folders is neither counted, evicted nor read, and a cache whose folders or files are
symbolic links is refused (`UnsafeCacheError`), so nothing is ever deleted or touched
through a link.

A file under objects/ is named by its content's sha256 and put there only by rename after
that sha256 was checked, so a partial or corrupt download is never served: a download
killed midway leaves a partial file whose lock died with its process, and the next
process removes it. A warm cache is reused by any later process (size checked on open).
Shards changed on the server since the run fail the check twice and are refused.

Readers pin a shard while they hold it open (a shared flock on the file); eviction takes
the least recently used shard that nobody pins (an exclusive flock it can get) until the
new download fits. Bytes on disk (objects and partials) stay within the limit as long as
the limit holds the shards readers pin at once plus the downloads in flight; the loaders
check that at construction (`check_limit`). Were it ever short, the download goes ahead
rather than wait (no reader can deadlock on its own pin), exceeding it by one shard.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from transforms import files

# Defaults for a training host: the user's cache folder, and at most 64 GiB or half the free
# space of its file system (checked when the cache is created), whichever is smaller.
DEFAULT_CACHE_LIMIT_CAP = 64 << 30
_SUBFOLDERS = ("objects", "partial", "locks")
# The names this cache gives its files: only these are ever evicted or counted.
_OWN_NAMES = {
    "objects": re.compile(r"[0-9a-f]{64}"),
    "partial": re.compile(r"([0-9a-f]{64})\.([0-9]{1,20})\.([0-9]{1,10})"),
}
# O_NONBLOCK: a FIFO planted under a cache name must not block the open (no effect on files).
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class ShardChangedError(OSError):
    """A downloaded shard's bytes differ from metadata.json twice over: not served."""


class UnsafeCacheError(ValueError):
    """A part of the cache directory is a link or not a regular file: it was not written by
    this cache, so it is neither followed nor replaced."""


class MissingCredentialsError(RuntimeError):
    """gs:// needs Google Cloud credentials and none were found."""


class RemoteShard(NamedTuple):
    url: str  # gs://BUCKET/NAME
    sha256: str
    size: int


def default_cache_dir() -> str:
    """$XDG_CACHE_HOME/segprep/shards, else ~/.cache/segprep/shards."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "segprep", "shards")


def default_limit(cache_dir: str) -> int:
    """min(64 GiB, half the free space of the file system holding `cache_dir`)."""
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    return min(DEFAULT_CACHE_LIMIT_CAP, shutil.disk_usage(cache_dir).free // 2)


def require_credentials() -> None:
    """Fail within seconds, in one line, when gs:// cannot be read: nothing is needed against
    a storage emulator (STORAGE_EMULATOR_HOST), else Application Default Credentials."""
    problem = files.missing_credentials()
    if problem is not None:
        raise MissingCredentialsError(problem)


def _download_into(url: str, size: int, handle) -> None:
    """At most size + 1 bytes of the object (one more shows a longer object), with the client
    library's retry: exponential back-off on 429, 5xx and dropped connections."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    bucket, name = files.split_gcs(url)
    blob = files.gcs_client().bucket(bucket).blob(name)
    try:
        blob.download_to_file(handle, start=0, end=size, retry=DEFAULT_RETRY, checksum=None)
    except Exception as error:
        from google.api_core import exceptions

        if isinstance(error, exceptions.NotFound):
            raise FileNotFoundError(f"{url} not found") from None
        if isinstance(error, exceptions.RequestRangeNotSatisfiable):  # an empty object
            return
        raise


def _file_sha256(fd: int) -> str:
    with os.fdopen(os.dup(fd), "rb") as handle:
        handle.seek(0)  # the descriptor's offset is where the download left it
        return hashlib.file_digest(handle, "sha256").hexdigest()


@dataclasses.dataclass(frozen=True)
class ShardCache:
    """The cache at `root`, holding at most `limit_bytes` (see the module docstring).

    Picklable and fork-safe: it holds no open file, only its place and limit.
    """

    root: str
    limit_bytes: int

    @classmethod
    def create(cls, cache_dir: str | os.PathLike | None, limit_bytes: int | None) -> ShardCache:
        root = os.path.abspath(os.fspath(cache_dir or default_cache_dir()))
        limit = None if limit_bytes is None else _checked_limit(limit_bytes)
        for sub in _SUBFOLDERS:
            os.makedirs(os.path.join(root, sub), mode=0o700, exist_ok=True)
            _require_real_folder(os.path.join(root, sub))
        return cls(root, default_limit(root) if limit is None else limit)

    def check_limit(self, shard_sizes: Sequence[int], readers: int) -> None:
        """Refuse a limit that cannot hold what `readers` pin plus a download and a prefetch."""
        largest = max(shard_sizes, default=0)
        needed = (readers + 2) * largest
        if self.limit_bytes < needed:
            raise ValueError(
                f"cache_limit_bytes={self.limit_bytes:,} cannot hold {readers} reader(s)' "
                f"shards plus two in flight: give at least {needed:,} "
                f"({readers + 2} x the largest shard, {largest:,} bytes)"
            )

    def object_path(self, shard: RemoteShard) -> str:
        return os.path.join(self.root, "objects", shard.sha256)

    # -- reading -------------------------------------------------------------------------

    def open(self, shard: RemoteShard) -> int:
        """A read-only descriptor of the shard, verified; it is pinned until closed."""
        while True:
            path = self.fetch(shard)
            try:
                fd = _open_own(path, os.O_RDONLY)
            except FileNotFoundError:  # evicted between the fetch and the open
                continue
            fcntl.flock(fd, fcntl.LOCK_SH)
            status = os.fstat(fd)
            if status.st_nlink == 0:  # evicted before the pin took hold
                os.close(fd)
                continue
            if status.st_size != shard.size:
                os.close(fd)
                raise ShardChangedError(
                    f"{path}: {status.st_size} bytes, metadata.json says {shard.size} for "
                    f"{shard.url} (cache file changed: remove it)"
                )
            return fd

    def fetch(self, shard: RemoteShard) -> str:
        """The path of the verified shard in the cache, downloading it if it is not there."""
        path = self.object_path(shard)
        if self._touch(path):
            return path
        lock = _open_own(os.path.join(self.root, "locks", shard.sha256), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching it: wait
            if self._touch(path):
                return path
            for _attempt in range(2):  # a corrupt download is fetched once more
                actual = self._download(shard, path)
                if actual is None:
                    return path
            raise ShardChangedError(
                f"{shard.url}: sha256 {actual[:16]}..., metadata.json says "
                f"{shard.sha256[:16]}... (the shard changed on the server after the run, or "
                "the download is corrupt twice over): refused, not served"
            )
        finally:
            os.close(lock)

    @staticmethod
    def _touch(path: str) -> bool:
        """Mark `path` recently used; False when it is not in the cache. The time is set on
        the descriptor of the file itself, never through a link."""
        try:
            fd = _open_own(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            os.utime(fd)
        finally:
            os.close(fd)
        return True

    def _download(self, shard: RemoteShard, path: str) -> str | None:
        """Download, check and publish; None when done, else the sha256 found."""
        partial = os.path.join(self.root, "partial", f"{shard.sha256}.{shard.size}.{os.getpid()}")
        with self._locked():
            fd = _open_own(partial, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until this process ends or finishes
            self._make_room(shard.size, keep=partial)
        try:
            with os.fdopen(os.dup(fd), "wb") as handle:
                _download_into(shard.url, shard.size, handle)
            if os.fstat(fd).st_size == shard.size:
                actual = _file_sha256(fd)
                if actual == shard.sha256:
                    os.rename(partial, path)
                    return None
            else:
                actual = f"of {os.fstat(fd).st_size} bytes, not {shard.size}"
            os.unlink(partial)
            return actual
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            raise
        finally:
            os.close(fd)

    # -- accounting ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = _open_own(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _entries(self, sub: str) -> list[tuple[float, str, int]]:
        """(last use, path, bytes) of each file this cache wrote under `sub` (its own name, a
        regular file, not a link); a partial counts its full size."""
        entries = []
        folder = os.path.join(self.root, sub)
        _require_real_folder(folder)
        for name in os.listdir(folder):
            own = _OWN_NAMES[sub].fullmatch(name)
            if own is None:
                continue
            path = os.path.join(folder, name)
            try:
                status = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(status.st_mode):
                continue
            size = int(own.group(2)) if sub == "partial" else status.st_size
            entries.append((status.st_mtime, path, size))
        return entries

    def _make_room(self, size: int, keep: str) -> None:
        """Under the lock: remove dead partials, then least recently used unpinned shards,
        until `size` more bytes fit within the limit."""
        used = 0
        for _, path, reserved in self._entries("partial"):
            if path == keep or _remove_if_unlocked(path):  # ours is the `size` to fit
                continue
            used += reserved
        shards = sorted(self._entries("objects"))
        used += sum(reserved for _, _, reserved in shards)
        for _, path, reserved in shards:
            if used + size <= self.limit_bytes:
                break
            if _remove_if_unlocked(path):
                used -= reserved


def _checked_limit(limit_bytes: object) -> int:
    """A positive whole number of bytes; anything else (inf, NaN, 1.5, a string) is refused
    in one line."""
    if isinstance(limit_bytes, float) and limit_bytes.is_integer():
        limit_bytes = int(limit_bytes)
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
        raise ValueError(
            f"cache_limit_bytes must be a positive whole number of bytes, got {limit_bytes!r}"
        )
    return limit_bytes


def _require_real_folder(path: str) -> None:
    """A folder of the cache must be a folder itself, not a link to one elsewhere."""
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise UnsafeCacheError(
            f"{path} is a symbolic link or not a folder: the shard cache only uses folders "
            "it made itself (remove it, or pass another cache_dir)"
        )


def _open_own(path: str, flags: int) -> int:
    """A descriptor of the cache's own regular file at `path`, never through a link."""
    try:
        fd = os.open(path, flags | _NO_FOLLOW, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeCacheError(
                f"{path} is a symbolic link: the shard cache never follows links it did not "
                "write (remove it)"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeCacheError(
            f"{path} is not a regular file: not the shard cache's own (remove it)"
        )
    return fd


def _remove_if_unlocked(path: str) -> bool:
    """Remove the cache's own file `path` unless some process holds a lock on it (a reader's
    pin, a live download); True when removed."""
    try:
        fd = _open_own(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            os.close(fd)
            return False
        raise
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    finally:
        os.close(fd)
    return True


# Prefetchers still running; stopped at exit, so that no download is cut off inside the
# HTTP client's C code while the interpreter tears down (that aborts the process).
_LIVE: weakref.WeakSet[Prefetcher] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for prefetcher in list(_LIVE):
        prefetcher.stop()


class Prefetcher:
    """Fetches the shards a reader will need, in the order it will need them.

    `steps[k]` lists the shards step k (a batch) reads. A daemon thread fetches them in
    that order, staying at most half the cache's limit of distinct shards ahead of the
    step last reported by `advance`, so prefetching never evicts what is about to be read.
    A failed fetch is left to the reader, which fetches on demand and raises it.
    """

    def __init__(
        self, cache: ShardCache, shards: Sequence[RemoteShard], steps: Sequence[Sequence[int]]
    ) -> None:
        self.cache = cache
        self.shards = shards
        self.steps = steps
        self._budget = cache.limit_bytes // 2
        self._step = 0
        self._stopped = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="segprep-prefetch", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def advance(self, step: int) -> None:
        with self._wake:
            if step > self._step:
                self._step = step
                self._wake.notify()

    def stop(self) -> None:
        """Stop after the download under way, and wait for it: a process forked later (the
        next pass's workers) must not inherit a download's lock."""
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join()

    def _run(self) -> None:
        ahead: collections.deque[tuple[int, int]] = collections.deque()  # (step, bytes)
        ahead_bytes = 0
        fetched_for: dict[int, int] = {}  # shard -> the step it was last fetched for
        next_step = 0
        while True:
            with self._wake:
                while True:
                    if self._stopped or next_step >= len(self.steps):
                        return
                    while ahead and ahead[0][0] < self._step:  # read by now
                        ahead_bytes -= ahead.popleft()[1]
                    next_step = max(next_step, self._step)
                    if ahead_bytes <= self._budget:
                        break
                    self._wake.wait()
            for shard in self.steps[next_step]:
                if self._stopped:
                    return
                if fetched_for.get(shard, -1) >= self._step:  # fetched, not yet read
                    continue
                try:
                    self.cache.fetch(self.shards[shard])
                except Exception:  # noqa: BLE001 - the reader fetches it and raises
                    return
                fetched_for[shard] = next_step
                ahead.append((next_step, self.shards[shard].size))
                ahead_bytes += self.shards[shard].size
            next_step += 1
