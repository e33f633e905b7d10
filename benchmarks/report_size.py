"""`segprep report` on a large synthetic output: page bytes, wall time and peak memory.

Writes a binary output of N entries (default 100,000) as 1,000 shards of tiny records with
segprep's own record writer (no Beam run: the report reads only metadata.json, a capped
sample of records and rejects.jsonl), plus a rejects.jsonl of N/5 lines with 12 reasons,
then runs `segprep report` as a whole process and reports what a user would see.

    .venv/bin/python benchmarks/report_size.py [--entries 100000] [--dir build/report-bench]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from beam_pipeline.commands.sample_data import jpeg_bytes, portrait  # noqa: E402
from transforms.codecs.mask import encode_mask  # noqa: E402
from transforms.format import tfrecord  # noqa: E402
from transforms.format.dataset_info import (  # noqa: E402
    FORMAT_VERSION,
    DatasetInfo,
    RejectCounts,
    ShardInfo,
    SplitInfo,
)
from transforms.format.example import build_example  # noqa: E402
from transforms.format.features import SCHEMA  # noqa: E402
from transforms.format.naming import METADATA_FILE, REJECTS_FILE, shard_name  # noqa: E402


def synthesize(directory: Path, entries: int, shards: int) -> None:
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    image, mask = portrait(rng, 48, 64)
    record_template = (jpeg_bytes(image), encode_mask(mask * 255, "jpeg"))
    per_shard = entries // shards
    rows = []
    for number in range(shards):
        name = shard_name("train", number, shards)
        with tfrecord.Writer(str(directory / name)) as writer:
            for index in range(per_shard):
                key = f"img{number:05d}_{index:05d}"
                writer.write(build_example(key, *record_template, 48, 64))
        data = (directory / name).read_bytes()
        rows.append(ShardInfo(name, per_shard, len(data), hashlib.sha256(data).hexdigest()))
    info = DatasetInfo(
        format_version=FORMAT_VERSION,
        mask_format="jpeg",
        splits={
            "train": SplitInfo("train", per_shard * shards, (48, 64), tuple(rows)),
            "validation": SplitInfo("validation", 0, None, ()),
        },
        num_rejected=RejectCounts(0, {}, {}),
        features=SCHEMA,
        parameters={},
        versions={"segprep": "bench"},
    )
    (directory / METADATA_FILE).write_bytes(info.to_bytes())
    with open(directory / REJECTS_FILE, "w") as handle:
        for index in range(entries // 5):
            reason = f"reason_{index % 12}"
            detail = "x" * 200 + f" <b>{index}</b>"
            row = {"key": f"bad{index}", "reason": reason, "detail": detail, "image": None}
            handle.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=1_000)
    parser.add_argument("--dir", default="build/report-bench")
    args = parser.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    out = root / "out"
    started = time.perf_counter()
    synthesize(out, args.entries, args.shards)
    print(f"synthesized {args.entries:,} entries in {time.perf_counter() - started:.1f} s")
    page = root / "report.html"
    segprep = os.path.join(os.path.dirname(sys.executable), "segprep")
    started = time.perf_counter()
    subprocess.run([segprep, "report", str(out), "--out", str(page)], check=True)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"report: {page.stat().st_size / 1e6:.2f} MB page, {seconds:.1f} s as a whole process, "
        f"peak RSS {peak:.0f} MB"
    )


if __name__ == "__main__":
    main()
