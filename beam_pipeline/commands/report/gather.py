"""What the report shows, read with bounded memory and time whatever the output's size.

Counts and statistics come from metadata.json; pixels from a capped sample of records
spread over every shard; rejects are streamed once (counted per reason, a few kept each).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import heapq
import io
import itertools
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from beam_pipeline.commands.report import thumbnails
from transforms import files
from transforms.duplicates import parse_group
from transforms.format import dataset_info, record_formats
from transforms.format.dataset_info import ClassesInfo, DatasetInfo
from transforms.format.example import ExampleError, parse_example
from transforms.format.naming import DUPLICATES_FILE, METADATA_FILE, REJECTS_FILE, RUNS_DIR
from transforms.limits import FILE_LIMITS

SAMPLE_RECORDS = 400  # per split, for the size and foreground distributions
SAMPLE_TILES = 24  # per split, shown as thumbnails
REJECT_EXAMPLES = 3  # per reason, shown with their detail
REJECT_THUMBNAILS = 24  # in all
MAX_REASONS = 40
MAX_SHARD_ROWS = 2000  # per split; the rest are counted
MAX_DUPLICATE_GROUPS = 60
MAX_CLASS_ROWS = 256  # per split, the classes with most pixels; the rest are counted
MAX_ABSENT_NAMES = 50  # absent classes named per split; the rest are counted
GALLERY_GROUPS = 6  # the largest groups, shown with thumbnails
GALLERY_MEMBERS = 6  # per group
SPLIT_CHECKS = 400  # group members whose stored split is compared with their listed one
MOVED_ROWS = 50
MAX_LINE = 1 << 20  # a rejects or duplicates line longer than this is skipped, not read
SOURCE_IMAGE_LIMIT = 64 << 20


class ReportError(Exception):
    """The folder cannot be reported on; the message says why (one line)."""


@dataclasses.dataclass
class Sample:
    key: str
    height: int
    width: int
    image: str  # data: URI of the thumbnail
    overlay: str
    foreground: float | None  # binary masks: the mask's foreground fraction


@dataclasses.dataclass
class SplitView:
    name: str
    num_examples: int
    num_shards: int
    bytes: int
    shards: list[dict[str, Any]]
    shards_left_out: int
    samples: list[Sample]
    sampled: int  # records read for the distributions
    sizes: list[tuple[str, int]]  # ("HxW", count), most common first
    foreground: list[tuple[str, int]] | None  # histogram bins (label, count), binary masks
    class_rows: list[dict[str, Any]] | None = None  # class outputs: at most MAX_CLASS_ROWS
    absent_classes: list[str] = dataclasses.field(default_factory=list)
    classes_left_out: int = 0  # classes beyond MAX_CLASS_ROWS, not shown
    left_out_share: float = 0.0  # their share of the labelled pixels
    absent_left_out: int = 0  # absent classes beyond MAX_ABSENT_NAMES, not named
    # shards (and why) that failed while being sampled: the page says so and names verify
    unreadable: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RejectReason:
    reason: str
    count: int
    examples: list[dict[str, Any]]  # key, detail, image path, thumbnail (or None)


@dataclasses.dataclass
class MemberTile:
    key: str
    where: str  # the split that stores it, "rejected <reason>", or "in no split"
    image: str | None  # data: URIs; None when neither its record nor its file is readable
    overlay: str | None


@dataclasses.dataclass
class GroupView:
    """One of the largest duplicate groups, with thumbnails of its first members."""

    size: int
    kind: str
    max_distance: Any
    splits: list[str]  # a group's `split`: one split, or every split it touches
    members: list[MemberTile]


@dataclasses.dataclass
class SplitMoves:
    """Group members stored outside the split their official list or folder names."""

    official: str  # "--split_file" or "--split_by_folder"
    checked: int  # group members compared
    unchecked: int  # members past SPLIT_CHECKS, not compared
    moved: list[tuple[str, str, str]]  # (key, listed split, stored split), the first few
    moved_total: int
    problem: str | None = None  # why the listed splits could not be read


@dataclasses.dataclass
class Report:
    """What the page shows; the defaults are an unpublished output's (its staged rejects)."""

    output_dir: str
    published: bool  # False: a refused or failed run; only its staged rejects exist
    rejects_file: str | None
    rejected: int
    rejects: list[RejectReason]
    reasons_left_out: int
    discovered: int | None = None
    accepted: int = 0
    unlabeled: int = 0  # --unlabeled_images skip: images without a mask, listed in unlabeled.jsonl
    mask_type: str = "unknown"
    mask_format: str | None = None
    record_format: str = record_formats.DEFAULT
    splits: list[SplitView] = dataclasses.field(default_factory=list)
    parameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    versions: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    run: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    exif_ignored: int | None = None
    classes: ClassesInfo | None = None
    weights: list[tuple[str, float]] | None = None  # at most MAX_CLASS_ROWS: the train split's top
    duplicates: list[dict[str, Any]] | None = None  # None: duplicates.jsonl absent
    # verify's findings about duplicates.jsonl itself (tampered: its groups are not facts)
    duplicates_problems: list[str] = dataclasses.field(default_factory=list)
    duplicate_groups: int = 0
    total_bytes: int = 0
    largest_groups: list[GroupView] = dataclasses.field(default_factory=list)
    split_moves: SplitMoves | None = None  # None: no official splits (or no groups file)


