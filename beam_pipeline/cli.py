"""`segprep`: sample-data, prepare, verify. User mistakes end in one line and exit code 2."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from beam_pipeline import __version__
from beam_pipeline.errors import UsageError


def _sample_data(args: argparse.Namespace) -> int:
    from beam_pipeline.sample_data import write_sample_data

    summary = write_sample_data(args.dir, args.count, args.seed, args.broken_fraction)
    broken = sum(summary.breakage_counts().values())
    print(f"wrote {summary.count} entries to {summary.image_dir} and {summary.mask_dir}")
    print(f"broken on purpose: {broken}")
    for kind, number in summary.breakage_counts().items():
        print(f"  {kind:<20} {number}")
    return 0


def _prepare(args: argparse.Namespace, beam_args: list[str]) -> int:
    from beam_pipeline import launcher
    from beam_pipeline.summary import format_summary

    config = launcher.config_from_args(args)
    options = launcher.pipeline_options(beam_args)
    result = launcher.run_job(config, options, overwrite=args.overwrite)
    print(format_summary(result))
    return 0


def quiet_libraries() -> None:
    """Hide TensorFlow's C++ start-up lines and Beam's info logs (inherited by workers)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    logging.getLogger().setLevel(logging.WARNING)


def build_parser() -> argparse.ArgumentParser:
    from beam_pipeline.options import add_prepare_arguments
    from beam_pipeline.sample_data import DEFAULT_BROKEN_FRACTION

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
    return parser


def main(argv: list[str] | None = None) -> int:
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
        return _prepare(args, extra)
    except UsageError as error:
        if args.verbose:
            traceback.print_exc()
        print(f"segprep: error: {error}", file=sys.stderr)
        return 2
