"""Which annotation tool wrote a file or folder, from its content alone.

A folder is labelme's (its .json files). A file is read no further than its first 64 KB
(and its top-level JSON keys, streamed): `<annotations` is CVAT for images; a JSON list is
a Label Studio export; an object with `images` or `categories` is COCO; an object with
`shapes` is one labelme file (labelme wants the folder). Anything else, or an object with
the keys of two formats, is a ValueError saying so.
"""

from __future__ import annotations

import os

import ijson

HEAD_BYTES = 64 << 10


def detect_format(path: str) -> str:
    if os.path.isdir(path):
        return "labelme"
    with open(path, "rb") as stream:
        head = stream.read(HEAD_BYTES)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"<"):
        if b"<annotations" in head:
            return "cvat"
        raise ValueError(f"{path}: XML, but not CVAT for images (no <annotations>)")
    if text.startswith(b"["):
        return "labelstudio"
    if text.startswith(b"{"):
        keys = _top_keys(path)
        found = set()
        if keys & {"images", "categories"}:
            found.add("coco")
        if "shapes" in keys:
            found.add("labelme")
        if len(found) == 1:
            kind = found.pop()
            if kind == "labelme":
                raise ValueError(
                    f"{path}: one labelme file; give the folder of labelme files instead"
                )
            return kind
        if found:
            raise ValueError(
                f"{path}: ambiguous: has the keys of {' and '.join(sorted(found))}; "
                "give --annotation_format"
            )
    raise ValueError(f"{path}: not an annotation format segprep knows; give --annotation_format")


def _top_keys(path: str) -> set[str]:
    keys: set[str] = set()
    try:
        with open(path, "rb") as stream:
            for prefix, event, value in ijson.parse(stream):
                if prefix == "" and event == "map_key":
                    keys.add(value)
                elif prefix == "" and event == "end_map":
                    break
    except ijson.JSONError:
        pass
    return keys