def gather(output_dir: str, version: int | None = None) -> Report:
    """What the page shows; `version`: the splits as that version of a grown output was."""
    base = output_dir.rstrip("/")
    if not files.is_remote(base) and not os.path.isdir(base):
        raise ReportError(f"{output_dir} is not a directory: pass a segprep output directory")
    metadata_path = f"{base}/{METADATA_FILE}"
    if files.exists(metadata_path):
        return _finished(base, version)
    staged = _staged_rejects(base)
    if staged is None:
        raise ReportError(
            f"{output_dir} has neither {METADATA_FILE} nor a run's staged {REJECTS_FILE}: "
            "not a segprep output; pass the --output_dir of `segprep prepare`"
        )
    reasons, left_out, total = _rejects(staged)
    return Report(
        output_dir=base,
        published=False,
        rejects_file=staged,
        rejected=total,
        rejects=reasons,
        reasons_left_out=left_out,
    )


def _finished(base: str, version: int | None = None) -> Report:
    try:
        raw = dataset_info.read_metadata_json(base)
        info = DatasetInfo.from_json(raw).at_version(version)
    except (dataset_info.MetadataError, dataset_info.IncompleteOutputError, ValueError) as error:
        raise ReportError(str(error)) from None
    classes = info.classes
    names = _class_names(classes)
    palette = thumbnails.class_palette(classes) if classes else None
    adapter = record_formats.get(str(raw.get("record_format", record_formats.DEFAULT)))
    splits = [
        _split_view(base, info, name, adapter, classes, names, palette) for name in info.splits
    ]
    reasons, left_out, total = _rejects(f"{base}/{REJECTS_FILE}")
    rejected = raw.get("num_rejected", {})
    weights = None
    if classes is not None and "train" in classes.stats:
        every = classes.weights("train")
        top = _top_classes(classes.split_stats("train").pixels)
        weights = [(names[index], float(every[index])) for index in top]
    duplicates_problems = _duplicates_problems(f"{base}/{DUPLICATES_FILE}", raw)
    duplicates, groups = _duplicates(f"{base}/{DUPLICATES_FILE}")
    largest, moves = _group_views(base, raw, version, classes, palette)
    accepted = sum(split.num_examples for split in info.splits.values())
    return Report(
        output_dir=base,
        published=True,
        rejects_file=f"{base}/{REJECTS_FILE}",
        discovered=raw.get("num_discovered"),
        accepted=accepted,
        rejected=rejected.get("total", total) if isinstance(rejected, dict) else total,
        unlabeled=info.num_unlabeled or 0,
        mask_type="classes" if classes else "binary",
        mask_format=info.mask_format,
        record_format=adapter.name,
        splits=splits,
        rejects=reasons,
        reasons_left_out=left_out,
        parameters=raw.get("parameters") or {},
        versions=raw.get("versions") or {},
        run=raw.get("run") or {},
        exif_ignored=raw.get("exif_orientation_ignored"),
        classes=classes,
        weights=weights,
        duplicates=duplicates,
        duplicates_problems=duplicates_problems,
        duplicate_groups=groups,
        total_bytes=sum(s.bytes for split in info.splits.values() for s in split.shards),
        largest_groups=largest,
        split_moves=moves,
    )


