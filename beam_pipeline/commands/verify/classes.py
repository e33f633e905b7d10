"""Class-id statistics counted again from the masks verify reads, and compared with
metadata.json's."""

from __future__ import annotations

from beam_pipeline.commands.verify.state import Checked
from transforms.class_stats import ClassStats

SHOWN = 8  # values or differences listed in one problem line


def stat_differences(recorded: ClassStats, counted: ClassStats) -> list[str]:
    """'field[class] recorded, counted' for every number that differs."""
    found = []
    for field in ("pixels", "images", "image_pixels"):
        pairs = zip(getattr(recorded, field), getattr(counted, field), strict=True)
        found.extend(
            f"{field}[{class_id}] {said} in metadata.json, {seen} counted"
            for class_id, (said, seen) in enumerate(pairs)
            if said != seen
        )
    for field in ("ignored_pixels", "num_images"):
        said, seen = getattr(recorded, field), getattr(counted, field)
        if said != seen:
            found.append(f"{field} {said} in metadata.json, {seen} counted")
    return found


def check_class_stats(state: Checked) -> None:
    """metadata.json's per-split class statistics against the counts from the masks."""
    if state.classes is None:
        return
    recorded = state.classes.stats
    for split, counted in state.class_counts.items():
        if split not in recorded:
            state.problem(f"metadata.json: classes has no statistics for split {split!r}")
        elif counted.complete:
            differences = stat_differences(recorded[split], counted.stats())
            if differences:
                shown = "; ".join(differences[:SHOWN])
                more = "" if len(differences) <= SHOWN else f"; ... ({len(differences)} in all)"
                state.problem(
                    f"metadata.json: class statistics of split {split!r} differ from its "
                    f"masks: {shown}{more}"
                )
    for split in sorted(set(recorded) - set(state.class_counts)):
        state.problem(f"metadata.json: classes has statistics for split {split!r}, not a split")
