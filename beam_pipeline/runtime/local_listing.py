"""List local input folders once, before the job: every file becomes part of an entry or a
reject, and a folder that cannot be read stops the run before anything is written.

Beam's MatchFiles would skip what it cannot read and cannot tell a FIFO from a file; this
walk sees each directory entry without following links into folders, so nothing is silently
dropped and nothing hangs.

Memory stays flat whatever the count: the walk's (key, role, file) rows go through an
external sort (transforms/spill.py) in a temporary folder, one streaming pass pairs adjacent
keys, and the pairs and rejects are written there as record files that the job reads in
parallel (job/listing.py). Only counts stay in memory.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import pickle
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping

from beam_pipeline.errors import shortened
from beam_pipeline.runtime.refusal import Refusal
from transforms import spill
from transforms.limits import STAGED_RECORD_BYTES
from transforms.pairing import (
    AnnotatedEntry,
    Layout,
    Pair,
    Role,
    SideFiles,
    SourceFile,
    StagedEntries,
    file_reject,
    image_key,
    keyed_reject,
    keyed_row,
    mask_key,
    may_share_key,
    pair_sorted,
    unrecognized,
)
from transforms.rejects import Reason, Reject
from transforms.spill import ExternalSort, RecordFiles, read_records

PAIRS_PER_FILE = 10_000  # the job reads one record file per work item


@dataclasses.dataclass(frozen=True)
class LocalListing:
    """What the walk found: counts, and the staged pairs and rejects (in `folder`, removed
    when this object is collected or the process ends)."""

    staged: StagedEntries
    paired: int
    rejected: Mapping[str, int]  # reason -> count
    left_out: int  # paired keys outside every split
    hidden: int  # .DS_Store, ._x.jpg, .git/...: never data, counted for the summary
    files: int  # every non-hidden file seen, in all folders
    first_mat_mask: str | None  # a paired .mat mask, for the --mask_key check
    folder: tempfile.TemporaryDirectory = dataclasses.field(compare=False, repr=False)
    ignored: int = 0  # files matching --ignore_files: counted, never read
    unlabeled: int = 0  # images without a mask under --images_without_mask skip
    side_files: int = 0  # files of the mask folder that --mask_suffix says are no masks
    side_kinds: tuple[tuple[str, int], ...] = ()  # (ending, count), most common first

    @property
    def rejects(self) -> int:
        """Rejects and unlabeled entries: everything staged beside the pairs."""
        return sum(self.rejected.values()) + self.unlabeled

    @property
    def discovered(self) -> int:
        return self.paired + self.rejects


def read_staged(path: str, limit: int):
    """The pickled pairs or rejects of one staged record file (written by this launcher)."""
    with open(path, "rb") as handle:
        for payload in read_records(handle, path, os.fstat(handle.fileno()).st_size, limit):
            yield pickle.loads(payload)


def list_local(
    layout: Layout,
    image_flag: str = "--image_dir",
    mask_flag: str = "--mask_dir",
    *,
    annotated: Iterable[tuple[str, AnnotatedEntry] | Reject] = (),
    left_out: Callable[[str], bool] | None = None,
    listed: Callable[[str], bool] | None = None,
    listed_keys: Mapping[str, str] | None = None,
    check_missing: Callable[[Mapping[str, int], int], None] | None = None,
) -> LocalListing:
    """Walk the folder(s) of `layout` and pair what they hold; with an annotation export, its keyed
    image records (launch/masks.py) are the masks. `left_out(key)`: a key no split takes.

    `listed(key)`: a key an official split list names (--split_file); `listed_keys` all of
    them, key -> split. Such a key missing on disk is a reject, and an image of it without a mask is
    `missing_mask` even under --unlabeled_images skip: the list says it has one.
    `check_missing(split -> missing listed keys, entries judged at most)` may refuse the run
    before a reject is made for each of them.
    """
    folder = spill.temporary_folder("listing")
    sort = ExternalSort(folder.name, "keyed")
    rejects = RecordFiles(os.path.join(folder.name, "rejects"), PAIRS_PER_FILE)
    rejected: collections.Counter[str] = collections.Counter()
    sequence = itertools.count()

    def reject(outcome: Reject) -> None:
        rejects.write(pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL))
        rejected[outcome.reason.value] += 1

    def file_rejected(outcome: Reject) -> None:
        if may_share_key(outcome, layout.annotations):  # met by the others of its key
            sort.add(*keyed_reject(next(sequence), outcome))
        else:
            reject(outcome)

    for outcome in annotated:
        if isinstance(outcome, Reject):
            reject(outcome)
        else:
            key, entry = outcome
            sort.add(*keyed_row(key, Role.MASK, next(sequence), entry))
    hidden = files = ignored = unlabeled = 0
    side = SideFiles(layout.mask_suffix)
    for root, role in layout.roots():
        flag = mask_flag if role is Role.MASK else image_flag
        if not os.path.isdir(root):
            raise Refusal(f"{flag} {root} is not a folder: check the path")
        for path, relative, source in _walk(root, flag):
            if source is None:
                hidden += 1
                continue
            if layout.is_input_file(path):
                continue
            files += 1
            if layout.is_ignored(relative):
                ignored += 1
                continue
            if layout.is_side_file(relative, role):
                side.add(relative)
                continue
            if not _is_utf8(relative):
                shown = os.fsencode(path).decode("utf-8", "backslashreplace")
                file_rejected(
                    file_reject(shown, role, Reason.BAD_FILE_NAME, "file name is not valid UTF-8")
                )
                continue
            classified = layout.classify(relative, role)
            if classified is None:
                file_rejected(unrecognized(path, role, layout))
                continue
            found_role, key = classified
            sort.add(*keyed_row(key, found_role, next(sequence), source))
    pairs = RecordFiles(os.path.join(folder.name, "pairs"), PAIRS_PER_FILE)
    outside = 0
    first_mat = None
    listed_keys = listed_keys or {}
    wanted = set(listed_keys)
    for outcome in pair_sorted(sort.sorted(), layout.annotations, layout.skip_unlabeled):
        wanted.discard(outcome.key)
        if isinstance(outcome, Reject) and outcome.reason is Reason.UNLABELED:
            if listed is not None and listed(outcome.key):
                outcome = Reject(
                    outcome.key,
                    Reason.MISSING_MASK,
                    "listed by --split_file, but the image has no mask",
                    outcome.image,
                )
            else:
                rejects.write(pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL))
                unlabeled += 1
                continue
        if isinstance(outcome, Pair):
            pairs.write(pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL))
            outside += bool(left_out and left_out(outcome.key))
            if first_mat is None and outcome.mask.path.endswith(".mat"):
                first_mat = outcome.mask.path
        else:
            reject(outcome)
    missing_listed = collections.Counter(listed_keys[key] for key in wanted)
    if check_missing is not None:
        check_missing(dict(missing_listed), pairs.records + sum(rejected.values()) + len(wanted))
    for key in sorted(wanted):
        reject(Reject(key, Reason.MISSING_IMAGE, "listed by --split_file: no image or mask"))
    staged = StagedEntries(tuple(pairs.close()), tuple(rejects.close()), STAGED_RECORD_BYTES)
    for path in os.listdir(folder.name):  # the sort's runs: read, no longer needed
        if path.endswith(".run"):
            os.remove(os.path.join(folder.name, path))
    return LocalListing(
        staged,
        pairs.records,
        dict(rejected),
        outside,
        hidden,
        files,
        first_mat,
        folder,
        ignored=ignored,
        unlabeled=unlabeled,
        side_files=side.count,
        side_kinds=side.described(),
    )


def keys_in(folder: str, role: Role, flag: str) -> set[str]:
    """The keys a folder's files would have as images or as masks (other names left out)."""
    key_of = image_key if role is Role.IMAGE else mask_key
    return {
        key
        for _, relative, source in _walk(folder, flag)
        if source is not None and (key := key_of(relative)) is not None
    }


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes arrive as surrogate escapes
        return False
    return True


