"""Dataset versions at commit time: the digest tables a version adds, its VersionInfo, and the
metadata of an append (the earlier version's, extended by what this run added).

An append (`segprep prepare --append`) never rewrites an earlier file: its shards get names
of their own version (transforms.format.naming.shard_name), its key rows, content digests
and image hashes go to new per-version tables, and only metadata.json, rejects.jsonl and the
TFDS files are replaced. The sums in metadata.json (counts, class statistics) are the earlier
version's plus this run's: O(new entries), never a re-read of earlier shards.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterable, Mapping

from beam_pipeline.job.hash_tables import published_order
from beam_pipeline.job.shard_work import WrittenShard, staged_digest_rows
from transforms import files
from transforms.format import digest_table
from transforms.format.dataset_info import (
    DatasetInfo,
    FileRef,
    RejectCounts,
    SplitInfo,
    VersionInfo,
)
from transforms.format.naming import digest_table_name
from transforms.rejects import Reject
from transforms.splits import split_names

# A digest table's lines are read one at a time; no line of ours is longer than this.
_LINE_LIMIT = 1 << 20


class OutputChangedError(RuntimeError):
    """The output appended to changed while the append ran: nothing is published."""


def stage_digest_table(
    staged: str,
    split: str,
    shards: list[WrittenShard],
    published: dict[str, str],
    version: int,
    new_keys: set[str] | None = None,
) -> FileRef:
    """The split's digest table for `version`, merged in key order from its shards' staged
    rows (each already sorted): one line per shard held at a time. Its reference;
    adds the keys to `new_keys` when given."""
    name = digest_table_name(split, version)
    kept = published_order(split, shards, published)
    handles = [_lines(staged + staged_digest_rows(shard)) for shard in kept]

    def lines():
        for line in digest_table.merge_sorted(handles):
            if new_keys is not None:
                new_keys.add(digest_table.parse_row(line)[0])
            yield line

    return FileRef(name, *files.write_chunks(staged + name, lines()))


def _lines(path: str):
    if files.is_local(path):
        with open(path, "rb") as handle:
            for line in handle:
                if len(line) > _LINE_LIMIT:
                    raise digest_table.DigestTableError(f"{path}: a line of {len(line)} bytes")
                yield line
    else:
        yield from files.read_bounded(path, 1 << 30).splitlines(keepends=True)


def version_info(
    info: DatasetInfo,
    *,
    version: int,
    run_id: str,
    created_at: str,
    added_files: Mapping[str, list[str]],
    key_tables: Mapping[str, FileRef],
    digest_tables: Mapping[str, FileRef],
    rejects: Iterable[Reject],
    skipped_identical: int = 0,
) -> VersionInfo:
    """The record of `version` in a description whose splits already include its shards."""
    splits = info.splits
    names = split_names(splits)  # train, validation, then any other (--split_file's test)
    sizes = {
        split: {shard.file: shard.num_examples for shard in splits[split].shards} for split in names
    }
    reasons = collections.Counter(reject.reason.value for reject in rejects)
    classes = info.classes
    return VersionInfo(
        version=version,
        created_at=created_at,
        run_id=run_id,
        shards={split: tuple(sorted(added_files.get(split, ()))) for split in names},
        added={
            split: sum(sizes[split][name] for name in added_files.get(split, ())) for split in names
        },
        num_examples={split: splits[split].num_examples for split in names},
        image_shape={split: splits[split].image_shape for split in names},
        key_tables={split: key_tables[split] for split in names},
        digest_tables={split: digest_tables[split] for split in names},
        skipped_identical=skipped_identical,
        num_rejected=dict(sorted(reasons.items())),
        class_stats=None
        if classes is None
        else {split: stats.to_json() for split, stats in classes.stats.items()},
    )


def merged_splits(previous: DatasetInfo, added: Mapping[str, SplitInfo]) -> dict[str, SplitInfo]:
    """The splits after an append: each earlier split's shards, then this run's (whose
    names sort after them), the counts summed, the key and hash tables extended."""
    splits = {}
    for name in split_names([*previous.splits, *added]):
        old = previous.splits.get(name) or SplitInfo(name, 0, None, ())
        new = added[name]
        if old.key_table is None:
            tables = {"key_table": new.key_table}
        else:
            tables = {"appended_key_tables": (*old.appended_key_tables, new.key_table)}
        splits[name] = dataclasses.replace(
            old,
            num_examples=old.num_examples + new.num_examples,
            image_shape=_shape(old, new),
            shards=(*old.shards, *new.shards),
            appended_hashes=(*old.appended_hashes, *new.appended_hashes),
            **tables,
        )
    return splits


def _shape(old: SplitInfo, new: SplitInfo) -> tuple[int, int] | None:
    """One shape for the merged split only if both parts have it (an empty part agrees)."""
    shapes = [part.image_shape for part in (old, new) if part.num_examples]
    if not shapes or None in shapes or len(set(shapes)) != 1:
        return None
    return shapes[0]


def merged_rejects(previous_jsonl: bytes, new_rejects_jsonl: bytes, now_keys: set[str]) -> bytes:
    """rejects.jsonl after an append: the earlier rejects of keys this run did not account
    for again, then this run's, sorted as a run writes them (by key, reason, ...)."""
    lines = [
        line
        for line in previous_jsonl.splitlines()
        if line.strip() and json.loads(line).get("key") not in now_keys
    ]
    lines += [line for line in new_rejects_jsonl.splitlines() if line.strip()]
    rows = sorted(
        lines, key=lambda line: (json.loads(line)["key"], json.loads(line)["reason"], line)
    )
    return b"".join(line + b"\n" for line in rows)


def rejected_by_reason(rejects_jsonl: bytes) -> RejectCounts:
    """metadata.json's num_rejected of a rejects.jsonl."""
    rows = (json.loads(line) for line in rejects_jsonl.splitlines())
    return RejectCounts.count((row["key"], row["reason"]) for row in rows)
