"""A cheap look at a JSON byte stream before a parser sees it: UTF-8, and bracket depth.

Parsers pay for depth: Python's json recurses (RecursionError past ~1000 levels) and ijson's
prefix tracking grows quadratically (20,000 nested brackets cost it about 1 GB; 60,000 in a
123 KB file, 23 GB). No format segprep reads needs more than a handful of levels, so a file
nested deeper than `limit` is refused before parsing, in one streaming pass over the bytes at
C speed: escapes are dropped with a regex, everything but quotes and brackets with
bytes.translate, and numpy counts the rest (quotes toggle "inside a string", brackets outside
strings move the depth).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

CHUNK_BYTES = 1 << 20
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_KEEP = b'"[]{}'
_DROP = bytes(byte for byte in range(256) if byte not in _KEEP)
_QUOTE, _OPENERS, _CLOSERS = ord('"'), (ord("["), ord("{")), (ord("]"), ord("}"))


# What segprep's own side files (manifest.json, journals, rejects.jsonl, duplicates.jsonl,
# hash rows, locks) nest at most is 4 levels; 32 leaves room and stops json's recursion.
SIDE_FILE_DEPTH = 32


class JsonShapeError(ValueError):
    """Not UTF-8, or nested deeper than allowed; the message is one line."""


def check_shape(chunks: Iterable[bytes], source: str, limit: int) -> None:
    """JsonShapeError naming `source` if the bytes are not UTF-8 or nest deeper than `limit`.

    Only shape is checked: syntax is the parser's job, and a bracket inside a string (escaped
    quotes included) is not counted.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    depth, inside, carry, offset = 0, False, b"", 0
    for chunk in chunks:
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError as error:
            raise JsonShapeError(
                f"{source}: not UTF-8 text (byte {offset + error.start}: {error.reason})"
            ) from None
        offset += len(chunk)
        text = carry + chunk
        # A trailing odd run of backslashes escapes the next chunk's first byte: keep one back.
        tail = len(text) - len(text.rstrip(b"\\"))
        carry = b"\\" if tail % 2 else b""
        text = _ESCAPE.sub(b"", text[: len(text) - len(carry)])
        marks = np.frombuffer(text.translate(None, _DROP), np.uint8)
        depth, deepest, inside = _walk(marks, depth, inside)
        if deepest > limit:
            raise JsonShapeError(
                f"{source}: nested deeper than {limit} levels, more than the format has"
            )
        if depth < 0:
            return  # unbalanced: the parser names the syntax error
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise JsonShapeError(f"{source}: not UTF-8 text (truncated at the end)") from None


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


def _walk(marks: np.ndarray, depth: int, inside: bool) -> tuple[int, int, bool]:
    """(depth after, deepest level reached, inside a string after) for `marks`, the quotes
    and brackets of a stretch of JSON."""
    if not len(marks):
        return depth, depth, inside
    quotes = marks == _QUOTE
    # Quotes so far, this one included: odd means this byte is in (or opens) a string.
    parity = (np.cumsum(quotes) + inside) % 2
    outside = (parity == 0) & ~quotes
    steps = np.where(np.isin(marks, _OPENERS), 1, np.where(np.isin(marks, _CLOSERS), -1, 0))
    levels = depth + np.cumsum(np.where(outside, steps, 0))
    if int(levels.min()) < 0:
        return -1, int(levels.max()), False
    return int(levels[-1]), int(levels.max()), bool(parity[-1])
