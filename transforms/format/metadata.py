"""metadata.json: the commit marker of an output directory and the reader's table of shards."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Mapping
from typing import Any

from transforms.format import features, record_formats
from transforms.format.dataset_info import FORMAT_VERSION
from transforms.format.naming import SPLITS
from transforms.rejects import Reject

_SHARD_FIELDS = ("file", "num_examples", "bytes", "sha256")


def build_metadata(
    shards: Iterable[Mapping[str, Any]],
    rejects: Iterable[Reject],
    *,
    mask_format: str,
    parameters: Mapping[str, Any],
    versions: Mapping[str, str],
    key_tables: Mapping[str, Mapping[str, Any]] | None = None,
    tfds_files: Iterable[Mapping[str, Any]] = (),
    record_format: str = record_formats.DEFAULT,
) -> dict[str, Any]:
    """The metadata dict (its typed, checked form is transforms.format.dataset_info.DatasetInfo).

    `shards` are dicts with split, file, num_examples, bytes, sha256 and image_shapes, and
    optionally `index`: the {file, bytes, sha256} of the shard's record index. `key_tables`
    maps a split to the {file, bytes, sha256} of its key table; `tfds_files` lists the
    TFDS description files the same way (transforms.format.record_index,
    transforms.format.tfds_info).
    """
    by_split: dict[str, list[Mapping[str, Any]]] = {split: [] for split in SPLITS}
    for shard in shards:
        by_split[shard["split"]].append(shard)
    splits = {}
    for split, entries in by_split.items():
        entries = sorted(entries, key=lambda shard: shard["file"])
        shapes = sorted({tuple(shape) for shard in entries for shape in shard["image_shapes"]})
        splits[split] = {
            "num_examples": sum(shard["num_examples"] for shard in entries),
            "num_shards": len(entries),
            # [height, width] when every record has that size: readers may use static shapes.
            "image_shape": list(shapes[0]) if len(shapes) == 1 else None,
            "shards": [_shard_entry(shard) for shard in entries],
        }
        if key_tables and split in key_tables:
            splits[split]["key_table"] = _file_ref(key_tables[split])
    reasons: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    for reject in sorted(rejects):
        reasons[reject.reason.value] += 1
        examples.setdefault(reject.reason.value, reject.key)
    info = {
        "format_version": FORMAT_VERSION,
        "splits": splits,
        "num_rejected": {
            "total": sum(reasons.values()),
            "by_reason": dict(sorted(reasons.items())),
            "example_key": dict(sorted(examples.items())),
        },
        "features": features.SCHEMA,
        "mask_format": mask_format,
        "record_format": record_formats.get(record_format).name,
        "parameters": dict(parameters),
        "versions": dict(versions),
    }
    return with_tfds_files(info, tfds_files)


def with_tfds_files(info: dict[str, Any], refs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`info` listing the TFDS files' {file, bytes, sha256}, by name (none: not listed)."""
    listed = [_file_ref(ref) for ref in refs]
    return {**info, "tfds_files": sorted(listed, key=lambda ref: ref["file"])} if listed else info


def _file_ref(ref: Mapping[str, Any]) -> dict[str, Any]:
    return {key: ref[key] for key in ("file", "bytes", "sha256")}


def _shard_entry(shard: Mapping[str, Any]) -> dict[str, Any]:
    entry = {key: shard[key] for key in _SHARD_FIELDS}
    if shard.get("index") is not None:
        entry["index"] = _file_ref(shard["index"])
    return entry


def dumps(metadata: Mapping[str, Any]) -> bytes:
    return (json.dumps(metadata, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def rejects_jsonl(rejects: Iterable[Reject]) -> bytes:
    lines = [
        json.dumps(r.to_json_dict(), ensure_ascii=False, sort_keys=True) for r in sorted(rejects)
    ]
    return ("\n".join(lines) + "\n" if lines else "").encode()
