"""How entries find their split: --train_size/--validation_size fractions, the official
lists of --split_file, or the folders of --split_by_folder; checked before anything runs."""

from __future__ import annotations

import argparse
import collections
import os
import re
from collections.abc import Mapping

from beam_pipeline.errors import UsageError, usage_error
from beam_pipeline.launch.options import DEFAULT_TRAIN_SIZE, DEFAULT_VALIDATION_SIZE
from transforms import files
from transforms.pairing import IMAGE_EXTENSIONS, Layout
from transforms.splits import FOLDER_SPLITS, FolderSplits, SplitFractions, SplitLists, folder_split

SPLIT_FILE_BYTES = 256 << 20  # ADE20K's and COCO's lists are a few MB
SPLIT_LINE_BYTES = 4096  # a key is a relative path: PATH_MAX; a longer line lists no key
# A split name becomes part of shard and table file names: short, lower-case letters.
_SPLIT_NAME = re.compile(r"[a-z]{1,32}")
# A list's extra columns (VOC's 1 / -1 / 0, Pet's class ids): numbers, never a key's words.
_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")


def splitter(
    args: argparse.Namespace, layout: Layout
) -> SplitFractions | SplitLists | FolderSplits:
    official = [
        flag
        for flag, given in (
            ("--split_file", args.split_file),
            ("--split_by_folder", args.split_by_folder),
        )
        if given
    ]
    if len(official) > 1:
        raise UsageError("give --split_file or --split_by_folder, not both")
    if official:
        sized = [
            flag
            for flag, value in (
                ("--train_size", args.train_size),
                ("--validation_size", args.validation_size),
            )
            if value is not None
        ]
        if sized:
            raise UsageError(
                f"{' and '.join(sized)} cannot go with {official[0]}: the official splits "
                "decide where each entry goes"
            )
    if args.split_by_folder:
        return FolderSplits()
    if args.split_file:
        return read_split_files(args.split_file, layout)
    train = DEFAULT_TRAIN_SIZE if args.train_size is None else args.train_size
    validation = DEFAULT_VALIDATION_SIZE if args.validation_size is None else args.validation_size
    try:
        return SplitFractions(train, validation)
    except ValueError as error:
        raise usage_error(error) from None


def read_split_files(given: list[str], layout: Layout) -> SplitLists:
    """SPLIT=PATH lists, one key per line; a key in two lists is a usage error naming it."""
    keys: dict[str, str] = {}
    sources: dict[str, str] = {}
    for text in given:
        split, sep, path = text.partition("=")
        if not sep or not path or not _SPLIT_NAME.fullmatch(split):
            raise UsageError(
                f"--split_file {text[:80]!r}{'...' if len(text) > 80 else ''}: expected "
                "SPLIT=PATH with a split name of 1 to 32 lower-case letters, e.g. "
                "train=ImageSets/Segmentation/train.txt"
            )
        if split in sources:
            raise UsageError(f"--split_file: split {split} is given twice")
        sources[split] = path
        listed = 0
        for line in _list_lines(split, path):
            key = _key(line, layout)
            if not key:
                continue
            listed += 1
            other = keys.setdefault(key, split)
            if other != split:
                raise UsageError(
                    f"--split_file: key {key} is in both {other} ({sources[other]}) and "
                    f"{split} ({path}): an entry belongs to one split"
                )
        if not listed:
            raise UsageError(f"--split_file {split}: {path} lists no keys (an empty list)")
    return SplitLists(keys, sources)


