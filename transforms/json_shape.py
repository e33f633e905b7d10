"""UTF-8, nesting depth and token lengths of a JSON text, checked before parsing: the flag
files' name for the check every annotation file gets from the bounded reader
(transforms/bounded_text.py), which holds the one implementation; `loads` is the same check
for segprep's own side files, then json.loads."""

from __future__ import annotations

import json
import re
from typing import Any

from transforms.bounded_text import CHUNK_BYTES, TextLimitError, check_json, check_json_bytes

JsonShapeError = TextLimitError
check_shape = check_json

# What segprep's own side files (manifest.json, journals, rejects.jsonl, duplicates.jsonl,
# hash rows, locks) nest at most is 4 levels; 32 leaves room and stops json's recursion.
SIDE_FILE_DEPTH = 32


# A \u escape of half a UTF-16 surrogate pair: json takes it, but the text it makes is one
# UTF-8 cannot hold (the same surrogate written raw is refused as not UTF-8), so printing
# or storing it again fails far from the file. The pattern only finds lines to look at.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class LoneSurrogateError(TextLimitError):
    """JSON whose text holds a lone UTF-16 surrogate (a \\ud800 escape): not UTF-8 text."""


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
    one line naming `source`) for what would end in RecursionError or a bad-UTF-8 error,
    and a LoneSurrogateError (one) for a string no UTF-8 writer or printer takes.
    `unique_keys`: an object naming a key twice is a DuplicateKeyError (segprep never writes
    one: a second `splits` would hide the first from a reader)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    check_json_bytes(raw, source, limit)
    value = json.loads(raw, object_pairs_hook=_unique if unique_keys else None)
    if _SURROGATE_ESCAPE.search(raw):  # else no string of it can hold one
        lone = _SURROGATE.search(json.dumps(value, ensure_ascii=False))
        if lone:
            escape = lone.group().encode("unicode_escape").decode("ascii")
            raise LoneSurrogateError(
                f"{source}: a {escape} escape, half a UTF-16 surrogate pair: not text UTF-8 "
                "can hold",
                too_large=False,
            )
    return value


__all__ = [
    "CHUNK_BYTES",
    "SIDE_FILE_DEPTH",
    "DuplicateKeyError",
    "JsonShapeError",
    "LoneSurrogateError",
    "check_shape",
    "loads",
]
