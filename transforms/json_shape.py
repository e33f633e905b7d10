"""UTF-8, nesting depth and token lengths of a JSON text, checked before parsing: the flag
files' name for the check every annotation file gets from the bounded reader
(transforms/bounded_text.py), which holds the one implementation; `loads` is the same check
for segprep's own side files, then json.loads."""

from __future__ import annotations

import json
from typing import Any

from transforms.bounded_text import CHUNK_BYTES, TextLimitError, check_json, check_json_bytes

JsonShapeError = TextLimitError
check_shape = check_json

# What segprep's own side files (manifest.json, journals, rejects.jsonl, duplicates.jsonl,
# hash rows, locks) nest at most is 4 levels; 32 leaves room and stops json's recursion.
SIDE_FILE_DEPTH = 32


class DuplicateKeyError(ValueError):
    """A JSON object that names one key twice: json.loads would keep the last silently."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise DuplicateKeyError(f"key {twice[:80]!r} appears twice in one object")
    return found


def loads(
    data: bytes | str, source: str, limit: int = SIDE_FILE_DEPTH, *, unique_keys: bool = False
) -> Any:
    """`data` parsed by json.loads once its shape is checked: a JsonShapeError (a ValueError,
    one line naming `source`) for what would end in RecursionError or a bad-UTF-8 error.
    `unique_keys`: an object naming a key twice is a DuplicateKeyError (segprep never writes
    one: a second `splits` would hide the first from a reader)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    check_json_bytes(raw, source, limit)
    return json.loads(raw, object_pairs_hook=_unique if unique_keys else None)


__all__ = [
    "CHUNK_BYTES",
    "SIDE_FILE_DEPTH",
    "DuplicateKeyError",
    "JsonShapeError",
    "check_shape",
    "loads",
]
