"""`prepare --append`: check that a run may add a version to the output, and plan it.

An append extends a finished segprep output that keeps versions and content digests, and
only with the same record spec (transforms/record_spec.py: everything that shapes a record)
and the same way of finding splits (method and fractions): records of one dataset must read
the same way. Any difference is a usage error (exit 2) naming each one.
With --split_file or --split_by_folder the new keys go where this run's lists or folders say.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from beam_pipeline.errors import UsageError
from beam_pipeline.job.settings import AppendSettings
from beam_pipeline.runtime import output_protocol
from transforms import files, json_shape
from transforms.format import dataset_info, side_tables
from transforms.format.dataset_info import DatasetInfo, FileRef, MetadataError
from transforms.format.naming import (
    MANIFEST_FILE,
    METADATA_FILE,
    REJECTS_FILE,
    SPLITS,
    UNLABELED_FILE,
)
from transforms.limits import FILE_LIMITS
from transforms.record_spec import RecordSpec, differences_from_stored, field_differences
from transforms.splits import FolderSplits, SplitFractions, SplitLists, folder_split


def plan_append(
    args: argparse.Namespace,
    output_dir: str,
    output: output_protocol.OutputState | None,
    spec: RecordSpec,
    fractions: Any,
    image_dir: str | None = None,
) -> AppendSettings:
    if args.overwrite:
        raise UsageError("--append adds a version to an output; --overwrite replaces it: pick one")
    if output is not None and not output.finished:
        raise UsageError(
            f"--append needs a finished segprep output in --output_dir {output_dir}: there is "
            "none (run `segprep prepare` without --append first)"
        )
    _require_readable_manifest(output_dir)
    path = files.join(output_dir, METADATA_FILE)
    try:
        data = dataset_info.read_metadata_bytes(output_dir)
        raw = dataset_info.parse_json(data, METADATA_FILE)
        info = DatasetInfo.from_json(raw)
    except (OSError, ValueError, MetadataError) as error:
        raise UsageError(f"--append: cannot read {path}: {error}") from None
    tables: dict[str, list[tuple[int, FileRef]]] = {split: [] for split in SPLITS}
    for number, version in enumerate(info.dataset_versions, start=1):
        for split, ref in version.digest_tables.items():
            tables.setdefault(split, []).append((number, ref))
    if not info.dataset_versions or any(
        len(tables[split]) != len(info.dataset_versions) for split in SPLITS
    ):
        raise UsageError(
            f"--append: {output_dir} was prepared by a segprep that kept no versions and "
            "content digests: prepare it once more (without --append) to append to it"
        )
    try:
        dataset_info.check_latest_version(info)
    except MetadataError as error:
        raise _damaged(f"{path}: {error}", output_dir) from None
    differences = (
        differences_from_stored(raw, spec)
        + split_differences(raw, fractions)
        + distance_differences(raw, args)
    )
    if differences:
        raise UsageError(
            f"--append: the parameters that shape records differ from {output_dir}'s: "
            + "; ".join(differences)
        )
    _refuse_new_splits(info, fractions, image_dir)
    check_shards(output_dir, info)
    for refs in tables.values():
        for _, ref in refs:
            check_digest_table(output_dir, ref)
    for name in (REJECTS_FILE, UNLABELED_FILE):
        _require_storable_lines(output_dir, name)
    return AppendSettings(
        version=info.latest_version + 1,
        previous_sha256=hashlib.sha256(data).hexdigest(),
        digest_tables={split: tuple(names) for split, names in tables.items()},
    )


def _refuse_new_splits(info: DatasetInfo, fractions: Any, image_dir: str | None) -> None:
    """An append adds records to the splits the output has: a split this run's lists (or
    split folders) name and no version holds (a test list or folder added later) failed the
    commit after the whole job (its key table is not version 1's). Refused before it."""
    if isinstance(fractions, SplitLists):
        named = {
            split: f"--split_file {split}={fractions.sources[split]}" for split in fractions.sources
        }
    elif isinstance(fractions, FolderSplits) and image_dir:
        named = {}
        try:
            names = files.listdir(image_dir)
        except OSError:
            names = []
        for name in names:
            split = folder_split(name)
            local = files.is_local(image_dir)
            if split and (not local or files.isdir(files.join(image_dir, name))):
                named.setdefault(split, f"--split_by_folder folder {name!r}")
    else:
        return
    new = [split for split in named if split not in info.splits]
    if new:
        split = sorted(new)[0]
        raise UsageError(
            f"--append: {named[split]} names split {split!r}, which the output does not have "
            f"(it has {', '.join(info.splits)}): an append adds records to the output's "
            "splits only; prepare the whole dataset once more (without --append) to add a split"
        )


def check_shards(output_dir: str, info: DatasetInfo) -> None:
    """Every shard metadata.json lists (the splits list every version's) is there at its
    listed size, else a usage error naming the first that is not: the append would publish
    a version counting, and skipping as stored, the records of a shard that is gone. One
    stat each; a shard of the right size with other bytes is left to `segprep verify`, as
    finding it means reading every shard."""
    for split in info.splits.values():
        for shard in split.shards:
            try:
                size = files.stat(files.join(output_dir, shard.file)).size
            except FileNotFoundError:
                problem = f"{shard.file}: missing (listed in metadata.json)"
            except OSError as error:
                problem = f"{shard.file}: cannot be read ({error.strerror or error})"
            else:
                if size == shard.bytes:
                    continue
                problem = f"{shard.file}: {size:,} bytes, metadata.json lists {shard.bytes:,}"
            raise _damaged(problem, output_dir)


def _damaged(problem: object, output_dir: str) -> UsageError:
    """The refusal of an output whose files disagree with its metadata.json."""
    return UsageError(
        f"--append: {problem}: the output is damaged, nothing was appended; run "
        f"`segprep verify {output_dir}`"
    )


def check_digest_table(output_dir: str, ref: FileRef) -> None:
    """The digest table is the one metadata.json lists, its keys in the order the job's
    lookups bisect by (side_tables.open_table), else a usage error: a damaged table would
    make the append store keys a second time."""
    try:
        side_tables.open_table(output_dir, ref, sorted_keys=True).close()
    except (side_tables.SideTableError, OSError) as error:
        raise _damaged(error, output_dir) from None


def _require_storable_lines(output_dir: str, name: str) -> None:
    """The commit carries the earlier lines of rejects.jsonl (or unlabeled.jsonl) into the
    new one, sorted by key and reason, and counts their reasons into metadata.json: a line
    that is not a JSON object with a string key and reason (not JSON at all, or holding a
    lone surrogate, a JSON \\ud800 escape segprep never writes) would fail that commit after
    the whole job ran, so it is refused here, naming the first such line. Every line is
    parsed, streamed (memory: one line), as the commit parses each of them anyway."""
    path = files.join(output_dir, name)
    if not files.exists(path):
        return
    try:
        with files.opened(path) as (handle, _):
            lines = files.bounded_lines(handle, FILE_LIMITS.jsonl_line_bytes, name)
            for number, line in enumerate(lines, start=1):
                if line.strip():
                    _parsed_line(line, f"{name} line {number}")
    except (json_shape.LoneSurrogateError, _NotARejectLine) as error:
        raise _damaged(error, output_dir) from None
    except (OSError, files.LineTooLongError) as error:
        raise UsageError(
            f"--append: {name}: not readable ({error}): run `segprep verify {output_dir}`"
        ) from None


class _NotARejectLine(ValueError):
    """A line of rejects.jsonl (or unlabeled.jsonl) the commit cannot merge."""


def _parsed_line(line: bytes, source: str) -> None:
    """A LoneSurrogateError for a line holding one, a _NotARejectLine for one that is not a
    JSON object with a string key and reason."""
    try:
        if b"\\u" in line:  # else no string of it can hold a surrogate: json.loads alone
            entry = json_shape.loads(line, source)
        else:
            entry = json.loads(line)
    except json_shape.LoneSurrogateError:
        raise
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past Python's stack
        entry = None
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("key"), str)
        and isinstance(entry.get("reason"), str)
    ):
        raise _NotARejectLine(f"{source}: not a JSON object with a key and a reason")


