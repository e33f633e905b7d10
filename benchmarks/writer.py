"""Writer throughput and memory: segprep prepare vs a plain loop vs the per-core decode limit.

    python benchmarks/writer.py                      # N = 1,000 and 8,000 (the README table)
    python benchmarks/writer.py --sizes 2000,20000   # memory flat in dataset size?
    python benchmarks/writer.py --classes --sizes 1000 --repeats 5   # class masks vs binary
    python benchmarks/writer.py --data copies,distinct --modes nodups,default   # the search's cost

(a) `segprep prepare` with default local settings (subprocess, whole command timed until
    every process it started has let go of its output), and for comparison: writing in the
    runner's process with threads, Beam's multi-processing mode, and a serial run;
(b) a plain single-process loop doing the same work per entry (subprocess, whole command);
(c) the per-core limit: decode + mask work alone on bytes already in memory.
Rates are paired entries per second, accepted or rejected, for all three: (c) counts every
entry it decodes too. Each command runs --repeats times (3), interleaved, with three
2-second trials of (c) before every round; rates and times are medians, memory the peak.
Data: N entries copied from a pool of 200 sample portraits (800x600, 5% broken), cached in
benchmarks/.cache/; with --data distinct, N distinct images made from that pool (each photo
mixed with a smooth random field of its own), so the duplicate search meets no copies.
Peak memory is the PSS summed over the process tree, sampled every 0.25 s.

--classes: the cost of class-id masks and their statistics against binary masks of the same
size, everything else equal. One pool of 200 VOC-like scenes (800x600 JPEG images, 21
classes, 5% broken) gives two datasets of the same images: palette PNG class masks, and the
same scenes' binary masks (object vs background) as 0/1 PNGs. `segprep prepare` (defaults)
runs on each, --mask_format png for both, interleaved; and before each round, three 2-second
trials per contender of the per-core work alone (decode image, read + check + encode mask,
plus statistics for classes). Rates are paired entries per second; medians.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "benchmarks" / ".cache"
POOL = 200
# Reading PSS walks page tables: sample rarely enough that the sampler itself stays under
# ~2% of one core (memory moves slowly next to this).
SAMPLE_SECONDS = 0.25
BIN = Path(sys.executable).parent


def _pool(name: str, **options) -> Path:
    """POOL sample entries under CACHE/name, written once (a `done` file marks them whole)."""
    from beam_pipeline.commands.sample_data import write_sample_data

    pool = CACHE / name
    if not (pool / "done").exists():
        shutil.rmtree(pool, ignore_errors=True)
        write_sample_data(pool, count=POOL, seed=0, **options)
        (pool / "done").write_text("")
    return pool


def dataset(n: int) -> Path:
    """N entries in the real layout; the pool's breakages repeat every 200 keys."""
    pool = _pool("pool")
    target = CACHE / f"sample-{n}"
    if (target / "done").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    (target / "images").mkdir(parents=True)
    (target / "masks").mkdir(parents=True)
    for index in range(n):
        source, key = f"{index % POOL + 1:05d}", f"{index + 1:06d}"
        image, mask = pool / "images" / f"{source}.jpg", pool / "masks" / f"{source}_mask.mat"
        if image.exists():
            shutil.copyfile(image, target / "images" / f"{key}.jpg")
        if mask.exists():
            shutil.copyfile(mask, target / "masks" / f"{key}_mask.mat")
    (target / "done").write_text("")
    return target


def distinct_dataset(n: int) -> Path:
    """N distinct images in the real layout: each of the pool's photos (same JPEG entropy,
    size and breakages, every 200 keys) mixed half and half with a smooth random field of its
    own, so no two entries are copies; the masks are the pool's."""
    import io

    import numpy as np
    from PIL import Image

    pool = _pool("pool")
    target = CACHE / f"distinct-{n}"
    if (target / "done").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    (target / "images").mkdir(parents=True)
    (target / "masks").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for index in range(n):
        source, key = f"{index % POOL + 1:05d}", f"{index + 1:06d}"
        image, mask = pool / "images" / f"{source}.jpg", pool / "masks" / f"{source}_mask.mat"
        if mask.exists():
            shutil.copyfile(mask, target / "masks" / f"{key}_mask.mat")
        if not image.exists():
            continue
        try:
            photo = Image.open(image)
            photo.load()
        except OSError:  # a broken pool image stays broken
            shutil.copyfile(image, target / "images" / f"{key}.jpg")
            continue
        field = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
        smooth = Image.fromarray(field).resize(photo.size, Image.Resampling.BICUBIC)
        mixed = Image.blend(photo.convert("RGB"), smooth, 0.5)
        out = io.BytesIO()
        mixed.save(out, format="JPEG", quality=90)
        (target / "images" / f"{key}.jpg").write_bytes(out.getvalue())
    (target / "done").write_text("")
    return target


