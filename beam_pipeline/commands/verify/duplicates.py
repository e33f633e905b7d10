"""`segprep verify`'s check of duplicates.jsonl and the stored image hashes.

Against the output's own key tables and rejects.jsonl: every key of a group is a record or
a reject; a group's records are all in the split the file names (one split per group; under
official splits, the list of splits its members are listed in); under --duplicates drop only
the kept key (the smallest, or the one an earlier version stored; under official splits one
per split, none new in train beside validation/test) is a record; each split's hashes file
lists the split's keys in key-table order, and each append's (`appended_hashes`) the keys of
that version's key table. Reads files only (local or gs://), no TensorFlow.
"""

from __future__ import annotations

import hashlib
from typing import Any

from beam_pipeline.commands.inspect_sheet.rejects import rejects_of
from beam_pipeline.commands.summary import plural
from beam_pipeline.commands.verify.state import Checked, as_list
from transforms.duplicates import parse_groups, parse_hash_rows
from transforms.format import record_index, side_tables
from transforms.format.dataset_info import FileRef
from transforms.format.naming import (
    DUPLICATES_FILE,
    FIRST_VERSION,
    MAX_VERSION,
    REJECTS_FILE,
    hashes_version,
    key_table_name,
)
from transforms.limits import FILE_LIMITS

_SHOWN = 3  # groups named per kind of problem


def duplicate_files(metadata: dict[str, Any]) -> set[str]:
    """The duplicates file and hash files metadata.json lists (read leniently)."""
    refs = []
    section = metadata.get("duplicates")
    if isinstance(section, dict):
        refs.append(section.get("file"))
    for split in (metadata.get("splits") or {}).values():
        if isinstance(split, dict):
            refs.append(split.get("hashes"))
            refs += as_list(split.get("appended_hashes"))
    names = (ref.get("file") for ref in refs if isinstance(ref, dict))
    return {name for name in names if isinstance(name, str)}  # a list or table names no file


def listed_file_problem(name: str, size: int, sha256: str, ref: Any) -> str | None:
    """The problem line of a file whose size or sha256 is not what metadata.json lists
    (`ref`); report says it of duplicates.jsonl in the same words."""
    if not isinstance(ref, dict) or size != ref.get("bytes") or sha256 != ref.get("sha256"):
        return f"{name}: size or sha256 differs from metadata.json"
    return None


