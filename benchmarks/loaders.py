"""Loader throughput: the PyTorch and Grain loaders against tf.data and the decode-only limits.

    flock /work/tools/bench.lock .venv/bin/python benchmarks/loaders.py [--trials 5]
    .venv/bin/python benchmarks/loaders.py --formats tfrecord,array_record

With `--formats`, the PyTorch and Grain loaders (the readers of both formats) are timed on
the same inputs prepared once per `--record_format`: each contender is named `NAME @ FORMAT`.

Builds (once, cached in benchmarks/.cache/) 800x600 portraits with JPEG masks, prepared by
the job and indexed with `segprep index`; every contender reads the same train shards, in
batches of 8 uint8 images and masks:

- tf.data uint8: shard_reader.make_dataset(..., dtype=tf.uint8, repeat=True), the baseline
- PyTorch: shard_reader.torch.make_loader(..., num_workers=2), epoch after epoch
- Grain: shard_reader.grain.make_loader(..., worker_count=2), and in-process (0)
- decode-only limits: decoding in-memory record bytes with nothing else, in tf.data
  (parallel map, as benchmarks/reader.py) and with simplejpeg in 2 processes (what the
  PyTorch and Grain loaders decode with)
- PyTorch with num_workers=1 and 0: what the worker default should be on a small host
- per-sample joint augmentation (random resized crop to AUG_SIZE, flip, rotation with mask
  fill 255; torchvision v2 when installed, else tests/helpers/augment.py's hand-written
  transform of the same semantics): make_loader(transform=) in 2 workers, the same in the
  main process (num_workers=0), and a plain torch Dataset over the original image and .mat
  mask files with the same transform in 2 DataLoader workers

Each trial of each contender runs in a fresh child process: warm-up batches first (workers
started, buffers filled), then `--records` records timed. Trials are interleaved (the order
rotates) and the median is reported with its ratio to tf.data uint8, together with the CPU
time per record of all the contender's processes (workers included): on a machine shared
with other work, wall time depends on how many threads a contender can put on the cores,
CPU time much less.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"
BATCH = 8
WARMUP_BATCHES = 20
NUM_SHARDS = 16
BASELINE = "tf.data uint8"
AUG_SIZE = (384, 288)
AUG_WORKERS = "PyTorch + per-sample augment, transform= in 2 workers"
AUG_MAIN = "PyTorch + per-sample augment, in the main process"
AUG_FILES = "plain Dataset over the original files + augment, 2 workers"
CONTENDERS = (
    BASELINE,
    "PyTorch, num_workers=2",
    "Grain, worker_count=2",
    "Grain, in-process",
    "decode-only limit, tf.data",
    "decode-only limit, simplejpeg x2 processes",
    "PyTorch, num_workers=1",
    "PyTorch, num_workers=0",
    AUG_WORKERS,
    AUG_MAIN,
    AUG_FILES,
)


FORMAT_CONTENDERS = ("PyTorch, num_workers=2", "Grain, in-process")


def prepare_data(count: int, seed: int, record_format: str | None = None) -> Path:
    """The prepared and indexed output, reused while the cache holds (None: the default
    record format, in the folder earlier runs cached it in)."""
    root = CACHE / f"loaders-{count}-seed{seed}"
    output = root / ("prepared" if record_format is None else f"prepared-{record_format}")
    if (output / "dataset_info.json").exists():
        return output
    from beam_pipeline.commands.index import index_output
    from beam_pipeline.commands.sample_data import write_sample_data
    from beam_pipeline.launch import launcher

    sample = root / "sample"
    if not (sample / "complete").exists():
        print(f"writing {count} sample entries to {sample} ...", file=sys.stderr)
        write_sample_data(sample, count=count, seed=seed, broken_fraction=0.0)
        (sample / "complete").touch()
    print(f"preparing {output} ...", file=sys.stderr)
    launcher.run(
        [
            "--image_dir", str(sample / "images"),
            "--mask_dir", str(sample / "masks"),
            "--output_dir", str(output),
            "--num_shards", str(NUM_SHARDS),
            *(["--record_format", record_format] if record_format else []),
            "--overwrite",
            "--runner", "FnApiRunner",
        ]
    )  # fmt: skip
    index_output(str(output))
    return output


def _record_bytes(data_dir: str, limit: int) -> list[tuple[bytes, bytes]]:
    """(image, mask) encoded bytes of the first `limit` train records."""
    from shard_reader.source import RecordSource
    from transforms.format import example_schema as tf_example

    source = RecordSource(data_dir, "train")
    pairs = []
    for index in range(min(limit, len(source))):
        feature = tf_example.Example.FromString(source.read_serialized(index)).features.feature
        pairs.append((feature["image"].bytes_list.value[0], feature["mask"].bytes_list.value[0]))
    return pairs


def _decode_batch(pairs: list[tuple[bytes, bytes]]) -> list[int]:
    import simplejpeg

    heights = []
    for image, mask in pairs:
        heights.append(simplejpeg.decode_jpeg(image, colorspace="RGB", fastdct=True).shape[0])
        simplejpeg.decode_jpeg(mask, colorspace="GRAY", fastdct=True)
    return heights


def batches(name: str, data_dir: str):
    """An endless iterator of batches (anything whose first element has len = batch size)."""
    if name == BASELINE:
        import tensorflow as tf

        import shard_reader

        dataset = shard_reader.make_dataset(data_dir, "train", BATCH, repeat=True, dtype=tf.uint8)
        return iter(dataset)
    if name in (AUG_WORKERS, AUG_MAIN, AUG_FILES):
        return _augmented(name, data_dir)
    if name.startswith("PyTorch"):
        from shard_reader.torch import make_loader

        workers = int(name.rsplit("=", 1)[1])
        loader = make_loader(data_dir, "train", BATCH, num_workers=workers)

        def endless():
            epoch = 0
            while True:
                loader.set_epoch(epoch)
                yield from loader
                epoch += 1

        return endless()
    if name.startswith("Grain"):
        from shard_reader.grain import make_loader

        workers = 2 if "worker_count=2" in name else 0
        dataset = make_loader(data_dir, "train", BATCH, num_epochs=None, worker_count=workers)
        return (list(batch.values()) for batch in dataset)
    if name == "decode-only limit, tf.data":
        import tensorflow as tf

        pairs = _record_bytes(data_dir, 400)
        images = tf.constant([image for image, _ in pairs])
        masks = tf.constant([mask for _, mask in pairs])

        def decode(image, mask):
            return tf.io.decode_jpeg(image, channels=3), tf.io.decode_jpeg(mask, channels=1)

        dataset = tf.data.Dataset.from_tensor_slices((images, masks)).repeat()
        dataset = dataset.map(decode, tf.data.AUTOTUNE, deterministic=False).batch(BATCH)
        return iter(dataset.prefetch(tf.data.AUTOTUNE))
    if name == "decode-only limit, simplejpeg x2 processes":
        from collections import deque
        from concurrent.futures import ProcessPoolExecutor

        pairs = _record_bytes(data_dir, 400)
        chunks = [pairs[first : first + BATCH] for first in range(0, len(pairs), BATCH)]
        pool = ProcessPoolExecutor(2)

        def endless():
            # A batch per task, four in flight; only decoding is measured, not moving pixels.
            pending: deque = deque()
            for number in itertools.count():
                pending.append(pool.submit(_decode_batch, chunks[number % len(chunks)]))
                if len(pending) == 4:
                    yield [pending.popleft().result()]

        return endless()
    raise ValueError(name)


class _FilesDataset:
    """What one writes without segprep: the original image and .mat mask files, decoded
    with Pillow and the project's mask reader, one sample per item."""

    def __init__(self, sample_dir: Path, transform) -> None:
        self.images = sorted((sample_dir / "images").glob("*.jpg"))
        self.masks = sample_dir / "masks"
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        import numpy as np
        import torch
        from PIL import Image

        from transforms.codecs.mask import load_mask

        path = self.images[index]
        mask_path = self.masks / f"{path.stem}_mask.mat"
        try:
            mask = load_mask(mask_path.read_bytes(), mask_path.name)
            image = np.asarray(Image.open(path).convert("RGB"))
        except Exception:  # noqa: BLE001 - the sample's broken entries: skipped as segprep does
            return None
        if image.shape[:2] != mask.shape:
            return None
        sample = {
            "image": torch.from_numpy(image.copy()).permute(2, 0, 1),
            "mask": torch.from_numpy((mask > 0).astype(np.uint8))[None],
        }
        return self.transform(sample)


