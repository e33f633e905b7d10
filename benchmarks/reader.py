"""Reader throughput: shard_reader against the blog's pipeline and the decode-only limit.

    .venv/bin/python benchmarks/reader.py [--count 1200] [--trials 5] [--records 1200]

Builds (once, cached in benchmarks/.cache/) a sample dataset of 800x600 portraits and
prepares it twice, with JPEG and with PNG masks. Every pipeline then reads the same train
shards. A trial times `--records` records after a warm-up (shuffle buffers filled, autotune
settled); trials of all pipelines are interleaved and the median is reported, with the
process CPU time per record, which noisy neighbours disturb less than wall time.

Float32 output dominates the cost beyond decoding on this kind of host: a batch of eight
800x600 images is 46 MB of float32, and glibc serves blocks that large with fresh mmap'd
pages on every batch. Each allocator is therefore measured in its own child process:
TensorFlow's default one and its BFC allocator (TF_CPU_ALLOCATOR_USE_BFC=true), which keeps
freed memory for reuse. Importing shard_reader turns BFC on unless the environment chose, so
each child sets the variable explicitly; "as shipped" compares shard_reader with BFC against
the blog's pipeline in a plain TensorFlow process (BFC off), as each would run for a user.
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

CACHE = Path(__file__).resolve().parent / ".cache"
BATCH = 8
WARMUP_BATCHES = 30
NUM_SHARDS = 16
ALLOCATORS = {"default": "false", "bfc": "true"}
ALLOCATOR_LABELS = {"default": "BFC off (TF default)", "bfc": "BFC on (shard_reader default)"}
PIPELINES = (
    "decode-only limit",
    "decode + float32 limit",
    "shard_reader",
    "shard_reader, dtype=uint8",
    "blog",
    "blog, map_parallelization off",
)
DESCRIPTIONS = {
    "decode-only limit": "parallel decode_jpeg (+ mask decode) of in-memory bytes, uint8",
    "decode + float32 limit": "the same, then the float32 conversion of the batch",
    "shard_reader": "make_dataset(..., 'train', 8, repeat=True): float32 image and mask",
    "shard_reader, dtype=uint8": "the same with dtype=tf.uint8 (the model casts on its device)",
    "blog": "TFRecordDataset(files).map(parse_and_decode).batch(8).shuffle(50)",
    "blog, map_parallelization off": "the same with tf.data.Options map_parallelization=False",
}


def prepare_data(count: int, seed: int) -> dict[str, Path]:
    """Sample data and one prepared output per mask format, reused while the cache holds."""
    root = CACHE / f"portraits-{count}-seed{seed}"
    sample = root / "sample"
    outputs = {fmt: root / f"prepared-{fmt}" for fmt in ("jpeg", "png")}
    if all((path / "metadata.json").exists() for path in outputs.values()):
        return outputs
    from beam_pipeline.commands.sample_data import write_sample_data
    from beam_pipeline.launch import launcher

    done = sample / "complete"
    if not done.exists():
        print(f"writing {count} sample entries to {sample} ...", file=sys.stderr)
        write_sample_data(sample, count=count, seed=seed, broken_fraction=0.0)
        done.touch()
    for fmt, output in outputs.items():
        if (output / "metadata.json").exists():
            continue
        print(f"preparing {output} ...", file=sys.stderr)
        launcher.run(
            [
                "--image_dir",
                str(sample / "images"),
                "--mask_dir",
                str(sample / "masks"),
                "--output_dir",
                str(output),
                "--num_shards",
                str(NUM_SHARDS),
                "--mask_format",
                fmt,
                "--overwrite",
                "--runner",
                "FnApiRunner",
            ]
        )
    return outputs


def build_pipelines(data_dir: str):
    """name -> zero-argument factory of an endless dataset of batches, all on `data_dir`."""
    import tensorflow as tf

    import shard_reader

    info = shard_reader.load_split(data_dir, "train")
    decode_mask = tf.io.decode_png if info.mask_format == "png" else tf.io.decode_jpeg
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "mask": tf.io.FixedLenFeature([], tf.string),
    }

    def parse_and_decode(serialized):
        # The blog's per-record function, producing what shard_reader produces.
        parsed = tf.io.parse_single_example(serialized, spec)
        image = tf.cast(tf.io.decode_jpeg(parsed["image"], channels=3), tf.float32)
        mask = tf.cast(decode_mask(parsed["mask"], channels=1) >= 128, tf.float32)
        return image, mask

    def blog(map_parallelization: bool):
        dataset = tf.data.TFRecordDataset(list(info.files)).map(parse_and_decode)
        dataset = dataset.batch(BATCH).shuffle(50).repeat()
        options = tf.data.Options()
        options.experimental_optimization.map_parallelization = map_parallelization
        return dataset.with_options(options)

    parsed = tf.data.TFRecordDataset(list(info.files)).map(
        lambda serialized: tf.io.parse_single_example(serialized, spec)
    )
    in_memory = [(item["image"], item["mask"]) for item in parsed.as_numpy_iterator()]
    images = tf.constant([image for image, _ in in_memory])
    masks = tf.constant([mask for _, mask in in_memory])

    def decode_only():
        def decode(image, mask):
            return tf.io.decode_jpeg(image, channels=3), decode_mask(mask, channels=1)

        dataset = tf.data.Dataset.from_tensor_slices((images, masks)).repeat()
        dataset = dataset.map(decode, tf.data.AUTOTUNE, deterministic=False)
        return dataset.batch(BATCH)

    def decode_float():
        def to_float(image, mask):
            return tf.cast(image, tf.float32), tf.cast(mask >= 128, tf.float32)

        return decode_only().map(to_float, tf.data.AUTOTUNE, deterministic=False)

    return {
        "decode-only limit": decode_only,
        "decode + float32 limit": decode_float,
        "shard_reader": lambda: shard_reader.make_dataset(data_dir, "train", BATCH, repeat=True),
        "shard_reader, dtype=uint8": lambda: shard_reader.make_dataset(
            data_dir, "train", BATCH, repeat=True, dtype=tf.uint8
        ),
        "blog": lambda: blog(True),
        "blog, map_parallelization off": lambda: blog(False),
    }


def measure(factory, records: int) -> tuple[float, float]:
    """(records/s, CPU ms per record) over `records` records after a warm-up."""
    iterator = iter(factory())
    for _ in range(WARMUP_BATCHES):
        next(iterator)
    seen = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    while seen < records:
        seen += int(next(iterator)[0].shape[0])
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return seen / wall, cpu / seen * 1e3


def worker(data: dict[str, str], trials: int, records: int) -> None:
    """Runs in a child process (allocator fixed at start); prints results as JSON."""
    pipelines = {
        (fmt, name): factory
        for fmt, path in data.items()
        for name, factory in build_pipelines(path).items()
    }
    order = list(pipelines)
    results: dict[str, list[list[float]]] = {f"{fmt}|{name}": [] for fmt, name in order}
    for trial in range(trials):
        shift = trial % len(order)
        for fmt, name in order[shift:] + order[:shift]:  # rotate: no pipeline always first
            results[f"{fmt}|{name}"].append(list(measure(pipelines[(fmt, name)], records)))
            print(f"  trial {trial + 1}/{trials} {fmt:4s} {name}", file=sys.stderr)
    print(json.dumps(results))


def run_child(allocator: str, data: dict[str, Path], trials: int, records: int) -> dict:
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC=ALLOCATORS[allocator])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    command = [
        sys.executable,
        __file__,
        "--worker",
        json.dumps({fmt: str(path) for fmt, path in data.items()}),
        "--trials",
        str(trials),
        "--records",
        str(records),
    ]
    print(f"measuring with the {allocator} allocator ...", file=sys.stderr)
    completed = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict], formats: list[str]) -> str:
    allocators = list(results)
    header = ["pipeline", "masks"]
    for allocator in allocators:
        header += [f"{ALLOCATOR_LABELS[allocator]}: rec/s", "% of limit", "CPU ms/rec"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for fmt in formats:
        for name in PIPELINES:
            row = [name, fmt]
            for allocator in allocators:
                runs = results[allocator]
                rate = statistics.median(r[0] for r in runs[f"{fmt}|{name}"])
                limit = statistics.median(r[0] for r in runs[f"{fmt}|decode-only limit"])
                cpu = statistics.median(r[1] for r in runs[f"{fmt}|{name}"])
                row += [f"{rate:.0f}", f"{100 * rate / limit:.0f}%", f"{cpu:.2f}"]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def summary(results: dict[str, dict], formats: list[str]) -> str:
    lines = []
    for allocator, runs in results.items():
        for fmt in formats:

            def rate(name, runs=runs, fmt=fmt):
                return statistics.median(r[0] for r in runs[f"{fmt}|{name}"])

            reader = rate("shard_reader")
            lines.append(
                f"- {ALLOCATOR_LABELS[allocator]}, {fmt} masks: shard_reader = "
                f"{reader / rate('decode-only limit'):.0%} of the decode-only limit "
                f"({rate('shard_reader, dtype=uint8') / rate('decode-only limit'):.0%} "
                f"with uint8 output), "
                f"{reader / rate('decode + float32 limit'):.0%} of decode + float32, "
                f"{reader / rate('blog'):.2f}x the blog's pipeline, "
                f"{reader / rate('blog, map_parallelization off'):.2f}x it without "
                "map_parallelization"
            )
    if {"default", "bfc"} <= set(results):
        for fmt in formats:

            def median_rate(allocator, name, fmt=fmt):
                return statistics.median(r[0] for r in results[allocator][f"{fmt}|{name}"])

            shipped = median_rate("bfc", "shard_reader")
            lines.append(
                f"- as shipped, {fmt} masks: shard_reader (BFC on by import) = "
                f"{shipped / median_rate('default', 'blog'):.2f}x the blog's pipeline in a plain "
                "TensorFlow process"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1200, help="sample entries to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--records", type=int, default=1200, help="records timed per trial")
    parser.add_argument("--allocators", default="default,bfc", help="default,bfc")
    parser.add_argument("--mask_formats", default="jpeg,png", help="jpeg,png")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker), args.trials, args.records)
        return
    formats = args.mask_formats.split(",")
    outputs = prepare_data(args.count, args.seed)
    data = {fmt: outputs[fmt] for fmt in formats}
    results = {
        allocator: run_child(allocator, data, args.trials, args.records)
        for allocator in args.allocators.split(",")
    }
    metadata = json.loads((data[formats[0]] / "metadata.json").read_text())
    train = metadata["splits"]["train"]
    print(
        f"\n{train['num_examples']} train records of {train['image_shape'][0]}x"
        f"{train['image_shape'][1]} in {train['num_shards']} shards, batch {BATCH}; "
        f"median of {args.trials} interleaved trials of {args.records} records each; "
        f"{os.cpu_count()} CPUs\n"
    )
    print(table(results, formats))
    print()
    for name, description in DESCRIPTIONS.items():
        print(f"- {name}: {description}")
    print()
    print(summary(results, formats))


if __name__ == "__main__":
    main()
