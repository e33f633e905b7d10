"""The prepare job's own flags, and the defaults of every subcommand; everything else on a
`prepare` command line goes to Beam.

Kept free of Beam, TensorFlow and image-library imports so `segprep --help` answers at once
and `segprep prepare` loads only what it uses.
"""

from __future__ import annotations

import argparse

from segcore.features import MASK_FORMATS

DEFAULT_RUNNER = "FnApiRunner"  # in this process; see launcher.pipeline_options
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner")
DEFAULT_SHARD_SIZE_MB = 100.0
DEFAULT_THREADS_PER_SHARD = 0  # one per core, or one per writer process
DEFAULT_WRITER_PROCESSES = 0  # one per core
# Half the dataset broken is almost always a wrong folder or flag, not a dirty download.
DEFAULT_MAX_REJECT_FRACTION = 0.5
DEFAULT_BROKEN_FRACTION = 0.05  # segprep sample-data
DEFAULT_INSPECT_OUT = "segprep_inspect.png"
DEFAULT_INSPECT_COUNT = 16
DEFAULT_INSPECT_SPLIT = "train"


def add_prepare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--image_dir", required=True, help="folder (local or gs://) of KEY.jpg|.jpeg|.png"
    )
    parser.add_argument(
        "--mask_dir", required=True, help="folder of KEY_mask.mat, KEY.mat, KEY_mask.png or KEY.png"
    )
    parser.add_argument("--output_dir", required=True, help="where shards and metadata.json go")
    parser.add_argument(
        "--train_size", type=float, default=0.9, help="fraction of valid entries for train"
    )
    parser.add_argument(
        "--validation_size",
        type=float,
        default=0.1,
        help="fraction of valid entries for validation",
    )
    sizing = parser.add_mutually_exclusive_group()
    sizing.add_argument(
        "--num_shards", type=int, default=None, help="total shards, spread over splits"
    )
    sizing.add_argument(
        "--shard_size_mb",
        type=float,
        default=None,
        help=f"target input MB per shard (default {DEFAULT_SHARD_SIZE_MB:g} unless --num_shards)",
    )
    parser.add_argument(
        "--mask_format", choices=MASK_FORMATS, default="jpeg", help="how masks are stored"
    )
    parser.add_argument(
        "--mask_key",
        default=None,
        help="variable name in .mat masks (default: 'mask', else the only 2-D variable)",
    )
    parser.add_argument(
        "--threads_per_shard",
        type=int,
        default=DEFAULT_THREADS_PER_SHARD,
        help="threads that read and decode the entries of one shard, 0 = one per core, or "
        "one per writer process (decoders release the GIL; remote reads wait on the network); "
        "records are still written in key order",
    )
    parser.add_argument(
        "--writer_processes",
        type=int,
        default=DEFAULT_WRITER_PROCESSES,
        help="local runs on local files: processes that write shards side by side, 0 = one "
        "per core, 1 = write in the runner's process (Dataflow and Beam's multi-process "
        "mode parallelise by themselves and ignore this)",
    )
    parser.add_argument(
        "--max_reject_fraction",
        type=float,
        default=DEFAULT_MAX_REJECT_FRACTION,
        help="above this fraction of bad entries (not counting not_in_split) rejects.jsonl is "
        "written but metadata.json is not, and the job fails",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier segprep output in --output_dir (never deletes other files)",
    )
    parser.add_argument(
        "--no_wait",
        action="store_true",
        help="Dataflow: return once the job is submitted (prints its id and console URL) "
        "instead of following its counters until it ends",
    )
    parser.add_argument(
        "--dry_run",
        action="store_true",
        help="build the job and print what would be submitted (steps, packaging, project, "
        "region, locations) as JSON; reads, stages and submits nothing",
    )
