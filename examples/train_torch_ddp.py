"""Train on 2 (or more) processes with torchrun, then evaluate every validation record once.

    .venv/bin/torchrun --standalone --nproc_per_node 2 examples/train_torch_ddp.py \
        build/output [--steps 20]

CPU ranks talk over gloo (nccl on GPUs). make_loader takes each rank's rank and world_size
from the process group, and its worker count from LOCAL_WORLD_SIZE (cores shared among the
ranks on this host). Training uses the default equal parts, so every rank runs the same
number of steps and none waits in an all-reduce for a batch that never comes. Evaluation
uses uneven_ranks=True: every record is read exactly once, ranks may differ by one record,
and the sums are all-reduced, so the metric is the whole split's. Rank 0 prints.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from train_torch import Task, tiny_unet

from shard_reader.torch import make_loader


def train(model, task, args) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = make_loader(args.data_dir, "train", args.batch_size, image_size=args.image_size)
    epoch, step = 0, 0
    while step < args.steps:
        loader.set_epoch(epoch)  # a new shuffle, the same on every rank
        for images, masks in loader:
            loss = task.loss(model(images.float() / 255.0), task.target(masks))
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients across the ranks here
            optimizer.step()
            step += 1
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if dist.get_rank() == 0:
                print(f"step {step} epoch {epoch} loss {mean.item() / dist.get_world_size():.4f}")
            if step == args.steps:
                break
        epoch += 1


@torch.no_grad()
def evaluate(model, task, args) -> None:
    loader = make_loader(
        args.data_dir,
        "validation",
        args.batch_size,
        shuffle=False,
        image_size=args.image_size,
        uneven_ranks=True,  # every record once; ranks may differ by one batch
    )
    # The bare module: the DDP wrapper's forward can sync across ranks, and with uneven
    # ranks one rank may run a batch more than the others.
    net = model.module
    sums = torch.zeros(3, dtype=torch.float64)  # loss x records, records, pixels right
    pixels = torch.zeros(1, dtype=torch.float64)  # pixels that count
    for images, masks in loader:
        logits = net(images.float() / 255.0)
        target = task.target(masks)
        sums[0] += task.loss(logits, target).item() * len(images)
        sums[1] += len(images)
        if task.classes is None:
            predicted, counted = (logits > 0).float(), torch.ones_like(target, dtype=torch.bool)
        else:
            predicted, counted = logits.argmax(1), target != task.classes.ignore_index
        sums[2] += ((predicted == target) & counted).sum().item()
        pixels += counted.sum().item()
    dist.all_reduce(sums)  # after the loop: every rank gets here once, whatever its count
    dist.all_reduce(pixels)
    if dist.get_rank() == 0:
        loss, records, right = sums.tolist()
        print(
            f"eval records {int(records)} loss {loss / records:.4f} "
            f"pixel accuracy {right / pixels.item():.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--image_size", type=int, nargs=2, default=(128, 96), metavar=("H", "W"))
    args = parser.parse_args()
    dist.init_process_group("gloo")
    try:
        torch.manual_seed(0)  # the same initial weights on every rank
        task = Task(args.data_dir)
        model = DistributedDataParallel(tiny_unet(task.outputs))
        train(model, task, args)
        evaluate(model, task, args)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