def _require_readable_manifest(output_dir: str) -> None:
    """The output's manifest, if it has one, must be a regular file a JSON parser can take:
    a FIFO, a device, an oversized or a deeply nested one would otherwise fail the commit
    after the whole job ran. One that is not JSON at all is no manifest (segprep replaces
    its manifest whole, never half): the commit reads the output's files from metadata.json."""
    path = files.join(output_dir, MANIFEST_FILE)
    try:
        json_shape.loads(files.read_bounded(path, FILE_LIMITS.metadata_bytes), path)
    except (FileNotFoundError, json.JSONDecodeError):
        return
    except (OSError, ValueError) as error:
        raise UsageError(f"--append: {error}: run `segprep verify {output_dir}`") from None


def keys_held(output_dir: str, keys: Iterable[str]) -> set[str]:
    """Which of `keys` (an append's --split_file lists) some version of the output holds:
    listed but absent from this run's folders, they are in the output, not missing. An
    output that cannot be read holds none here; plan_append names what is wrong with it."""
    try:
        info = DatasetInfo.from_json(json.loads(dataset_info.read_metadata_bytes(output_dir)))
    except (OSError, ValueError, MetadataError):
        return set()
    wanted = set(keys)
    held: set[str] = set()
    for version in info.dataset_versions:
        for ref in version.digest_tables.values():
            try:
                table = side_tables.open_digest_table(output_dir, ref, check_sha256=False)
                held.update(key for key in wanted - held if table.get(key) is not None)
            except (OSError, ValueError):
                continue  # plan_append refuses the output, naming the table
    return held


def split_differences(raw: dict[str, Any], fractions: Any) -> list[str]:
    """How entries find their split is not part of a record, but an append must keep it:
    'name: output X, this run Y' for each difference."""
    used = raw.get("parameters") or {}
    stored_method = _split_method(used.get("split_files"), used.get("split_by_folder"))
    method = _split_method(isinstance(fractions, SplitLists), isinstance(fractions, FolderSplits))
    stored, ours = {}, {}
    if stored_method != method:
        stored["split"], ours["split"] = stored_method, method
    elif isinstance(fractions, SplitFractions):
        stored = {name: used.get(name) for name in ("train_size", "validation_size")}
        ours = {"train_size": fractions.train, "validation_size": fractions.validation}
    return field_differences(stored, ours)


def distance_differences(raw: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The distance within which images are near copies, when this run and the output both
    searched: an append's search groups stored images with each other too, so another
    distance would group stored images of two splits (a wider one) or leave stored images
    placed together for a group that is gone (a narrower one)."""
    section = raw.get("duplicates")
    stored = section.get("threshold") if isinstance(section, dict) else None
    if stored is None or args.duplicates == "off":
        return []
    return field_differences(
        {"duplicate_distance": stored}, {"duplicate_distance": args.duplicate_distance}
    )


def _split_method(lists: Any, by_folder: Any) -> str:
    """The flag that places entries in splits: given official lists (the stored output's
    `split_files` parameter, or this run's SplitLists), else split by folder, else sizes."""
    if lists:
        return "--split_file"
    if by_folder:
        return "--split_by_folder"
    return "--train_size/--validation_size"
