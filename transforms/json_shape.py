"""UTF-8, nesting depth and token lengths of a JSON text, checked before parsing: the flag
files' name for the check every annotation file gets from the bounded reader
(transforms/bounded_text.py), which holds the one implementation; `loads` is the same check
for segprep's own side files, then json.loads."""

from __future__ import annotations

import json
from typing import Any

from transforms.bounded_text import CHUNK_BYTES, TextLimitError, check_json

JsonShapeError = TextLimitError
check_shape = check_json

# What segprep's own side files (manifest.json, journals, rejects.jsonl, duplicates.jsonl,
# hash rows, locks) nest at most is 4 levels; 32 leaves room and stops json's recursion.
SIDE_FILE_DEPTH = 32


def loads(data: bytes | str, source: str, limit: int = SIDE_FILE_DEPTH) -> Any:
    """`data` parsed by json.loads once its shape is checked: a JsonShapeError (a ValueError,
    one line naming `source`) for what would end in RecursionError or a bad-UTF-8 error."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    check_shape(
        (raw[start : start + CHUNK_BYTES] for start in range(0, len(raw), CHUNK_BYTES)),
        source,
        limit,
    )
    return json.loads(raw)


__all__ = ["CHUNK_BYTES", "SIDE_FILE_DEPTH", "JsonShapeError", "check_shape", "loads"]