def _class_names(classes: ClassesInfo | None) -> list[str]:
    if classes is None:
        return []
    if classes.names:
        return list(classes.names)
    return [f"class {index}" for index in range(classes.num_classes)]


def _split_view(base, info, name, adapter, classes, names, palette) -> SplitView:
    split = info.split(name)
    shards = [
        {"file": s.file, "records": s.num_examples, "bytes": s.bytes, "sha256": s.sha256}
        for s in split.shards[:MAX_SHARD_ROWS]
    ]
    samples: list[Sample] = []
    sizes: collections.Counter[str] = collections.Counter()
    fractions: list[float] = []
    sampled = 0
    every = max(1, math.ceil(min(SAMPLE_RECORDS, split.num_examples) / SAMPLE_TILES))
    unreadable: list[str] = []
    for record in _sampled_records(base, split, adapter, unreadable):
        sizes[f"{record['height']}x{record['width']}"] += 1
        tile = sampled % every == 0 and len(samples) < SAMPLE_TILES
        fraction = None
        if classes is None:
            mask = thumbnails.decode_mask(record["mask"])
            if mask is not None:
                fraction = float(np.count_nonzero(mask >= 128)) / max(1, mask.size)
                fractions.append(fraction)
        if tile:
            image, overlay = thumbnails.record_tiles(record, classes, palette)
            samples.append(
                Sample(record["key"], record["height"], record["width"], image, overlay, fraction)
            )
        sampled += 1
    view = SplitView(
        name=name,
        num_examples=split.num_examples,
        num_shards=split.num_shards,
        bytes=sum(s.bytes for s in split.shards),
        shards=shards,
        shards_left_out=max(0, split.num_shards - MAX_SHARD_ROWS),
        samples=samples,
        sampled=sampled,
        unreadable=unreadable,
        sizes=sizes.most_common(12),
        foreground=_histogram(fractions) if classes is None else None,
    )
    if classes is not None and name in classes.stats:
        _fill_class_rows(view, classes, name, names, palette)
    return view


def _sampled_records(base: str, split, adapter, unreadable: list[str]) -> Iterator[dict[str, Any]]:
    """Up to SAMPLE_RECORDS records, spread over the split's shards (the first few of each).
    A shard that fails (a CRC, a truncated frame, a record that is no Example) is named in
    `unreadable` with its error, and the sampling goes on with the next one."""
    if not split.shards:
        return
    per_shard = max(1, math.ceil(SAMPLE_RECORDS / len(split.shards)))
    taken = 0
    for shard in split.shards:
        if taken >= SAMPLE_RECORDS:
            return
        path = f"{base}/{shard.file}"
        try:
            with _open(path) as handle:
                records = adapter.read_records(handle, shard.file, shard.bytes)
                for number, payload in enumerate(records):
                    if number >= per_shard or taken >= SAMPLE_RECORDS:
                        break
                    try:
                        yield parse_example(payload)
                    except ExampleError as error:
                        unreadable.append(f"{shard.file} record {number}: {error}")
                        continue
                    taken += 1
        except OSError as error:
            unreadable.append(f"{shard.file}: {error}")


def _histogram(fractions: Sequence[float], bins: int = 10) -> list[tuple[str, int]]:
    counts = [0] * bins
    for fraction in fractions:
        counts[min(bins - 1, int(fraction * bins))] += 1
    return [(f"{i * 100 // bins}-{(i + 1) * 100 // bins} %", c) for i, c in enumerate(counts)]


def _top_classes(pixels: Sequence[int]) -> list[int]:
    """Every class id in order when they fit on the page, else the MAX_CLASS_ROWS with most
    pixels (ties: the lower id), in id order: a page stays bounded at 65,535 classes."""
    if len(pixels) <= MAX_CLASS_ROWS:
        return list(range(len(pixels)))
    ranked = sorted(range(len(pixels)), key=lambda index: (-pixels[index], index))
    return sorted(ranked[:MAX_CLASS_ROWS])


