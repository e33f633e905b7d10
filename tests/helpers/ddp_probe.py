"""Run by torchrun (2 CPU ranks, gloo) from tests/test_torch_ddp.py: what make_loader takes
from the process group. Rank 0 writes the gathered answers as JSON to argv[2].

    torchrun --standalone --nproc_per_node 2 tests/helpers/ddp_probe.py DATA OUT.json
"""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist

from shard_reader.torch import make_loader


def main() -> None:
    data, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    loader = make_loader(data, "train", 2, num_workers=0, with_keys=True, seed=3)
    keys = [key for _, _, batch in loader for key in batch]
    evaluation = make_loader(data, "train", 3, num_workers=0, with_keys=True, uneven_ranks=True)
    every = [key for _, _, batch in evaluation for key in batch]
    try:
        make_loader(data, "train", 2, num_workers=0, rank=0, world_size=dist.get_world_size())
        disagreeing = None if dist.get_rank() == 0 else "accepted"
    except ValueError as error:
        disagreeing = str(error)
    default = make_loader(data, "train", 2)
    answer = {
        "rank": loader.rank,
        "world_size": loader.world_size,
        "keys": keys,
        "evaluation": every,
        "evaluation_len": len(evaluation),
        "disagreeing": disagreeing,
        "local_world_size": os.environ.get("LOCAL_WORLD_SIZE"),
        "default_workers": default.dataloader.num_workers,
    }
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, answer)
    if dist.get_rank() == 0:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump(gathered, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