def _walk(root: str, flag: str):
    """(path, relative path, SourceFile or None when hidden) for every entry under root.

    Real sub-folders are descended; a link to a folder is not (no cycles, nothing outside the
    tree) and is listed like a file, which pairing then rejects as not a regular file. Names
    stream in the folder's own order: the external sort, not the walk, orders the entries.
    """
    limit = _path_limit(root)
    pending = [""]
    while pending:
        prefix = pending.pop()
        folder = os.path.join(root, prefix)
        try:
            scan = os.scandir(folder)
        except PermissionError:
            raise Refusal(
                f"{flag}: cannot read the folder {shortened(folder)} (permission denied): fix "
                "its permissions or move it out of the input"
            ) from None
        with scan:
            for item in scan:
                relative = prefix + item.name
                if item.name.startswith("."):
                    if not item.is_dir(follow_symlinks=False):
                        yield item.path, relative, None
                    continue
                # Nothing opens a path this long (ENAMETOOLONG), the job's readers included,
                # so it can be neither read nor named by a reject that tools open.
                if len(item.path) * 4 >= limit and len(os.fsencode(item.path)) >= limit:
                    raise _too_long(flag, item, limit)
                if item.is_dir(follow_symlinks=False):
                    pending.append(relative + "/")
                    continue
                yield item.path, relative, _source(item)


def _too_long(flag: str, item: os.DirEntry, limit: int) -> Refusal:
    kind = "folder" if item.is_dir(follow_symlinks=False) else "file"
    return Refusal(
        f"{flag}: cannot read the {kind} {shortened(item.path)}: its path is "
        f"{len(os.fsencode(item.path)):,} bytes, more than the system allows ({limit - 1:,}): "
        "move it to a shallower folder or out of the input"
    )


def _path_limit(root: str) -> int:
    """PATH_MAX of the file system under root: the bytes of a path with its final NUL."""
    try:
        return os.pathconf(root, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


def _source(item: os.DirEntry) -> SourceFile:
    try:
        info = item.stat()  # follows a link to its target: a link to /dev/zero is no file
    except OSError:  # a dangling link, or the file vanished
        return SourceFile(item.path, 0, regular=False)
    if stat.S_ISREG(info.st_mode):
        return SourceFile(item.path, info.st_size)
    return SourceFile(item.path, 0, regular=False)
