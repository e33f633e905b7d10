"""Checks before anything runs: a wrong folder or flag is one clear line, not a failed job."""

from __future__ import annotations

import io
import os

from beam_pipeline.errors import UsageError
from beam_pipeline.runtime.local_listing import LocalListing, keys_in, list_local
from transforms import files
from transforms.pairing import MASK_SUFFIXES, ONE_FOLDER_MASK_SUFFIXES, Layout, Role, basename


def check_listing(layout: Layout, listing: LocalListing, flags: tuple[str, str]) -> None:
    """Local inputs: files exist, and at least one image has its mask."""
    image_flag, mask_flag = flags
    if layout.annotations is not None:
        if listing.files == 0:
            raise UsageError(f"{image_flag} {layout.image_dir} holds no files: check the path")
        if not listing.paired:
            raise UsageError(
                f"no image in {image_flag} {layout.image_dir} is named by {mask_flag} "
                f"{layout.annotations}: its images' file_name must be the image's path "
                "relative to that folder (e.g. 000000397133.jpg)"
            )
        return
    if listing.files == 0:
        raise UsageError(
            f"{image_flag} {layout.image_dir}"
            + ("" if layout.one_folder else f" and {mask_flag} {layout.mask_dir}")
            + " hold no files: check the paths"
        )
    if listing.paired:
        return
    if not layout.one_folder and list_local(Layout(layout.mask_dir, layout.image_dir)).paired:
        raise UsageError(
            f"the folders look swapped: {image_flag} {layout.image_dir} holds masks and "
            f"{mask_flag} {layout.mask_dir} images; pass them the other way round"
        )
    if layout.one_folder:
        suffixes = ", ".join(f"KEY{suffix}" for suffix in ONE_FOLDER_MASK_SUFFIXES)
        raise UsageError(
            f"{image_flag} {layout.image_dir}: no image KEY.jpg|.jpeg|.png has a mask beside it "
            f"named {suffixes}{_two_folder_hint(layout.image_dir)}"
        )
    suffixes = ", ".join(f"KEY{suffix}" for suffix in MASK_SUFFIXES)
    raise UsageError(
        f"no image in {image_flag} has a mask in {mask_flag} {layout.mask_dir}; masks must be "
        f"named {suffixes} for an image KEY.jpg: check both folders"
    )


def _two_folder_hint(folder: str, most: int = 6) -> str:
    """One folder given, but it holds an image folder and a mask folder: name them."""
    try:
        subfolders = sorted(entry.path for entry in os.scandir(folder) if _is_folder(entry))
    except OSError:
        return ""
    if len(subfolders) > most:
        return ""
    # Each sub-folder walked once per role, not once per pair of them.
    image_keys = {folder: keys_in(folder, Role.IMAGE, "--data_dir") for folder in subfolders}
    mask_keys = {folder: keys_in(folder, Role.MASK, "--data_dir") for folder in subfolders}
    for images in subfolders:
        for masks in subfolders:
            if images != masks and image_keys[images] & mask_keys[masks]:
                return f"; it holds two folders: pass --image_dir {images} --mask_dir {masks}"
    return ""


def _is_folder(entry: os.DirEntry) -> bool:
    return entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".")


def check_remote_inputs(layout: Layout, flags: tuple[str, str]) -> None:
    """gs:// inputs: the folders hold something, and not each the other's kind (a cheap
    listing call or two each)."""
    for flag, path in zip(flags, (layout.image_dir, layout.mask_dir), strict=True):
        if path is None:  # masks from a COCO file, read by the launcher already
            continue
        if not files.has_files(path):
            raise UsageError(f"{flag} {path} has no files: check the path")
    if layout.mask_dir is None or layout.one_folder or layout.annotations is not None:
        return
    images, masks = (
        _kinds(files.first_names(path, 50)) for path in (layout.image_dir, layout.mask_dir)
    )
    if images == {"mask"} and masks == {"image"}:
        image_flag, mask_flag = flags
        raise UsageError(
            f"the folders look swapped: {image_flag} {layout.image_dir} holds masks and "
            f"{mask_flag} {layout.mask_dir} images; pass them the other way round"
        )


def _kinds(names: list[str]) -> set[str]:
    """What a sample of a folder's names can only be: "image" (.jpg, .jpeg) or "mask" (.mat,
    _mask.png); a plain .png may be either and says nothing."""
    kinds = set()
    for name in names:
        lower = name.lower()
        if lower.endswith((".jpg", ".jpeg")):
            kinds.add("image")
        elif lower.endswith((".mat", "_mask.png")):
            kinds.add("mask")
    return kinds


def check_mask_key(layout: Layout, listing: LocalListing | None, requested: str) -> None:
    """Look inside one .mat mask: a misspelt variable would otherwise reject every entry."""
    import scipy.io

    from transforms.codecs.mask import DEFAULT_MASK_KEY

    if listing is not None:
        path = listing.first_mat_mask
    else:
        path = _first_remote_mat(layout.mask_dir)
    if path is None:
        return
    try:
        data = files.read_bounded(path, 64 << 20)
        variables = [name for name, *_ in scipy.io.whosmat(io.BytesIO(data))]
    except Exception:  # noqa: BLE001 - unreadable or v7.3: the job reports it per entry
        return
    variable = requested.split(".")[0]  # GTcls.Segmentation: a field of struct GTcls
    if variable not in variables:
        hint = DEFAULT_MASK_KEY if DEFAULT_MASK_KEY in variables else ", ".join(variables)
        raise UsageError(
            f"--mask_key {requested!r} is not a variable of {basename(path)} "
            f"(it has: {', '.join(variables) or 'none'}): pass --mask_key {hint} or leave it out"
        )
    _check_mask_field(data, path, requested)


def _check_mask_field(data: bytes, path: str, requested: str) -> None:
    """A struct's field path (or a struct named without one), checked on the first file."""
    from transforms.codecs.mask import load_mask
    from transforms.rejects import Reason, RejectError

    try:
        load_mask(data, basename(path), requested)
    except RejectError as error:
        if error.reason is Reason.MASK_VARIABLE:
            detail = f"--mask_key {requested!r}: in {basename(path)}, {error.detail}"
            raise UsageError(detail) from None


def _first_remote_mat(mask_dir: str) -> str | None:
    from apache_beam.io.filesystems import FileSystems

    try:
        found = FileSystems.match([mask_dir + "**.mat"], limits=[1])[0]
    except Exception:  # noqa: BLE001 - BeamIOError: no .mat file, nothing to check
        return None
    return found.metadata_list[0].path if found.metadata_list else None