CLASSES = 21


def class_datasets(n: int) -> tuple[Path, Path]:
    """(class masks, binary masks) datasets of the same N VOC-like scenes, 800x600."""
    import numpy as np
    from PIL import Image

    pool = _pool("class-pool", classes=CLASSES)
    classes, binary = CACHE / f"classes-{n}", CACHE / f"classes-{n}-binary"
    if (classes / "done").exists() and (binary / "done").exists():
        return classes, binary
    for target in (classes, binary):
        shutil.rmtree(target, ignore_errors=True)
        (target / "images").mkdir(parents=True)
        (target / "masks").mkdir(parents=True)
    for index in range(n):
        source, key = f"{index % POOL + 1:05d}", f"{index + 1:06d}"
        image, mask = pool / "images" / f"{source}.jpg", pool / "masks" / f"{source}.png"
        if image.exists():
            shutil.copyfile(image, classes / "images" / f"{key}.jpg")
            os.link(classes / "images" / f"{key}.jpg", binary / "images" / f"{key}.jpg")
        if not mask.exists():
            continue
        shutil.copyfile(mask, classes / "masks" / f"{key}.png")
        try:
            ids = np.asarray(Image.open(mask))
        except OSError:  # the broken one stays broken in both
            shutil.copyfile(mask, binary / "masks" / f"{key}.png")
            continue
        objects = ((ids != 0) & (ids != 255)).astype(np.uint8)
        Image.fromarray(objects).save(binary / "masks" / f"{key}.png")
    for target in (classes, binary):
        (target / "done").write_text("")
    return classes, binary


def per_core_masks(trials: int = 3, seconds: float = 2.0) -> dict[str, list[float]]:
    """Entries/s of decode + mask work alone, one core, per trial: binary 0/1 PNG masks
    (stored as PNG) and class masks (checked, stored as PNG, counted), interleaved."""
    from transforms.class_stats import mask_stats
    from transforms.codecs.class_mask import ClassMaskSettings, encode_class_mask, load_class_mask
    from transforms.codecs.image import validate_image
    from transforms.codecs.mask import binarize, encode_mask, load_mask
    from transforms.rejects import RejectError

    settings = ClassMaskSettings("classes", CLASSES)
    classes, binary = class_datasets(POOL)

    def entries(root: Path) -> list[tuple[bytes, bytes]]:
        return [
            (image.read_bytes(), (root / "masks" / f"{image.stem}.png").read_bytes())
            for image in sorted((root / "images").iterdir())
            if (root / "masks" / f"{image.stem}.png").exists()
        ]

    def binary_work(image: bytes, mask: bytes) -> None:
        validate_image(image)
        encode_mask(binarize(load_mask(mask, "m.png")), "png", binary=True)

    def class_work(image: bytes, mask: bytes) -> None:
        validate_image(image)
        ids = load_class_mask(mask, "m.png", settings)
        encode_class_mask(ids, settings)
        mask_stats(ids, settings.num_classes, settings.ignore_index)

    contenders = {
        "binary": (entries(binary), binary_work),
        "classes": (entries(classes), class_work),
    }
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(trials):
        for name, (pairs, work) in contenders.items():
            done, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                for image, mask in pairs:
                    try:
                        work(image, mask)
                    except RejectError:
                        pass
                    done += 1
            rates[name].append(done / (time.perf_counter() - started))
    return rates


