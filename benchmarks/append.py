"""`prepare --append` of 10 % new entries against a full re-prepare of the union.

    python benchmarks/append.py                       # N = 8,000 at 160x120
    python benchmarks/append.py --entries 2000 --height 600 --width 800

Data: N entries copied (hard links) from a pool of 200 sample entries (no broken ones),
under N distinct keys. Version 1 is prepared from the first 90 %; then, each from a copy of
that output, timed as whole `segprep prepare` commands (subprocess, default local settings):

(a) `--append` of the 10 % batch alone;
(b) `--append` of the whole folder (90 % looked up, read and skipped as identical);
(c) a from-scratch prepare of the whole folder into a new directory.

Each runs --repeats times (3), interleaved; times are medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POOL = 200


def _segprep(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [str(Path(sys.executable).parent / "segprep"), "prepare", *args, "--runner", "FnApiRunner"],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)},
    )
    return time.perf_counter() - started


def _link(pool: Path, target: Path, keys: range) -> Path:
    pool_images = sorted((pool / "images").iterdir())
    pool_masks = sorted((pool / "masks").iterdir())
    for folder in ("images", "masks"):
        (target / folder).mkdir(parents=True, exist_ok=True)
    for key in keys:
        image, mask = pool_images[key % POOL], pool_masks[key % POOL]
        os.link(image, target / "images" / f"e{key:06d}{image.suffix}")
        os.link(mask, target / "masks" / f"e{key:06d}{mask.name[len(image.stem) :]}")
    return target


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=8000)
    parser.add_argument("--height", type=int, default=120)
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from beam_pipeline.commands.sample_data import write_sample_data

    root = Path(tempfile.mkdtemp(prefix="segprep-append-"))
    try:
        write_sample_data(
            root / "pool", POOL, seed=1, broken_fraction=0.0, height=args.height, width=args.width
        )
        first = int(args.entries * 0.9)
        old = _link(root / "pool", root / "old", range(first))
        new = _link(root / "pool", root / "new", range(first, args.entries))
        union = _link(root / "pool", root / "union", range(args.entries))
        v1 = root / "v1"
        print(f"version 1: {first:,} entries in {_segprep(*_flags(old, v1)):.1f} s")
        times: dict[str, list[float]] = {"append 10%": [], "append all": [], "re-prepare": []}
        for round_ in range(args.repeats):
            for name, source in (("append 10%", new), ("append all", union)):
                out = root / f"{name.replace(' ', '-').replace('%', '')}-{round_}"
                shutil.copytree(v1, out)
                times[name].append(_segprep(*_flags(source, out), "--append"))
            times["re-prepare"].append(_segprep(*_flags(union, root / f"full-{round_}")))
        for name, values in times.items():
            print(f"{name:<12} {statistics.median(values):6.1f} s  ({len(values)} runs)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _flags(source: Path, out: Path) -> list[str]:
    return [
        "--image_dir",
        str(source / "images"),
        "--mask_dir",
        str(source / "masks"),
        "--output_dir",
        str(out),
    ]


if __name__ == "__main__":
    main()
