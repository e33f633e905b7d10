"""`segprep index DIR`: add the record index and the TFDS files to an existing output.

Outputs written before the index existed can be upgraded in place, without re-running the
job: every shard is read once (the record-format adapter checks each frame's CRCs), its
records' lengths give the index (transforms/format/record_index.py) and their keys the key table.

It follows the output protocol like a `prepare` run: it holds the output's lock, stages
under `.segprep/runs/<run_id>/`, and publishes through the manifest, metadata.json (which
lists the new files with their sha256) last. A file at a target name that segprep did not
write is never overwritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import time
import uuid

from beam_pipeline.commands.shard_records import shard_records
from beam_pipeline.errors import UsageError, printable
from beam_pipeline.runtime import output_protocol
from transforms import files
from transforms.format import dataset_info, record_formats, record_index, side_tables, tfds_info
from transforms.format.dataset_info import DatasetInfo, FileRef, MetadataError
from transforms.format.example import ExampleError, parse_example
from transforms.format.features import KEY
from transforms.format.naming import (
    INDEX_DIR,
    METADATA_FILE,
    key_table_name,
    run_dir,
)


@dataclasses.dataclass(frozen=True)
class IndexResult:
    directory: str
    records: dict[str, int]  # split -> records indexed
    files: tuple[str, ...]  # names written (relative), metadata.json last

    def summary(self) -> str:
        if not self.files:
            return (
                f"{self.directory} (grown by appends) has every index file its metadata.json "
                "lists: nothing done"
            )
        splits = ", ".join(f"{split} {count}" for split, count in self.records.items())
        return (
            f"indexed {self.directory}: {sum(self.records.values())} records ({splits}); "
            f"wrote {len(self.files)} files ({INDEX_DIR}/, TFDS dataset_info.json and "
            f"features.json, {METADATA_FILE})"
        )


def run_index(directory: str) -> int:
    """CLI body: the summary line, exit 0."""
    print(printable(index_output(directory).summary()))
    return 0


def index_output(directory: str) -> IndexResult:
    """Build and publish the index of `directory`; UsageError for anything the user must fix.

    Under the output protocol (runtime/output_protocol.py): the run holds the output's lock,
    stages under its own run folder, and publishes with the manifest, metadata.json last.
    """
    base = directory.rstrip("/") or "/"
    if not files.isdir(base):
        raise UsageError(f"{directory} is not a directory: pass a `segprep prepare` output")
    output = files.normalize_dir(base)
    # A first look refuses what is no output before the lock's folder is made in it.
    _, info = _look(directory, base, output, holder=True)
    if len(info.dataset_versions) > 1:
        return _grown(directory, base, info)
    run_id = f"index-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    with output_protocol.RunLock(output, run_id):
        # What is published must be what is there under the lock: a run that committed
        # between the first look and the lock (an append's version) would otherwise be
        # published over, and its files deleted as no longer listed.
        state, info = _look(directory, base, output, holder=False)
        if len(info.dataset_versions) > 1:
            return _grown(directory, base, info)
        output_protocol.make_staging_dir(output, run_id)
        try:
            staged, records, info = _stage(base, run_dir(run_id), info, info.adapter)
            _check_targets(base, staged, state)
            moves = [(name, name) for name in staged]
            keep = [name for name in state.ours if name not in staged and name != METADATA_FILE]
            output_protocol.publish(output, run_id, moves, info.to_bytes(), keep=keep)
        except BaseException:
            output_protocol.discard_staged(output, run_id, keep=())
            raise
    return IndexResult(directory, records, (*staged, METADATA_FILE))


def _look(
    directory: str, base: str, output: str, *, holder: bool
) -> tuple[output_protocol.OutputState, DatasetInfo]:
    """The output's state and metadata.json, refused unless a finished output whose kept
    tables are sound. `holder=False`: for the run that holds the lock."""
    state = output_protocol.inspect_output(output, holder=holder)
    output_protocol.check_output(state, overwrite=True)  # only the lock and foreign names
    try:
        info = dataset_info.load(base)
    except (MetadataError, FileNotFoundError) as error:
        raise UsageError(str(error)) from None
    if not state.finished:
        raise UsageError(f"{directory} is not a finished segprep output")
    _check_kept_tables(base, info)
    return state, info


def _grown(directory: str, base: str, info: DatasetInfo) -> IndexResult:
    """An output grown by appends: nothing to write when every index file it lists is there.
    Rebuilt from the shards, its index would be one key table per split written over the
    versions' own."""
    damaged = _first_damaged_index_file(base, info)
    if damaged is not None:
        raise UsageError(
            f"{directory} was grown by appends and its index file {damaged} is missing "
            "or not the one metadata.json lists: restore it, or prepare the output again"
        )
    return IndexResult(directory, {}, ())


