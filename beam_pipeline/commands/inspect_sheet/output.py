"""Where a sheet comes from and goes: the dataset's metadata (checked), and the sheet's own
file, outside the dataset (a published output), under a name no earlier sheet has."""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
from collections.abc import Iterator

from beam_pipeline.errors import UsageError
from transforms import files
from transforms.format.dataset_info import IncompleteOutputError, MetadataError


def require_dir(directory: str) -> None:
    if not files.isdir(directory):
        raise UsageError(f"{directory} is not a directory: pass a `segprep prepare` output")


def load_metadata(directory: str) -> dict:
    """metadata.json as checked by DatasetInfo (every file name one segprep writes, inside
    the output: an edited `../other/...` shard is refused, never read)."""
    from transforms.format.dataset_info import DatasetInfo, read_metadata_json

    require_dir(directory)
    try:
        return DatasetInfo.from_json(read_metadata_json(directory)).to_json()
    except IncompleteOutputError as error:
        raise UsageError(str(error)) from None
    except MetadataError as error:
        raise UsageError(f"{error}: run `segprep verify {directory}`") from None


def default_sheet_path(directory: str, out: str | None, split: str, rejects: bool) -> str:
    """`--out` itself, or `<dataset>_inspect_<split|rejects>.png` under `--out` when it is a
    folder, else beside the dataset folder (in the current folder for a gs:// dataset: a
    sheet is for looking at, here); a long dataset name is cut to fit (fitted_name)."""
    if out is not None and not files.isdir(out):
        return out
    remote = "://" in directory
    dataset = directory.rstrip("/") if remote else os.path.realpath(directory)
    folder = out if out is not None else os.getcwd() if remote else os.path.dirname(dataset)
    suffix = f"_inspect_{'rejects' if rejects else split}.png"
    name = fitted_name(folder, "", dataset.rsplit("/", 1)[-1], suffix)
    if out is not None:
        return f"{out.rstrip('/')}/{name}"
    return os.path.join(folder, name)


# numbered() adds "_2", "_3" ... to a default name whose place is taken: room for 7 digits
_NUMBER_ROOM = len("_9999999")


def fitted_name(folder: str, prefix: str, name: str, suffix: str) -> str:
    """`prefix + name + suffix`: a default file name made of a folder's `name`, for a file
    in `folder`. When that (with numbered()'s _2, _3 ...) is longer than a name the file
    system takes (255 bytes mostly: a legal folder name of 250 leaves no room for the
    suffix, and the write would fail "File name too long"), `name` is cut and 8 hex digits
    of its hash added, so two long names cut alike still name two files."""
    limit = files.name_max(folder) - _NUMBER_ROOM

    def size(text: str) -> int:
        return len(os.fsencode(f"{prefix}{text}{suffix}"))

    if size(name) <= limit:
        return f"{prefix}{name}{suffix}"
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:8]
    kept = name
    while kept and size(f"{kept}-{digest}") > limit:
        kept = kept[:-1]
    return f"{prefix}{kept}-{digest}{suffix}"


def check_out(out: str, directory: str) -> str:
    """Absolute output path; refused inside the dataset directory or in a missing folder."""
    if "://" in out:
        dataset = directory.rstrip("/") + "/"
        if out.startswith(dataset):
            raise UsageError(f"--out {out} is inside the dataset directory: write it elsewhere")
        return out
    out = os.path.abspath(out)
    if "://" not in directory:
        dataset = os.path.realpath(directory)
        if os.path.commonpath([os.path.realpath(out), dataset]) == dataset:
            raise UsageError(
                f"--out {out} is inside the dataset directory {directory}, a published output: "
                "write the sheet elsewhere"
            )
    if not os.path.isdir(os.path.dirname(out)):
        raise UsageError(f"--out {out}: folder {os.path.dirname(out)} does not exist")
    try:
        mode = os.stat(out).st_mode
    except OSError:  # not there (or a dangling link): a new name
        return out
    if not stat.S_ISREG(mode):
        # `--out /dev/null` (or a FIFO) took the sheet to `/dev/null_2`, a new file among
        # the devices: refused as report refuses its page.
        raise UsageError(
            f"--out {out} is not a regular file (a device, FIFO or socket): segprep writes "
            "the sheet only to a new file, or beside a regular one under a new name"
        )
    return out


def numbered(path: str) -> Iterator[str]:
    """`path`, then `path` with _2, _3 ... before its suffix: the names a new file may take."""
    yield path
    stem, suffix = os.path.splitext(path)
    for number in itertools.count(2):
        yield f"{stem}_{number}{suffix}"


def write_new(path: str, data: bytes) -> str:
    """Write `data` to `path`, or to `path` with _2, _3 ... when that name is taken.

    Each name is claimed whole and exclusively (transforms.files.write_new: a hard link
    locally, a no-generation precondition in a bucket), so two runs at once never share one.
    """
    return next(name for name in numbered(path) if files.write_new(name, data))