def _collate_present(samples):
    import torch

    kept = [sample for sample in samples if sample is not None]
    return torch.stack([s["image"] for s in kept]), torch.stack([s["mask"] for s in kept])


def _augmented(name: str, data_dir: str):
    """Endless batches with per-sample joint augmentation (see the module docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch

    from tests.helpers.augment import joint_augment

    transform = joint_augment(AUG_SIZE)
    if name == AUG_FILES:
        dataset = _FilesDataset(Path(data_dir).parent / "sample", transform)
        loader = torch.utils.data.DataLoader(
            dataset, BATCH, shuffle=True, num_workers=2, collate_fn=_collate_present,
            persistent_workers=True,
        )  # fmt: skip
    else:
        from shard_reader.torch import make_loader

        workers = 2 if name == AUG_WORKERS else 0
        loader = make_loader(data_dir, "train", BATCH, num_workers=workers, transform=transform)

    def endless():
        for epoch in itertools.count():
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            yield from loader

    return endless()


def _tree_cpu() -> float:
    """CPU seconds of this process and its live children (the loaders' workers)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def measure(name: str, data_dir: str, records: int) -> tuple[float, float]:
    """(records per second, CPU ms per record) over `records` records after a warm-up.

    CPU time counts every process of the loader; it is steadier than wall time when
    other work shares the machine.
    """
    iterator = batches(name, data_dir)
    for _ in range(WARMUP_BATCHES):
        next(iterator)
    seen = 0
    started, cpu_started = time.perf_counter(), _tree_cpu()
    while seen < records:
        seen += len(next(iterator)[0])
    wall, cpu = time.perf_counter() - started, _tree_cpu() - cpu_started
    return seen / wall, cpu / seen * 1e3


def run_child(name: str, data_dir: Path, records: int) -> tuple[float, float]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
    command = [sys.executable, __file__, "--child", name, "--data", str(data_dir)]
    command += ["--records", str(records)]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    rate, cpu = json.loads(done.stdout.strip().splitlines()[-1])
    return rate, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1200, help="sample entries to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--records", type=int, default=800, help="records timed per trial")
    parser.add_argument(
        "--contenders", default=";".join(CONTENDERS), help="names separated by semicolons"
    )
    parser.add_argument(
        "--formats",
        help="record formats separated by commas: time the PyTorch and Grain loaders on each",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.data, args.records)))
        return
    if args.formats:
        formats = args.formats.split(",")
        dirs = {fmt: prepare_data(args.count, args.seed, fmt) for fmt in formats}
        contenders = {
            f"{name} @ {fmt}": (name, dirs[fmt]) for fmt in formats for name in FORMAT_CONTENDERS
        }
        data_dir = dirs[formats[0]]
    else:
        data_dir = prepare_data(args.count, args.seed)
        contenders = {name: (name, data_dir) for name in args.contenders.split(";")}
    names = list(contenders)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for trial in range(args.trials):
        shift = trial % len(names)
        for name in names[shift:] + names[:shift]:  # rotate: no contender always first
            runs[name].append(run_child(*contenders[name], args.records))
            rate, cpu = runs[name][-1]
            print(
                f"  trial {trial + 1}/{args.trials} {name}: {rate:.0f}/s {cpu:.2f} ms",
                file=sys.stderr,
            )
    metadata = json.loads((data_dir / "metadata.json").read_text())
    train = metadata["splits"]["train"]
    print(
        f"\n{train['num_examples']} train records of {train['image_shape'][0]}x"
        f"{train['image_shape'][1]}, JPEG masks, {train['num_shards']} shards, batch {BATCH}, "
        f"uint8; median of {args.trials} interleaved trials of {args.records} records; "
        f"{os.cpu_count()} CPUs\n"
    )

    def median(name: str, field: int) -> float:
        return statistics.median(run[field] for run in runs[name])

    base = BASELINE in runs
    print("| loader | records/s | min..max | vs tf.data | CPU ms/record | tf.data CPU / its CPU |")
    print("|---|---|---|---|---|---|")
    for name, values in runs.items():
        rates = [rate for rate, _ in values]
        versus = f"{median(name, 0) / median(BASELINE, 0):.0%}" if base else "-"
        efficiency = f"{median(BASELINE, 1) / median(name, 1):.0%}" if base else "-"
        print(
            f"| {name} | {median(name, 0):.0f} | {min(rates):.0f}..{max(rates):.0f} | {versus} "
            f"| {median(name, 1):.2f} | {efficiency} |"
        )


if __name__ == "__main__":
    main()
