"""UTF-8, nesting depth and token lengths of a JSON text, checked before parsing: the flag
files' name for the check every annotation file gets from the bounded reader
(transforms/bounded_text.py), which holds the one implementation."""

from __future__ import annotations

from transforms.bounded_text import CHUNK_BYTES, TextLimitError, check_json

JsonShapeError = TextLimitError
check_shape = check_json

__all__ = ["CHUNK_BYTES", "JsonShapeError", "check_shape"]
