"""make_dataset's cache directories: one filler at a time, and a manifest that ties the files
to the dataset they were decoded from.

A directory's name carries a short digest of what the cache depends on (metadata.json's
bytes, split, part, image size, keys), so a rewritten dataset gets a fresh directory. The
name alone proves nothing: a directory copied or planted under it would be served as this
dataset's pixels. So the process that fills a cache seals it with `manifest.json`: the full
digest and the sha256 of every cache file. A filled cache is served only when its manifest
is there and every file still hashes to it; otherwise it is refused (CacheMismatchError),
not rebuilt: segprep deletes no file it cannot tell it wrote, and a manifest-less cache
cannot be told from a planted one. The user removes it, and the next run fills it afresh.

The manifest is written by a caller without a key: it catches a stale, copied or damaged
cache, not someone able to write both the cache files and their manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence

from transforms import files
from transforms.files import read_bounded_local
from transforms.format.naming import METADATA_FILE
from transforms.limits import FILE_LIMITS

# Part of every cache directory name: bump when what a cache directory holds changes.
CACHE_FORMAT = 2
# File name prefix of tf.data's cache files inside one cache directory.
CACHE_PREFIX = "examples"
MANIFEST = "manifest.json"
_MANIFEST_BYTES = 1 << 20


class CacheBusyError(RuntimeError):
    """Another live process is filling the same cache directory."""


class CacheMismatchError(ValueError):
    """A filled cache directory whose files are not shown to be this dataset's: not served."""


# Cache directories this process fills, with the descriptor of the flock it holds on each.
_CLAIMED: dict[str, int] = {}
# Directories this process has sealed (the seal runs at the end of every pass).
_SEALED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class CacheDirectory:
    path: str
    digest: str  # sha256 of everything the cached examples depend on

    @property
    def prefix(self) -> str:
        """The filename given to tf.data's cache."""
        return os.path.join(self.path, CACHE_PREFIX)

    @property
    def filling(self) -> bool:
        """This process fills (and then seals) the cache."""
        return self.path in _CLAIMED


def open_directory(
    root: str,
    data_dir: str,
    split: str,
    pipeline: tuple[int, int],
    size: Sequence[int] | None,
    with_keys: bool,
    version: int | None = None,
) -> CacheDirectory:
    """The cache directory of these settings under `root`: claimed for filling when empty,
    checked against its manifest when filled (CacheMismatchError, CacheBusyError)."""
    metadata = files.read_bounded(files.join(data_dir, METADATA_FILE), FILE_LIMITS.metadata_bytes)
    num_pipelines, pipeline_id = pipeline
    fields = [CACHE_FORMAT, split, num_pipelines, pipeline_id, size, with_keys]
    if version is not None:  # a pinned version reads other records than the latest
        fields.append(version)
    identity = json.dumps(fields, sort_keys=True)
    digest = hashlib.sha256(metadata + identity.encode()).hexdigest()
    shape = "x".join(map(str, size)) if size else "mixed"
    keys = "-keys" if with_keys else ""
    name = f"{split}-part{pipeline_id}of{num_pipelines}-{shape}{keys}-{digest[:16]}"
    directory = CacheDirectory(os.path.join(root, name), digest)
    os.makedirs(directory.path, exist_ok=True)
    if not os.path.exists(f"{directory.prefix}.index"):  # not filled yet: this process fills it
        _claim(directory.path)
    else:
        _check(directory)
    return directory


def seal(directory: CacheDirectory) -> None:
    """Write the manifest of a cache this process has just filled (tf.data has finished its
    files); later calls, at the end of later passes, do nothing."""
    if not directory.filling or directory.path in _SEALED:
        return
    hashes = {
        name: files.sha256(os.path.join(directory.path, name)) for name in _cache_files(directory)
    }
    manifest = {"cache_format": CACHE_FORMAT, "digest": directory.digest, "files": hashes}
    temporary = os.path.join(directory.path, f".{MANIFEST}.{os.getpid()}")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, sort_keys=True)
    os.replace(temporary, os.path.join(directory.path, MANIFEST))
    _SEALED.add(directory.path)


def _cache_files(directory: CacheDirectory) -> list[str]:
    """tf.data's finished cache files: the index and its data shards."""
    return sorted(
        name
        for name in os.listdir(directory.path)
        if name == f"{CACHE_PREFIX}.index" or name.startswith(f"{CACHE_PREFIX}.data-")
    )


def _check(directory: CacheDirectory) -> None:
    """Refuse a filled cache unless its manifest names this dataset and its files' hashes."""
    path = os.path.join(directory.path, MANIFEST)
    remedy = f"not served; remove {directory.path} and the next run fills it afresh"
    try:
        manifest = json.loads(read_bounded_local(path, _MANIFEST_BYTES))
    except FileNotFoundError:
        # Filled files with no manifest: still being sealed by a live filler, else refused.
        _claim(directory.path)  # CacheBusyError while a live process holds it
        raise CacheMismatchError(
            f"cache directory {directory.path} holds cache files but no {MANIFEST} tying them "
            f"to this dataset (planted, copied, or its filler died before sealing it): {remedy}"
        ) from None
    except (OSError, ValueError, RecursionError) as error:
        message = f"cache manifest {path} is unreadable ({error}): {remedy}"
        raise CacheMismatchError(message) from None
    if not isinstance(manifest, dict) or manifest.get("digest") != directory.digest:
        raise CacheMismatchError(
            f"cache directory {directory.path} was filled from another dataset or settings "
            f"(its manifest's digest differs): {remedy}"
        )
    listed = manifest.get("files")
    present = _cache_files(directory)
    if not isinstance(listed, dict) or sorted(listed) != present:
        raise CacheMismatchError(
            f"cache directory {directory.path} holds {present}, its manifest lists "
            f"{sorted(listed) if isinstance(listed, dict) else listed!r}: {remedy}"
        )
    for name in present:
        if files.sha256(os.path.join(directory.path, name)) != listed[name]:
            raise CacheMismatchError(
                f"cache file {name} in {directory.path} differs from its manifest: {remedy}"
            )


def _claim(directory: str) -> None:
    """Make this process the one filler of a cache directory, for the rest of its life.

    tf.data guards a filling cache with a lock file that a killed process leaves behind,
    after which every run fails. An flock dies with its process, so holding one tells a
    live filler (refuse) from a dead one (its leftovers are removed).
    """
    if directory in _CLAIMED:
        return
    import fcntl  # POSIX only, and only needed by cache directories

    handle = os.open(os.path.join(directory, "filler.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        raise CacheBusyError(
            f"cache directory {directory} is claimed by another running process that fills it; "
            "wait for its first epoch to end, or give this one another cache directory"
        ) from None
    _CLAIMED[directory] = handle
    for name in os.listdir(directory):
        if name.startswith(CACHE_PREFIX) and (".lockfile" in name or ".tempstate" in name):
            os.remove(os.path.join(directory, name))
