"""Train a tiny segmentation network in PyTorch on a segprep output, on the CPU.

    .venv/bin/python examples/train_torch.py build/output [--steps 20] [--batch_size 8]

The output needs its record index (`segprep index build/output` for an output written
before it existed). Halfway through, the loader's state is saved and a new loader resumes
from it, as after a preemption: training goes on with the batches the first loader would
have given. For several processes, pass rank and world_size to make_loader (one per
torch.distributed process); each rank then gets its own equal, disjoint part.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from shard_reader.torch import make_loader


def tiny_unet() -> nn.Module:
    """Two convolutions down, one up: enough to see the loss fall on the sample data."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.ConvTranspose2d(16, 8, 2, stride=2),
        nn.ReLU(),
        nn.Conv2d(8, 1, 1),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--image_size", type=int, nargs=2, default=(128, 96), metavar=("H", "W"))
    args = parser.parse_args()

    torch.manual_seed(0)
    model = tiny_unet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.BCEWithLogitsLoss()

    def loader():
        return make_loader(
            args.data_dir, "train", args.batch_size, num_workers=2, image_size=args.image_size
        )

    train, epoch, step, state = loader(), 0, 0, None
    train.set_epoch(epoch)
    batches = iter(train)
    while step < args.steps:
        try:
            images, masks = next(batches)
        except StopIteration:  # next epoch: a new shuffle
            epoch += 1
            train.set_epoch(epoch)
            batches = iter(train)
            continue
        # uint8 0..255 and 0/1 from the loader; the model wants floats.
        logits = model(images.float() / 255.0)
        loss = loss_fn(logits, masks.float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        print(f"step {step} epoch {epoch} loss {loss.item():.4f}", flush=True)
        if step == args.steps // 2 and state is None:
            state = {"loader": train.state_dict(), "epoch": epoch}  # a checkpoint
            train = loader()  # ... the job is preempted and restarts ...
            train.load_state_dict(state["loader"])
            train.set_epoch(state["epoch"])
            batches = iter(train)
            print(f"resumed at step {step} from {state['loader']}", flush=True)


if __name__ == "__main__":
    main()
