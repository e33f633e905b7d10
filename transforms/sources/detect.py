"""Which annotation tool wrote a file or folder, from its content alone.

A folder is labelme's (its .json files). Anything else that is not a regular file (a FIFO,
a device) is refused before it is opened: a FIFO would block the read. A file is read no
further than its first 64 KB (and its top-level JSON keys, streamed through the bounded
reader, whose caps are a ValueError too): `<annotations` is CVAT for images; a JSON list is
a Label Studio export; an object with `images` or `categories` is COCO; an object with
`shapes` is one labelme file (labelme wants the folder). Anything else, or an object with
the keys of two formats, is a ValueError saying so.
"""

from __future__ import annotations

import os
import stat

import ijson

from transforms.bounded_text import CHUNK_BYTES, JsonReader
from transforms.files import open_regular

HEAD_BYTES = 64 << 10
TOP_KEYS_DEPTH = 32  # deeper than any format nests: the format's reader refuses it


def detect_format(path: str) -> str:
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return "labelme"
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path}: not a regular file (FIFO, device or socket)")
    with open_regular(path) as stream:
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
        with open_regular(path) as stream:
            reader = JsonReader(stream, path, depth=TOP_KEYS_DEPTH)
            for prefix, event, value in ijson.parse(reader, buf_size=CHUNK_BYTES):
                if prefix == "" and event == "map_key":
                    keys.add(value)
                elif prefix == "" and event == "end_map":
                    break
    except ijson.JSONError:
        pass  # the keys so far tell the format; its reader names the syntax error
    return keys
