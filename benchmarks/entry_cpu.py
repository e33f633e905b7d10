"""CPU milliseconds per entry of the writer's per-entry work, this tree against a git ref.

    python benchmarks/entry_cpu.py                  # against the writer before the CPU work
    python benchmarks/entry_cpu.py --baseline c4c09bc --rounds 6 --entries 40

The work of one entry once its bytes are in memory: validate the image, decode and check
the mask, encode it, serialise the Example (transforms.record's make_record and
make_class_record). Three kinds of entry, 800x600 like the portrait dataset:
  jpeg_masks   sample portrait JPEG + .mat 0/1 mask, stored with a JPEG mask (the default)
  png_masks    the same JPEG + 0/255 PNG mask file, stored with --mask_format png
  class_masks  VOC-like scene JPEG + palette PNG of 21 class ids, stored as PNG
The baseline's transforms/ is taken from git (`git archive`) into a temporary folder; each
measurement is a fresh subprocess importing one tree or the other, run alternately (A B B A
...), so load on the machine falls on both alike. Each subprocess does a warm-up pass, then
times `--passes` passes with time.process_time (user + system CPU of the process). Printed:
the median ms per entry of each tree and kind, and the cut.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("jpeg_masks", "png_masks", "class_masks")
CLASSES = 21


def _write_entries(folder: Path, count: int) -> None:
    import numpy as np
    from PIL import Image

    sys.path.insert(0, str(ROOT))
    from beam_pipeline.commands.sample_data import (
        jpeg_bytes,
        mat_bytes,
        palette_png,
        portrait,
        scene,
    )

    for number in range(count):
        image, mask = portrait(np.random.default_rng([1, number]))
        out = io.BytesIO()
        Image.fromarray(mask * np.uint8(255)).save(out, format="PNG")
        (folder / f"{number:03d}.jpg").write_bytes(jpeg_bytes(image))
        (folder / f"{number:03d}_mask.mat").write_bytes(mat_bytes(mask))
        (folder / f"{number:03d}_mask.png").write_bytes(out.getvalue())
        image, ids = scene(np.random.default_rng([2, number]), CLASSES)
        (folder / f"{number:03d}_scene.jpg").write_bytes(jpeg_bytes(image))
        (folder / f"{number:03d}_ids.png").write_bytes(palette_png(ids))


# kind -> (image file suffix, mask file suffix, flags)
_FILES = {
    "jpeg_masks": (".jpg", "_mask.mat", {}),
    "png_masks": (".jpg", "_mask.png", {"mask_format": "png"}),
    "class_masks": ("_scene.jpg", "_ids.png", {"mask_format": "png", "classes": True}),
}


def _worker(folder: Path, passes: int) -> None:
    """Runs with only one tree importable; prints {level/kind: [CPU ms, minor page faults]
    per entry}, the least of `passes` timed passes after a warm-up pass. Level `record` is
    the per-entry conversion alone (bytes in memory); `shard` is write_shard on the files:
    read, convert, frame, write and hash the shard, as a writer process does."""
    from beam_pipeline.job.settings import ShardWriterSettings
    from beam_pipeline.job.shard_work import write_shard
    from transforms.codecs.class_mask import class_mask_settings
    from transforms.pairing import Pair
    from transforms.record import make_class_record, make_record
    from transforms.record_spec import RecordSpec
    from transforms.splits import ShardSpec

    classes = class_mask_settings("classes", num_classes=CLASSES)
    numbers = sorted(path.name[:3] for path in folder.glob("*_scene.jpg"))
    staging = folder / f"staging-{os.getpid()}"
    (staging / "index").mkdir(parents=True)  # the launcher makes both before the job
    result = {}
    for kind in KINDS:
        image_suffix, mask_suffix, flags = _FILES[kind]
        names = [(f"{n}{image_suffix}", f"{n}{mask_suffix}") for n in numbers]
        entries = [((folder / i).read_bytes(), (folder / m).read_bytes(), m) for i, m in names]
        spec = RecordSpec(
            classes if "classes" in flags else RecordSpec().classes,
            flags.get("mask_format", "jpeg"),
        )

        def records(entries=entries, spec=spec):
            make = make_class_record if spec.classes.is_classes else make_record
            for image, mask, name in entries:
                make("k", image, mask, name, spec)

        pairs = [Pair(i[:3], _source(folder / i), _source(folder / m)) for i, m in names]
        source = "class_files" if spec.classes.is_classes else "binary_files"
        settings = ShardWriterSettings(str(staging) + "/", spec, mask_source=source)

        def shard(settings=settings, pairs=pairs):
            write_shard(settings, ShardSpec("train", 0, 1), pairs)

        for level, work in (("record", records), ("shard", shard)):
            work()  # warm-up: imports, allocator, caches
            best = None
            for _ in range(passes):
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.process_time()
                work()
                cpu = time.process_time() - start
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                if best is None or cpu < best[0]:
                    best = (cpu, faults)
            result[f"{level}/{kind}"] = [best[0] * 1000 / len(numbers), best[1] / len(numbers)]
    print(json.dumps(result))


def _source(path: Path):
    from transforms.pairing import SourceFile

    return SourceFile(str(path), path.stat().st_size)


def _tree_of(ref: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "transforms", "beam_pipeline"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="c4c09bc", help="git ref to compare against")
    parser.add_argument("--rounds", type=int, default=6, help="subprocesses per tree (6)")
    parser.add_argument("--entries", type=int, default=30, help="entries of each kind (30)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per subprocess")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(Path(args.worker), args.passes)
        return 0
    with tempfile.TemporaryDirectory() as temp:
        data = Path(temp, "entries")
        data.mkdir()
        _write_entries(data, args.entries)
        trees = {"baseline": _tree_of(args.baseline, Path(temp, "baseline")), "this tree": ROOT}
        samples: dict[str, dict[str, list[list[float]]]] = {t: {} for t in trees}
        for round_number in range(args.rounds):
            order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
            for tree in order:
                env = {**os.environ, "PYTHONPATH": str(trees[tree])}
                command = [sys.executable, __file__, "--worker", str(data)]
                command += ["--passes", str(args.passes)]
                output = subprocess.run(command, env=env, check=True, capture_output=True)
                for name, measured in json.loads(output.stdout).items():
                    samples[tree].setdefault(name, []).append(measured)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"baseline {args.baseline}; per entry, median over {args.rounds} subprocesses of the "
        f"least of {args.passes} passes: CPU ms (minor page faults)"
    )
    print(f"{'level/kind':20s} {'baseline':>16s} {'this tree':>16s} {'CPU cut':>8s}")
    for name in samples["baseline"]:
        before, after = (
            [statistics.median(m[i] for m in samples[tree][name]) for i in (0, 1)] for tree in trees
        )
        print(
            f"{name:20s} {before[0]:8.2f} ({before[1]:5.0f}) {after[0]:8.2f} ({after[1]:5.0f})"
            f" {1 - after[0] / before[0]:8.0%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
