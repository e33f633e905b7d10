"""Read one batch back through shard_reader and print what training will see."""

import os
import sys

# Before TensorFlow loads: no C++ start-up lines (unless you set these), as with `segprep`.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # its notice ignores the log level

import shard_reader  # noqa: E402


def main(data_dir: str) -> None:
    dataset = shard_reader.make_dataset(data_dir, "train", batch_size=8, with_keys=True)
    images, masks, keys = next(iter(dataset))
    steps = shard_reader.steps_per_epoch(data_dir, "train", batch_size=8)
    print(f"read back a batch from {data_dir}:")
    low, high = images.numpy().min(), images.numpy().max()
    print(f"  images {tuple(images.shape)} {images.dtype.name} in [{low:.0f}, {high:.0f}]")
    print(
        f"  masks  {tuple(masks.shape)} {masks.dtype.name}, foreground {masks.numpy().mean():.1%}"
    )
    print(f"  keys   {', '.join(k.decode() for k in keys.numpy()[:4])}, ...")
    print(f"  {steps} steps per epoch at batch size 8")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/output")
