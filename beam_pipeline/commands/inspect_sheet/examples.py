"""The first records of a split as entries of a sheet: pixels as the readers decode them.

Records come through the file layer and the record-format adapter, and are decoded by the
readers' own `shard_reader.source.decode_example` (simplejpeg with TensorFlow's DCT, mask
thresholded at 128), so a mask that looks right here is right for the model. A class-id output
shows its stored ids in colour (the run's colormap, else Pascal VOC's palette).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from beam_pipeline.commands.inspect_sheet.drawing import (
    BACKGROUND,
    IGNORE_COLOUR,
    MAX_LEGEND_ITEMS,
    Entry,
)
from beam_pipeline.commands.shard_records import record_format, shard_records
from beam_pipeline.errors import UsageError
from transforms import files
from transforms.format.dataset_info import ClassesInfo, MetadataError


def split_total(metadata: dict, directory: str, split: str) -> int:
    splits = metadata.get("splits", {})
    if split not in splits:
        raise UsageError(f"--split {split!r} not in {directory}; it has {sorted(splits)}")
    total = splits[split].get("num_examples", 0)
    if not total:
        raise UsageError(f"--split {split!r} of {directory} has no examples")
    return total


def _decoded(
    directory: str, metadata: dict, split: str, count: int, classes: ClassesInfo | None
) -> Iterator[dict[str, Any]]:
    """The first `count` records of `split`, decoded, in shard order."""
    from shard_reader.source import decode_example

    adapter = record_format(metadata)
    mask_format = metadata.get("mask_format")
    read = 0
    for shard in metadata["splits"][split]["shards"]:
        path = files.join(directory, shard["file"])
        with shard_records(path, shard["file"], adapter) as payloads:
            for number, serialized in enumerate(payloads):
                where = f"{shard['file']} record {number}"
                yield decode_example(serialized, mask_format, where, classes=classes)
                read += 1
                if read == count:
                    return


def _unreadable(directory: str, error: Exception) -> UsageError:
    return UsageError(
        f"{directory} cannot be read ({type(error).__name__}: {error}): "
        f"run `segprep verify {directory}`"
    )


def shard_entries(
    directory: str, metadata: dict, split: str, count: int
) -> tuple[list[Entry], int]:
    """The first `count` examples of `split` exactly as the readers yield them."""
    total = split_total(metadata, directory, split)
    entries = []
    try:
        for item in _decoded(directory, metadata, split, count, None):
            binary = item["mask"][..., 0]  # the reader's {0, 1} after thresholding at 128
            pixels = item["image"]
            caption = (
                item["key"],
                f"{pixels.shape[0]}x{pixels.shape[1]} (HxW), foreground {binary.mean():.1%}",
            )
            display = (binary * 255).astype(np.uint8)
            entries.append(Entry(caption[0], pixels, display, caption))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise _unreadable(directory, error) from None
    return entries, total


def class_palette(classes: dict) -> np.ndarray:
    """[size, 3] uint8 colour of every stored value: the colormap's, else Pascal VOC's
    palette (distinct random colours past 256 ids); the ignore index in VOC's boundary
    colour."""
    from beam_pipeline.commands.sample_data import voc_palette

    count, ignore = classes["num_classes"], classes["ignore_index"]
    size = max(count, ignore + 1, 256)
    colours = np.random.default_rng(0).integers(0, 256, size=(size, 3)).astype(np.uint8)
    colours[:256] = np.asarray(voc_palette(), dtype=np.uint8).reshape(256, 3)
    if classes.get("colormap"):
        colours[:count] = np.asarray(classes["colormap"], dtype=np.uint8)
    colours[ignore] = IGNORE_COLOUR
    return colours


def class_entries(
    directory: str, metadata: dict, split: str, count: int
) -> tuple[list[Entry], int, list[tuple[str, tuple[int, int, int]]]]:
    """The first `count` records of `split` with their stored class ids in colour, the split's
    size, and the legend of the classes they show."""
    total = split_total(metadata, directory, split)
    classes = metadata["classes"]
    try:
        info = ClassesInfo.from_json(classes)
    except MetadataError as error:
        raise UsageError(f"{directory}: {error}: run `segprep verify {directory}`") from None
    num_classes = classes["num_classes"]
    names = classes.get("names") or [f"class {index}" for index in range(num_classes)]
    colours = class_palette(classes)
    entries, shown = [], set()
    try:
        for item in _decoded(directory, metadata, split, count, info):
            ids = item["mask"][..., 0]
            present = np.unique(ids).tolist()
            shown.update(present)
            labelled = [names[c] for c in present if c < num_classes]
            caption = (item["key"], f"{len(labelled)} classes: {', '.join(labelled)}")
            entries.append(Entry(item["key"], item["image"], colours[ids], caption))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        raise _unreadable(directory, error) from None
    legend = [(_legend_label(c, classes), tuple(colours[c].tolist())) for c in sorted(shown)]
    if len(legend) > MAX_LEGEND_ITEMS:
        more = len(legend) - MAX_LEGEND_ITEMS + 1
        legend = [*legend[: MAX_LEGEND_ITEMS - 1], (f"... {more} more", BACKGROUND)]
    return entries, total, legend


def _legend_label(value: int, classes: dict) -> str:
    if value >= classes["num_classes"]:
        return f"{value} (ignored)"
    names = classes.get("names")
    return f"{value} {names[value]}" if names else f"class {value}"
