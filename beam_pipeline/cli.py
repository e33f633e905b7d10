"""`segprep`: sample-data, prepare, verify, inspect. User mistakes: one line, exit code 2."""

from __future__ import annotations

import argparse
import atexit
import gc
import logging
import os
import sys
import traceback

from beam_pipeline import __version__
from beam_pipeline.errors import RejectLimitError, UsageError
from beam_pipeline.launch.options import (
    DEFAULT_BROKEN_FRACTION,
    DEFAULT_INSPECT_COUNT,
    DEFAULT_INSPECT_OUT,
    DEFAULT_INSPECT_SPLIT,
    DEFAULT_RUNNER,
    LOCAL_RUNNERS,
    add_prepare_arguments,
)


def _sample_data(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.sample_data import write_sample_data

    summary = write_sample_data(args.dir, args.count, args.seed, args.broken_fraction)
    broken = sum(summary.breakage_counts().values())
    print(f"wrote {summary.count} entries to {summary.image_dir} and {summary.mask_dir}")
    print(f"broken on purpose: {broken}")
    for kind, number in summary.breakage_counts().items():
        print(f"  {kind:<20} {number}")
    return 0


def _prepare(args: argparse.Namespace, beam_args: list[str]) -> int:
    if _writes_locally(args, beam_args):
        from beam_pipeline.runtime import writer_pool

        writer_pool.warm_up()  # before importing Beam: the pool's imports run beside ours
    from beam_pipeline.commands.summary import format_summary
    from beam_pipeline.launch import launcher

    config = launcher.config_from_args(args)
    options = launcher.pipeline_options(beam_args, no_wait=args.no_wait)
    result = launcher.run_job(config, options, overwrite=args.overwrite, dry_run=args.dry_run)
    if result.submission is not None:  # --dry_run, a template, or a job left running remotely
        from beam_pipeline.launch.cloud import format_description

        print(format_description(result.submission))
        return 0
    print(format_summary(result.metadata))
    return 0


def _writes_locally(args: argparse.Namespace, beam_args: list[str]) -> bool:
    """A quick look at the flags: will this run use local writer processes?

    Only decides how early the pool starts; launcher.writer_processes has the final word.
    """
    runner = argparse.ArgumentParser(add_help=False)
    runner.add_argument("--runner", default=DEFAULT_RUNNER)
    runner.add_argument("--direct_running_mode", default="in_memory")
    beam, _ = runner.parse_known_args(beam_args)
    paths = (args.image_dir, args.mask_dir, args.output_dir)
    from beam_pipeline.runtime.writer_pool import usable_cores

    return (
        (args.writer_processes or usable_cores()) > 1
        and not args.dry_run
        and beam.runner in LOCAL_RUNNERS
        and beam.direct_running_mode == "in_memory"
        and not any("://" in path for path in paths)
    )


def _verify(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.verify import run_verify

    return run_verify(args.dir)


def _index(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.index import run_index

    return run_index(args.dir)


def _inspect(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.inspect_sheet import run_inspect

    return run_inspect(args.dir, args.split, args.count, args.out, args.rejects)


def quiet_libraries() -> None:
    """Hide TensorFlow's C++ start-up lines and Beam's info logs (inherited by workers)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    logging.getLogger().setLevel(logging.WARNING)
    # Beam logs a failing DoFn's traceback at ERROR; segprep reports the error itself.
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)


def build_parser() -> argparse.ArgumentParser:
    defaults = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="segprep",
        description="Images + segmentation masks -> sharded TFRecords.",
        formatter_class=defaults,
    )
    parser.add_argument("--version", action="version", version=f"segprep {__version__}")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks and library logs")
    commands = parser.add_subparsers(dest="command", required=True)

    sample = commands.add_parser(
        "sample-data", help="write a synthetic dataset in the real layout", formatter_class=defaults
    )
    sample.add_argument("dir", help="creates DIR/images and DIR/masks")
    sample.add_argument("--count", type=int, default=60, help="number of entries")
    sample.add_argument("--seed", type=int, default=0, help="random seed")
    sample.add_argument(
        "--broken_fraction",
        type=float,
        default=DEFAULT_BROKEN_FRACTION,
        help="fraction of broken entries",
    )

    prepare = commands.add_parser(
        "prepare",
        help="run the Beam job (extra flags go to Beam, e.g. --runner)",
        formatter_class=defaults,
    )
    add_prepare_arguments(prepare)

    verify = commands.add_parser(
        "verify",
        help="re-read an output and check shards, CRCs, sha256, counts and rejects "
        "against metadata.json (exit 1 on any problem)",
        formatter_class=defaults,
    )
    verify.add_argument("dir", help="output directory of `segprep prepare` (local or gs://)")

    index = commands.add_parser(
        "index",
        help="add the record index (random access, PyTorch, Grain) and the TFDS files to an "
        "output that lacks them",
        formatter_class=defaults,
    )
    index.add_argument("dir", help="output directory of `segprep prepare` (local or gs://)")

    inspect = commands.add_parser(
        "inspect",
        help="render a contact sheet PNG (image | mask | overlay) of examples or rejects",
        formatter_class=defaults,
    )
    inspect.add_argument("dir", help="output directory of `segprep prepare` (local or gs://)")
    inspect.add_argument("--split", default=DEFAULT_INSPECT_SPLIT, help="split to show")
    inspect.add_argument("--count", type=int, default=DEFAULT_INSPECT_COUNT, help="entries to show")
    inspect.add_argument(
        "--out",
        default=DEFAULT_INSPECT_OUT,
        help="PNG to write (never inside the dataset directory)",
    )
    inspect.add_argument(
        "--rejects",
        action="store_true",
        help="show rejects.jsonl entries from their original files instead of shard examples",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    # Registered first, so it runs last: the interpreter's final garbage collection would
    # walk every object Beam and TensorFlow made (~0.4 s) to free memory the OS reclaims.
    atexit.register(gc.freeze)
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "prepare":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not args.verbose:
        quiet_libraries()
    try:
        if args.command == "sample-data":
            return _sample_data(args)
        if args.command == "verify":
            return _verify(args)
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "index":
            return _index(args)
        return _prepare(args, extra)
    except UsageError as error:
        return _fail(args, f"error: {error}", 2)
    except RejectLimitError as error:
        return _fail(args, str(error).splitlines()[0], 1)
    except Exception as error:  # noqa: BLE001 - last resort: one line, not a traceback
        first_line = (str(error).strip().splitlines() or [""])[0]
        hint = "" if args.verbose else " (run with --verbose for the traceback)"
        return _fail(args, f"failed: {type(error).__name__}: {first_line}{hint}", 1)


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    if args.verbose:
        traceback.print_exc()
    print(f"segprep: {message}", file=sys.stderr)
    return code
