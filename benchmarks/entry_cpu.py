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


def _worker(folder: Path, passes: int) -> None:
    """Runs with only one tree's transforms/ importable; prints {kind: ms per entry}."""
    from transforms.codecs.class_mask import class_mask_settings
    from transforms.record import make_class_record, make_record

    settings = class_mask_settings("classes", num_classes=CLASSES)
    names = sorted(path.stem for path in folder.glob("*_scene.jpg"))
    entries = [
        {
            suffix: (folder / f"{name.removesuffix('_scene')}{suffix}").read_bytes()
            for suffix in ("_scene.jpg", ".jpg", "_mask.mat", "_mask.png", "_ids.png")
        }
        for name in names
    ]
    work = {
        "jpeg_masks": lambda e: make_record("k", e[".jpg"], e["_mask.mat"], "k_mask.mat"),
        "png_masks": lambda e: make_record(
            "k", e[".jpg"], e["_mask.png"], "k_mask.png", mask_format="png"
        ),
        "class_masks": lambda e: make_class_record(
            "k", e["_scene.jpg"], e["_ids.png"], "k.png", settings
        ),
    }
    result = {}
    for kind, one in work.items():
        for entry in entries:  # warm-up: imports, allocator, caches
            one(entry)
        start = time.process_time()
        for _ in range(passes):
            for entry in entries:
                one(entry)
        result[kind] = (time.process_time() - start) * 1000 / (passes * len(entries))
    print(json.dumps(result))


def _tree_of(ref: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "transforms"], check=True, capture_output=True
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
        samples: dict[str, dict[str, list[float]]] = {t: {k: [] for k in KINDS} for t in trees}
        for round_number in range(args.rounds):
            order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
            for tree in order:
                env = {**os.environ, "PYTHONPATH": str(trees[tree])}
                command = [sys.executable, __file__, "--worker", str(data)]
                command += ["--passes", str(args.passes)]
                output = subprocess.run(command, env=env, check=True, capture_output=True)
                for kind, ms in json.loads(output.stdout).items():
                    samples[tree][kind].append(ms)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"baseline {args.baseline}; median CPU ms per entry over {args.rounds} subprocesses")
    print(f"{'kind':12s} {'baseline':>9s} {'this tree':>10s} {'cut':>6s}")
    for kind in KINDS:
        before = statistics.median(samples["baseline"][kind])
        after = statistics.median(samples["this tree"][kind])
        print(f"{kind:12s} {before:9.2f} {after:10.2f} {1 - after / before:6.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
