"""Training from gs://: the PyTorch loader over the storage emulator against the same output
read locally, with a warm, a cold and a small (25 %) shard cache, in both shuffle modes.

    flock /work/tools/bench.lock .venv/bin/python benchmarks/gcs_reader.py [--trials 3]

Builds (once, cached in benchmarks/.cache/) sample portraits prepared by the job into
NUM_SHARDS shards and indexed, starts gcp-storage-emulator in its own process (in memory,
on loopback) and uploads the output. Every contender reads the train split with
shard_reader.torch.make_loader(batch 8, num_workers=2) in a fresh child process:

- local: the output on local disk (shuffle global, then window)
- gs:// warm cache: the cache already holds every shard (the target: >= 90 % of local)
- gs:// cold cache: an empty cache; the time to the first batch and the first epoch's rate
- gs:// cache at 25 %: a limit of a quarter of the train shards' bytes, global and window

Warm and small-cache contenders run one epoch untimed (filling what the cache can hold),
then `--epochs` epochs timed. The emulator is a Python server on the same 2 cores, so the
cold and small-cache figures are a lower bound of what a real bucket gives.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache"
BATCH = 8
WORKERS = 2
NUM_SHARDS = 32
WINDOW_SHARDS = 2


def prepare_data(count: int, seed: int) -> Path:
    root = CACHE / f"gcs-{count}-seed{seed}"
    output = root / "prepared"
    if (output / "dataset_info.json").exists():
        return output
    from beam_pipeline.commands.index import index_output
    from beam_pipeline.commands.sample_data import write_sample_data
    from beam_pipeline.launch import launcher

    sample = root / "sample"
    if not (sample / "complete").exists():
        write_sample_data(sample, count=count, seed=seed, broken_fraction=0.0)
        (sample / "complete").touch()
    launcher.run(
        [
            "--image_dir", str(sample / "images"),
            "--mask_dir", str(sample / "masks"),
            "--output_dir", str(output),
            "--num_shards", str(NUM_SHARDS),
            "--overwrite",
            "--runner", "FnApiRunner",
        ]
    )  # fmt: skip
    index_output(str(output))
    return output


EMULATOR = """
import logging, sys, threading
from gcp_storage_emulator.server import create_server
logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
server = create_server("127.0.0.1", int(sys.argv[1]), in_memory=True, default_bucket="bench")
server.start()
print("ready", flush=True)
sys.stdin.read()
server.stop()
"""


def start_emulator() -> tuple[subprocess.Popen, str]:
    from tests.helpers.gcs_server import free_loopback_port

    port = free_loopback_port()
    process = subprocess.Popen(
        [sys.executable, "-c", EMULATOR, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    return process, f"http://127.0.0.1:{port}"


def upload(output: Path) -> None:
    from google.cloud.storage import Client

    bucket = Client.create_anonymous_client().bucket("bench")
    for path in sorted(output.rglob("*")):
        if path.is_file() and ".segprep" not in path.parts:
            bucket.blob(f"out/{path.relative_to(output).as_posix()}").upload_from_filename(
                str(path)
            )


def child(args: argparse.Namespace) -> None:
    from shard_reader.torch import make_loader

    shuffle = "window" if args.shuffle == "window" else True
    start = time.perf_counter()
    loader = make_loader(
        args.data,
        "train",
        BATCH,
        num_workers=WORKERS,
        shuffle=shuffle,
        window_shards=WINDOW_SHARDS,
        cache_dir=args.cache_dir,
        cache_limit_bytes=args.limit,
    )
    first_batch = None
    epoch = 0
    records = 0
    if args.cold:
        for images, _ in loader:
            if first_batch is None:
                first_batch = time.perf_counter() - start
            records += len(images)
        elapsed = time.perf_counter() - start
    else:
        for _ in loader:  # untimed: workers, page cache, and the cache filled
            pass
        begin = time.perf_counter()
        for epoch in range(1, args.epochs + 1):
            loader.set_epoch(epoch)
            for images, _ in loader:
                records += len(images)
        elapsed = time.perf_counter() - begin
    print(json.dumps({"rate": records / elapsed, "first_batch": first_batch}))


def run_child(data: str, shuffle: str, cache_dir: str | None, limit: int | None, **kw) -> dict:
    command = [sys.executable, __file__, "--child", "--data", data, "--shuffle", shuffle]
    if cache_dir:
        command += ["--cache_dir", cache_dir]
    if limit:
        command += ["--limit", str(limit)]
    if kw.get("cold"):
        command.append("--cold")
    command += ["--epochs", str(kw.get("epochs", 2))]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=480)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--shuffle", default="global", help=argparse.SUPPRESS)
    parser.add_argument("--cache_dir", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    output = prepare_data(args.count, args.seed)
    metadata = json.loads((output / "metadata.json").read_text())
    shards = metadata["splits"]["train"]["shards"]
    dataset_bytes = sum(shard["bytes"] for shard in shards)
    quarter = dataset_bytes // 4
    emulator, endpoint = start_emulator()
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    work = Path(tempfile.mkdtemp(prefix="gcs-bench-"))
    results: dict[str, list[dict]] = {}
    try:
        upload(output)
        url = "gs://bench/out"
        warm = str(work / "warm")
        run_child(url, "global", warm, 1 << 34, cold=True)  # fills the warm cache
        for trial in range(args.trials):
            cold = str(work / f"cold{trial}")
            contenders = {
                "local, global": (str(output), "global", None, None, {}),
                "local, window": (str(output), "window", None, None, {}),
                "gs:// warm cache, global": (url, "global", warm, 1 << 34, {}),
                "gs:// cold cache, global (first epoch)": (
                    url, "global", cold, 1 << 34, {"cold": True}
                ),
                "gs:// cache 25 %, global": (url, "global", str(work / f"g{trial}"), quarter, {}),
                "gs:// cache 25 %, window": (url, "window", str(work / f"w{trial}"), quarter, {}),
            }  # fmt: skip
            for name, (data, shuffle, cache_dir, limit, extra) in contenders.items():
                extra.setdefault("epochs", args.epochs)
                result = run_child(data, shuffle, cache_dir, limit, **extra)
                results.setdefault(name, []).append(result)
                print(f"trial {trial} {name}: {result}", file=sys.stderr)
            for name in ("cold", "g", "w"):
                shutil.rmtree(work / f"{name}{trial}", ignore_errors=True)
    finally:
        emulator.stdin.close()
        emulator.wait()
        shutil.rmtree(work, ignore_errors=True)
    local = statistics.median(r["rate"] for r in results["local, global"])
    print(
        f"{len(shards)} train shards, {dataset_bytes / 1e6:.1f} MB; cache at 25 %: "
        f"{quarter / 1e6:.1f} MB; batch {BATCH}, num_workers={WORKERS}, "
        f"window_shards={WINDOW_SHARDS}; median of {args.trials} trials"
    )
    print(f"{'contender':42} {'records/s':>10} {'vs local':>9} {'first batch':>12}")
    for name, runs in results.items():
        rate = statistics.median(r["rate"] for r in runs)
        firsts = [r["first_batch"] for r in runs if r["first_batch"] is not None]
        first = f"{statistics.median(firsts):.2f} s" if firsts else ""
        print(f"{name:42} {rate:10.1f} {rate / local:9.2f} {first:>12}")


if __name__ == "__main__":
    main()
