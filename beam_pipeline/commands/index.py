"""`segprep index DIR`: add the record index and the TFDS files to an existing output.

Outputs written before the index existed can be upgraded in place, without re-running the
job: every shard is read once (TensorFlow's TFRecord reader checks each frame's CRCs), its
records' lengths give the index (segcore/record_index.py) and their keys the key table.

Nothing appears half-done: everything is staged under `.segprep/runs/<run_id>/`, renamed
into place, and metadata.json, which lists the new files with their sha256, is replaced
last. A file at a target name that metadata.json does not list as segprep's is never
overwritten, unless it already holds exactly the bytes this run would write (what an
interrupted earlier `segprep index` leaves behind).
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import time
import uuid

import tensorflow as tf

from beam_pipeline.errors import UsageError
from segcore import dataset_info, metadata, record_index, tf_example, tfds_info
from segcore.dataset_info import DatasetInfo, FileRef, MetadataError
from segcore.features import KEY
from segcore.naming import (
    INDEX_DIR,
    METADATA_FILE,
    RUNS_DIR,
    SEGPREP_DIR,
    key_table_name,
    run_dir,
)

_CHUNK = 8 << 20


@dataclasses.dataclass(frozen=True)
class IndexResult:
    directory: str
    records: dict[str, int]  # split -> records indexed
    files: tuple[str, ...]  # names written (relative), metadata.json last

    def summary(self) -> str:
        splits = ", ".join(f"{split} {count}" for split, count in self.records.items())
        return (
            f"indexed {self.directory}: {sum(self.records.values())} records ({splits}); "
            f"wrote {len(self.files)} files ({INDEX_DIR}/, TFDS dataset_info.json and "
            f"features.json, {METADATA_FILE})"
        )


def run_index(directory: str) -> int:
    """CLI body: the summary line, exit 0."""
    print(index_output(directory).summary())
    return 0


def index_output(directory: str) -> IndexResult:
    """Build and publish the index of `directory`; UsageError for anything the user must fix."""
    base = directory.rstrip("/") or "/"
    if not tf.io.gfile.isdir(base):
        raise UsageError(f"{directory} is not a directory: pass a `segprep prepare` output")
    try:
        raw = dataset_info.read_metadata_json(base)
        info = DatasetInfo.from_json(raw)
    except (MetadataError, FileNotFoundError) as error:
        raise UsageError(str(error)) from None
    run_id = f"index-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    created = [path for path in (SEGPREP_DIR, RUNS_DIR) if not _exists(base, path)]
    staging = run_dir(run_id)
    try:
        staged, records, info = _stage(base, staging, info)
        names = [*staged, METADATA_FILE]
        _write(base, f"{staging}/{METADATA_FILE}", metadata.dumps(info.to_json()))
        _check_targets(base, staging, staged, DatasetInfo.from_json(raw))
        tf.io.gfile.makedirs(f"{base}/{INDEX_DIR}")
        for name in names:  # metadata.json last: it is the commit
            tf.io.gfile.rename(f"{base}/{staging}/{name}", f"{base}/{name}", overwrite=True)
    finally:
        _remove(base, staging, created)
    return IndexResult(directory, records, tuple(names))


def _stage(
    base: str, staging: str, info: DatasetInfo
) -> tuple[list[str], dict[str, int], DatasetInfo]:
    """Write every new file under `staging`; the names written and the updated metadata."""
    staged: list[str] = []
    records: dict[str, int] = {}
    splits = {}
    for name, split in info.splits.items():
        table_name = key_table_name(name)
        table_path = f"{base}/{staging}/{table_name}"
        tf.io.gfile.makedirs(posixpath.dirname(table_path))
        shards = []
        table_digest = hashlib.sha256()
        table_size = 0
        with tf.io.gfile.GFile(table_path, "wb") as table:
            table.write(b"")  # GFile creates the file on its first write: an empty split too
            for shard in split.shards:
                indexed = _index_shard(base, shard)
                path = f"{staging}/{indexed.index_file}"
                _write(base, path, indexed.index_bytes)
                staged.append(indexed.index_file)
                rows = record_index.key_table_bytes(indexed.key_rows)
                table.write(rows)
                table_digest.update(rows)
                table_size += len(rows)
                ref = FileRef(
                    indexed.index_file,
                    len(indexed.index_bytes),
                    hashlib.sha256(indexed.index_bytes).hexdigest(),
                )
                shards.append(dataclasses.replace(shard, index=ref))
        staged.append(table_name)
        records[name] = split.num_examples
        splits[name] = dataclasses.replace(
            split,
            shards=tuple(shards),
            key_table=FileRef(table_name, table_size, table_digest.hexdigest()),
        )
    info = dataclasses.replace(info, splits=splits)
    refs = []
    for name, data in tfds_info.tfds_files(info).items():
        _write(base, f"{staging}/{name}", data)
        staged.append(name)
        refs.append(FileRef(name, len(data), hashlib.sha256(data).hexdigest()))
    return staged, records, dataclasses.replace(info, tfds_files=tuple(refs))


def _index_shard(base: str, shard: dataset_info.ShardInfo) -> record_index.ShardIndex:
    """The index of one shard, read back from the file, which must match metadata.json."""
    path = f"{base}/{shard.file}"
    if not tf.io.gfile.exists(path):
        raise UsageError(f"{shard.file} is missing: run `segprep verify {base}`")
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != shard.sha256:
        raise UsageError(
            f"{shard.file} does not match its sha256 in metadata.json: "
            f"run `segprep verify {base}`; nothing was written"
        )
    records = []
    try:
        for serialized in tf.data.TFRecordDataset(path).as_numpy_iterator():
            example = tf_example.Example.FromString(serialized)
            key = example.features.feature[KEY].bytes_list.value[0].decode("utf-8")
            records.append((key, len(serialized)))
    except (tf.errors.OpError, IndexError, ValueError) as error:
        raise UsageError(f"{shard.file} cannot be indexed: {error}") from None
    indexed = record_index.index_shard(shard.file, records)
    frames = record_index.parse_index(indexed.index_bytes)
    end = frames[-1][0] + frames[-1][1] if frames else 0
    if len(frames) != shard.num_examples or end != shard.bytes:
        raise UsageError(
            f"{shard.file}: {len(frames)} records in {end} bytes, metadata.json says "
            f"{shard.num_examples} in {shard.bytes}: run `segprep verify {base}`"
        )
    return indexed


def _listed(info: DatasetInfo) -> set[str]:
    """Names metadata.json lists as written by segprep (index and TFDS files)."""
    names = {ref.file for ref in info.tfds_files}
    for split in info.splits.values():
        names.update(shard.index.file for shard in split.shards if shard.index)
        if split.key_table:
            names.add(split.key_table.file)
    return names


def _check_targets(base: str, staging: str, staged: list[str], before: DatasetInfo) -> None:
    """Refuse to replace a file segprep did not write (see the module docstring)."""
    ours = _listed(before)
    for name in staged:
        target = f"{base}/{name}"
        if name in ours or not tf.io.gfile.exists(target):
            continue
        if tf.io.gfile.isdir(target) or _read(target) != _read(f"{base}/{staging}/{name}"):
            raise UsageError(
                f"{target} exists and metadata.json does not list it: segprep did not write "
                "it; move it away and run `segprep index` again (nothing was changed)"
            )


def _exists(base: str, name: str) -> bool:
    return tf.io.gfile.exists(f"{base}/{name}")


def _read(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


def _write(base: str, name: str, data: bytes) -> None:
    path = f"{base}/{name}"
    tf.io.gfile.makedirs(posixpath.dirname(path))
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(data)


def _remove(base: str, staging: str, created: list[str]) -> None:
    """Delete this run's staging folder, and segprep's folders if this run made them."""
    if _exists(base, staging):
        tf.io.gfile.rmtree(f"{base}/{staging}")
    for name in reversed(created):
        path = f"{base}/{name}"
        if tf.io.gfile.isdir(path) and not tf.io.gfile.listdir(path):
            tf.io.gfile.rmtree(path)
