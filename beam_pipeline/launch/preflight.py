"""Checks before anything runs: a wrong folder or flag is one clear line, not a failed job."""

from __future__ import annotations

import dataclasses
import io

import scipy.io
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.errors import UsageError
from beam_pipeline.runtime import storage
from segcore.mask_codec import DEFAULT_MASK_KEY
from segcore.pairing import MASK_SUFFIXES, basename, image_key, mask_key


@dataclasses.dataclass(frozen=True)
class LocalListing:
    """Every path under both local input folders, listed once before the job: for these
    checks and for the progress bar's total (the job lists again, in the pipeline)."""

    image_dir: str
    mask_dir: str
    images: list[str]
    masks: list[str]


def list_local_inputs(image_dir: str, mask_dir: str) -> LocalListing | None:
    """None for gs:// folders: listing a bucket twice is not worth a progress bar."""
    if not (storage.is_local(image_dir) and storage.is_local(mask_dir)):
        return None
    return LocalListing(
        image_dir, mask_dir, storage.list_dir(image_dir), storage.list_dir(mask_dir)
    )


def check_inputs(
    image_dir: str,
    mask_dir: str,
    requested_mask_key: str | None,
    listing: LocalListing | None = None,
) -> None:
    """Both folders hold files; (local) at least one pair; --mask_key names a variable."""
    for flag, path, paths in (
        ("--image_dir", image_dir, listing and listing.images),
        ("--mask_dir", mask_dir, listing and listing.masks),
    ):
        if not (paths if listing else storage.has_files(path)):
            raise UsageError(
                f"{flag} {path} has no files: check the path (and that it is a folder)"
            )
    if listing is not None:
        _check_some_pair(listing)
    if requested_mask_key is not None:
        _check_mask_key(mask_dir, requested_mask_key)


def _keys(root: str, paths: list[str], key_of) -> tuple[set[str], str | None]:
    keys = {key for key in (key_of(path[len(root) :]) for path in paths) if key is not None}
    return keys, (basename(paths[0]) if paths else None)


def _check_some_pair(listing: LocalListing) -> None:
    image_dir, mask_dir = listing.image_dir, listing.mask_dir
    images, image_example = _keys(image_dir, listing.images, image_key)
    masks, mask_example = _keys(mask_dir, listing.masks, mask_key)
    if images & masks:
        return
    if not images:
        raise UsageError(
            f"--image_dir {image_dir} has no .jpg, .jpeg or .png files (e.g. {image_example}): "
            "check the folder"
        )
    suffixes = ", ".join(f"KEY{suffix}" for suffix in MASK_SUFFIXES)
    raise UsageError(
        f"no image in --image_dir has a mask in --mask_dir {mask_dir} (e.g. {mask_example}); "
        f"masks must be named {suffixes} for an image KEY.jpg: check --mask_dir"
    )


def _check_mask_key(mask_dir: str, requested: str) -> None:
    """Look inside one .mat mask: a misspelt variable would otherwise reject every entry."""
    try:
        found = FileSystems.match([storage.normalize_dir(mask_dir) + "**.mat"], limits=[1])[0]
    except Exception:  # noqa: BLE001 - BeamIOError: no .mat file, nothing to check
        return
    if not found.metadata_list:
        return
    path = found.metadata_list[0].path
    try:
        variables = [name for name, *_ in scipy.io.whosmat(io.BytesIO(storage.read_bytes(path)))]
    except Exception:  # noqa: BLE001 - unreadable or v7.3: the job reports it per entry
        return
    if requested not in variables:
        hint = DEFAULT_MASK_KEY if DEFAULT_MASK_KEY in variables else ", ".join(variables)
        raise UsageError(
            f"--mask_key {requested!r} is not a variable of {basename(path)} "
            f"(it has: {', '.join(variables) or 'none'}): pass --mask_key {hint} or leave it out"
        )
