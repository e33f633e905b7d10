"""`segprep inspect DIR`: build the sheet (examples or rejects) and write it under a new name."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable

from beam_pipeline.commands.inspect_sheet.drawing import (
    COLUMNS,
    MAX_COUNT,
    TILE_HEIGHT,
    Sheet,
    render,
    sheet_size,
)
from beam_pipeline.commands.inspect_sheet.examples import class_entries, shard_entries
from beam_pipeline.commands.inspect_sheet.output import (
    check_out,
    default_sheet_path,
    load_metadata,
    require_dir,
    write_new,
)
from beam_pipeline.commands.inspect_sheet.rejects import NoRejects, reject_entries
from beam_pipeline.errors import UsageError, printable
from transforms.format.naming import METADATA_FILE, REJECTS_FILE


def build_sheet(
    directory: str, split: str, count: int, rejects: bool, version: int | None = None
) -> Sheet:
    """The contact sheet for `directory`: shard examples of `split`, or rejects."""
    if count < 1:
        raise UsageError(f"--count must be at least 1, got {count}")
    if rejects:
        entries, total, source = reject_entries(directory, count)
        staged = source != f"{directory.rstrip('/')}/{REJECTS_FILE}"
        origin = f" (no {METADATA_FILE}: staged by run {source.split('/')[-2]})" if staged else ""
        title = (
            f"{directory} | rejects{origin}: {len(entries)} of {total}, from the original "
            "files (partly decoded; grey = unreadable) | image, mask, overlay"
        )
        return render(entries, title)
    metadata = load_metadata(directory)
    if version is not None:  # the split as that version of a grown output was
        from transforms.format.dataset_info import DatasetInfo, MetadataError

        try:
            metadata = DatasetInfo.from_json(metadata).at_version(version).to_json()
        except (MetadataError, ValueError) as error:
            raise UsageError(f"{directory}: {error}") from None
    if "classes" in metadata:
        entries, total, legend = class_entries(directory, metadata, split, count)
        colours = "the run's colormap" if metadata["classes"].get("colormap") else "VOC's palette"
        title = (
            f"{directory} | {split}: {len(entries)} of {total} examples, class ids as stored, "
            f"coloured by {colours} | image, classes, overlay"
        )
        return render(entries, title, legend)
    entries, total = shard_entries(directory, metadata, split, count)
    title = (
        f"{directory} | {split}: {len(entries)} of {total} examples as training reads "
        "them (mask thresholded at 128) | image, mask, overlay"
    )
    return render(entries, title)


def run_inspect(
    directory: str,
    split: str,
    count: int,
    out: str | None,
    rejects: bool,
    version: int | None = None,
) -> int:
    """CLI body: write the sheet PNG under a new name; the last line printed is its path."""
    require_dir(directory)  # before --out's checks: a wrong dataset is the likelier mistake
    path = check_out(default_sheet_path(directory, out, split, rejects), directory)
    if count > MAX_COUNT:
        height = sheet_size(MAX_COUNT, (TILE_HEIGHT, TILE_HEIGHT))[1]
        print(
            f"note: --count {count:,} capped at {MAX_COUNT}: {MAX_COUNT // COLUMNS} rows of "
            f"{COLUMNS} already make a PNG about {height:,} pixels tall",
            file=sys.stderr,
        )
        count = MAX_COUNT
    return write_sheet(path, lambda: build_sheet(directory, split, count, rejects, version))


def write_sheet(path: str, build: Callable[[], Sheet]) -> int:
    """The sheet `build` draws, written as a PNG under a new name (write_new) and its path
    printed; or, when there is nothing to draw (NoRejects), the good news printed. Exit 0."""
    try:
        sheet = build()
    except NoRejects as news:
        print(printable(str(news)))
        return 0
    buffer = io.BytesIO()
    sheet.image.save(buffer, format="PNG")
    print(printable(str(write_new(path, buffer.getvalue()))))
    return 0