def check_duplicates(state: Checked) -> None:
    metadata = state.metadata
    splits = metadata["splits"]
    section = metadata.get("duplicates")
    _check_appended_hashes(state)
    if section is None or (isinstance(section, dict) and section.get("mode") == "off"):
        return  # the first version did not search: only appends' hashes to check
    if not isinstance(section, dict) or not isinstance(section.get("file"), dict):
        state.problem("metadata.json: the `duplicates` section lists no duplicates file")
        return
    records: dict[str, list[str]] = {}  # split -> keys in key-table order
    for name, split in splits.items():
        keys = _table_keys(state, split.get("key_table") if isinstance(split, dict) else None)
        if keys is None:
            state.problem(f"split {name!r}: no key table, duplicates not checked")
            return
        records[name] = keys
    split_of = {key: name for name, keys in records.items() for key in keys}
    latest = _latest_version(metadata)
    earlier = set(split_of) if latest != FIRST_VERSION else set()  # records before the latest
    for name, split in splits.items():  # an append's groups hold its keys too
        tables = split.get("appended_key_tables") if isinstance(split, dict) else None
        for table in as_list(tables):  # a damaged list is the index check's
            keys = _table_keys(state, table) or []
            split_of.update((key, name) for key in keys)
            if isinstance(table, dict) and table.get("file") != key_table_name(name, latest):
                earlier.update(keys)
    parameters = metadata.get("parameters") or {}
    if not isinstance(parameters, dict):
        state.problem("metadata.json: parameters is not a JSON object")
        parameters = {}
    if parameters.get("duplicates") != "off":
        _check_hashes(state, records)  # else the first version stored none
    ref = section["file"]
    if not isinstance(ref.get("file"), str):
        state.problem("metadata.json: the `duplicates` section's file entry names no file")
        return
    data = _listed(state, ref)
    if data is None:
        return
    where = ref["file"]
    differs = listed_file_problem(where, len(data), hashlib.sha256(data).hexdigest(), ref)
    if differs:
        state.problem(differs)
    try:
        groups = parse_groups(data)
    except ValueError as error:
        state.problem(f"{where}: {error}")
        return
    outside = {key for group in groups for key in group["keys"] if key not in split_of}
    try:
        rejects = rejects_of(state.base, outside, REJECTS_FILE)
    except (OSError, ValueError) as error:
        state.problem(f"{REJECTS_FILE}: {error}")
        return
    unknown, straddling, kept_wrong, wide = [], [], [], []
    threshold = section.get("threshold")
    for number, group in enumerate(groups, start=1):
        keys = group["keys"]
        if type(threshold) is int and group["max_distance"] > threshold:
            wide.append(f"line {number} ({group['max_distance']})")
        missing = [key for key in keys if key not in split_of and key not in rejects]
        if missing:
            unknown.append(f"line {number} ({missing[0]})")
        placed = {split_of[key] for key in keys if key in split_of}
        if _misplaced(placed, group["split"]):
            straddling.append(f"line {number} ({', '.join(sorted(placed))})")
        drop = section.get("mode") == "drop"
        if drop and _kept_too_many(keys, group["split"], split_of, earlier):
            kept_wrong.append(f"line {number}")
    for found, noun, text in (
        (unknown, "key", "in neither a shard nor rejects.jsonl"),
        (straddling, "group", "whose records are not all in the split it names"),
        (kept_wrong, "group", "(--duplicates drop) with a record besides the kept key"),
        (wide, "group", f"wider than the threshold ({threshold})"),
    ):
        if found:
            counted = plural(len(found), noun)
            state.problem(f"{where}: {counted} {text}: {', '.join(found[:_SHOWN])}")
    if len(groups) != section.get("groups"):
        said = section.get("groups")
        state.problem(f"{where}: {plural(len(groups), 'group')}, metadata.json says {said}")


def _misplaced(placed: set[str], named: Any) -> bool:
    """A group's records outside the split its line names: one split (the group follows
    it), or under official splits the list of splits its members are listed in."""
    if isinstance(named, list):
        return not placed <= set(named)
    return len(placed) > 1 or bool(placed and placed != {named})


def _kept_too_many(
    keys: list[str], named: Any, split_of: dict[str, str], earlier: set[str]
) -> bool:
    """--duplicates drop kept more than it should. The latest version's records of a group
    (`earlier`: the keys earlier versions stored, which an append never drops): besides the
    smallest key, or any beside an earlier record; under official splits, more than one
    record per split, or a train record beside a validation/test one."""
    new = [key for key in keys if key in split_of and key not in earlier]
    if not isinstance(named, list):
        if any(key in earlier for key in keys):
            return bool(new)
        return any(key != keys[0] for key in new)
    placed = [split_of[key] for key in keys if key in split_of]
    held_in = {split for split in placed if split != "train"}
    if any(split_of[key] == "train" for key in new) and held_in:
        return True
    kept = [split_of[key] for key in new]
    stored_in = {split_of[key] for key in keys if key in earlier}
    return len(kept) != len(set(kept)) or bool(stored_in & set(kept))


def _latest_version(metadata: dict[str, Any]) -> int:
    versions = metadata.get("dataset_versions")
    if isinstance(versions, list) and versions and isinstance(versions[-1], dict):
        number = versions[-1].get("version")
        if isinstance(number, int) and FIRST_VERSION <= number <= MAX_VERSION:
            return number  # else a damaged version the index check names
    return FIRST_VERSION


