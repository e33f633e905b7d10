"""The end-of-run summary: the same figures metadata.json holds, for a person."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from segcore.splits import num_shards_note

if TYPE_CHECKING:
    from beam_pipeline.launch.plan import RunPlan


def format_summary(metadata: dict[str, Any], plan: RunPlan | None = None) -> str:
    run = metadata.get("run", {})
    splits = metadata["splits"]
    accepted = sum(split["num_examples"] for split in splits.values())
    shards = sum(split["num_shards"] for split in splits.values())
    rejected = metadata["num_rejected"]
    lines = [
        f"segprep: {metadata['num_discovered']:,} entries discovered, {accepted:,} accepted, "
        f"{rejected['total']:,} rejected",
    ]
    for name, split in splits.items():
        size = sum(shard["bytes"] for shard in split["shards"])
        lines.append(
            f"  {name:<12}{split['num_examples']:>9,} examples  {split['num_shards']:>4} shards"
            f"  {size / 1e6:>9.1f} MB"
        )
    for reason, count in rejected["by_reason"].items():
        example = rejected.get("example_key", {}).get(reason, "")
        lines.append(f"  rejected {reason:<20}{count:>6,}   e.g. {example}")
    if run:
        lines.append(
            f"  {shards} shards, {run['bytes_written'] / 1e6:.1f} MB written in "
            f"{run['wall_seconds']:.1f} s ({run['records_per_second']:.0f} records/s)"
        )
    note = num_shards_note(plan.job.planning.num_shards, shards) if plan is not None else None
    if note:
        lines.append(f"  {note}")
    if plan is not None and plan.listing is not None and plan.listing.hidden:
        lines.append(f"  ignored {plan.listing.hidden:,} hidden files (names starting with '.')")
    output = metadata["parameters"]["output_dir"]
    lines.append(f"  output: {output}  (rejects.jsonl lists every rejected entry)")
    return "\n".join(lines)
