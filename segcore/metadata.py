"""metadata.json: the commit marker of an output directory and the reader's table of shards."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Mapping
from typing import Any

from segcore import features
from segcore.naming import SPLITS
from segcore.rejects import Reject

FORMAT_VERSION = 1


def build_metadata(
    shards: Iterable[Mapping[str, Any]],
    rejects: Iterable[Reject],
    *,
    mask_format: str,
    parameters: Mapping[str, Any],
    versions: Mapping[str, str],
) -> dict[str, Any]:
    """The metadata dict.

    `shards` are dicts with split, file, num_examples, bytes, sha256 and image_shapes.
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
            "shards": [
                {key: shard[key] for key in ("file", "num_examples", "bytes", "sha256")}
                for shard in entries
            ],
        }
    reasons: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    for reject in sorted(rejects):
        reasons[reject.reason.value] += 1
        examples.setdefault(reject.reason.value, reject.key)
    return {
        "format_version": FORMAT_VERSION,
        "splits": splits,
        "num_rejected": {
            "total": sum(reasons.values()),
            "by_reason": dict(sorted(reasons.items())),
            "example_key": dict(sorted(examples.items())),
        },
        "features": features.SCHEMA,
        "mask_format": mask_format,
        "parameters": dict(parameters),
        "versions": dict(versions),
    }


def dumps(metadata: Mapping[str, Any]) -> bytes:
    return (json.dumps(metadata, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def rejects_jsonl(rejects: Iterable[Reject]) -> bytes:
    lines = [
        json.dumps(r.to_json_dict(), ensure_ascii=False, sort_keys=True) for r in sorted(rejects)
    ]
    return ("\n".join(lines) + "\n" if lines else "").encode()