def _check_hashes(state: Checked, records: dict[str, list[str]]) -> None:
    for name, split in state.metadata["splits"].items():
        ref = split.get("hashes") if isinstance(split, dict) else None
        if ref is None:
            state.problem(f"split {name!r}: no image hashes listed (--duplicates was on)")
            continue
        whose = f"keys of split {name!r} in key-table order"
        _check_hash_keys(state, name, ref, records[name], whose)


def _check_appended_hashes(state: Checked) -> None:
    """Each append's hash table (`appended_hashes`) against its version's key table: the
    same keys in the same order, the table as metadata.json lists it."""
    for name, split in state.metadata["splits"].items():
        if not isinstance(split, dict) or not isinstance(split.get("appended_hashes"), list):
            continue
        key_tables = {
            ref["file"]: ref
            for ref in as_list(split.get("appended_key_tables"))
            if isinstance(ref, dict) and isinstance(ref.get("file"), str)
        }
        for entry in split["appended_hashes"]:
            file = entry.get("file") if isinstance(entry, dict) else None
            version = hashes_version(name, file) if isinstance(file, str) else None
            if version is None or version == FIRST_VERSION:
                state.problem(f"split {name!r}: appended_hashes lists {str(file)[:80]!r}")
                continue
            keys = _table_keys(state, key_tables.get(key_table_name(name, version)))
            if keys is None:
                state.problem(f"{file}: no key table of version {version} to check it with")
                continue
            whose = f"keys of its key table for split {name!r}, in key-table order"
            _check_hash_keys(state, name, entry, keys, whose, _appended_ref)


def _check_hash_keys(
    state: Checked, split: str, entry: Any, keys: list[str], whose: str, ref_of=None
) -> None:
    """One hash table's rows hold `keys`, in that order (`whose` says which keys). The table
    is read through side_tables (its name, no link, a regular file, the listed size and
    sha256, bounded lines); `ref_of` makes its FileRef from `entry`."""
    try:
        ref = (ref_of or side_tables.hash_table_ref_of)(split, entry)
        with side_tables.open_table(state.base, ref) as table:
            data = b"".join(table.lines())
    except side_tables.SideTableError as error:
        name = entry.get("file") if isinstance(entry, dict) else None
        state.problem(f"{str(name)[:80]}: size or sha256 differs from metadata.json ({error})")
        return
    try:
        found = [row.key for row in parse_hash_rows(data)]
    except (ValueError, UnicodeDecodeError) as error:
        state.problem(f"{entry.get('file')}: {error}")
        return
    if found != keys:
        state.problem(
            f"{entry.get('file')}: {len(found)} keys that are not the {len(keys)} {whose}"
        )


def _appended_ref(split: str, entry: Any) -> FileRef:
    """An appended_hashes entry as a FileRef (its name checked by the caller)."""
    size, digest = entry.get("bytes"), entry.get("sha256")
    if isinstance(size, bool) or not isinstance(size, int) or not isinstance(digest, str):
        raise side_tables.SideTableError(f"{entry.get('file')}: listed size or sha256 not valid")
    return FileRef(entry["file"], size, digest)


def _table_keys(state: Checked, ref: Any) -> list[str] | None:
    """The keys of a listed key table, in file order; None when it cannot be read or parsed
    (a damaged table is a problem: the index check names it too)."""
    data = _listed(state, ref)
    if data is None:
        return None
    try:
        return [row.key for row in record_index.parse_key_table(data)]
    except (record_index.IndexFormatError, UnicodeDecodeError) as error:
        state.problem(f"{ref['file']}: {error}")
        return None


def _listed(state: Checked, ref: Any) -> bytes | None:
    """A listed file's bytes; a problem when it is missing or not a name segprep writes."""
    if not isinstance(ref, dict) or not isinstance(ref.get("file"), str):
        return None
    name = ref["file"]
    if not (name == DUPLICATES_FILE or side_tables.is_side_table_name(name)):
        state.problem(f"{name[:80]!r}: not a name segprep writes (listed in metadata.json)")
        return None
    return state.read(name, FILE_LIMITS.index_bytes)
