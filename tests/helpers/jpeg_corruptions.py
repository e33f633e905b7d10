"""Seeded corruptions of JPEG files, and the verdict of the image check on each.

Shared by tests/test_jpeg_validation_fuzz.py and benchmarks/jpeg_fuzz.py: the image check
may decode a kept JPEG at 1/8 scale only if it accepts and rejects exactly the files the
full-size decode does. Corruptions are of the kinds downloads and disks produce: bit flips,
truncation, inserted and deleted bytes, and broken markers (a changed marker code or segment
length, a dropped or doubled segment, a lost 0xFF).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Iterator

import numpy as np
from PIL import Image

from transforms.codecs.image import validate_image
from transforms.rejects import RejectError

KINDS = ("bit_flip", "truncate", "insert", "delete", "marker")
_STANDALONE = {0xD8, 0xD9, 0x01} | set(range(0xD0, 0xD8))  # SOI, EOI, TEM, RSTn


def generated_jpegs(seed: int, height: int, width: int) -> dict[str, bytes]:
    """Sample-data portraits encoded the ways cameras and tools do (RGB, so kept as is)."""
    from beam_pipeline.commands.sample_data import portrait

    rng = np.random.default_rng(seed)
    encodings = {
        "baseline_420_q90": {"quality": 90},
        "baseline_444_q95": {"quality": 95, "subsampling": 0},
        "progressive_q85": {"quality": 85, "progressive": True},
        "optimized_422_q75": {"quality": 75, "subsampling": 1, "optimize": True},
        "restart_markers_q90": {"quality": 90, "restart_marker_rows": 1},
    }
    photos = {}
    for name, params in encodings.items():
        image, _ = portrait(rng, height, width)
        out = io.BytesIO()
        Image.fromarray(image).save(out, format="JPEG", **params)
        photos[name] = out.getvalue()
    return photos


def segments(data: bytes) -> list[tuple[int, int]]:
    """(offset of the 0xFF, total length) of each marker segment before the first scan's
    data, the scan header included; then the markers inside and after the entropy data."""
    found, position = [], 2 if data[:2] == b"\xff\xd8" else 0
    while position + 4 <= len(data) and data[position] == 0xFF:
        code = data[position + 1]
        if code in _STANDALONE:
            found.append((position, 2))
            position += 2
            continue
        length = int.from_bytes(data[position + 2 : position + 4], "big")
        found.append((position, 2 + length))
        position += 2 + length
        if code == 0xDA:  # start of scan: entropy-coded data follows
            break
    for offset in range(position, len(data) - 1):
        if data[offset] == 0xFF and data[offset + 1] not in (0x00, 0xFF):
            found.append((offset, 2))
    return found


def corrupt(data: bytes, kind: str, rng: np.random.Generator) -> tuple[bytes, str]:
    """One corrupted copy of `data` and a short description of what was done."""
    size = len(data)
    if kind == "bit_flip":
        damaged = bytearray(data)
        flips = int(rng.integers(1, 5))
        for _ in range(flips):
            damaged[int(rng.integers(0, size))] ^= 1 << int(rng.integers(0, 8))
        return bytes(damaged), f"{flips} bit(s) flipped"
    if kind == "truncate":
        cut = int(rng.integers(2, size))
        return data[:cut], f"cut at {cut}/{size}"
    if kind == "insert":
        at, count = int(rng.integers(0, size)), int(rng.integers(1, 17))
        noise = rng.integers(0, 256, size=count, dtype=np.uint8).tobytes()
        return data[:at] + noise + data[at:], f"{count} byte(s) inserted at {at}"
    if kind == "delete":
        at, count = int(rng.integers(0, size - 1)), int(rng.integers(1, 17))
        return data[:at] + data[at + count :], f"{count} byte(s) deleted at {at}"
    if kind != "marker":
        raise ValueError(f"unknown corruption {kind!r}")
    listed = segments(data)
    offset, length = listed[int(rng.integers(0, len(listed)))]
    code = data[offset + 1]
    damaged = bytearray(data)
    action = int(rng.integers(0, 5))
    if action == 0:
        damaged[offset + 1] = int(rng.integers(0xC0, 0xFF))
        return bytes(damaged), f"marker {code:02X} at {offset} became {damaged[offset + 1]:02X}"
    if action == 1 and length > 2:
        new = int(rng.choice([0, 1, 2, length - 3, length - 1, length + 1, 0xFFFF]))
        damaged[offset + 2 : offset + 4] = new.to_bytes(2, "big")
        return bytes(damaged), f"length of marker {code:02X} at {offset} set to {new}"
    if action == 2:
        return data[:offset] + data[offset + length :], f"marker {code:02X} at {offset} dropped"
    if action == 3:
        segment = data[offset : offset + length]
        return data[:offset] + segment + data[offset:], f"marker {code:02X} at {offset} doubled"
    damaged[offset] = 0x00
    return bytes(damaged), f"0xFF of marker {code:02X} at {offset} lost"


@dataclasses.dataclass(frozen=True)
class Case:
    photo: str
    kind: str
    description: str
    data: bytes


def cases(photos: dict[str, bytes], count: int, seed: int) -> Iterator[Case]:
    """`count` corruptions, the kinds and photos taken in turn, each draw from `seed`."""
    rng = np.random.default_rng(seed)
    names = sorted(photos)
    for number in range(count):
        photo = names[number % len(names)]
        kind = KINDS[(number // len(names)) % len(KINDS)]
        data, description = corrupt(photos[photo], kind, rng)
        yield Case(photo, kind, description, data)


def verdict(data: bytes, *, scaled_check: bool, thumbnail: bool = False) -> tuple:
    """What the writer makes of the file: ("accept", height, width, transcoded, sha256 of
    the stored JPEG) or ("reject", reason); an exception validate_image lets through (the
    record builder turns it into image_unreadable) is named by its type."""
    try:
        image = validate_image(data, scaled_check=scaled_check, thumbnail=thumbnail)
    except RejectError as error:
        return ("reject", error.reason.value)
    except Exception as error:  # noqa: BLE001 - any escape is part of the verdict
        return ("reject", f"escaped {type(error).__name__}")
    digest = hashlib.sha256(image.jpeg).hexdigest()[:16]
    return ("accept", image.height, image.width, image.transcoded, digest)
