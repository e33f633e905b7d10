"""examples/train_segmentation.py trains on real shards: the loss falls, metrics are finite."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_segmentation.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_segmentation", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_few_steps_of_training_reduce_the_loss(prepared, capsys):
    example = load_example()
    args = ["--epochs", "4", "--steps", "5", "--batch_size", "8", "--image_size", "32"]
    history = example.main([str(prepared[0]), *args]).history
    losses = history["loss"]
    assert len(losses) == 4
    for name in ("loss", "iou", "val_loss", "val_iou"):
        assert all(math.isfinite(value) for value in history[name]), (name, history[name])
    assert all(0.0 <= value <= 1.0 for value in history["iou"] + history["val_iou"])
    assert losses[-1] < 0.85 * losses[0], losses
    assert history["iou"][-1] > history["iou"][0], history["iou"]
    report = capsys.readouterr().out
    assert "epoch 4: loss" in report and "val_iou" in report