def _list_lines(split: str, path: str) -> list[str]:
    """The key of each line of a list, a UTF-8 BOM dropped: its first whitespace-separated
    field when the others are numbers (VOC's and Oxford-IIIT Pet's columns:
    `Abyssinian_1 1 1 1`, `2008_000002 -1`), else the whole line without its outer
    whitespace, since a key may hold spaces (`my photo 01`: its first field `my` stored
    one entry of six and left five `not_in_split`). A line longer than any key is a usage
    error naming the file and line."""
    try:
        data = files.read_bounded(path, SPLIT_FILE_BYTES)
        text = data.decode("utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"--split_file {split}: no such file {path}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--split_file {split}: {path} is not UTF-8 text") from None
    except (OSError, ValueError) as error:
        raise UsageError(f"--split_file {split}: cannot read {path}: {error}") from None
    fields = []
    for number, line in enumerate(text.splitlines(), start=1):
        if len(line) > SPLIT_LINE_BYTES:
            raise UsageError(
                f"--split_file {split}: line {number} of {path} is {len(line):,} characters "
                f"long, more than a key can be ({SPLIT_LINE_BYTES:,}): not a list of keys"
            )
        words = line.split()
        if words:
            columns = all(_NUMBER.fullmatch(word) for word in words[1:])
            fields.append(words[0] if columns else line.strip())
    return fields


def refuse_unusable_lists(
    lists: SplitLists, looked_for: Mapping[str, str], missing: Mapping[str, int]
) -> None:
    """Before the job: a list none of whose keys (`looked_for`: key -> split, those the
    output does not hold yet) is on disk names the wrong files or folders; its every entry
    would be a reject. `missing`: split -> listed keys found neither as image nor mask."""
    wanted = collections.Counter(looked_for.values())
    for split, path in sorted(lists.sources.items()):
        if wanted[split] and missing.get(split, 0) == wanted[split]:
            example = next(key for key, name in looked_for.items() if name == split)
            raise UsageError(
                f"--split_file {split}: none of the {wanted[split]:,} keys of {path} names an "
                f"entry of the input folders (e.g. {example!r}): check the list and the folders"
            )


def refuse_certain_rejection(
    lists: SplitLists, missing: int, judged_at_most: int, max_fraction: float
) -> None:
    """Before the job: listed keys missing on disk are rejects whatever the job finds, and
    at most `judged_at_most` entries are judged. When they alone are more than
    --max_reject_fraction of those, the run could only be refused at its end, after holding
    a reject per missing key (10^6 of them would exhaust memory): refuse it now."""
    from beam_pipeline.errors import RejectLimitError
    from beam_pipeline.job.commit import percent

    if not missing or not judged_at_most or missing / judged_at_most <= max_fraction:
        return
    raise RejectLimitError(
        f"{missing:,} of at most {judged_at_most:,} entries rejected before the job "
        f"({percent(missing / judged_at_most, max_fraction)}), more than "
        f"--max_reject_fraction {max_fraction:g}: nothing was published; {missing:,} keys "
        f"listed by --split_file ({', '.join(sorted(lists.sources.values()))}) have no image "
        "or mask in the input folders"
    )


def _key(name: str, layout: Layout) -> str:
    """The key a list line names: with or without the image's extension or suffix."""
    lowered = name.lower()
    for suffix in (
        *IMAGE_EXTENSIONS,
        *((layout.image_suffix.lower(),) if layout.image_suffix else ()),
    ):
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def refuse_unknown_folders(layout: Layout, left_out: int, flag: str) -> None:
    """--split_by_folder on a folder whose first folders name no split: most often one level
    too deep or too high (leftImg8bit/train instead of leftImg8bit); name what is there."""
    try:
        found = sorted(
            entry.name
            for entry in os.scandir(layout.image_dir)
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".")
        )
    except OSError:
        found = []
    unknown = [name for name in found if folder_split(name) is None]
    shown = ", ".join(unknown[:8]) + (", ..." if len(unknown) > 8 else "")
    raise UsageError(
        f"--split_by_folder: {left_out:,} entries of {flag} {layout.image_dir} lie in no "
        f"split folder ({'|'.join(FOLDER_SPLITS)}); its folders are: "
        f"{shown or 'none (the files lie at its top level)'}"
    )