def _check_kept_tables(base: str, info: DatasetInfo) -> None:
    """The side tables index keeps as they are (image-hash and digest tables), which the new
    metadata.json lists again: checked as a job's worker opens them (name, no link, a
    regular file of the listed size with no hole), without reading them, so a damaged one
    is named instead of published again under "indexed". Their sha256 is verify's to check:
    reading them is no part of indexing."""
    try:
        refs = [ref for split in info.splits.values() for ref in side_tables.hash_table_refs(split)]
        refs += [ref for version in info.dataset_versions for ref in version.digest_tables.values()]
        for ref in refs:
            side_tables.open_table(base, ref, check_sha256=False).close()
    except side_tables.SideTableError as error:
        raise UsageError(f"{error}: run `segprep verify {base}`; nothing was written") from None


def _first_damaged_index_file(base: str, info: DatasetInfo) -> str | None:
    """The first index, key table or TFDS file metadata.json lists that is absent, of
    another size or with a hole (or none listed where the format needs them); None when all
    are there."""
    if not (info.has_index and info.tfds_files):
        return "list (metadata.json names no complete index)"
    refs = [*info.tfds_files]
    for split in info.splits.values():
        refs += [shard.index for shard in split.shards if shard.index is not None]
        refs += split.key_tables
    for ref in refs:
        path = files.join(base, ref.file)
        try:
            if files.stat(path).size == ref.bytes:
                files.check_no_hole(path)
                continue
        except OSError:
            pass
        return ref.file
    return None


def _stage(
    base: str, staging: str, info: DatasetInfo, adapter: record_formats.RecordFormat
) -> tuple[list[str], dict[str, int], DatasetInfo]:
    """Write every new file under `staging`; the names written and the updated metadata."""
    staged: list[str] = []

    def stage(name: str, data: bytes) -> FileRef:
        path = f"{base}/{staging}/{name}"
        files.makedirs(posixpath.dirname(path))
        files.write_bytes(path, data)
        staged.append(name)
        return FileRef(name, len(data), hashlib.sha256(data).hexdigest())

    records: dict[str, int] = {}
    splits = {}
    for name, split in info.splits.items():
        shards = []
        table = []
        for shard in split.shards:
            indexed = _index_shard(base, shard, adapter)
            table.append(record_index.key_table_bytes(indexed.key_rows))
            if not adapter.offset_index:  # key table only: random access is native
                shards.append(shard)
                continue
            ref = stage(indexed.index_file, indexed.index_bytes)
            shards.append(dataclasses.replace(shard, index=ref))
        key_table = stage(key_table_name(name), b"".join(table))
        records[name] = split.num_examples
        splits[name] = dataclasses.replace(split, shards=tuple(shards), key_table=key_table)
    info = dataclasses.replace(info, splits=splits)
    refs = tuple(stage(name, data) for name, data in tfds_info.tfds_files(info).items())
    return staged, records, dataclasses.replace(info, tfds_files=refs)


def _index_shard(
    base: str, shard: dataset_info.ShardInfo, adapter: record_formats.RecordFormat
) -> record_index.ShardIndex:
    """The index of one shard, read back from the file, which must match metadata.json."""
    path = f"{base}/{shard.file}"
    if not files.exists(path):
        raise UsageError(f"{shard.file} is missing: run `segprep verify {base}`")
    try:
        files.check_no_hole(path)
        digest = files.sha256(path)
    except OSError as error:  # a FIFO, a device, a folder: never read
        raise UsageError(f"{shard.file} cannot be read: {error}") from None
    if digest != shard.sha256:
        raise UsageError(
            f"{shard.file} does not match its sha256 in metadata.json: "
            f"run `segprep verify {base}`; nothing was written"
        )
    records = []
    try:
        with shard_records(path, shard.file, adapter) as payloads:
            for serialized in payloads:
                records.append((parse_example(serialized)[KEY], len(serialized)))
    except (OSError, ExampleError, ValueError) as error:
        raise UsageError(f"{shard.file} cannot be indexed: {error}") from None
    indexed = record_index.index_shard(shard.file, records)
    frames = record_index.frame_offsets(length for _, length in records)
    # Offsets exist for formats framed back to back; the others are checked by count alone.
    end = (frames[-1][0] + frames[-1][1] if frames else 0) if adapter.offset_index else shard.bytes
    if len(frames) != shard.num_examples or end != shard.bytes:
        raise UsageError(
            f"{shard.file}: {len(frames)} records in {end} bytes, metadata.json says "
            f"{shard.num_examples} in {shard.bytes}: run `segprep verify {base}`"
        )
    return indexed


def _check_targets(base: str, staged: list[str], state: output_protocol.OutputState) -> None:
    """Refuse to replace a file segprep did not write: every target must be absent or ours."""
    ours = set(state.ours)
    for name in staged:
        if name not in ours and files.exists(f"{base}/{name}"):
            raise UsageError(
                f"{base}/{name} exists and segprep did not write it: move it away and run "
                "`segprep index` again (nothing was changed)"
            )
