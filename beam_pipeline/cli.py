"""`segprep`: sample-data, prepare, verify, index, inspect, report.

Only dispatch lives here: `prepare`'s flags are parsed by its run plan (launch/plan.py).
User mistakes end in one line and exit code 2; Ctrl-C in one line and 130; a finished
command whose result could not be written to stdout in one line and 3.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence

from beam_pipeline import __version__
from beam_pipeline.errors import (
    RejectLimitError,
    UsageError,
    one_line_errors,
    printable,
    printable_lines,
    shortened,
)
from beam_pipeline.launch.options import (
    BEAM_FLAGS_NOTE,
    DEFAULT_BROKEN_FRACTION,
    DEFAULT_INSPECT_COUNT,
    DEFAULT_INSPECT_SPLIT,
    DEFAULT_SAMPLE_COUNT,
    HelpFormatter,
    fraction,
    integer,
    location,
    positive_int,
)
from beam_pipeline.runtime import interrupts
from transforms.settings_error import SettingError, as_flag

VERBOSE = "--verbose"
# A command whose work is done (an output published, an index written, a check passed) but
# whose result could not be written to stdout (a full disk, an I/O error): not 1, which
# would tell a scheduler that a published output failed (and it might run it again).
RESULT_UNWRITTEN = 3


# A hang-up (the terminal closed, the ssh session dropped) ends a run as SIGTERM does.
_SIGNALS = {
    signal.SIGINT: (130, "interrupted"),
    signal.SIGTERM: (143, "terminated"),
    signal.SIGHUP: (129, "hung up"),
}


def _on_signal(signum: int, frame) -> None:
    """Ctrl-C, SIGTERM and SIGHUP unwind the run (it cleans up, its writers stop); noted as well
    (runtime/interrupts.py), since Beam re-raises what interrupts a step as a RuntimeError
    and Python drops what a finalizer raises."""
    interrupts.note(signum)
    raise KeyboardInterrupt


def _sample_data(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.sample_data import write_sample_data

    summary = write_sample_data(
        args.dir, args.count, args.seed, args.broken_fraction, classes=args.classes
    )
    broken = sum(summary.breakage_counts().values())
    lines = [
        f"wrote {summary.count} entries to {summary.image_dir} and {summary.mask_dir}",
        f"broken on purpose: {broken}",
        *(f"  {kind:<20} {number}" for kind, number in summary.breakage_counts().items()),
        *summary.planted_lines(),
    ]
    _print(lines)
    return 0


def _prepare(argv: list[str]) -> int:
    from beam_pipeline.launch.plan import make_plan

    plan = make_plan([arg for arg in argv if arg != VERBOSE])
    from beam_pipeline.commands.summary import summary_lines
    from beam_pipeline.launch import launcher

    result = launcher.execute(plan)
    if result.submission is not None:  # --dry_run, a template, or a job left running remotely
        from beam_pipeline.launch.submission import format_description

        # JSON's own line breaks; a path in it is a JSON string, its controls escaped
        _print(format_description(result.submission).split("\n"))
        return 0
    _print(summary_lines(result.info, plan))
    return 0


def _print(lines: Sequence[str]) -> None:
    """Print a result, each line escaped whole (printable_lines); through _Guarded, a
    failed write does not fail the run."""
    print(printable_lines(lines), flush=True)


class _Guarded:
    """sys.stdout or sys.stderr for one command: a write that fails (a reader that stopped
    early, `| head`; a full disk) is noted and ends the stream's writing, never the command,
    since the work it reports is done by then."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.failure: OSError | None = None

    def write(self, text: str) -> int:
        if self.failure is None:
            try:
                return self.stream.write(text)
            except OSError as error:
                self._failed(error)
        return len(text)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self.stream.flush()
            except OSError as error:
                self._failed(error)

    def _failed(self, error: OSError) -> None:
        self.failure = error
        # Python flushes what the stream still buffers again at exit: into nothing, now.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(_devnull(), self.stream.fileno())

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _devnull() -> int:
    return os.open(os.devnull, os.O_WRONLY)


