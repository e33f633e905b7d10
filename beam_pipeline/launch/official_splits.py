"""How entries find their split: --train_size/--validation_size fractions, the official
lists of --split_file, or the folders of --split_by_folder; checked before anything runs."""

from __future__ import annotations

import argparse
import os
import re

from beam_pipeline.errors import UsageError, usage_error
from beam_pipeline.launch.options import DEFAULT_TRAIN_SIZE, DEFAULT_VALIDATION_SIZE
from beam_pipeline.runtime import storage
from transforms.pairing import IMAGE_EXTENSIONS, Layout
from transforms.splits import FOLDER_SPLITS, FolderSplits, SplitFractions, SplitLists, folder_split

SPLIT_FILE_BYTES = 256 << 20  # ADE20K's and COCO's lists are a few MB
_SPLIT_NAME = re.compile(r"[a-z]+")


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
                f"--split_file {text!r}: expected SPLIT=PATH with a lower-case split name, "
                "e.g. train=ImageSets/Segmentation/train.txt"
            )
        if split in sources:
            raise UsageError(f"--split_file: split {split} is given twice")
        try:
            data = storage.read_bounded(path, SPLIT_FILE_BYTES)
            lines = data.decode("utf-8").splitlines()
        except FileNotFoundError:
            raise UsageError(f"--split_file {split}: no such file {path}") from None
        except UnicodeDecodeError:
            raise UsageError(f"--split_file {split}: {path} is not UTF-8 text") from None
        except (OSError, ValueError) as error:
            raise UsageError(f"--split_file {split}: cannot read {path}: {error}") from None
        sources[split] = path
        for line in lines:
            key = _key(line.strip(), layout)
            if not key:
                continue
            other = keys.setdefault(key, split)
            if other != split:
                raise UsageError(
                    f"--split_file: key {key} is in both {other} ({sources[other]}) and "
                    f"{split} ({path}): an entry belongs to one split"
                )
    return SplitLists(keys, sources)


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
