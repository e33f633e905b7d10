"""Split a split's records between input pipelines, by record ranges over the shards.

Whole-file sharding gives pipelines record counts as uneven as the shards (and nothing at
all to some when there are fewer shards than pipelines); record-level `Dataset.shard` makes
every pipeline read every byte. Instead the shards are laid end to end and cut into
`num_pipelines` contiguous ranges whose sizes differ by at most one record: each pipeline
reads only its range (plus the skipped head of at most one shard) and the ranges tile the
split exactly. metadata.json gives the per-shard counts, so no file is opened to plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class Segment:
    """Records [skip, skip + take) of shard `shard`."""

    shard: int
    skip: int
    take: int
    to_end: bool  # the range runs to the end of the shard: read it all, so extras show up


def part_sizes(num_examples: int, num_pipelines: int) -> list[int]:
    """Records per input pipeline: the first `num_examples % num_pipelines` get one more."""
    if num_pipelines < 1:
        raise ValueError(f"num_pipelines must be at least 1, got {num_pipelines}")
    if num_pipelines > num_examples:
        raise ValueError(
            f"{num_pipelines} input pipelines for {num_examples} records: "
            "some pipelines would get no data"
        )
    base, extra = divmod(num_examples, num_pipelines)
    return [base + (1 if index < extra else 0) for index in range(num_pipelines)]


def plan_segments(
    shard_sizes: Sequence[int], num_pipelines: int = 1, pipeline_id: int = 0
) -> list[Segment]:
    """The segments input pipeline `pipeline_id` of `num_pipelines` reads, in shard order."""
    if not 0 <= pipeline_id < num_pipelines:
        raise ValueError(f"input_pipeline_id {pipeline_id} outside 0..{num_pipelines - 1}")
    sizes = part_sizes(sum(shard_sizes), num_pipelines)
    start = sum(sizes[:pipeline_id])
    end = start + sizes[pipeline_id]
    segments = []
    offset = 0
    for shard, size in enumerate(shard_sizes):
        low, high = max(start, offset), min(end, offset + size)
        if low < high:
            segments.append(Segment(shard, low - offset, high - low, high == offset + size))
        offset += size
    return segments