def _standard_streams() -> None:
    """A closed stdout or stderr (cron, daemons: `>&-`) is os.devnull: Python leaves
    sys.stdout None for it, and the next file opened would take its number, for the
    writers it forks to print into."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            null = _devnull()
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - open for the process


def _verify(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.verify import run_verify

    return run_verify(args.dir, repair=args.repair)


def _index(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.index import run_index

    return run_index(args.dir)


def _inspect(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.inspect_sheet import run_inspect

    if args.duplicates:
        if args.rejects:
            raise UsageError("give --rejects or --duplicates, not both")
        from beam_pipeline.commands.inspect_sheet.duplicates import run_inspect_duplicates

        return run_inspect_duplicates(args.dir, args.count, args.out)
    return run_inspect(
        args.dir, args.split, args.count, args.out, args.rejects, version=args.version
    )


def _make_report(args: argparse.Namespace) -> int:
    from beam_pipeline.commands.report import write_report
    from beam_pipeline.commands.report.gather import ReportError

    try:
        path = write_report(args.dir, args.out, version=args.version)
    except ReportError as error:
        raise UsageError(str(error)) from None
    _print([path])
    return 0


def quiet_libraries() -> None:
    """Hide TensorFlow's C++ start-up lines and Beam's info logs (inherited by workers)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    logging.getLogger().setLevel(logging.WARNING)
    # Beam logs a failing DoFn's traceback at ERROR; segprep reports the error itself.
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)


def build_parser() -> argparse.ArgumentParser:
    from beam_pipeline.launch.plan import build_parser as prepare_parser

    parser = one_line_errors(
        argparse.ArgumentParser(
            prog="segprep",
            description="Images + segmentation masks -> sharded TFRecords.",
            formatter_class=HelpFormatter,
        )
    )
    parser.add_argument("--version", action="version", version=f"segprep {__version__}")
    parser.add_argument(VERBOSE, action="store_true", help="show tracebacks and library logs")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help: str, **kwargs) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, formatter_class=HelpFormatter, **kwargs)
        sub.add_argument(VERBOSE, action="store_true", help="show tracebacks and library logs")
        return one_line_errors(sub)

    def output_command(name: str, help: str) -> argparse.ArgumentParser:
        """A command that reads a prepared output: its DIR argument first."""
        sub = command(name, help)
        sub.add_argument(
            "dir", type=location, help="output directory of `segprep prepare` (local or gs://)"
        )
        return sub

    sample = command("sample-data", "write a synthetic dataset in the real layout")
    sample.add_argument("dir", type=location, help="creates DIR/images and DIR/masks")
    sample.add_argument(
        "--count", type=positive_int, default=DEFAULT_SAMPLE_COUNT, help="number of entries"
    )
    sample.add_argument("--seed", type=integer, default=0, help="random seed")
    sample.add_argument(
        "--broken_fraction",
        type=fraction,
        default=DEFAULT_BROKEN_FRACTION,
        help="fraction of broken entries",
    )
    sample.add_argument(
        "--classes",
        type=integer,
        default=None,
        metavar="N",
        help="write N-class palette PNG masks (VOC layout) instead of binary .mat masks",
    )

    commands.add_parser(
        "prepare",
        help="run the Beam job (Beam flags such as --runner are accepted too)",
        parents=[prepare_parser()],
        add_help=False,
        formatter_class=HelpFormatter,
        epilog=BEAM_FLAGS_NOTE,
    )

    verify = output_command(
        "verify",
        "re-read an output and check shards, CRCs, sha256, counts and rejects "
        "against metadata.json (exit 1 on any problem)",
    )
    verify.add_argument(
        "--repair",
        action="store_true",
        help="first finish a commit that was cut short (completed or rolled back, by how far "
        "it got) and clear what ended runs left in .segprep/",
    )

    output_command(
        "index",
        "add the record index (random access, PyTorch, Grain) and the TFDS files to an "
        "output that lacks them",
    )

    inspect = output_command(
        "inspect", "render a contact sheet PNG (image | mask | overlay) of examples or rejects"
    )
    inspect.add_argument("--split", default=DEFAULT_INSPECT_SPLIT, help="split to show")
    inspect.add_argument(
        "--count",
        type=positive_int,
        default=DEFAULT_INSPECT_COUNT,
        help="entries to show, at most 64",
    )
    inspect.add_argument(
        "--out",
        type=location,
        help="PNG file or folder to write; without it DATASET_inspect_SPLIT.png (or "
        "_rejects.png) beside the dataset folder (a long DATASET cut to fit); never inside the "
        "dataset, never over an existing file (adds _2, _3, ...)",
    )
    inspect.add_argument(
        "--rejects",
        action="store_true",
        help="show rejects.jsonl entries from their original files instead of shard examples",
    )
    inspect.add_argument(
        "--version",
        type=positive_int,
        default=None,
        help="show the split as this version of a grown output was (`prepare --append`); "
        "default: the latest",
    )
    inspect.add_argument(
        "--duplicates",
        action="store_true",
        help="show the groups of duplicates.jsonl, group by group (docs/duplicates.md)",
    )

    report = output_command(
        "report",
        "write one self-contained HTML page about an output (counts, classes, samples, "
        "rejects, shards); prints its path",
    )
    report.add_argument(
        "--out",
        type=location,
        help="HTML file to write (local); without it segprep-report-DIRNAME.html beside "
        "DIR (in the current folder for gs://; a long DIRNAME cut to fit)",
    )
    report.add_argument(
        "--version",
        type=positive_int,
        default=None,
        help="describe the splits as this version of a grown output was (`prepare --append`); "
        "default: the latest (rejects are always the latest's)",
    )
    return parser


