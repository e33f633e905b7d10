"""make_dataset's default against the blog's pipeline, read as most training loops read:
one pass per epoch over a dataset without repeat (the case issue 24 measured).

    .venv/bin/python benchmarks/per_epoch.py [--trials 3] [--epochs 4]

Uses benchmarks/reader.py's "small" split (~350 train records of 800x600 in 4 shards,
built once into benchmarks/.cache/). Each contender runs in one fresh child process per
trial, with the allocator importing shard_reader picks (TF_CPU_ALLOCATOR_USE_BFC=true) for
all, the blog's pipeline included: one untimed epoch, then `--epochs` epochs timed, each a
new `for batch in dataset` (tf.data rebuilds its iterator, fills its shuffle buffer anew).

- blog: TFRecordDataset(files).map(parse_and_decode).batch(8).shuffle(50), float32
- float32: make_dataset(dir, "train", 8), the default dtype
- uint8: make_dataset(dir, "train", 8, dtype=tf.uint8)
- uint8 + cast: the uint8 batches cast to float32 by the consumer, as Keras `Rescaling`
  or a model's first layer would (here on the CPU: on an accelerator it is free)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CONTENDERS = ("blog", "float32", "uint8", "uint8 + cast")


def child(name: str, data_dir: str, epochs: int) -> dict:
    import tensorflow as tf

    import shard_reader  # the allocator first, for every contender

    if name == "blog":
        files = sorted(str(p) for p in Path(data_dir).glob("train-*.tfrecord"))
        spec = {
            "image": tf.io.FixedLenFeature([], tf.string),
            "mask": tf.io.FixedLenFeature([], tf.string),
        }

        def parse_and_decode(serialized):
            parsed = tf.io.parse_single_example(serialized, spec)
            image = tf.cast(tf.io.decode_jpeg(parsed["image"], channels=3), tf.float32)
            mask = tf.cast(tf.io.decode_jpeg(parsed["mask"], channels=1) >= 128, tf.float32)
            return image, mask

        # The blog's lines as written (benchmarks/reader.py's "blog", without repeat).
        dataset = tf.data.TFRecordDataset(files).map(parse_and_decode).batch(8).shuffle(50)
    else:
        dtype = tf.float32 if name == "float32" else tf.uint8
        dataset = shard_reader.make_dataset(data_dir, "train", 8, dtype=dtype)
    cast = name == "uint8 + cast"
    records = 0

    def one_epoch() -> int:
        count = 0
        for images, masks in dataset:
            if cast:
                images, masks = tf.cast(images, tf.float32), tf.cast(masks, tf.float32)
            count += int(images.shape[0])
        return count

    one_epoch()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        records += one_epoch()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"rate": records / elapsed, "cpu_ms": 1000 * cpu / records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.data, args.epochs)))
        return
    from benchmarks.reader import prepare_data

    data_dir = str(prepare_data("small"))
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true"}
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    results: dict[str, list[dict]] = {name: [] for name in CONTENDERS}
    for trial in range(args.trials):
        names = CONTENDERS[trial % len(CONTENDERS) :] + CONTENDERS[: trial % len(CONTENDERS)]
        for name in names:
            command = [sys.executable, __file__, "--child", name, "--data", data_dir]
            done = subprocess.run(
                [*command, "--epochs", str(args.epochs)],
                capture_output=True, text=True, env=env, check=False,
            )  # fmt: skip
            if done.returncode:
                raise RuntimeError(done.stderr[-3000:])
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"trial {trial} {name}: {results[name][-1]}", file=sys.stderr)
    blog = statistics.median(r["rate"] for r in results["blog"])
    print(f"per-epoch passes, {args.epochs} epochs timed, median of {args.trials} trials")
    print(f"{'contender':14} {'records/s':>10} {'x blog':>7} {'CPU ms/record':>14}")
    for name, runs in results.items():
        rate = statistics.median(r["rate"] for r in runs)
        cpu = statistics.median(r["cpu_ms"] for r in runs)
        print(f"{name:14} {rate:10.1f} {rate / blog:7.2f} {cpu:14.2f}")


if __name__ == "__main__":
    main()
