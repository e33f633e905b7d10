"""The shards a split plan names."""

from __future__ import annotations

from collections.abc import Mapping

from transforms.splits import ShardSpec


def shard_specs(plan: Mapping[str, int]) -> list[ShardSpec]:
    """Every shard of `plan` (split -> shard count), split by split in name order."""
    return [ShardSpec(split, i, n) for split, n in sorted(plan.items()) for i in range(n)]
