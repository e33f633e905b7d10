"""Launcher memory against listing size: does planning stay flat from 10k to 1M entries?

    python benchmarks/launcher_memory.py                        # 10k, 50k, 200k, 1M entries
    python benchmarks/launcher_memory.py --sizes 10000,50000    # a quick look
    python benchmarks/launcher_memory.py --modes coco           # COCO staging only
    python benchmarks/launcher_memory.py --modes cvat --sizes 10000,100000   # a CVAT export

Two listings per size N, each planned by `segprep prepare --dry_run` in a subprocess:
  folders: N keys in one --data_dir, KEY.jpg + KEY_mask.mat (empty files: planning never
           reads them), so the launcher walks 2N files, sorts, pairs and stages N pairs;
  coco:    an image folder of N empty KEY.jpg files and a COCO file of N images with one
           polygon each, which the launcher shape-checks, streams, joins per image, pairs
           with the images and stages.
The dry run covers everything the launcher does with a listing (listing, pairing, the
COCO join, staging the pairs for the job, building the job graph); it stops before the job
runs. Peak memory is the PSS summed over the process tree (tests/process_tree.py), sampled
every 0.1 s; the data is made once per size under benchmarks/.cache/launcher/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "benchmarks" / ".cache" / "launcher"
SAMPLE_SECONDS = 0.1
DEFAULT_SIZES = (10_000, 50_000, 200_000, 1_000_000)


def folder_data(n: int) -> Path:
    data = CACHE / f"folders-{n}"
    if not (data / ".done").exists():
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        for index in range(n):
            for name in (f"{index:07d}.jpg", f"{index:07d}_mask.mat"):
                os.close(os.open(data / name, os.O_CREAT | os.O_WRONLY, 0o644))
        (data / ".done").touch()  # hidden: never data
    return data


def coco_data(n: int) -> tuple[Path, Path]:
    folder = CACHE / f"coco-{n}"
    images, annotations = folder / "images", folder / "coco.json"
    if not (folder / "done").exists():
        shutil.rmtree(folder, ignore_errors=True)
        images.mkdir(parents=True)
        for index in range(n):
            os.close(os.open(images / f"{index:07d}.jpg", os.O_CREAT | os.O_WRONLY, 0o644))
        with open(annotations, "w") as handle:
            handle.write('{"categories": [{"id": 1, "name": "thing"}], "images": [')
            handle.write(
                ",".join(
                    json.dumps({"id": i, "file_name": f"{i:07d}.jpg", "height": 480, "width": 640})
                    for i in range(n)
                )
            )
            handle.write('], "annotations": [')
            handle.write(
                ",".join(
                    json.dumps(
                        {
                            "id": i,
                            "image_id": i,
                            "category_id": 1,
                            "iscrowd": 0,
                            "segmentation": [
                                [10.5, 10.5, 200.25, 10.5, 200.25, 300.75, 10.5, 300.75]
                            ],
                        }
                    )
                    for i in range(n)
                )
            )
            handle.write("]}")
        (folder / "done").touch()
    return images, annotations


def cvat_data(n: int) -> tuple[Path, Path]:
    """N empty images and a CVAT for images 1.1 XML with one polygon per image."""
    folder = CACHE / f"cvat-{n}"
    images, annotations = folder / "images", folder / "annotations.xml"
    if not (folder / "done").exists():
        shutil.rmtree(folder, ignore_errors=True)
        images.mkdir(parents=True)
        for index in range(n):
            os.close(os.open(images / f"{index:07d}.jpg", os.O_CREAT | os.O_WRONLY, 0o644))
        with open(annotations, "w") as handle:
            handle.write('<?xml version="1.0" encoding="utf-8"?>\n<annotations>\n')
            handle.write("<meta><task><labels><label><name>thing</name></label></labels>")
            handle.write("</task></meta>\n")
            for i in range(n):
                handle.write(
                    f'<image id="{i}" name="{i:07d}.jpg" width="640" height="480">'
                    '<polygon label="thing" points="10.5,10.5;200.25,10.5;200.25,300.75;'
                    '10.5,300.75" z_order="0"/></image>\n'
                )
            handle.write("</annotations>\n")
        (folder / "done").touch()
    return images, annotations


def measure(command: list[str]) -> tuple[float, int, dict]:
    """(wall seconds, peak tree PSS bytes, the dry run's plan) of one dry run."""
    from tests.helpers.process_tree import run_measured

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
    started = time.perf_counter()
    done, peak = run_measured(command, env=env, timeout=None, sample_seconds=SAMPLE_SECONDS)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed: {done.stderr[-2000:]}")
    return seconds, peak, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--modes", default="folders,coco")
    parser.add_argument("--keep", action="store_true", help="keep the data under .cache")
    args = parser.parse_args()
    segprep = [os.path.join(os.path.dirname(sys.executable), "segprep"), "prepare"]
    rows = []
    for mode in args.modes.split(","):
        for n in map(int, args.sizes.split(",")):
            out = Path(tempfile.mkdtemp(prefix="segprep-bench-")) / "out"
            if mode == "folders":
                flags = ["--data_dir", str(folder_data(n))]
            elif mode == "cvat":
                images, annotations = cvat_data(n)
                flags = ["--image_dir", str(images), "--annotations", str(annotations)]
                flags += ["--annotation_format", "cvat", "--mask_type", "classes"]
            else:
                images, annotations = coco_data(n)
                flags = ["--image_dir", str(images), "--coco_annotations", str(annotations)]
                flags += ["--mask_type", "classes"]
            command = [*segprep, *flags, "--output_dir", str(out), "--dry_run"]
            seconds, peak, plan = measure(command)
            shutil.rmtree(out.parent, ignore_errors=True)
            paired = plan["plan"]["listing"]["paired"]
            assert paired == n, (mode, n, paired)
            rows.append((mode, n, seconds, peak))
            print(f"{mode} {n:,}: {peak / 2**20:.0f} MB peak PSS, {seconds:.1f} s", flush=True)
            if not args.keep:
                shutil.rmtree(CACHE / f"{mode}-{n}")
    print()
    print("| listing | entries | peak PSS MB | vs smallest | wall s |")
    print("| --- | --- | --- | --- | --- |")
    smallest: dict[str, int] = {}
    for mode, n, seconds, peak in rows:
        base = smallest.setdefault(mode, peak)
        print(f"| {mode} | {n:,} | {peak / 2**20:.0f} | {peak / base:.2f}x | {seconds:.1f} |")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