def _fill_class_rows(view: SplitView, classes: ClassesInfo, split: str, names, palette) -> None:
    stats = classes.split_stats(split)
    labelled = max(1, sum(stats.pixels))
    shown = _top_classes(stats.pixels)
    view.class_rows = [
        {
            "id": index,
            "name": names[index],
            "pixels": stats.pixels[index],
            "share": stats.pixels[index] / labelled,
            "images": stats.images[index],
            "image_share": stats.images[index] / max(1, stats.num_images),
            "colour": "#" + "".join(f"{int(v):02x}" for v in palette[index]),
        }
        for index in shown
    ]
    view.classes_left_out = len(names) - len(shown)
    view.left_out_share = 1 - sum(row["share"] for row in view.class_rows) if shown else 0.0
    absent = [index for index, count in enumerate(stats.images) if count == 0]
    view.absent_classes = [names[index] for index in absent[:MAX_ABSENT_NAMES]]
    view.absent_left_out = max(0, len(absent) - MAX_ABSENT_NAMES)


def _rejects(path: str) -> tuple[list[RejectReason], int, int]:
    """Per reason (commonest first): the count and the first few entries; how many reasons
    were left out; the total. Streamed: memory holds the kept examples, never the file."""
    counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    if not files.exists(path):
        return [], 0, 0
    try:
        _count_rows(path, counts, examples)
    except OSError as error:  # a FIFO, a device or a folder in its place: never read
        raise ReportError(_unreadable(path, error)) from None
    reasons = [
        RejectReason(reason, count, examples.get(reason, []))
        for reason, count in counts.most_common(MAX_REASONS)
    ]
    shown = 0
    for reason in reasons:
        for example in reason.examples:
            if shown < REJECT_THUMBNAILS and isinstance(example["image"], str):
                example["thumbnail"] = _source_thumbnail(example["image"])
                shown += example["thumbnail"] is not None
    return reasons, max(0, len(counts) - MAX_REASONS), sum(counts.values())


def _count_rows(path: str, counts, examples) -> None:
    """Count every line's reason and keep the first few of each (streamed, never held)."""
    for row in _json_lines(path):
        reason = str(row.get("reason", "unknown"))
        counts[reason] += 1
        kept = examples[reason]
        if len(kept) < REJECT_EXAMPLES and len(examples) <= MAX_REASONS * 2:
            kept.append(
                {
                    "key": str(row.get("key", "")),
                    "detail": str(row.get("detail", "")),
                    "image": row.get("image"),
                    "thumbnail": None,
                }
            )


def _source_thumbnail(path: str) -> str | None:
    """A thumbnail of a rejected entry's input image, when it is still there and decodes."""
    if files.is_remote(path):
        return None
    try:
        data = files.read_bounded_local(path, SOURCE_IMAGE_LIMIT)
    except OSError:
        return None
    return thumbnails.image_thumbnail(data)


def _duplicates_problems(path: str, raw: Mapping[str, Any]) -> list[str]:
    """verify's checks of duplicates.jsonl (its size and sha256 against metadata.json, the
    shape of each line), streamed: what the page must say before showing its groups. Only
    well-shaped lines are shown (`_group_rows`); one that is not is named, the rest counted."""
    from beam_pipeline.commands.verify.duplicates import listed_file_problem

    if not files.exists(path):
        return []
    digest, bad, first = hashlib.sha256(), 0, ""
    try:
        with _open(path) as handle:
            for number, line in enumerate(_lines(handle, digest), start=1):
                if not line.strip():
                    continue
                try:
                    parse_group(line)
                except (ValueError, KeyError, TypeError) as error:
                    bad += 1
                    first = first or f"{DUPLICATES_FILE}: line {number}: {error}"
            size = handle.tell()
    except OSError as error:  # a FIFO, a device or a folder in its place: never read
        raise ReportError(_unreadable(path, error)) from None
    problems = []
    section = raw.get("duplicates")
    if isinstance(section, dict) and section.get("mode") != "off":
        ref = section.get("file")
        differs = listed_file_problem(DUPLICATES_FILE, size, digest.hexdigest(), ref)
        problems += [differs] if differs else []
    if bad:
        more = f" (and {bad - 1:,} more lines that are no duplicate group)" if bad > 1 else ""
        problems.append(first + more)
    return problems


