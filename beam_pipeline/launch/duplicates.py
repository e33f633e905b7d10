"""The run plan's part for duplicates: --duplicates, --duplicate_distance, --leakage_check.

Another output can be checked against only if it stored its image hashes (listed per split
in its metadata.json); that is found out here, before anything runs.
"""

from __future__ import annotations

import argparse
import os

from beam_pipeline.errors import UsageError
from beam_pipeline.job.settings import DuplicateSettings, LeakageCheck
from beam_pipeline.launch import credentials
from transforms import files
from transforms.format import dataset_info, naming, side_tables
from transforms.splits import FolderSplits, SplitFractions, SplitLists

# Hashes a partition of the whole-hash join holds at most, and the fewest partitions: a local
# run of thousands of images sends a few hundred lists, and a partition stays a few MB.
_PER_PART = 2_000
_MIN_PARTS = 512
_ROW_BYTES = 400  # a stored hash row's bytes, about (it holds a 256-character signature)
_UNLISTED = 32_000_000  # gs:// inputs, listed by the job: partitions for this many images


def _same_folder(folder: str, output: str) -> bool:
    """The same place, a local one through any link (a link to the output is the output)."""
    if files.normalize_dir(folder) == output:
        return True
    if files.is_local(folder) and files.is_local(output):
        return os.path.realpath(folder) == os.path.realpath(output)
    return False


def plan_duplicates(
    args: argparse.Namespace,
    fractions: SplitFractions | SplitLists | FolderSplits,
    staging_dir: str,
    pool: str | None,
    entries: int | None = None,
) -> DuplicateSettings | None:
    """The job's duplicate settings; None for --duplicates off (no hashing at all).

    An append compares its new images with the hashes the output stores, as well as with
    each other (docs/duplicates.md); the output's duplicates.jsonl and hash tables stay as
    they were, and this run's hashes go to tables of its own version.
    """
    output = files.normalize_dir(args.output_dir)
    for folder in args.leakage_check or ():
        if _same_folder(folder, output):
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
    stored = sum(ref.bytes for check in checks for ref in check.hash_tables)
    stored += sum(ref.bytes for _, ref in existing)
    hashes = (_UNLISTED if entries is None else entries) + stored // _ROW_BYTES
    return DuplicateSettings(
        mode=args.duplicates,
        distance=args.duplicate_distance,
        fractions=fractions,
        staging_dir=staging_dir,
        pool=pool,
        leakage=checks,
        existing=existing,
        existing_dir=output if existing else "",
        join_parts=max(_MIN_PARTS, hashes // _PER_PART),
    )


def stored_hash_tables(output: str) -> tuple[tuple[str, dataset_info.FileRef], ...]:
    """--append: (split, hashes table) for every hash table of the output (each version's
    that searched), each checked as --leakage_check's are (none when every version was
    prepared with --duplicates off: nothing to compare with)."""
    checked = _checked_hash_tables(
        output, f"--append {output}", "the output's hash table is not the one it lists"
    )
    return tuple((name, ref) for name, refs, _ in checked for ref in refs)


def _leakage_check(folder: str) -> LeakageCheck:
    """The other output's hash tables, each checked before the job starts."""
    directory = files.normalize_dir(folder)
    if not files.is_local(directory):
        credentials.check_credentials(directory)
    checked = _checked_hash_tables(
        directory,
        f"--leakage_check {folder}",
        "the test set's hash table is not the one it lists, so leaks would go unseen",
    )
    for name, refs, complete in checked:
        if not complete:
            some = ": some of its images have" if refs else " has"
            raise UsageError(
                f"--leakage_check {folder}: split {name!r}{some} no image hashes (prepared "
                "with --duplicates off, or by a segprep before image hashes): prepare it "
                "again with --duplicates group"
            )
    if not checked:
        raise UsageError(f"--leakage_check {folder}: its metadata.json lists no splits")
    return LeakageCheck(directory, tuple(ref for _, refs, _ in checked for ref in refs))


def _checked_hash_tables(
    output: str, flag: str, damaged: str
) -> list[tuple[str, tuple[dataset_info.FileRef, ...], bool]]:
    """(split, its hash tables in version order, whether every version that added records
    to it stored their hashes) of every split of `output`, each table checked
    (side_tables.open_table: name, link, kind, size and sha256 as metadata.json lists them);
    a one-line UsageError starting with `flag` when the output or a table is not right."""
    try:
        info = dataset_info.load(output)
    except (dataset_info.IncompleteOutputError, dataset_info.MetadataError) as error:
        raise UsageError(f"{flag}: {error}") from None
    tables = []
    for name, split in sorted(info.splits.items()):
        try:
            refs = side_tables.hash_table_refs(split)
            side_tables.check_hash_table_sizes(split, refs)
            for ref in refs:
                side_tables.open_table(output, ref).close()
        except (side_tables.SideTableError, OSError) as error:
            raise UsageError(f"{flag}: {error}: {damaged}; run `segprep verify {output}`") from None
        tables.append((name, refs, _all_hashed(info, name, refs)))
    return tables


def _all_hashed(
    info: dataset_info.DatasetInfo, split: str, refs: tuple[dataset_info.FileRef, ...]
) -> bool:
    """Every version that added records to `split` stored a hash table for it (a version
    prepared or appended with --duplicates off did not: some images have no hashes)."""
    hashed = {naming.hashes_version(split, ref.file) for ref in refs}
    versions = info.dataset_versions
    if not versions:  # an output from before versions: its one table, or none
        return bool(refs)
    return all(v.version in hashed for v in versions if v.added.get(split))
