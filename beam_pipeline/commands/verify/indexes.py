"""The record index and TFDS files metadata.json lists, against the shards as read."""

from __future__ import annotations

import hashlib
from typing import Any

from beam_pipeline.commands.verify.duplicates import duplicate_files
from beam_pipeline.commands.verify.state import Checked, as_list
from beam_pipeline.runtime.commit_journal import is_published_name
from transforms import files
from transforms.format import dataset_info, digest_table, record_index, side_tables, tfds_info
from transforms.format.dataset_info import DatasetInfo, FileRef, MetadataError
from transforms.format.naming import INDEX_DIR, shard_version
from transforms.limits import FILE_LIMITS


def check_index(state: Checked) -> None:
    listed = lists_index(state.metadata)
    if not listed:
        return  # written before the index existed: `segprep index` adds it
    try:
        info = DatasetInfo.from_json(state.metadata)
    except MetadataError as error:
        state.problem(f"record index not checked: metadata.json: {error}")
        return
    state.report.indexed = True
    for split in info.splits.values():
        if not split.has_index:
            state.problem(
                f"metadata.json: split {split.name!r} lacks part of its record index: "
                "run `segprep index` to rebuild it"
            )
        # Per version (one key table each): the rows of the records it added.
        versions = sorted({shard_version(shard.file) for shard in split.shards} | {1})
        expected: dict[int, list[record_index.KeyRow] | None] = {v: [] for v in versions}
        for number, shard in enumerate(split.shards):
            records = state.records.get(shard.file)
            version = shard_version(shard.file)
            rows = expected.get(version)
            if records is None or rows is None:
                expected[version] = None  # the shard was not read to its end
            else:
                rows.extend(
                    record_index.KeyRow(key or "", number, position)
                    for position, (key, _) in enumerate(records)
                )
            if shard.index is not None:
                _check_shard_index(state, shard.file, shard.index, records)
        for version, ref in enumerate(split.key_tables, start=1):
            _check_key_table(state, ref, expected.get(version, []))
        for version in info.dataset_versions:
            ref = version.digest_tables.get(split.name)
            if ref is not None:
                rows = expected.get(version.version, [])
                keys = None if rows is None else sorted(row.key for row in rows)
                _check_digest_table(state, ref, keys)
    _check_versions(state, info)
    expected = tfds_info.tfds_files(info)
    for ref in info.tfds_files:
        data = _listed_file(state, ref, FILE_LIMITS.metadata_bytes)
        if data is not None and data != expected[ref.file]:
            state.problem(f"{ref.file}: does not describe the splits in metadata.json")
    _check_extra_index_files(state, listed)


def _listed_file(state: Checked, ref: FileRef, limit: int) -> bytes | None:
    """The file's bytes, with a problem when its size or sha256 is not what metadata.json
    gives; None when it cannot be read."""
    data = state.read(ref.file, limit)
    if data is not None:
        _check_digest(state, ref, len(data), hashlib.sha256(data).hexdigest())
    return data


def _check_digest(state: Checked, ref: FileRef, size: int, digest: str) -> None:
    if size != ref.bytes or digest != ref.sha256:
        state.problem(
            f"{ref.file}: {size} bytes, sha256 {digest}; metadata.json says "
            f"{ref.bytes} bytes, sha256 {ref.sha256}"
        )


def _check_shard_index(
    state: Checked, shard: str, ref: FileRef, records: list[tuple[str | None, int]] | None
) -> None:
    data = _listed_file(state, ref, FILE_LIMITS.index_bytes)
    if data is None or records is None:
        return
    try:
        frames = record_index.parse_index(data)
    except record_index.IndexFormatError as error:
        state.problem(f"{ref.file}: {error}")
        return
    actual = record_index.frame_offsets(length for _, length in records)
    if frames != actual:
        first = next(
            (n for n, (a, b) in enumerate(zip(frames, actual, strict=False)) if a != b),
            min(len(frames), len(actual)),
        )
        state.problem(
            f"{ref.file}: offsets and lengths do not match {shard} from record {first} "
            f"({len(frames)} entries, {len(actual)} records)"
        )


def _check_key_table(
    state: Checked, ref: FileRef, expected: list[record_index.KeyRow] | None
) -> None:
    """Streamed a line at a time (hashed as it is read): a tampered table of a GB, sparse on
    disk, costs one line of memory, not three copies of itself."""
    path = state.path(ref.file)
    if not files.exists(path):
        state.problem(f"{ref.file}: missing (listed in metadata.json)")
        return
    digest, size, rows, wrong = hashlib.sha256(), 0, 0, None
    try:
        files.check_no_hole(path)
        with files.opened(path) as (handle, total):
            if total > FILE_LIMITS.key_table_bytes:
                raise files.TooLargeError(
                    f"{total:,} bytes, more than the {FILE_LIMITS.key_table_bytes:,} allowed"
                )
            lines = files.bounded_lines(handle, FILE_LIMITS.jsonl_line_bytes, ref.file)
            for rows, line in enumerate(lines, start=1):
                digest.update(line)
                size += len(line)
                if wrong is None and expected is not None:
                    wrong = _wrong_row(ref.file, line, rows, expected)
    except (OSError, files.LineTooLongError) as error:  # a FIFO, a folder, too large, a hole
        state.problem(f"{ref.file}: not readable: {error}")
        return
    _check_digest(state, ref, size, digest.hexdigest())
    if wrong is not None:
        state.problem(wrong)
    elif expected is not None and rows != len(expected):
        state.problem(f"{ref.file}: {rows} keys, the shards hold {len(expected)} records")


