"""`segprep inspect OUT --duplicates`: a contact sheet of the duplicate groups, group by
group, each member from its record (RecordSource, by key) or, when it was rejected (drop,
leakage, a bad mask), from its original file."""

from __future__ import annotations

import sys

import numpy as np

from beam_pipeline.commands.inspect_sheet.command import write_sheet
from beam_pipeline.commands.inspect_sheet.drawing import (
    MAX_COUNT,
    TILE_HEIGHT,
    Entry,
    Sheet,
    render,
)
from beam_pipeline.commands.inspect_sheet.output import (
    check_out,
    default_sheet_path,
    load_metadata,
    require_dir,
)
from beam_pipeline.commands.inspect_sheet.rejects import (
    NoRejects,
    display_mask,
    partial_image,
    rejects_of,
)
from beam_pipeline.errors import UsageError
from transforms import files
from transforms.duplicates import parse_groups
from transforms.format.naming import DUPLICATES_FILE, REJECTS_FILE
from transforms.limits import FILE_LIMITS


def run_inspect_duplicates(directory: str, count: int, out: str | None) -> int:
    """CLI body, as inspect_sheet.run_inspect: the sheet PNG under a new name, its path last."""
    require_dir(directory)
    path = check_out(default_sheet_path(directory, out, "duplicates", False), directory)
    if count > MAX_COUNT:
        print(f"note: --count {count:,} capped at {MAX_COUNT}", file=sys.stderr)
        count = MAX_COUNT
    return write_sheet(path, lambda: duplicates_sheet(directory, count))


def duplicates_sheet(directory: str, count: int) -> Sheet:
    entries, shown, total = duplicate_entries(directory, count)
    title = (
        f"{directory} | duplicates: {len(entries)} entries of {shown} of {total} groups "
        f"({DUPLICATES_FILE}) | image, mask, overlay"
    )
    return render(entries, title)


def duplicate_entries(directory: str, count: int) -> tuple[list[Entry], int, int]:
    """Up to `count` entries, whole groups first; (entries, groups shown, groups)."""
    metadata = load_metadata(directory)
    section = metadata.get("duplicates") or {"mode": "off"}
    if section.get("mode") == "off":
        raise NoRejects(f"{directory} was prepared with --duplicates off: no groups to show")
    base = directory.rstrip("/")
    try:
        groups = parse_groups(
            files.read_bounded(files.join(base, DUPLICATES_FILE), FILE_LIMITS.index_bytes)
        )
    except (OSError, ValueError) as error:
        raise UsageError(f"{base}/{DUPLICATES_FILE}: {error}: run `segprep verify`") from None
    if not groups:
        raise NoRejects(f"{directory} has no duplicate groups ({DUPLICATES_FILE} is empty)")
    sources = record_sources(base, metadata["splits"])
    rejects = _rejects(base, {key for group in groups[:count] for key in group["keys"]})
    entries: list[Entry] = []
    shown = 0
    for number, group in enumerate(groups, start=1):
        if len(entries) >= count:
            break
        shown += 1
        about = f"group {number}: {group['kind']}, distance <= {group['max_distance']}"
        if group["conflicting_masks"]:
            about += ", masks differ"
        for key in group["keys"][: max(count - len(entries), 2)]:
            entries.append(_entry(key, about, sources, rejects))
    return entries[: max(count, 2)], shown, len(groups)


def record_sources(base: str, splits: dict, version: int | None = None) -> dict:
    """split -> RecordSource of every split with records (a group member is looked up in
    each; `report` shows members' thumbnails the same way)."""
    from shard_reader.source import RecordSource

    return {
        name: RecordSource(base, name, verify_index=False, version=version)
        for name, split in splits.items()
        if split.get("num_examples")
    }


def stored_item(key: str, sources: dict) -> tuple[str, dict] | None:
    """(split, decoded record) of the split that stores `key`; None when none does."""
    for split, source in sources.items():
        try:
            return split, source[source.index_of(key)]
        except KeyError:
            continue
    return None


def _entry(key: str, about: str, sources, rejects) -> Entry:
    stored = stored_item(key, sources)
    if stored is not None:
        split, item = stored
        mask = (item["mask"][..., 0] > 0).astype(np.uint8) * 255
        return Entry(key, item["image"], mask, (key, f"{about}; {split}"))
    reject = rejects.get(key)
    if reject is None:
        return Entry(key, None, None, (key, f"{about}; in no split, no reject"))
    image, image_problem = partial_image(reject.get("image"), TILE_HEIGHT)
    mask, mask_problem = display_mask(reject.get("mask"))
    caption = (key, f"{about}; rejected {reject.get('reason')}")
    return Entry(key, image, mask, caption, image_problem or "no image", mask_problem or "no mask")


def _rejects(base: str, wanted: set[str]) -> dict[str, dict]:
    try:
        return rejects_of(base, wanted, files.join(base, REJECTS_FILE))
    except (OSError, files.LineTooLongError) as error:
        raise UsageError(f"{error}: run `segprep verify {base}`") from None
