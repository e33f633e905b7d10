"""The end-of-run summary: the figures of the published DatasetInfo, for a person."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from transforms.format.dataset_info import ClassesInfo, DatasetInfo, RejectCounts, SplitInfo
from transforms.format.naming import DUPLICATES_FILE, UNLABELED_FILE
from transforms.splits import SplitFractions, num_shards_note

SHOWN_CLASSES = 3  # rarest and most frequent classes per split
# Below this, start-up (Beam, the workers) is most of the run: a rate would mislead.
MIN_RATE_SECONDS = 5.0
SHOWN_ABSENT = 8

if TYPE_CHECKING:
    from beam_pipeline.launch.plan import RunPlan


def summary_lines(info: DatasetInfo, plan: RunPlan | None = None) -> list[str]:
    """`prepare`'s summary, a line each: printed through printable_lines, which escapes a
    line break in a path or key instead of splitting the line there."""
    splits = info.splits
    accepted = sum(split.num_examples for split in splits.values())
    shards = sum(split.num_shards for split in splits.values())
    # Deferred: the job's modules are loaded by the run this summarises, not by verify,
    # which imports this module for plural().
    from beam_pipeline.job.describe import kept_keys

    rejected = info.num_rejected or RejectCounts(0, {})
    # key_exists: an append refused a stored key's new bytes; its record stays, counted once
    # in num_discovered, as accepted.
    kept = kept_keys(rejected)
    lines = [
        f"segprep: {plural(info.num_discovered or 0, 'entry', 'entries')} discovered, "
        f"{accepted:,} accepted, "
        f"{rejected.total - kept:,} rejected"
        + (f" (and {kept:,} key_exists: stored keys kept as they were)" if kept else ""),
    ]
    if len(info.dataset_versions) > 1:  # an append: what this run did, then the dataset now
        latest = info.dataset_versions[-1]
        lines.append(
            f"  version {latest.version}: {sum(latest.added.values()):,} added, "
            f"{latest.skipped_identical:,} already present with the same bytes, "
            f"{sum(latest.num_rejected.values()):,} rejected by this run"
        )
    for name, split in splits.items():
        size = sum(shard.bytes for shard in split.shards)
        lines.append(
            f"  {name:<12}{split.num_examples:>9,} examples  {split.num_shards:>4} "
            f"{_shards(split.num_shards):<6}  {size / 1e6:>9.1f} MB"
        )
    for reason, count in rejected.by_reason.items():
        example = (rejected.example_key or {}).get(reason, "")
        lines.append(f"  rejected {reason:<20}{count:>6,}   e.g. {example}")
    if info.num_unlabeled:
        lines.append(
            f"  unlabeled {info.num_unlabeled:>25,}   images with no mask, not rejects "
            f"(--images_without_mask skip): listed in {UNLABELED_FILE}"
        )
    run = info.run
    if run is not None and run.wall_seconds is not None:
        rate = ""
        if run.wall_seconds >= MIN_RATE_SECONDS:
            rate = f" ({run.records_per_second:.0f} records/s)"
        lines.append(
            f"  {shards} {_shards(shards)}, {(run.bytes_written or 0) / 1e6:.1f} MB written in "
            f"{run.wall_seconds:.1f} s{rate}"
        )
    if info.classes is not None:
        tool = (info.parameters or {}).get("annotation_format") or "coco"
        lines.extend(classes_lines(info.classes, tool))
    lines.extend(duplicates_lines(info.duplicates, splits))
    note = num_shards_note(plan.job.planning.num_shards, shards) if plan is not None else None
    if note:
        lines.append(f"  {note}")
    if plan is not None:
        lines.extend(_empty_split_notes(splits, plan.job.planning.fractions, accepted))
    exif = info.exif_orientation_ignored
    if exif:
        lines.append(
            f"  note: {exif:,} {'image carries' if exif == 1 else 'images carry'} an EXIF "
            "orientation kept as stored (the mask has the stored size, as "
            "tf.io.decode_jpeg decodes); a mask drawn on the displayed view of a square "
            "photo would be misaligned: see docs/bad-input.md"
        )
    if plan is not None and plan.listing is not None and plan.listing.hidden:
        hidden = plural(plan.listing.hidden, "hidden file")
        lines.append(f"  ignored {hidden} (names starting with '.')")
    if plan is not None and plan.listing is not None and plan.listing.ignored:
        globs = " ".join(shlex.quote(glob) for glob in plan.layout.ignore_files)
        ignored = plural(plan.listing.ignored, "file")
        lines.append(f"  ignored {ignored} matching --ignore_files {globs} (not read)")
    if plan is not None and plan.listing is not None and plan.listing.side_files:
        lines.append(f"  {side_files_line(plan.listing.side_files, plan.listing.side_kinds)}")
    output = (info.parameters or {})["output_dir"]
    lines.append(f"  output: {output}  (rejects.jsonl lists every rejected entry)")
    lines.append(f"  report: segprep report {shlex.quote(output.rstrip('/'))}")
    return lines


def side_files_line(count: int, kinds: tuple[tuple[str, int], ...]) -> str:
    """`side files: 27 in the mask folder (not masks: *_gtFine_color.png 9, ...)`."""
    shown = ", ".join(f"{kind} {number:,}" for kind, number in kinds[:4])
    more = ", ..." if len(kinds) > 4 else ""
    return f"side files: {count:,} in the mask folder (not masks: {shown}{more}; not read)"


def duplicates_lines(
    section: Mapping[str, Any] | None, splits: Mapping[str, SplitInfo] | None = None
) -> list[str]:
    """The duplicate groups (docs/duplicates.md): how many, how splits were kept or moved,
    the groups crossing official splits (a leakage warning), and leakage if checked."""
    if not section or section.get("mode") == "off":
        return []
    groups = section["groups"]
    if section["mode"] == "drop":
        kept = f"{section['dropped']:,} dropped as duplicate_image, one kept per group"
        if section.get("official_splits"):
            kept += " and split (train copies of validation/test images go)"
    elif section.get("official_splits"):
        kept = "each entry kept in its listed split"
    else:
        kept = "each kept in one split"
    line = (
        f"  duplicates: {plural(groups, 'group')} of "
        f"{section['keys_in_groups']:,} entries ({section['exact_groups']:,} exact), {kept}"
    )
    if section.get("conflicting_mask_groups"):
        line += f"; {section['conflicting_mask_groups']:,} with conflicting masks"
    matches = section.get("in_output_matches")
    if matches:
        line += f"; {plural(matches, 'near copy', 'near copies')} of images already in the output"
    lines = [line + f" (distance <= {section['threshold']}; {DUPLICATES_FILE})"]
    moved = section.get("moved")
    if moved and splits is not None:
        lines.append("  " + _moved_line(moved, section.get("entries_moved"), splits))
    crossing = section.get("cross_split_groups", 0)
    if section.get("official_splits") and crossing:
        lines.append("  " + _crossing_line(section))
    if isinstance(section.get("latest_append"), dict):
        lines.append("  " + _append_line(section["latest_append"]))
    if section.get("leakage_checked"):
        lines.append(
            f"  leakage: {section['leaks']:,} entries near-duplicate an image of "
            f"{', '.join(section['leakage_checked'])}: rejected as leaks_into"
        )
    return lines


def _append_line(found: Mapping[str, Any]) -> str:
    """What an append's search found: its new images' near copies of stored images."""
    if found.get("mode") == "off":
        return (
            "this append did not search for duplicates (--duplicates off): its new entries "
            "are in no group, and none was compared with the images already in the output"
        )
    matches = found.get("in_output_matches", 0)
    if found.get("mode") == "drop":
        dropped = plural(found.get("dropped", 0), "new entry", "new entries")
        done = f"{dropped} dropped as duplicate_image"
    elif found.get("official_splits"):
        done = "each entry kept in its listed split"
    else:
        done = "each joined the split of the image it copies"
    if matches == 0:
        found_line = "no new entry is a near copy of an image already in the output"
        if found.get("mode") == "drop" and found.get("dropped"):
            found_line += f"; {done}"
    else:
        copies = "entry is a near copy" if matches == 1 else "entries are near copies"
        found_line = f"{matches:,} new {copies} of images already in the output, {done}"
    line = (
        f"this append: {found_line}; "
        f"{plural(found.get('groups', 0), 'group')} among "
        "the new and stored images"
    )
    if found.get("official_splits") and found.get("cross_split_groups"):
        line += f"; {_crossing_line(found)}"
    return line


def _moved_line(
    moved: Mapping[str, int], entries: int | None, splits: Mapping[str, SplitInfo]
) -> str:
    """`grouping moved 1,237 entries between splits: train 6,859 -> 6,920, validation 741 ->
    680`: every entry placed apart from its key's split is counted (the sizes show only the
    net change, which is far smaller when groups go both ways), then the split sizes now
    and had every entry kept its key's split. `entries` is None in metadata written before
    it was counted: then only the sizes are said."""
    sizes = []
    for name, change in moved.items():
        now = splits[name].num_examples if name in splits else 0
        sizes.append(f"{name} {now - change:,} -> {now:,}")
    if entries is None:
        return f"grouping changed the split sizes: {', '.join(sizes)}"
    counted = plural(entries, "entry", "entries")
    return f"grouping moved {counted} between splits: {', '.join(sizes)}"


def _crossing_line(section: Mapping[str, Any]) -> str:
    """The leakage warning: groups holding near copies on both sides of official splits."""
    crossing = section["cross_split_groups"]
    held = " and ".join(section.get("cross_split_held_in") or ["another split"])
    train = section.get("cross_split_train_keys", 0)
    what = (
        f"{held} {'holds' if len(section.get('cross_split_held_in') or []) < 2 else 'hold'} "
        f"near copies of {train:,} train {'image' if train == 1 else 'images'}"
        if train
        else f"near copies sit in {held}"
    )
    groups = "group crosses" if crossing == 1 else "groups cross"
    if section["mode"] == "drop" and train:
        return f"{crossing:,} {groups} your splits: {what}, dropped from train ({DUPLICATES_FILE})"
    return f"{crossing:,} {groups} your splits: {what} ({DUPLICATES_FILE})"


def classes_lines(classes: ClassesInfo, tool: str = "coco") -> list[str]:
    """Per split: the most frequent and rarest classes by pixels, and the absent ones."""
    from transforms.class_stats import absent_classes, rarest_and_most_frequent

    count = classes.num_classes
    names = list(classes.names or ()) or [f"class {index}" for index in range(count)]
    lines = [f"  classes: {count}, ignore index {classes.ignore_index}"]
    for split, stats in classes.stats.items():
        labelled = sum(stats.pixels)
        if not labelled:
            continue
        rarest, frequent = rarest_and_most_frequent(stats, SHOWN_CLASSES)
        frequent_text = _shares(frequent, stats, names, labelled)
        line = f"  {split:<12}most frequent: {frequent_text}"
        if set(rarest) != set(frequent):  # with few classes present, the same classes twice
            line += f"; rarest: {_shares(rarest, stats, names, labelled)}"
        lines.append(line)
        absent = absent_classes(stats)
        if absent:
            shown = ", ".join(names[c] for c in absent[:SHOWN_ABSENT])
            more = f", ... ({len(absent)} in all)" if len(absent) > SHOWN_ABSENT else ""
            lines.append(f"  {'':<12}absent: {shown}{more}")
    coco = classes.extra.get("coco") or {}
    if coco.get("orphan_annotations"):
        lines.append(
            f"  {_tool_title(tool)}: {coco['orphan_annotations']:,} annotations name no image "
            "of the file "
            f"(e.g. id {coco.get('orphan_example_id')}): not drawn"
        )
    return lines


def _tool_title(name: str) -> str:
    """The export's tool as people call it (metadata.json's classes.coco holds any tool's
    label counts, under the name its first tool gave it)."""
    from transforms.sources import tools

    try:
        return tools.get(name).title
    except ValueError:  # a tool this segprep does not know: its stored name
        return name


def _shares(ids: list[int], stats, names: Sequence[str], labelled: int) -> str:
    """`name 12 %, ...`: two significant digits, so a rare class never shows as 0.0 %."""
    return ", ".join(f"{names[c]} {_percent(stats.pixels[c] / labelled * 100)} %" for c in ids)


def _percent(value: float) -> str:
    """Two significant digits below 10 (`0.47`, `9.4`), whole numbers above (`12`, `100`):
    never an exponent."""
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


def plural(count: int, noun: str, nouns: str = "") -> str:
    """`1 file`, `2 files`; `nouns` where the plural is not the noun and an s (`entries`)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def _shards(count: int) -> str:
    return "shard" if count == 1 else "shards"


def _empty_split_notes(
    splits: Mapping[str, SplitInfo], fractions: object, accepted: int
) -> list[str]:
    """A split asked for but left empty: its readers would fail later, say it now."""
    if not isinstance(fractions, SplitFractions):
        return [
            f"  note: {name} got no examples from its official split"
            for name, split in splits.items()
            if name in getattr(fractions, "sources", {}) and not split.num_examples
        ]
    asked = {"train": fractions.train, "validation": fractions.validation}
    return [
        f"  note: {name} got no examples: --{name}_size {asked[name]:g} of {accepted:,} "
        "accepted entries, each placed by a hash of its key, left it empty; more data or a "
        f"larger --{name}_size fills it"
        for name, fraction in asked.items()
        if fraction > 0 and not (name in splits and splits[name].num_examples)
    ]
