"""Train a tiny segmentation network in PyTorch on a segprep output, on the CPU.

    .venv/bin/python examples/train_torch.py build/output [--steps 20] [--batch_size 8]

The loss follows metadata.json: for a class-id output (`--mask_type classes`) the network
predicts one channel per class and trains with CrossEntropyLoss, ignoring the ignore index
and weighting classes by the train split's median-frequency weights; for binary masks it
predicts one channel and trains with BCEWithLogitsLoss.

The output needs its record index (`segprep index build/output` for an output written
before it existed). Halfway through, the loader's state is saved and a new loader resumes
from it, as after a preemption: training goes on with the batches the first loader would
have given. For several processes see examples/train_torch_ddp.py (torchrun).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from shard_reader import load_classes, load_metadata
from shard_reader.torch import make_loader


def tiny_unet(outputs: int = 1) -> nn.Module:
    """Two convolutions down, one up: enough to see the loss fall on the sample data."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.ConvTranspose2d(16, 8, 2, stride=2),
        nn.ReLU(),
        nn.Conv2d(8, outputs, 1),
    )


class Task:
    """The model's outputs and the loss, as metadata.json describes the masks."""

    def __init__(self, data_dir: str) -> None:
        # metadata.json's "classes" section is there only for a class-id output.
        classes = load_classes(data_dir) if "classes" in load_metadata(data_dir) else None
        self.classes = classes
        if classes is None:  # 0/1 masks: one logit per pixel
            self.outputs = 1
            self.loss = nn.BCEWithLogitsLoss()
        else:  # class ids: one logit per class; the ignore index never counts
            self.outputs = classes.num_classes
            weights = torch.tensor(classes.weights("train"), dtype=torch.float32)
            self.loss = nn.CrossEntropyLoss(ignore_index=classes.ignore_index, weight=weights)

    def target(self, masks: torch.Tensor) -> torch.Tensor:
        """Loader masks [B,1,H,W] -> what the loss takes."""
        if self.classes is None:
            return masks.float()
        return masks[:, 0].long()  # [B,H,W] class ids, ignore index included


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--image_size", type=int, nargs=2, default=(128, 96), metavar=("H", "W"))
    parser.add_argument("--num_workers", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    task = Task(args.data_dir)
    model = tiny_unet(task.outputs)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loader():
        return make_loader(
            args.data_dir,
            "train",
            args.batch_size,
            num_workers=args.num_workers,
            image_size=args.image_size,
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
        # uint8 0..255 from the loader; the model wants floats.
        logits = model(images.float() / 255.0)
        loss = task.loss(logits, task.target(masks))
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