def _duplicates(path: str) -> tuple[list[dict[str, Any]] | None, int]:
    if not files.exists(path):
        return None, 0
    rows = _group_rows(path)
    groups = list(itertools.islice(rows, MAX_DUPLICATE_GROUPS))
    return groups, len(groups) + sum(1 for _ in rows)


def _group_views(base: str, raw: Mapping[str, Any], version, classes, palette):
    """(the largest groups with their members' thumbnails, the group members kept out of
    their listed split); both bounded, whatever the number of groups."""
    path = f"{base}/{DUPLICATES_FILE}"
    if not files.exists(path):
        return [], None
    from beam_pipeline.commands.inspect_sheet.duplicates import record_sources

    largest, member_keys, members = _scan_groups(path)
    unreadable = None
    try:
        sources = record_sources(base, raw.get("splits") or {}, version)
    except Exception as error:  # noqa: BLE001 - e.g. no record index (segprep index adds it)
        sources, unreadable = {}, f"the records cannot be looked up: {error}"
    shown = {key for row in largest for key in _keys_of(row)[:GALLERY_MEMBERS]}
    rejects = _rejects_of(f"{base}/{REJECTS_FILE}", shown)
    absent = "in no split" if unreadable is None else "record not looked up"
    views = [_group_view(row, sources, rejects, absent, classes, palette) for row in largest]
    moves = _split_moves(raw.get("parameters") or {}, member_keys, members, sources, unreadable)
    return views, moves


def _scan_groups(path: str) -> tuple[list[dict[str, Any]], list[str], int]:
    """(the GALLERY_GROUPS largest groups, first in file order on ties; the first
    SPLIT_CHECKS member keys; the number of members), in one streamed pass."""
    heap: list[tuple[int, int, dict[str, Any]]] = []
    member_keys: list[str] = []
    members = 0
    for number, row in enumerate(_group_rows(path)):
        keys = _keys_of(row)
        members += len(keys)
        member_keys.extend(keys[: max(0, SPLIT_CHECKS - len(member_keys))])
        item = (len(keys), -number, row)
        if len(heap) < GALLERY_GROUPS:
            heapq.heappush(heap, item)
        elif item[:2] > heap[0][:2]:
            heapq.heapreplace(heap, item)
    largest = [row for _, _, row in sorted(heap, key=lambda item: item[:2], reverse=True)]
    return largest, member_keys, members


def _keys_of(row: Mapping[str, Any]) -> list[str]:
    keys = row.get("keys")
    return [str(key) for key in keys] if isinstance(keys, list) else []


def splits_of(group: Mapping[str, Any]) -> list[str]:
    """A group's `split` as a list: one split (a string), every split it touches (a list,
    under official splits), or none recorded."""
    split = group.get("split")
    if isinstance(split, str):
        return [split]
    if isinstance(split, list):
        return [str(name) for name in split]
    return []


def _group_view(row, sources, rejects, absent: str, classes, palette) -> GroupView:
    keys = _keys_of(row)
    return GroupView(
        size=len(keys),
        kind=str(row.get("kind", "")),
        max_distance=row.get("max_distance", ""),
        splits=splits_of(row),
        members=[
            _member_tile(key, sources, rejects, absent, classes, palette)
            for key in keys[:GALLERY_MEMBERS]
        ],
    )


def _member_tile(key: str, sources, rejects, absent: str, classes, palette) -> MemberTile:
    """A member from its record, or from its original file when it was rejected; `absent`
    says where it is when neither holds it."""
    from beam_pipeline.commands.inspect_sheet.duplicates import stored_item

    try:
        stored = stored_item(key, sources)
    except Exception:  # noqa: BLE001 - a damaged shard or key table: verify says what
        stored = None
    if stored is not None:
        split, item = stored
        image, overlay = thumbnails.array_tiles(item["image"], item["mask"], classes, palette)
        return MemberTile(key, split, image, overlay)
    reject = rejects.get(key)
    if reject is None:
        return MemberTile(key, absent, None, None)
    source = reject.get("image")
    image = _source_thumbnail(source) if isinstance(source, str) else None
    return MemberTile(key, f"rejected {reject.get('reason', 'unknown')}", image, None)


