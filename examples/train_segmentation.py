"""Train a tiny U-Net on segprep shards: the reader, exact epochs and tf.distribute together.

    .venv/bin/python examples/train_segmentation.py build/output --epochs 3 --image_size 128

MirroredStrategy when GPUs exist, the default strategy otherwise. Each input pipeline reads
its own part of the split (input_context), and an epoch is `steps_per_epoch` steps: one
exact pass over the training split (unless --steps caps it).
"""

from __future__ import annotations

import argparse
import math
import os
import time

# Before TensorFlow loads: no C++ start-up lines (unless you set these), as with `segprep`.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # its notice ignores the log level

# isort: off
import shard_reader  # noqa: E402 - first: it chooses TensorFlow's CPU allocator (README)

# isort: on
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402


def make_strategy() -> tf.distribute.Strategy:
    if tf.config.list_physical_devices("GPU"):
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def resize_and_flip(image_size: int):
    """Augment for one example: shrink both to image_size^2 for CPU speed, flip both at once."""

    def augment(image: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        size = [image_size, image_size]
        image = tf.image.resize(image, size, antialias=True)
        mask = tf.image.resize(mask, size, method="nearest")
        flip = tf.random.uniform([]) < 0.5
        return (
            tf.where(flip, tf.reverse(image, [1]), image),
            tf.where(flip, tf.reverse(mask, [1]), mask),
        )

    return augment


def resize_only(image_size: int):
    def augment(image: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        size = [image_size, image_size]
        return (
            tf.image.resize(image, size, antialias=True),
            tf.image.resize(mask, size, method="nearest"),
        )

    return augment


def tiny_unet(image_size: int, width: int = 8) -> keras.Model:
    """Two down, two up, skip connections; outputs per-pixel foreground logits."""
    inputs = keras.Input([image_size, image_size, 3])
    x = keras.layers.Rescaling(1 / 127.5, offset=-1)(inputs)
    skips = []
    for depth in range(2):
        x = conv_block(x, width * 2**depth)
        skips.append(x)
        x = keras.layers.MaxPooling2D()(x)
    x = conv_block(x, width * 4)
    for depth in reversed(range(2)):
        x = keras.layers.UpSampling2D()(x)
        x = keras.layers.Concatenate()([x, skips[depth]])
        x = conv_block(x, width * 2**depth)
    logits = keras.layers.Conv2D(1, 1)(x)
    return keras.Model(inputs, logits)


def conv_block(x, filters: int):
    for _ in range(2):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    return x


class EpochReport(keras.callbacks.Callback):
    """One line per epoch: loss and IoU, for train and validation."""

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        names = [name for name in ("loss", "iou", "val_loss", "val_iou") if name in logs]
        report = ", ".join(f"{name} {logs[name]:.4f}" for name in names)
        print(f"epoch {epoch + 1}: {report} ({time.monotonic() - self.started:.0f}s)")


def train(
    data_dir: str,
    *,
    epochs: int = 3,
    batch_size: int = 16,
    steps: int | None = None,
    image_size: int = 128,
    learning_rate: float = 2e-3,
    seed: int | None = 0,
) -> keras.callbacks.History:
    """Fit and return the Keras history (loss, iou, val_loss, val_iou per epoch)."""
    if seed is not None:
        keras.utils.set_random_seed(seed)
    strategy = make_strategy()
    replicas = strategy.num_replicas_in_sync
    per_replica = max(1, batch_size // replicas)
    # One input pipeline per worker; a step takes one per-replica batch for each replica.
    context = tf.distribute.InputContext(1, 0, replicas)
    steps_per_epoch = shard_reader.steps_per_epoch(data_dir, "train", per_replica, context)
    if steps:
        steps_per_epoch = min(steps_per_epoch, steps)

    def train_data(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return shard_reader.make_dataset(
            data_dir,
            "train",
            input_context.get_per_replica_batch_size(per_replica * replicas),
            input_context=input_context,
            repeat=True,
            seed=seed,
            augment=resize_and_flip(image_size),
        )

    with strategy.scope():
        model = tiny_unet(image_size)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=keras.losses.BinaryCrossentropy(from_logits=True),
            metrics=[keras.metrics.BinaryIoU(target_class_ids=[1], threshold=0.0, name="iou")],
        )
    validation = {}
    if shard_reader.load_metadata(data_dir)["splits"]["validation"]["num_examples"]:
        validation_steps = shard_reader.steps_per_epoch(data_dir, "validation", batch_size)
        validation = {
            "validation_data": shard_reader.make_dataset(
                data_dir,
                "validation",
                batch_size,
                training=False,
                augment=resize_only(image_size),
            ),
            "validation_steps": min(validation_steps, steps) if steps else validation_steps,
        }
    print(
        f"{strategy.__class__.__name__} with {replicas} replica(s); "
        f"{steps_per_epoch} steps of {per_replica * replicas} per epoch"
    )
    return model.fit(
        strategy.distribute_datasets_from_function(train_data),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        shuffle=False,  # the dataset shuffles per example itself
        callbacks=[EpochReport()],
        verbose=0,
        **validation,
    )


def main(argv: list[str] | None = None) -> keras.callbacks.History:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", help="a segprep output directory (local or gs://)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs (default: %(default)s)")
    parser.add_argument(
        "--batch_size", type=int, default=16, help="global batch size (default: %(default)s)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="cap on steps per epoch (default: no cap, one exact pass over the split)",
    )
    parser.add_argument(
        "--image_size",
        type=int,
        default=128,
        help="train at this square size, a multiple of 4 (default: %(default)s)",
    )
    parser.add_argument(
        "--learning_rate", type=float, default=2e-3, help="Adam's (default: %(default)s)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="for weights and shuffling (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.image_size < 4 or args.image_size % 4:
        parser.error("--image_size must be a positive multiple of 4 (two 2x poolings)")
    history = train(
        args.data_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        steps=args.steps,
        image_size=args.image_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
    )
    losses = history.history["loss"]
    if not all(math.isfinite(loss) for loss in losses):
        raise SystemExit(f"loss is not finite: {losses}")
    return history


if __name__ == "__main__":
    main()
