"""The run plan's part for duplicates: --duplicates, --duplicate_distance, --leakage_check.

Another output can be checked against only if it stored its image hashes (listed per split
in its metadata.json); that is found out here, before anything runs.
"""

from __future__ import annotations

import argparse

from beam_pipeline.errors import UsageError
from beam_pipeline.job.settings import DuplicateSettings, LeakageCheck
from beam_pipeline.runtime import storage
from transforms.format import dataset_info
from transforms.splits import FolderSplits, SplitFractions, SplitLists


def plan_duplicates(
    args: argparse.Namespace,
    fractions: SplitFractions | SplitLists | FolderSplits,
    staging_dir: str,
    pool: str | None,
    mask_digests: bool,
) -> DuplicateSettings | None:
    """The job's duplicate settings; None for --duplicates off (no hashing at all).

    An append compares its new images with the hashes the output stores, as well as with
    each other (docs/duplicates.md); the output's duplicates.jsonl and hash tables stay as
    they were.
    """
    output = storage.normalize_dir(args.output_dir)
    for folder in args.leakage_check or ():
        if storage.normalize_dir(folder) == output:
            raise UsageError(
                f"--leakage_check {folder} is the --output_dir: check against another output "
                "(your test set), not the one this run writes"
            )
    checks = tuple(_leakage_check(folder) for folder in args.leakage_check or ())
    if args.duplicates == "off":
        if checks:
            raise UsageError(
                "--leakage_check compares image hashes, which --duplicates off does not "
                "compute: use --duplicates group (the default) or drop"
            )
        return None
    existing = stored_hash_tables(output) if getattr(args, "append", False) else ()
    return DuplicateSettings(
        mode=args.duplicates,
        distance=args.duplicate_distance,
        fractions=fractions,
        staging_dir=staging_dir,
        pool=pool,
        mask_digests=mask_digests,
        leakage=checks,
        existing=existing,
    )


def stored_hash_tables(output: str) -> tuple[tuple[str, str], ...]:
    """--append: (split, hashes file) for each split of the output that stored its image
    hashes (none when it was prepared with --duplicates off: nothing to compare with)."""
    try:
        info = dataset_info.read_metadata_json(output)
    except (dataset_info.IncompleteOutputError, dataset_info.MetadataError) as error:
        raise UsageError(f"--append {output}: {error}") from None
    splits = info.get("splits") if isinstance(info, dict) else None
    tables = []
    for name, split in sorted((splits or {}).items()):
        ref = split.get("hashes") if isinstance(split, dict) else None
        if isinstance(ref, dict) and isinstance(ref.get("file"), str):
            tables.append((name, storage.join(output, ref["file"])))
    return tuple(tables)


def _leakage_check(folder: str) -> LeakageCheck:
    directory = storage.normalize_dir(folder)
    try:
        info = dataset_info.read_metadata_json(directory)
    except (dataset_info.IncompleteOutputError, dataset_info.MetadataError) as error:
        raise UsageError(f"--leakage_check {folder}: {error}") from None
    splits = info.get("splits") if isinstance(info, dict) else None
    files = []
    for name, split in sorted((splits or {}).items()):
        ref = split.get("hashes") if isinstance(split, dict) else None
        if not isinstance(ref, dict) or not isinstance(ref.get("file"), str):
            raise UsageError(
                f"--leakage_check {folder}: split {name!r} has no image hashes (prepared "
                "with --duplicates off, or by a segprep before image hashes): prepare it "
                "again with --duplicates group"
            )
        files.append(storage.join(directory, ref["file"]))
    if not files:
        raise UsageError(f"--leakage_check {folder}: its metadata.json lists no splits")
    return LeakageCheck(directory, tuple(files))
