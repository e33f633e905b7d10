"""Which part of a split this process reads under torch.distributed, and with how many
decoding workers: defaults taken from the process group and torchrun's environment."""

from __future__ import annotations

import os

import torch.distributed

from shard_reader.source import usable_cores


def local_world_size() -> int:
    """Processes of this job on this host: torchrun's LOCAL_WORLD_SIZE, else 1."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def default_num_workers() -> int:
    """Usable cores shared among this host's ranks (LOCAL_WORLD_SIZE), at least 1."""
    return max(1, usable_cores() // local_world_size())


def resolve_ranks(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size): as given, else torch.distributed's when its group is up, else
    (0, 1). Given values that disagree with an initialised group are refused: each rank
    would read another rank's part, or the same records as another rank."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if distributed:
        group_rank, group_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        pairs = (("rank", rank, group_rank), ("world_size", world_size, group_size))
        for name, given, actual in pairs:
            if given is not None and given != actual:
                raise ValueError(
                    f"{name}={given} disagrees with torch.distributed ({name} {actual}): "
                    "leave rank and world_size out to take them from the process group"
                )
        return group_rank, group_size
    return (0 if rank is None else rank), (1 if world_size is None else world_size)
