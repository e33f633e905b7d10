"""Which files are images, which are masks, and which key each belongs to."""

from __future__ import annotations

import dataclasses
import posixpath

from segcore.rejects import Reason, Reject

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
# Checked in this order: `00001_mask.mat` gives key `00001`, not `00001_mask`.
MASK_SUFFIXES = ("_mask.mat", "_mask.png", ".mat", ".png")


@dataclasses.dataclass(frozen=True, order=True)
class SourceFile:
    path: str
    size: int


def basename(path: str) -> str:
    """Last path component of a local or gs:// path."""
    return posixpath.basename(path.replace("\\", "/").rstrip("/"))


def image_key(relative_path: str) -> str | None:
    """`a/00001` for `a/00001.jpg` (any case of .jpg/.jpeg/.png), None for other files.

    Keys keep the sub-folder, so `a/1.jpg` and `b/1.jpg` are two entries, paired with
    `a/1_mask.mat` and `b/1_mask.mat`.
    """
    return _strip_suffix(relative_path, IMAGE_EXTENSIONS)


def mask_key(relative_path: str) -> str | None:
    """`00001` for `00001_mask.mat`, `00001.mat`, `00001_mask.png` or `00001.png`."""
    return _strip_suffix(relative_path, MASK_SUFFIXES)


def _strip_suffix(relative_path: str, suffixes: tuple[str, ...]) -> str | None:
    name = basename(relative_path)
    if name.startswith("."):
        return None  # hidden files (.DS_Store, ._00001.jpg) are never data
    lowered = name.lower()
    for suffix in suffixes:
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return relative_path[: -len(suffix)]
    return None


@dataclasses.dataclass(frozen=True)
class Pair:
    key: str
    image: SourceFile
    mask: SourceFile


def resolve_pair(key: str, images: list[SourceFile], masks: list[SourceFile]) -> Pair | Reject:
    """Exactly one image and one mask make a pair; anything else is a reject with a reason."""
    images, masks = sorted(images), sorted(masks)
    image = images[0].path if images else None
    mask = masks[0].path if masks else None
    if len(images) > 1 or len(masks) > 1:
        many = images if len(images) > 1 else masks
        kind = "images" if len(images) > 1 else "masks"
        names = ", ".join(basename(f.path) for f in many)
        return Reject(
            key, Reason.DUPLICATE_KEY, f"{len(many)} {kind} for one key: {names}", image, mask
        )
    if not images:
        return Reject(key, Reason.MISSING_IMAGE, f"mask {basename(mask)} has no image", None, mask)
    if not masks:
        return Reject(key, Reason.MISSING_MASK, f"image {basename(image)} has no mask", image, None)
    return Pair(key, images[0], masks[0])