def _wrong_row(
    name: str, line: bytes, number: int, expected: list[record_index.KeyRow]
) -> str | None:
    """What is wrong with line `number` of a key table, None when it is the expected row."""
    try:
        row = record_index.parse_key_row(line.rstrip(b"\n"), number)
    except record_index.IndexFormatError as error:
        return f"{name}: {error}"
    if number > len(expected):
        return None  # counted: more keys than records
    want = expected[number - 1]
    if row == want:
        return None
    return (
        f"{name} line {number}: key {row.key!r} at shard {row.shard} record {row.record}, "
        f"but the shards hold {want.key!r} at shard {want.shard} record {want.record}"
    )


def _check_digest_table(state: Checked, ref: FileRef, keys: list[str] | None) -> None:
    """A version's content digests: sorted [key, sha256] rows of exactly its keys, read as an
    append reads them (side_tables: no link, a regular file, the listed size and sha256)."""
    try:
        with side_tables.open_table(state.base, ref, cap=FILE_LIMITS.key_table_bytes) as table:
            data = b"".join(table.lines())
    except side_tables.SideTableError as error:
        state.problem(f"{ref.file}: not the file metadata.json lists ({error})")
        return
    if keys is None:
        return
    try:
        listed = [key for key, _ in digest_table.iter_rows(data.splitlines())]
    except (digest_table.DigestTableError, UnicodeDecodeError) as error:
        state.problem(f"{ref.file}: {error}")
        return
    if listed != keys:
        missing = sorted(set(keys) - set(listed))[:3]
        extra = sorted(set(listed) - set(keys))[:3]
        state.problem(
            f"{ref.file}: {len(listed)} keys, its version's shards hold {len(keys)} "
            f"(missing e.g. {missing}, extra e.g. {extra})"
        )


def _check_versions(state: Checked, info: DatasetInfo) -> None:
    """Every version reads as it was published: its splits' records, counted in the shards
    as read, are the counts it records, the latest's too (readers take the latest from the
    splits, but an append makes it an earlier version, held to its counts)."""
    try:
        dataset_info.check_latest_version(info)
    except MetadataError as error:
        state.problem(f"metadata.json: {error} (an append refuses this output)")
    for version in info.dataset_versions:
        pinned = info.at_version(version.version)
        for split in pinned.splits.values():
            names = [shard.file for shard in split.shards]
            if not all(name in state.records for name in names):
                continue  # a shard was not read to its end: reported already
            read = sum(len(state.records[name]) for name in names)
            if read != version.num_examples.get(split.name, 0):
                state.problem(
                    f"metadata.json: version {version.version} split {split.name!r} says "
                    f"{version.num_examples.get(split.name)} records, its shards hold {read}"
                )
            own = [name for name in names if shard_version(name) == version.version]
            added = sum(len(state.records[name]) for name in own)
            if added != version.added.get(split.name, 0):
                state.problem(
                    f"metadata.json: version {version.version} split {split.name!r} says "
                    f"{version.added.get(split.name)} records added, its shards hold {added}"
                )


def _check_extra_index_files(state: Checked, listed: set[str]) -> None:
    folder = state.path(INDEX_DIR)
    if not files.isdir(folder):
        return
    for name in files.listdir(folder):
        relative = f"{INDEX_DIR}/{name}"
        # A name segprep never publishes is the user's, kept by every run like a file beside
        # the shards; one it would publish is an index file metadata.json does not account for.
        if relative not in listed and is_published_name(relative):
            state.problem(f"{relative}: extra file, present but not in metadata.json")


def lists_index(metadata: dict[str, Any]) -> set[str]:
    """Every index or TFDS file name metadata.json lists, read leniently (it may be damaged)."""
    refs = list(as_list(metadata.get("tfds_files")))
    for split in metadata["splits"].values():
        if not isinstance(split, dict):
            continue
        refs += [split.get("key_table"), *as_list(split.get("appended_key_tables"))]
        refs += [s.get("index") for s in as_list(split.get("shards")) if isinstance(s, dict)]
    for version in as_list(metadata.get("dataset_versions")):
        tables = version.get("digest_tables") if isinstance(version, dict) else None
        refs += list(tables.values()) if isinstance(tables, dict) else []
    names = {r["file"] for r in refs if isinstance(r, dict) and isinstance(r.get("file"), str)}
    return names | {name for name in duplicate_files(metadata) if name.startswith(f"{INDEX_DIR}/")}
