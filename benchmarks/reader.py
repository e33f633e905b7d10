"""Reader throughput: shard_reader against the decode-only limit and the blog's pipeline.

    .venv/bin/python benchmarks/reader.py [--trials 5] [--records 1000] [--splits large,small]
    .venv/bin/python benchmarks/reader.py --quick          # 2 trials of ~400 records

Builds (once, cached in benchmarks/.cache/) two sample datasets of 800x600 portraits with
JPEG masks: "large", ~1,000 train records in 15 shards, and "small", ~350 train records in
4 shards, where per-epoch start-up weighs. Every contender then reads the same train shards
in ONE child process whose allocator is fixed before TensorFlow starts
(TF_CPU_ALLOCATOR_USE_BFC, "true" by default: what importing shard_reader picks), so the
blog's pipeline gets the same allocator as shard_reader. Batch 8 everywhere.

A trial reads 30 batches untimed (buffers filled, autotuning settled), then times at least
--records records; for shard_reader and the blog, a whole number of epochs' worth, so each
trial crosses as many epoch starts as it times epochs. Cached contenders read their first
epoch untimed (it fills the cache) and time epochs 2-4. Trials of all contenders
are interleaved (rotated) and the median is reported, with process CPU ms per record, which
noisy neighbours disturb less than wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CACHE = Path(__file__).resolve().parent / ".cache"
BATCH = 8
WARMUP_BATCHES = 30
SEED = 0


@dataclasses.dataclass(frozen=True)
class SplitData:
    """A sample dataset size: entries generated and total shards (train gets ~90%)."""

    count: int
    num_shards: int


SPLITS = {"large": SplitData(1110, 16), "small": SplitData(390, 5)}

# id -> (label in the table, what it is); the order is the table's.
CONTENDERS = {
    "limit": (
        "decode-only limit",
        "parallel decode_jpeg of image and mask bytes already in memory, uint8",
    ),
    "limit-float32": (
        "decode + float32 limit",
        "the same, then each batch thresholded and cast to float32: the float32 ceiling",
    ),
    "float32": ("shard_reader float32", "make_dataset(..., 'train', 8, repeat=True), the default"),
    "uint8": ("shard_reader uint8", "the same with dtype=tf.uint8"),
    "blog": (
        "blog",
        "TFRecordDataset(files).map(parse_and_decode).batch(8).shuffle(50).repeat()",
    ),
    "memory-float32": ("cache=memory float32, epochs 2-4", "cache='memory', epochs 2-4 timed"),
    "memory-uint8": ("cache=memory uint8, epochs 2-4", "the same with dtype=tf.uint8"),
    "400x300-float32": ("image_size=(400, 300) float32", "image_size=(400, 300), no cache"),
    "400x300-uint8": ("image_size=(400, 300) uint8", "the same with dtype=tf.uint8"),
    "200x150-float32": ("image_size=(200, 150) float32", "image_size=(200, 150), no cache"),
    "200x150-uint8": ("image_size=(200, 150) uint8", "the same with dtype=tf.uint8"),
}


def prepare_data(name: str) -> Path:
    """The prepared output of one sample dataset, reused while the cache holds."""
    spec = SPLITS[name]
    root = CACHE / f"portraits-{spec.count}-seed{SEED}"
    sample, output = root / "sample", root / f"prepared-{spec.num_shards}shards"
    if (output / "metadata.json").exists():
        return output
    from beam_pipeline.commands.sample_data import write_sample_data
    from beam_pipeline.launch import launcher

    done = sample / "complete"
    if not done.exists():
        print(f"writing {spec.count} sample entries to {sample} ...", file=sys.stderr)
        write_sample_data(sample, count=spec.count, seed=SEED, broken_fraction=0.0)
        done.touch()
    print(f"preparing {output} ...", file=sys.stderr)
    launcher.run(
        [
            *("--image_dir", str(sample / "images"), "--mask_dir", str(sample / "masks")),
            *("--output_dir", str(output), "--num_shards", str(spec.num_shards)),
            *("--overwrite", "--runner", "FnApiRunner"),
        ]
    )
    return output


@dataclasses.dataclass(frozen=True)
class Contender:
    """make() -> an endless dataset of batches; `epoch` records per epoch, 0 if not epochal."""

    make: Callable[[], Any]
    epoch: int = 0
    cached: bool = False


def build_contenders(data_dir: str, names: list[str]) -> dict[str, Contender]:
    import tensorflow as tf

    import shard_reader

    info = shard_reader.load_split(data_dir, "train")
    size = info.num_examples
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "mask": tf.io.FixedLenFeature([], tf.string),
    }

    def parse_and_decode(serialized):
        # The blog's per-record function, yielding what shard_reader yields.
        parsed = tf.io.parse_single_example(serialized, spec)
        image = tf.cast(tf.io.decode_jpeg(parsed["image"], channels=3), tf.float32)
        mask = tf.cast(tf.io.decode_jpeg(parsed["mask"], channels=1) >= 128, tf.float32)
        return image, mask

    def blog():
        dataset = tf.data.TFRecordDataset(list(info.files)).map(parse_and_decode)
        return dataset.batch(BATCH).shuffle(50).repeat()

    parsed = tf.data.TFRecordDataset(list(info.files)).map(
        lambda serialized: tf.io.parse_single_example(serialized, spec)
    )
    pairs = [(item["image"], item["mask"]) for item in parsed.as_numpy_iterator()]
    images, masks = tf.constant([p[0] for p in pairs]), tf.constant([p[1] for p in pairs])

    def decode_only():
        def decode(image, mask):
            return tf.io.decode_jpeg(image, channels=3), tf.io.decode_jpeg(mask, channels=1)

        dataset = tf.data.Dataset.from_tensor_slices((images, masks)).repeat()
        return dataset.map(decode, tf.data.AUTOTUNE, deterministic=False).batch(BATCH)

    def decode_float():
        def to_float(image, mask):
            return tf.cast(image, tf.float32), tf.cast(mask >= 128, tf.float32)

        return decode_only().map(to_float, tf.data.AUTOTUNE, deterministic=False)

    def reader(**settings):
        return lambda: shard_reader.make_dataset(data_dir, "train", BATCH, repeat=True, **settings)

    uint8 = {"dtype": tf.uint8}
    small, smaller = {"image_size": (400, 300)}, {"image_size": (200, 150)}
    contenders = {
        "limit": Contender(decode_only),
        "limit-float32": Contender(decode_float),
        "float32": Contender(reader(), size),
        "uint8": Contender(reader(**uint8), size),
        "blog": Contender(blog, size),
        "memory-float32": Contender(reader(cache="memory"), size, cached=True),
        "memory-uint8": Contender(reader(cache="memory", **uint8), size, cached=True),
        "400x300-float32": Contender(reader(**small), size),
        "400x300-uint8": Contender(reader(**small, **uint8), size),
        "200x150-float32": Contender(reader(**smaller), size),
        "200x150-uint8": Contender(reader(**smaller, **uint8), size),
    }
    return {name: contenders[name] for name in names}


def measure(contender: Contender, records: int) -> tuple[float, float, int]:
    """(records/s, CPU ms per record, records timed) of one trial."""
    iterator = iter(contender.make())

    def take(count: int) -> int:
        seen = 0
        while seen < count:
            seen += int(next(iterator)[0].shape[0])
        return seen

    if contender.cached:
        take(contender.epoch)  # the first epoch fills the cache
        target = 3 * contender.epoch
    else:
        take(WARMUP_BATCHES * BATCH)  # buffers filled, autotuning settled
        # Whole epochs' worth of records: a window of k epochs crosses k epoch starts.
        target = (
            math.ceil(records / contender.epoch) * contender.epoch if contender.epoch else records
        )
    started, cpu_started = time.perf_counter(), time.process_time()
    seen = take(target)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return seen / wall, cpu / seen * 1e3, seen


def worker(data: dict[str, str], names: list[str], trials: int, records: int) -> None:
    """Runs in the child process (allocator fixed at start); prints results as JSON."""
    contenders = {
        (split, name): contender
        for split, path in data.items()
        for name, contender in build_contenders(path, names).items()
    }
    order = list(contenders)
    results: dict[str, list] = {f"{split}|{name}": [] for split, name in order}
    for trial in range(trials):
        shift = trial * len(order) // trials  # rotate: no contender always first
        for split, name in order[shift:] + order[:shift]:
            rate, cpu, seen = measure(contenders[(split, name)], records)
            results[f"{split}|{name}"].append([rate, cpu, seen])
            print(f"  trial {trial + 1}/{trials} {split:5s} {name}: {rate:.0f}/s", file=sys.stderr)
    print(json.dumps(results))


def run_child(data: dict[str, Path], names, trials: int, records: int, allocator: str) -> dict:
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC=allocator)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    command = [
        sys.executable,
        __file__,
        "--worker",
        json.dumps({split: str(path) for split, path in data.items()}),
        "--contenders",
        ",".join(names),
        *("--trials", str(trials), "--records", str(records)),
    ]
    completed = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def medians(results: dict, split: str, name: str) -> tuple[float, float] | None:
    runs = results.get(f"{split}|{name}")
    if not runs:
        return None
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def table(results: dict, split: str, names: list[str]) -> str:
    """Rates and ratios; "by CPU" compares CPU ms per record, steadier on a shared host."""
    limit = medians(results, split, "limit")
    blog = medians(results, split, "blog")

    def ratios(rate: float, cpu: float, base: tuple[float, float] | None) -> list[str]:
        if base is None:
            return ["-", "-"]
        return [f"{rate / base[0]:.2f}", f"{base[1] / cpu:.2f}"]

    header = [
        "pipeline",
        "records/s",
        "x limit",
        "x limit by CPU",
        "x blog",
        "x blog by CPU",
        "CPU ms/record",
        "trials (records/s)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * 6 + "---|"]
    for name in names:
        rate, cpu = medians(results, split, name)
        trials = ", ".join(f"{r[0]:.0f}" for r in results[f"{split}|{name}"])
        by_limit, by_blog = ratios(rate, cpu, limit), ratios(rate, cpu, blog)
        row = [CONTENDERS[name][0], f"{rate:,.0f}", *by_limit, *by_blog, f"{cpu:.2f}", trials]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


TARGETS = [
    ("default float32 >= 1.3x the blog's pipeline", "float32", "blog", 1.3),
    ("default float32 >= 0.85x the decode-only limit", "float32", "limit", 0.85),
    ("uint8 >= 0.95x the decode-only limit", "uint8", "limit", 0.95),
    ("cache='memory' float32, epochs 2+ >= 4x the limit", "memory-float32", "limit", 4.0),
    ("cache='memory' uint8, epochs 2+ >= 4x the limit", "memory-uint8", "limit", 4.0),
    ("image_size (400, 300) uint8 >= 2x full-size uint8", "400x300-uint8", "uint8", 2.0),
    ("image_size (400, 300) float32 >= 2x full-size uint8", "400x300-float32", "uint8", 2.0),
    ("image_size (200, 150) uint8 >= 3x full-size uint8", "200x150-uint8", "uint8", 3.0),
    ("image_size (200, 150) float32 >= 3x full-size uint8", "200x150-float32", "uint8", 3.0),
]


def targets(results: dict, split: str) -> list[str]:
    """The issue's targets that this run can check: records/s ratio, and the CPU one."""
    lines = []
    for label, name, base, goal in TARGETS:
        mine, theirs = medians(results, split, name), medians(results, split, base)
        if mine is None or theirs is None:
            continue
        wall, cpu = mine[0] / theirs[0], theirs[1] / mine[1]
        verdict = "met" if wall >= goal else "NOT met"
        lines.append(f"- {split}: {label}: {wall:.2f}x ({cpu:.2f}x by CPU), {verdict}")
    return lines


def machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument(
        "--records", type=int, default=1000, help="records timed per trial (whole epochs)"
    )
    parser.add_argument("--splits", default="large,small", help="of: large (~1000), small (~350)")
    parser.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help=f"comma-separated, of {', '.join(CONTENDERS)}",
    )
    parser.add_argument(
        "--allocator", default="true", help="TF_CPU_ALLOCATOR_USE_BFC for every contender"
    )
    parser.add_argument("--quick", action="store_true", help="2 trials of ~400 records")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [name for name in args.contenders.split(",") if name]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown:
        parser.error(f"unknown contenders {unknown}; choose from {list(CONTENDERS)}")
    if args.worker:
        worker(json.loads(args.worker), names, args.trials, args.records)
        return
    trials, records = (2, 400) if args.quick else (args.trials, args.records)
    splits = args.splits.split(",")
    data = {split: prepare_data(split) for split in splits}
    started = time.perf_counter()
    load_before = os.getloadavg()
    results = run_child(data, names, trials, records, args.allocator)
    load_after = os.getloadavg()
    print(
        f"\n{datetime.date.today().isoformat()}, {machine()}; batch {BATCH}; "
        f"TF_CPU_ALLOCATOR_USE_BFC={args.allocator} for every contender (one process), "
        f"TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS', '0')}; "
        f"median of {trials} interleaved trials; {time.perf_counter() - started:.0f} s; "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after\n"
    )
    for split in splits:
        train = json.loads((data[split] / "metadata.json").read_text())["splits"]["train"]
        print(
            f"**{split}**: {train['num_examples']} train records of "
            f"{train['image_shape'][0]}x{train['image_shape'][1]} in {train['num_shards']} "
            f"shards, >= {records} records timed per trial (whole epochs)\n"
        )
        print(table(results, split, names))
        print()
    for split in splits:
        print("\n".join(targets(results, split)))
    print()
    for name in names:
        print(f"- {CONTENDERS[name][0]} (`{name}`): {CONTENDERS[name][1]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
