"""Every shard read back as a trainer would: size, sha256, each record's framing and CRCs
(through the record-format adapter), its features, image and mask."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from beam_pipeline.commands.shard_records import shard_records
from beam_pipeline.commands.verify import pixels
from beam_pipeline.commands.verify.class_count import ClassCount
from beam_pipeline.commands.verify.classes import SHOWN
from beam_pipeline.commands.verify.state import Checked
from transforms import files
from transforms.format import features
from transforms.format.dataset_info import is_image_shape
from transforms.format.example import ExampleError, parse_example
from transforms.format.naming import shard_name, shard_version
from transforms.format.record_index import is_count
from transforms.record_spec import record_problems


def check_splits(state: Checked) -> None:
    if state.mask_format not in features.MASK_FORMATS:
        state.problem(
            f"metadata.json: mask_format {state.mask_format!r} is not one of "
            f"{list(features.MASK_FORMATS)}"
        )
    if state.has_classes and state.mask_format != "png":
        state.problem(f"metadata.json: class-id masks with mask_format {state.mask_format!r}")
    if state.classes is not None:
        state.report.classes = True
        state.class_counts = {
            split: ClassCount(state.classes) for split in state.metadata["splits"]
        }
    for split, info in state.metadata["splits"].items():
        _check_split(state, split, info)


def _check_split(state: Checked, split: str, info: Any) -> None:
    shards = info.get("shards") if isinstance(info, dict) else None
    if not isinstance(shards, list):
        state.problem(f"metadata.json: split {split!r} has no shards list")
        state.unread(split)
        return
    if info.get("num_shards") != len(shards):
        state.problem(
            f"metadata.json: split {split!r} num_shards {info.get('num_shards')} "
            f"but {len(shards)} shards listed"
        )
    # a count that is not one is named by its shard's own check (records against it)
    counts = [shard.get("num_examples", 0) for shard in shards if isinstance(shard, dict)]
    listed_total = sum(count for count in counts if is_count(count))
    if info.get("num_examples") != listed_total:
        state.problem(
            f"metadata.json: split {split!r} num_examples {info.get('num_examples')} "
            f"but its shards list {listed_total}"
        )
    shape = info.get("image_shape")
    image_shape = None  # none: records of any size
    if is_image_shape(shape):
        image_shape = tuple(shape)
    elif shape:
        shown = str(shape)[:40]
        state.problem(f"metadata.json: split {split!r} image_shape {shown} is not [height, width]")
    read = 0
    expected_names = _expected_shard_names(split, shards, state.adapter.suffix)
    for index, shard in enumerate(shards):
        name = shard.get("file") if isinstance(shard, dict) else None
        if not isinstance(name, str):
            state.problem(f"metadata.json: split {split!r} shard {index} has no file name")
            state.unread(split)
            continue
        state.listed.add(name)
        if name != expected_names[index]:
            state.problem(
                f"{name}: name does not match its place in metadata.json "
                f"(split {split!r}, shard {index} of {len(shards)}: {expected_names[index]})"
            )
        read += _check_shard(state, name, shard, image_shape, split)
        state.report.shards += 1
    state.report.examples[split] = read


def _check_shard(
    state: Checked,
    name: str,
    entry: dict[str, Any],
    image_shape: tuple[int, ...] | None,
    split: str,
) -> int:
    """Records read from one shard (0 when it is missing or unreadable)."""
    path = state.path(name)
    if not files.exists(path):
        state.problem(f"{name}: missing (listed in metadata.json)")
        state.unread(split)
        return 0
    try:
        size = files.stat(path).size
        files.check_no_hole(path)
        digest = files.sha256(path)
    except OSError as error:  # a FIFO, a device, a folder: never read
        state.problem(f"{name}: not readable: {error}")
        state.unread(split)
        return 0
    if size != entry.get("bytes"):
        state.problem(f"{name}: {size} bytes, metadata.json says {entry.get('bytes')}")
    if digest != entry.get("sha256"):
        state.problem(f"{name}: sha256 {digest}, metadata.json says {entry.get('sha256')}")
    count = 0
    records = []
    try:
        with shard_records(path, name, state.adapter) as payloads:
            for serialized in payloads:
                where = f"{name} record {count}"
                key = _check_record(state, serialized, where, image_shape, split)
                records.append((key, len(serialized)))
                count += 1
    except (OSError, ValueError) as error:
        state.problem(
            f"{name}: record {count} fails the {state.adapter.name} check (bad checksum or "
            f"framing): {type(error).__name__}: {error}"
        )
        state.unread(split)
        return count
    if count != entry.get("num_examples"):
        state.problem(f"{name}: {count} records, metadata.json says {entry.get('num_examples')}")
    state.records[name] = records
    return count


def _check_record(
    state: Checked,
    serialized: bytes,
    where: str,
    image_shape: tuple[int, ...] | None,
    split: str,
) -> str | None:
    """The record's key, after checking its features; None when it does not parse."""
    try:
        parsed = parse_example(serialized)
    except ExampleError as error:
        state.problem(f"{where}: not a segprep example: {error}")
        state.uncounted(split)
        return None
    key = parsed[features.KEY]
    state.keys[key] += 1
    where = f"{where} (key {key})"
    height = int(parsed[features.HEIGHT])
    width = int(parsed[features.WIDTH])
    for line in record_problems(state.spec, height, width):
        state.problem(f"{where}: {line}")
    if image_shape is not None and (height, width) != image_shape:
        state.problem(
            f"{where}: {height}x{width} (HxW) but metadata.json image_shape is {list(image_shape)}"
        )
    try:
        image = pixels.decode_jpeg(parsed[features.IMAGE]).shape
    except pixels.DecodeError as error:
        state.problem(f"{where}: image does not decode as JPEG: {error}")
    else:
        if tuple(image) != (height, width, 3):
            state.problem(f"{where}: image is {tuple(image)}, expected ({height}, {width}, 3)")
    if state.has_classes:
        if not _check_class_mask(state, parsed[features.MASK], where, height, width, split):
            state.uncounted(split)
    else:
        _check_mask(state, parsed[features.MASK], where, height, width)
    return key