def _command_index(argv: list[str]) -> int | None:
    """Position of the subcommand: the first argument that is not a global switch."""
    for index, arg in enumerate(argv):
        if not arg.startswith("-"):
            return index
    return None


def main(argv: list[str] | None = None) -> int:
    # Registered first, so it runs last: the interpreter's final garbage collection would
    # walk every object Beam and TensorFlow made (~0.4 s) to free memory the OS reclaims.
    atexit.register(gc.freeze)
    argv = sys.argv[1:] if argv is None else argv
    _standard_streams()
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Guarded(out), _Guarded(err)
    try:
        return _result_written(_main(argv), sys.stdout.failure)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str]) -> int:
    verbose = VERBOSE in argv
    if not verbose:
        quiet_libraries()
    previous = {
        signum: signal.signal(signum, _on_signal)
        for signum in _SIGNALS
        if signal.getsignal(signum) is not signal.SIG_IGN  # a shell's background job
    }
    interrupts.clear()
    try:
        code = _dispatch(argv)
    except BaseException as error:  # noqa: BLE001 - last resort: one line, not a traceback
        code = _report(error, verbose)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return _flush_stdout(code)


def _report(error: BaseException, verbose: bool) -> int:
    """The one line and exit code of an error; SystemExit (--help, --version) passes."""
    if isinstance(error, SystemExit):
        raise error
    # What a failed prepare left published, as the launcher read it from the output folder.
    outcome = getattr(error, "segprep_outcome", None)
    taken = interrupts.taken()
    if taken is not None or isinstance(error, KeyboardInterrupt):
        code, what = _SIGNALS[taken or signal.SIGINT]
        return _fail(verbose, f"{what}: {outcome or 'nothing was published'}", code)
    if isinstance(error, UsageError):
        return _fail(verbose, f"error: {error}", 2)
    if isinstance(error, SettingError):  # the runtime's refusals (runtime/refusal.py), the core's
        return _fail(verbose, f"error: {error.worded(as_flag)}", 2)
    if isinstance(error, RejectLimitError):
        return _fail(verbose, str(error).splitlines()[0], 1)
    first_line = shortened((str(error).strip().splitlines() or [""])[0], 1000)
    if outcome and "nothing was published" not in first_line:
        first_line += f"; {outcome}"
    hint = "" if verbose else " (run with --verbose for the traceback)"
    return _fail(verbose, f"failed: {type(error).__name__}: {first_line}{hint}", 1)


def _dispatch(argv: list[str]) -> int:
    index = _command_index(argv)
    if index is not None and argv[index] == "prepare":
        build_parser().parse_args(argv[:index])  # global switches: --version, --help
        return _prepare(argv[index + 1 :])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "sample-data":
        return _sample_data(args)
    _probe_credentials(getattr(args, "dir", None))
    if args.command == "verify":
        return _verify(args)
    if args.command == "report":
        return _make_report(args)
    if args.command == "index":
        return _index(args)
    return _inspect(args)


def _probe_credentials(path: str | None) -> None:
    """A tool given gs:// asks for credentials once, in seconds, before its first read: the
    one probe every gs:// entry point goes through (transforms.files.missing_credentials),
    and one request that Cloud Storage answers (files.unreachable)."""
    from transforms import files

    if path and files.is_remote(path):
        problem = files.missing_credentials() or files.unreachable(path)
        if problem is not None:
            raise UsageError(problem)


def _flush_stdout(code: int) -> int:
    sys.stdout.flush()  # a failed write is noted (_Guarded), the code stays
    return code


def _result_written(code: int, failure: OSError | None) -> int:
    """A finished command whose result could not be written exits RESULT_UNWRITTEN, saying
    so on stderr; a reader that stopped early (`| head`) does not change the code."""
    if code != 0 or failure is None or isinstance(failure, BrokenPipeError):
        return code
    why = failure.strerror or type(failure).__name__
    message = f"done, but its result could not be written to stdout ({why})"
    return _fail(False, message, RESULT_UNWRITTEN)


def _fail(verbose: bool, message: str, code: int) -> int:
    if verbose:
        traceback.print_exc()
    print(f"segprep: {printable(message)}", file=sys.stderr)  # cannot fail (_Guarded)
    return code


if __name__ == "__main__":  # `python -m beam_pipeline.cli COMMAND ...`: what `segprep` runs
    sys.exit(main())
