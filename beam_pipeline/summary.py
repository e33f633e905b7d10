"""The end-of-run summary, from metadata.json and the job's counters."""

from __future__ import annotations

from beam_pipeline.launcher import PrepareResult


def format_summary(result: PrepareResult) -> str:
    info = result.metadata
    accepted = sum(split["num_examples"] for split in info["splits"].values())
    lines = [
        f"discovered {info['num_discovered']} entries in {result.seconds:.1f} s "
        f"({accepted / max(result.seconds, 1e-9):.1f} records/s)"
    ]
    for name, split in info["splits"].items():
        size = sum(shard["bytes"] for shard in split["shards"])
        lines.append(
            f"  {name:<11} {split['num_examples']:>7} examples in {split['num_shards']} shards "
            f"({size / 1e6:.1f} MB)"
        )
    rejected = info["num_rejected"]
    lines.append(f"  rejected    {rejected['total']:>7}")
    for reason, count in rejected["by_reason"].items():
        lines.append(f"    {reason:<22} {count}")
    lines.append(f"output: {info['parameters']['output_dir']}")
    return "\n".join(lines)