def classes_main(sizes: list[int], repeats: int) -> None:
    """Class masks against binary masks of the same size: whole job and per-core work."""
    contenders = {
        "binary masks (0/1 PNG), --mask_format png": (1, ["--mask_format", "png"]),
        f"class masks (palette PNG, {CLASSES} classes) + statistics": (
            0,
            ["--mask_type", "classes", "--num_classes", str(CLASSES)],
        ),
    }
    cores: dict[str, list[float]] = {"binary": [], "classes": []}
    table = []
    for n in sizes:
        data = class_datasets(n)
        scratch = CACHE / f"out-classes-{n}"
        runs: dict[str, list[tuple[float, int, int]]] = {}
        for _ in range(repeats):  # interleaved: a noisy minute hits both alike
            for name, rates in per_core_masks().items():
                cores[name] += rates
            for name, (which, extra) in contenders.items():
                runs.setdefault(name, []).append(run_segprep(data[which], scratch, extra))
        for name, results in runs.items():
            seconds = statistics.median(result[0] for result in results)
            peak = max(result[1] for result in results)
            rates = [result[2] / result[0] for result in results]
            table.append((n, name, statistics.median(rates), seconds, peak, rates))
        shutil.rmtree(scratch, ignore_errors=True)
    binary_core, classes_core = (statistics.median(cores[name]) for name in ("binary", "classes"))
    print(
        f"per-core decode + mask work: binary {binary_core:.1f}, classes {classes_core:.1f} "
        f"entries/s ({classes_core / binary_core - 1:+.1%}; medians of {len(cores['binary'])} "
        "interleaved trials)"
    )
    print()
    print("| N | run | entries/s (median) | trials | wall s | peak PSS MB | vs binary |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = {n: rate for n, name, rate, *_ in table if name.startswith("binary")}
    for n, name, rate, seconds, peak, rates in table:
        trials = ", ".join(f"{value:.1f}" for value in rates)
        print(
            f"| {n:,} | {name} | {rate:.1f} | {trials} | {seconds:.1f} | {peak / 2**20:.0f} | "
            f"{rate / base[n] - 1:+.1%} |"
        )


def timed(command: list[str]) -> tuple[float, int, str, float]:
    """(wall seconds, peak tree PSS bytes, stdout, CPU seconds) of a command, until every
    process it started has let go of its output. The CPU seconds (user + system) are those
    of every process of the tree that was waited for (the writers by their fork server, it
    by the launcher): the work done, which the VM's speed from minute to minute moves less
    than the wall time."""
    from tests.helpers.process_tree import run_measured  # the tests' process-tree PSS sampler

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
    # The previous run's dirty pages (up to 1.4 GB here) would otherwise be written back
    # while this one runs and bill it for them: every run starts from a flushed page cache.
    os.sync()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done, peak = run_measured(command, env=env, timeout=None, sample_seconds=SAMPLE_SECONDS)
    seconds = time.perf_counter() - started
    _reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed: {done.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, peak, done.stdout, cpu


def _adopt_orphans() -> None:
    """Become the subreaper of every process this one starts (prctl PR_SET_CHILD_SUBREAPER),
    so the CPU of a run's orphans counts too: the writers' fork server is the launcher's
    child, but nobody waits for it when the launcher ends."""
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def _reap_orphans(seconds: float = 30.0) -> None:
    """Wait for the orphans of the run that just ended (the fork server leaves a moment after
    the launcher), so that RUSAGE_CHILDREN holds their CPU."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)


UNPAIRED = ("missing_image", "missing_mask")


GROUPED: dict[Path, int] = {}  # data -> keys the last default run put in duplicate groups


def run_segprep(data: Path, out: Path, extra: list[str]) -> tuple[float, int, int, float]:
    """(seconds, peak PSS, paired entries processed, CPU seconds)."""
    shutil.rmtree(out, ignore_errors=True)
    command = [str(BIN / "segprep"), "prepare", "--image_dir", str(data / "images")]
    command += ["--mask_dir", str(data / "masks"), "--output_dir", str(out), *extra]
    seconds, peak, _, cpu = timed(command)
    metadata = json.loads((out / "metadata.json").read_text())
    if metadata["duplicates"]["mode"] != "off":
        GROUPED[data] = metadata["duplicates"]["keys_in_groups"]
    accepted = sum(split["num_examples"] for split in metadata["splits"].values())
    rejected = metadata["num_rejected"]["total"]
    if accepted + rejected != metadata["num_discovered"]:
        raise AssertionError("keys lost or duplicated")
    unpaired = sum(metadata["num_rejected"]["by_reason"].get(reason, 0) for reason in UNPAIRED)
    return seconds, peak, metadata["num_discovered"] - unpaired, cpu


def run_plain_loop(data: Path, out: Path) -> tuple[float, int, int, float]:
    """(seconds, peak PSS, paired entries processed, CPU seconds)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    seconds, peak, stdout, cpu = timed(
        [sys.executable, __file__, "--plain-loop", str(data), str(out)]
    )
    return seconds, peak, int(stdout.split()[-1]), cpu


def plain_loop(data: Path, out: Path) -> None:
    """The blog's way: one process, one file at a time, one TFRecordWriter."""
    import tensorflow as tf

    from transforms.record import make_record
    from transforms.rejects import RejectError

    paired = 0
    with tf.io.TFRecordWriter(str(out / "all.tfrecord")) as writer:
        for image in sorted((data / "images").iterdir()):
            mask = data / "masks" / f"{image.stem}_mask.mat"
            if not mask.exists():
                continue
            paired += 1
            try:
                record = make_record(image.stem, image.read_bytes(), mask.read_bytes(), mask.name)
            except RejectError:
                continue
            writer.write(record.serialized)
    print(paired)


def per_core_limit(trials: int = 3, seconds: float = 2.0) -> list[float]:
    """Entries/s of decode + mask work alone, one core, bytes already in memory, per trial."""
    from transforms.codecs.image import validate_image
    from transforms.codecs.mask import binarize, encode_mask, load_mask
    from transforms.rejects import RejectError

    pool = CACHE / "pool"
    entries = []
    for image in sorted((pool / "images").iterdir()):
        mask = pool / "masks" / f"{image.stem}_mask.mat"
        if mask.exists():
            entries.append((image.read_bytes(), mask.read_bytes()))
    rates = []
    for _ in range(trials):
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            for image, mask in entries:
                try:
                    validate_image(image)
                    encode_mask(binarize(load_mask(mask, "m.mat")), "jpeg", binary=True)
                except RejectError:
                    pass
                done += 1
        rates.append(done / (time.perf_counter() - started))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,8000", help="comma-separated N")
    parser.add_argument(
        "--modes",
        default="default,nodups,inline,threads,serial",
        help="default, nodups, inline, threads, serial (Beam's multi_processing mode is refused by "
        "segprep: its workers outlive a killed launcher)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per command (median)")
    parser.add_argument(
        "--data",
        default="copies",
        help="copies (N copies of the 200-image pool: the duplicate search's worst case), "
        "distinct (every image its own), or both: copies,distinct",
    )
    parser.add_argument(
        "--classes",
        action="store_true",
        help="class-id masks + statistics against binary masks of the same size",
    )
    parser.add_argument("--plain-loop", nargs=2, metavar=("DATA", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    _adopt_orphans()
    if args.plain_loop:
        plain_loop(Path(args.plain_loop[0]), Path(args.plain_loop[1]))
        return
    cores = os.cpu_count() or 1
    sizes = [int(n) for n in args.sizes.split(",")]
    if args.classes:
        classes_main(sizes, args.repeats)
        return
    local = ["--runner", "FnApiRunner"]
    modes = {
        "default": [],  # in-process runner, one writer process per core
        "nodups": ["--duplicates", "off"],  # the same without the duplicate search
        "inline": ["--writer_processes", "1"],  # shards written in the runner, thread per core
        "threads": local
        + ["--direct_running_mode", "multi_threading", "--direct_num_workers", str(cores)]
        + ["--threads_per_shard", "1"],
        "serial": local + ["--writer_processes", "1", "--threads_per_shard", "1"],
    }
    labels = {
        "default": "(a) segprep prepare, default (writer process per core)",
        "inline": "segprep, shards written in the runner (thread per core)",
        "nodups": "segprep prepare --duplicates off",
        "threads": "segprep, Beam multi-threading",
        "serial": "segprep, serial",
    }
    makers = {"copies": dataset, "distinct": distinct_dataset}
    kinds = args.data.split(",")
    data = {(n, kind): makers[kind](n) for n in sizes for kind in kinds}
    limits: list[float] = []  # c is measured before every round, interleaved like the rest
    table = []
    for n in sizes:
        scratch = CACHE / f"out-{n}"
        runs: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
        for _ in range(args.repeats):  # interleaved: a noisy minute hits every command alike
            limits += per_core_limit()
            for kind in kinds:
                source = data[n, kind]
                plain = run_plain_loop(source, scratch)
                runs.setdefault((kind, "(b) plain loop"), []).append(plain)
                for mode in args.modes.split(","):
                    measured = run_segprep(source, scratch, modes[mode])
                    runs.setdefault((kind, labels[mode]), []).append(measured)
        for (kind, name), results in runs.items():
            seconds = statistics.median(result[0] for result in results)
            peak = max(result[1] for result in results)
            cpu = statistics.median(result[3] for result in results)
            label = f"{kind}: {name}" if len(kinds) > 1 or kind != "copies" else name
            table.append((n, kind, label, seconds, peak, results[0][2] / seconds, cpu))
        shutil.rmtree(scratch, ignore_errors=True)
    # The median, like every other figure in the table; the best trial is shown beside it.
    limit = statistics.median(limits)
    print(
        f"cores: {cores}; per-core limit c = {limit:.0f} entries/s (decode + mask work; "
        f"median of {len(limits)} trials, best {max(limits):.0f})"
    )
    print()
    for (n, kind), source in data.items():
        if source in GROUPED:
            print(f"{kind} {n:,}: {GROUPED[source]:,} keys in duplicate groups (default run)")
    print()
    print("| N | run | entries/s | wall s | CPU s | peak PSS MB | vs plain loop | vs cores x c |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    plain = {(n, k): rate for n, k, name, _, _, rate, _ in table if name.endswith("plain loop")}
    for n, kind, name, seconds, peak, rate, cpu in table:
        print(
            f"| {n:,} | {name} | {rate:.0f} | {seconds:.1f} | {cpu:.1f} | {peak / 2**20:.0f} | "
            f"{rate / plain[n, kind]:.2f} | {rate / (cores * limit):.0%} |"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
