"""Per-mask cost of class-id masks against binary masks of the same size (800x600).

    .venv/bin/python benchmarks/class_masks.py [--trials 7] [--masks 40]

Times, per mask, the steps a writer runs on a mask it has already read: the binary path
(binarize + encode_mask png) as the baseline, and the class path's check, statistics and
lossless PNG encode; then the whole mask work from file bytes (binary: .mat as the blog's
portraits; classes: VOC palette PNG). Masks are the sample set's VOC-like scenes (21
classes, 255 outlines). Trials interleave the contenders; medians of per-mask CPU time are
reported with their ratio to the baseline in the same run. Run it under
`flock /work/tools/bench.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from beam_pipeline.commands.sample_data import mat_bytes, palette_png, scene
from transforms.class_stats import mask_stats
from transforms.codecs.class_mask import (
    ClassMaskSettings,
    check_class_ids,
    encode_class_mask,
    load_class_mask,
)
from transforms.codecs.mask import binarize, encode_mask, load_mask

SETTINGS = ClassMaskSettings("classes", 21)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--masks", type=int, default=40)
    args = parser.parse_args()
    ids = [scene(np.random.default_rng(i), 21)[1] for i in range(args.masks)]
    binary = [(m > 0).astype(np.uint8) for m in ids]
    mat_files = [mat_bytes(m) for m in binary]
    png_files = [palette_png(m) for m in ids]
    contenders = {
        "binary: binarize + encode png (baseline)": lambda i: encode_mask(
            binarize(binary[i]), "png"
        ),
        "classes: check_class_ids": lambda i: check_class_ids(ids[i], SETTINGS),
        "classes: mask_stats": lambda i: mask_stats(ids[i], 21, 255),
        "classes: encode_class_mask": lambda i: encode_class_mask(ids[i], SETTINGS),
        "classes: check + stats + encode": lambda i: (
            encode_class_mask(check_class_ids(ids[i], SETTINGS), SETTINGS),
            mask_stats(ids[i], 21, 255),
        ),
        "binary from file: load .mat + binarize + encode png": lambda i: encode_mask(
            binarize(load_mask(mat_files[i], "k_mask.mat")), "png"
        ),
        "classes from file: load palette png + all of the above": lambda i: _classes(png_files[i]),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.trials):
        for name, run in contenders.items():
            start = time.process_time()
            for index in range(args.masks):
                run(index)
            times[name].append((time.process_time() - start) / args.masks)
    baseline = statistics.median(next(iter(times.values())))
    print(f"per 800x600 mask, median of {args.trials} interleaved trials (CPU time)")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<58} {median * 1e3:7.3f} ms  {median / baseline:5.2f}x baseline")


def _classes(data: bytes) -> tuple[bytes, object]:
    ids = load_class_mask(data, "k.png", SETTINGS)
    return encode_class_mask(ids, SETTINGS), mask_stats(ids, 21, 255)


if __name__ == "__main__":
    main()