def _rejects_of(path: str, keys: set[str]) -> dict[str, dict[str, Any]]:
    """The rejects.jsonl lines of `keys` (streamed: only theirs are kept)."""
    if not keys or not files.exists(path):
        return {}
    found = {}
    with contextlib.suppress(OSError):
        for row in _json_lines(path):
            key = str(row.get("key", ""))
            if key in keys:
                found[key] = row
    return found


def _split_moves(parameters: Mapping[str, Any], keys, members: int, sources, unreadable):
    """Under official splits, the checked group members not stored in their listed split."""
    official, listed, problem = _listed_splits(parameters)
    if official is None:
        return None
    if unreadable is not None:
        listed, problem = None, unreadable
    unchecked = max(0, members - len(keys))
    if listed is None:
        return SplitMoves(official, 0, members, [], 0, problem)
    moved = []
    for key in keys:
        wanted = listed(key)
        stored = _stored_split(key, wanted, sources)
        if wanted is not None and stored is not None and stored != wanted:
            moved.append((key, wanted, stored))
    return SplitMoves(official, len(keys), unchecked, moved[:MOVED_ROWS], len(moved))


def _listed_splits(parameters: Mapping[str, Any]):
    """("--split_file" / "--split_by_folder" / None, key -> listed split, why not readable)."""
    from transforms.splits import FolderSplits

    if parameters.get("split_by_folder"):
        return "--split_by_folder", FolderSplits().split_of, None
    lists = parameters.get("split_files")
    if not isinstance(lists, dict) or not lists:
        return None, None, None
    from beam_pipeline.errors import UsageError
    from beam_pipeline.launch.official_splits import read_split_files
    from transforms.pairing import Layout

    suffix = parameters.get("image_suffix")
    layout = Layout("/", "/", image_suffix=suffix if isinstance(suffix, str) else None)
    try:
        found = read_split_files([f"{split}={path}" for split, path in lists.items()], layout)
    except UsageError as error:
        return "--split_file", None, f"the split lists cannot be read now: {error}"
    return "--split_file", found.split_of, None


def _stored_split(key: str, wanted: str | None, sources) -> str | None:
    """The split whose record index holds `key`, its listed split looked in first."""
    order = sorted(sources, key=lambda name: name != wanted)
    for name in order:
        try:
            sources[name].index_of(key)
        except KeyError:
            continue
        except Exception:  # noqa: BLE001 - a damaged key table: verify says what
            return None
        return name
    return None


def _unreadable(path: str, error: OSError) -> str:
    """One line naming `path` once (files' own errors already name it)."""
    return f"{path}: {error.strerror}" if error.strerror else str(error)


def _lines(handle: io.BufferedReader, digest: Any = None) -> Iterator[bytes]:
    """Each line of `handle`, b"" in place of one over MAX_LINE (skipped without being
    held); `digest` is updated with every byte read."""
    while line := handle.readline(MAX_LINE + 1):
        if digest is not None:
            digest.update(line)
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while (rest := handle.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                if digest is not None:
                    digest.update(rest)
            if digest is not None:
                digest.update(rest)
            line = b""
        yield line


def _json_lines(path: str) -> Iterator[dict[str, Any]]:
    with _open(path) as handle:
        for line in _lines(handle):
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                continue
            if isinstance(row, dict):
                yield row


def _group_rows(path: str) -> Iterator[dict[str, Any]]:
    """The lines of duplicates.jsonl shaped as segprep writes them (verify's line check):
    a line of another shape is left out, and named on the page (`_duplicates_problems`)."""
    with _open(path) as handle:
        for line in _lines(handle):
            try:
                yield parse_group(line)
            except (ValueError, KeyError, TypeError):
                continue


def _staged_rejects(base: str) -> str | None:
    runs = f"{base}/{RUNS_DIR}"
    if files.is_remote(base) or not os.path.isdir(runs) or os.path.islink(runs):
        return None
    found = []
    for name in os.listdir(runs):
        path = f"{runs}/{name}/{REJECTS_FILE}"
        try:
            info = os.lstat(path)
        except OSError:
            continue
        found.append((info.st_mtime_ns, path))
    return max(found)[1] if found else None


def _open(path: str) -> io.BufferedReader:
    if files.is_remote(path):
        return io.BytesIO(files.read_bounded(path, FILE_LIMITS.index_bytes))  # type: ignore[return-value]
    return files.open_regular(path)  # type: ignore[return-value]