def _check_class_mask(
    state: Checked, data: bytes, where: str, height: int, width: int, split: str
) -> bool:
    """Check one class-id mask and count it into its split; False when it was not counted.

    The bit depth comes from the PNG header: decoding a 16-bit PNG as 8 bits (or the
    reverse) silently rescales every id, which is the very damage to look for.
    """
    if len(data) < 26 or not data.startswith(features.PNG_SIGNATURE) or data[12:16] != b"IHDR":
        state.problem(f"{where}: class mask is not a PNG")
        return False
    depth, colour_type = data[24], data[25]
    classes = state.classes
    if classes is not None and (depth, colour_type) != (classes.png_bit_depth, 0):
        state.problem(
            f"{where}: class mask is a {depth}-bit PNG of colour type {colour_type}, "
            f"metadata.json says {classes.png_bit_depth}-bit grey (colour type 0)"
        )
        return False
    try:
        mask = pixels.decode_class_png(data, depth)
    except pixels.DecodeError as error:
        state.problem(f"{where}: mask does not decode as png: {error}")
        return False
    if mask.shape != (height, width, 1):
        state.problem(f"{where}: mask is {mask.shape}, expected ({height}, {width}, 1)")
        return False
    if classes is None:
        return False  # the classes section is broken (reported): nothing to check against
    counts = np.bincount(mask.ravel(), minlength=classes.num_classes)
    bad = counts.copy()
    bad[: classes.num_classes] = 0
    if classes.ignore_index < len(bad):
        bad[classes.ignore_index] = 0
    if bad.any():
        values = np.flatnonzero(bad)
        shown = ", ".join(str(value) for value in values[:SHOWN].tolist())
        more = "" if len(values) <= SHOWN else f", ... ({len(values)} distinct)"
        state.problem(
            f"{where}: {int(bad.sum())} mask pixels hold {{{shown}{more}}}: neither class "
            f"ids (0-{classes.num_classes - 1}) nor the ignore index {classes.ignore_index}"
        )
        return False
    state.class_counts[split].add(counts)
    return True


def _check_mask(state: Checked, encoded: bytes, where: str, height: int, width: int) -> None:
    decoders = {"png": pixels.decode_png, "jpeg": pixels.decode_jpeg}
    known = isinstance(state.mask_format, str)  # else a list or table: check_splits names it
    decode = decoders.get(state.mask_format, pixels.decode_any) if known else pixels.decode_any
    try:
        mask = decode(encoded)
    except pixels.DecodeError as error:
        state.problem(f"{where}: mask does not decode as {state.mask_format}: {error}")
        return
    if mask.shape != (height, width, 1):
        state.problem(f"{where}: mask is {mask.shape}, expected ({height}, {width}, 1)")
        return
    if state.mask_format == "png":
        unclean = int(np.count_nonzero((mask != 0) & (mask != features.MASK_FOREGROUND)))
        if unclean:
            state.problem(f"{where}: {unclean} mask pixels are neither 0 nor 255")
        return
    # A stored JPEG mask pixel this close to the threshold could land on either side with a
    # different decoder or quality setting: the mask no longer thresholds cleanly.
    low = features.MASK_THRESHOLD - features.JPEG_MASK_MARGIN
    high = features.MASK_THRESHOLD + features.JPEG_MASK_MARGIN
    ambiguous = int(np.count_nonzero((mask >= low) & (mask < high)))
    if ambiguous:
        state.problem(
            f"{where}: {ambiguous} mask pixels in {low}..{high - 1}, too close to the "
            f"threshold {features.MASK_THRESHOLD} to be clean 0/255"
        )


def _expected_shard_names(split: str, shards: list[Any], suffix: str) -> list[str]:
    """The name each listed shard must have at its place: version 1's shards, then each
    later version's, each numbered `-of-N` over its own version's shards."""
    versions = []
    for shard in shards:
        name = shard.get("file") if isinstance(shard, dict) else None
        try:
            versions.append(shard_version(name) if isinstance(name, str) else 1)
        except ValueError:
            versions.append(1)
    counts = collections.Counter(versions)
    seen: collections.Counter[int] = collections.Counter()
    names = []
    for version in versions:
        try:
            names.append(shard_name(split, seen[version], counts[version], version, suffix))
        except (ValueError, TypeError):
            names.append("?")
        seen[version] += 1
    if versions != sorted(versions):
        names = [f"{name} (versions out of order)" for name in names]
    return names
