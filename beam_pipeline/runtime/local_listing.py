"""List local input folders once, before the job: every file becomes part of an entry or a
reject, and a folder that cannot be read stops the run before anything is written.

Beam's MatchFiles would skip what it cannot read and cannot tell a FIFO from a file; this
walk sees each directory entry without following links into folders, so nothing is silently
dropped and nothing hangs.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterable

from beam_pipeline.errors import UsageError
from transforms.pairing import (
    CocoEntry,
    Entries,
    Layout,
    Role,
    SourceFile,
    file_reject,
    image_key,
    mask_key,
    pair_files,
    unrecognized,
)
from transforms.rejects import Reason, Reject


@dataclasses.dataclass(frozen=True)
class LocalListing:
    """What the walk found: the paired entries, and the hidden files it left out."""

    entries: Entries
    hidden: int  # .DS_Store, ._x.jpg, .git/...: never data, counted for the summary
    files: int  # every non-hidden file seen, in all folders


def list_local(
    layout: Layout,
    image_flag: str = "--image_dir",
    mask_flag: str = "--mask_dir",
    *,
    coco: Iterable[tuple[str, CocoEntry] | Reject] = (),
) -> LocalListing:
    """Walk the folder(s) of `layout` and pair what they hold; with a COCO file, its keyed
    image records (launch/masks.py) are the masks."""
    keyed: list[tuple[Role, str, SourceFile | CocoEntry]] = []
    rejects: list[Reject] = []
    for outcome in coco:
        if isinstance(outcome, Reject):
            rejects.append(outcome)
        else:
            keyed.append((Role.MASK, *outcome))
    hidden = files = 0
    for root, role in layout.roots():
        flag = mask_flag if role is Role.MASK else image_flag
        if not os.path.isdir(root):
            raise UsageError(f"{flag} {root} is not a folder: check the path")
        for path, relative, source in _walk(root, flag):
            if source is None:
                hidden += 1
                continue
            if layout.is_input_file(path):
                continue
            files += 1
            if not _is_utf8(relative):
                shown = os.fsencode(path).decode("utf-8", "backslashreplace")
                rejects.append(
                    file_reject(shown, role, Reason.BAD_FILE_NAME, "file name is not valid UTF-8")
                )
                continue
            classified = layout.classify(relative, role)
            if classified is None:
                rejects.append(unrecognized(path, role))
                continue
            keyed.append((*classified, source))
    return LocalListing(pair_files(keyed, rejects, layout.annotations), hidden, files)


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
    tree) and is listed like a file, which pairing then rejects as not a regular file.
    """
    pending = [""]
    while pending:
        prefix = pending.pop()
        folder = os.path.join(root, prefix)
        try:
            with os.scandir(folder) as scan:
                found = sorted(scan, key=lambda item: item.name)
        except PermissionError:
            raise UsageError(
                f"{flag}: cannot read the folder {folder} (permission denied): fix its "
                "permissions or move it out of the input"
            ) from None
        for item in found:
            relative = prefix + item.name
            if item.name.startswith("."):
                if not item.is_dir(follow_symlinks=False):
                    yield item.path, relative, None
                continue
            if item.is_dir(follow_symlinks=False):
                pending.append(relative + "/")
                continue
            yield item.path, relative, _source(item)


def _source(item: os.DirEntry) -> SourceFile:
    try:
        info = item.stat()  # follows a link to its target: a link to /dev/zero is no file
    except OSError:  # a dangling link, or the file vanished
        return SourceFile(item.path, 0, regular=False)
    if stat.S_ISREG(info.st_mode):
        return SourceFile(item.path, info.st_size)
    return SourceFile(item.path, 0, regular=False)
