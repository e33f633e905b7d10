"""The run plan: every decision of a `prepare` run, made once, before anything is written.

`make_plan(argv)` parses segprep's flags and Beam's (with Beam's own parser), checks them,
lists and pairs local inputs, looks at the output folder, and resolves what the machine
decides (runner kind, writer processes, threads, progress). The dry run prints the plan, the
real run executes it, and the summary and metadata.json read it: nothing downstream asks a
question again or changes an answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from beam_pipeline.errors import UsageError, one_line_errors, printable, usage_error
from beam_pipeline.job.settings import (
    CommitSettings,
    JobSettings,
    PlanningSettings,
    ShardWriterSettings,
)
from beam_pipeline.launch import credentials, dataflow, masks, official_splits, preflight
from beam_pipeline.launch.duplicates import plan_duplicates
from beam_pipeline.launch.options import (
    BEAM_FLAGS_NOTE,
    DEFAULT_RUNNER,
    DEFAULT_SHARD_SIZE_MB,
    LOCAL_RUNNERS,
    MAX_WORKERS,
    PRICE_FLAGS,
    HelpFormatter,
    add_prepare_arguments,
    frozen_args,
)
from beam_pipeline.runtime import output_protocol, writer_pool
from beam_pipeline.runtime.local_listing import LocalListing, list_local
from transforms import files
from transforms.pairing import Layout
from transforms.settings_error import SettingError
from transforms.splits import MIN_SHARDS, FolderSplits, SplitFractions, SplitLists

if TYPE_CHECKING:
    from transforms.record_spec import RecordSpec

# Beam's multi-worker local mode (multi_threading) asks for this many shards per worker, on
# top of transforms.splits.MIN_SHARDS.
SHARDS_PER_LOCAL_WORKER = 4


@dataclasses.dataclass(frozen=True)
class RunnerPlan:
    """Where the job runs, decided from Beam's options once."""

    name: str  # the runner's class name: FnApiRunner, DataflowRunner, ...
    local: bool  # on this machine
    in_process: bool  # local, in this process (the FnApiRunner's in-memory mode)
    workers: int  # local worker processes or threads; 1 in-process or remote
    dataflow: bool
    submit_only: bool  # Dataflow: a template, Beam's dry run or --no_wait; the job runs later
    template: bool


@dataclasses.dataclass(frozen=True)
class RunPlan:
    run_id: str
    started_at: float  # epoch seconds, for the run figures in metadata.json
    beam_args: tuple[str, ...]  # Beam's flags as given, validated by Beam's parser
    beam_overrides: tuple[tuple[str, Any], ...]  # segprep's choices on top of them
    runner: RunnerPlan
    layout: Layout
    output_dir: str
    overwrite: bool
    dry_run: bool
    listing: LocalListing | None  # local inputs, listed, paired and staged once
    output: output_protocol.OutputState | None  # None: a dry run on gs:// (touches nothing)
    writer_processes: int
    progress: bool
    job: JobSettings
    masks: masks.MaskPlan
    # --price_*: the user's per-unit prices for the dry run's cost (launch/estimate.py)
    prices: tuple[tuple[str, float], ...] = ()

    def pipeline_options(self):
        """A fresh PipelineOptions of this plan (Beam mutates the ones it is given)."""
        from apache_beam.options.pipeline_options import PipelineOptions

        return PipelineOptions(list(self.beam_args), **dict(self.beam_overrides))

    @property
    def discovered(self) -> int | None:
        """Entries found before the job (local inputs), the summary's first figure."""
        return self.listing.discovered if self.listing else None

    @property
    def decided_before_writing(self) -> int:
        """Entries rejected before any shard work: listing rejects and keys outside both
        splits. The progress display counts them done from the start."""
        if self.listing is None:
            return 0
        return self.listing.rejects + self.listing.left_out

    def describe(self) -> dict[str, Any]:
        """The plan as JSON-able data: what a dry run prints besides the job's steps."""
        planning = self.job.planning
        described: dict[str, Any] = {
            "run_id": self.run_id,
            "runner": self.runner.name,
            "local": self.runner.local,
            "writer_processes": self.writer_processes,
            "threads_per_shard": self.job.writing.threads,
            "min_total_shards": planning.min_total_shards,
            "record_format": planning.record_format,
            "progress": self.progress,
            "masks": self.masks.describe(),
        }
        if self.listing is not None:
            listing = self.listing
            described["listing"] = {
                "discovered": listing.discovered,
                "paired": listing.paired,
                "rejected_by_listing": dict(sorted(listing.rejected.items())),
                "hidden_files_ignored": self.listing.hidden,
                "ignored_files": listing.ignored,
                "side_files": listing.side_files,
                "unlabeled": listing.unlabeled,
            }
        if self.output is not None:
            described["output"] = {
                "finished_output_replaced": self.output.finished,
                "segprep_files": len(self.output.ours),
                "other_files_kept": list(self.output.foreign),
            }
        return described


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="segprep prepare",
        description="Run the Beam job: images and masks -> sharded TFRecords.",
        epilog=BEAM_FLAGS_NOTE,
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    add_prepare_arguments(parser)
    return parser


def make_plan(argv: list[str]) -> RunPlan:
    """Parse, check and resolve everything; raises UsageError with one line on any mistake."""
    parser = build_parser()
    args, rest, export, layout = _parse(parser, argv)
    output_dir = files.normalize_dir(args.output_dir)
    paths = (*(folder for folder in (layout.image_dir, layout.mask_dir) if folder), output_dir)
    _refuse_output_inside_inputs(output_dir, layout, args, export)
    if _may_use_writer_pool(args, paths):
        writer_pool.warm_up()  # before Beam's parser loads Beam: the record code imports beside it
    beam = _parse_beam_flags(rest, parser)
    runner = _runner(beam, args)
    _check_where_it_runs(runner, layout, output_dir, beam, paths)
    _check_credentials(args, export, paths)
    fractions = _splitter(args, layout, paths)
    mask_plan = masks.plan_masks(args, export)
    spec = record_spec(args, mask_plan)
    listing = _inputs(args, layout, mask_plan, fractions, export)
    output = _output(args, output_dir)
    append = _append(args, output_dir, output, spec, fractions, layout.image_dir)
    run_id = _run_id()
    started_at = time.time()
    processes = _writer_processes(args, runner, paths)
    progress = listing is not None and runner.local and files.is_local(output_dir)
    decided = _Decided(
        args, layout, output_dir, runner, fractions, mask_plan, spec, listing, run_id, processes
    )
    return RunPlan(
        run_id=run_id,
        started_at=started_at,
        beam_args=tuple(rest),
        beam_overrides=tuple(sorted(_beam_overrides(beam, args, runner).items())),
        runner=runner,
        layout=layout,
        output_dir=output_dir,
        overwrite=args.overwrite,
        dry_run=args.dry_run,
        listing=listing,
        output=output,
        writer_processes=processes,
        progress=progress,
        job=_job_settings(decided, append, started_at, progress),
        masks=mask_plan,
        prices=_prices(args),
    )


@dataclasses.dataclass(frozen=True)
class _Decided:
    """What the planning steps settled, which the job's settings are made of."""

    args: Any  # the frozen flags (options.frozen_args)
    layout: Layout
    output_dir: str
    runner: RunnerPlan
    fractions: SplitFractions | SplitLists | FolderSplits
    mask_plan: masks.MaskPlan
    spec: RecordSpec
    listing: LocalListing | None
    run_id: str
    processes: int

    @property
    def pool(self) -> str | None:
        """The writer pool's name, when the writers run in processes."""
        return self.run_id if self.processes > 1 else None

    @property
    def staging(self) -> str:
        return output_protocol.staging_dir(self.output_dir, self.run_id)

    @property
    def threads(self) -> int:
        chosen = self.args.threads_per_shard
        return chosen or (1 if self.processes > 1 else writer_pool.usable_cores())

    @property
    def shard_size_mb(self) -> float | None:
        if self.args.num_shards is None and self.args.shard_size_mb is None:
            return DEFAULT_SHARD_SIZE_MB
        return self.args.shard_size_mb


def _parse(parser: argparse.ArgumentParser, argv: list[str]):
    """segprep's flags, frozen, with Beam's left over; the annotation export and the folders."""
    one_line_errors(parser)
    try:
        parsed, rest = parser.parse_known_args(argv)
        args = frozen_args(parsed)
        export = masks.check_mask_flags(args)
        layout = _layout(args, export)
    except UsageError:
        _refuse_unknown_flags(argv, parser)  # a misspelt --image_dir explains "required"
        raise
    return args, rest, export, layout


def _check_where_it_runs(
    runner: RunnerPlan, layout: Layout, output_dir: str, beam: argparse.Namespace, paths
) -> None:
    if runner.dataflow:
        dataflow.check_dataflow(layout, output_dir, beam)
    elif not runner.local and any(files.is_local(path) for path in paths):
        raise UsageError(
            f"--runner {runner.name} runs elsewhere: every data folder must be on Cloud Storage"
        )


def _check_credentials(args, export: masks.Annotations | None, paths) -> None:
    """Fail fast without credentials where Cloud Storage will be read: class-name, colormap
    and annotation files are read while planning, dry run or not."""
    remote_data = [path for path in paths if not files.is_local(path)]
    remote_files = [
        path
        for path in (args.class_names, args.colormap, export.path if export else None)
        if path is not None and not files.is_local(path)
    ]
    if remote_files or (remote_data and not args.dry_run):
        credentials.check_credentials((remote_files or remote_data)[0])


def _splitter(args, layout: Layout, paths) -> SplitFractions | SplitLists | FolderSplits:
    try:
        fractions = official_splits.splitter(args, layout)
    except ValueError as error:
        raise usage_error(error) from None
    if isinstance(fractions, SplitLists) and any(not files.is_local(path) for path in paths):
        raise UsageError(
            "--split_file needs local data folders (a listed key missing on disk must be "
            "found before the job); use --split_by_folder or copy the data"
        )
    return fractions


def _append(args, output_dir: str, output, spec: RecordSpec, fractions, image_dir: str):
    if not args.append:
        return None
    from beam_pipeline.launch.append import plan_append

    return plan_append(args, output_dir, output, spec, fractions, image_dir)


def _job_settings(decided: _Decided, append, started_at: float, progress: bool) -> JobSettings:
    args, listing, mask_plan, spec = decided.args, decided.listing, decided.mask_plan, decided.spec
    staging = decided.staging
    duplicates = plan_duplicates(
        args, decided.fractions, staging, decided.pool, None if listing is None else listing.paired
    )
    planning = PlanningSettings(
        decided.fractions,
        num_shards=args.num_shards,
        shard_size_mb=decided.shard_size_mb,
        min_total_shards=max(MIN_SHARDS, SHARDS_PER_LOCAL_WORKER * decided.runner.workers),
        record_format=spec.record_format,
    )
    writing = ShardWriterSettings(
        staging_dir=staging,
        spec=spec,
        threads=decided.threads,
        pool=decided.pool,
        progress_dir=os.path.join(staging, "progress") if progress else None,
        annotation_fill=mask_plan.annotation_fill,
        mask_source=mask_plan.source,
        store_hashes=duplicates is not None,
    )
    commit = CommitSettings(
        decided.output_dir,
        decided.run_id,
        _parameters(decided, duplicates),
        spec,
        args.max_reject_fraction,
        started_at,
        release_lock=not decided.runner.local and not decided.runner.template,
        annotations=None if mask_plan.dataset is None else mask_plan.dataset.metadata(),
        append=append,
    )
    staged_images = ()
    if mask_plan.dataset is not None and not listing:
        # Pairs of a local listing carry their image records; the job lists anything else.
        staged_images = masks.staged_image_files(staging, mask_plan.dataset)
    return JobSettings(
        decided.layout,
        listing.staged if listing else None,
        planning,
        writing,
        commit,
        staged_images,
        duplicates,
    )


def _parameters(decided: _Decided, duplicates) -> dict[str, Any]:
    """The run's flags as metadata.json's `parameters` records them."""
    args, layout = decided.args, decided.layout
    return {
        "image_dir": layout.image_dir,
        "mask_dir": layout.mask_dir,
        "output_dir": decided.output_dir,
        **_split_parameters(decided.fractions),
        "unlabeled_images": "skip" if layout.skip_unlabeled else "reject",
        "ignore_files": list(layout.ignore_files),
        "image_suffix": layout.image_suffix,
        "mask_suffix": layout.mask_suffix,
        "num_shards": args.num_shards,
        "shard_size_mb": decided.shard_size_mb,
        "mask_format": decided.mask_plan.mask_format,
        "record_format": args.record_format,
        "mask_key": args.mask_key,
        **decided.mask_plan.parameters(args),
        "max_reject_fraction": args.max_reject_fraction,
        "threads_per_shard": decided.threads,
        "writer_processes": decided.processes,
        "runner": decided.runner.name,
        "duplicates": args.duplicates,
        "duplicate_distance": args.duplicate_distance,
        "leakage_check": [check.output_dir for check in duplicates.leakage] if duplicates else [],
    }


def record_spec(args: argparse.Namespace, mask_plan: masks.MaskPlan) -> RecordSpec:
    """The one spec of what this run's records are; a bad value is a usage error."""
    from transforms.record_spec import RecordSpec

    try:
        return RecordSpec.from_flags(args, mask_plan.classes, mask_plan.mask_format)
    except SettingError as error:
        raise usage_error(error) from None


def _prices(args: argparse.Namespace) -> tuple[tuple[str, float], ...]:
    return tuple((name, getattr(args, name)) for name in PRICE_FLAGS if getattr(args, name))


def _split_parameters(fractions: SplitFractions | SplitLists | FolderSplits) -> dict[str, Any]:
    if isinstance(fractions, SplitFractions):
        return {"train_size": fractions.train, "validation_size": fractions.validation}
    if isinstance(fractions, SplitLists):
        return {"split_files": dict(sorted(fractions.sources.items()))}
    return {"split_by_folder": True}


def _inputs(
    args: argparse.Namespace,
    layout: Layout,
    mask_plan: masks.MaskPlan,
    fractions: SplitFractions | SplitLists | FolderSplits,
    export: masks.Annotations | None,
) -> LocalListing | None:
    """Local inputs are listed and paired here, once; gs:// ones are only checked for files
    (the job lists them). A dry run reads what exists and needs nothing to exist."""
    flags = _flags(args, export)
    folders = [folder for folder in (layout.image_dir, layout.mask_dir) if folder]
    listing = None
    if all(files.is_local(folder) for folder in folders):
        if not args.dry_run or os.path.isdir(layout.image_dir):
            annotated = (
                ()
                if mask_plan.dataset is None
                else masks.annotated_entries(
                    mask_plan.dataset, layout.annotations, layout.image_dir
                )
            )
            lists = fractions.keys if isinstance(fractions, SplitLists) else {}
            if lists and args.append:
                from beam_pipeline.launch.append import keys_held

                held = keys_held(files.normalize_dir(args.output_dir), lists)
                lists = {key: split for key, split in lists.items() if key not in held}
            listing = list_local(
                layout,
                *flags,
                annotated=annotated,
                left_out=lambda key: fractions.split_of(key) is None,
                listed=fractions.listed,
                listed_keys=lists,
                check_missing=_missing_check(fractions, lists, args.max_reject_fraction),
            )
            preflight.check_listing(layout, listing, flags)
            if isinstance(fractions, FolderSplits) and listing.left_out:
                official_splits.refuse_unknown_folders(layout, listing.left_out, flags[0])
    elif not args.dry_run:
        preflight.check_remote_inputs(layout, flags)
    if args.mask_key is not None and not args.dry_run:
        preflight.check_mask_key(layout, listing, args.mask_key)
    return listing


def _missing_check(fractions, lists: dict[str, str], max_fraction: float):
    """--split_file: refuse a list naming no entry, or missing keys that alone exceed
    --max_reject_fraction, before the listing makes a reject of each missing key."""
    if not lists:
        return None

    def check(missing: dict[str, int], judged_at_most: int) -> None:
        official_splits.refuse_unusable_lists(fractions, lists, missing)
        total = sum(missing.values())
        official_splits.refuse_certain_rejection(fractions, total, judged_at_most, max_fraction)

    return check


def _output(args: argparse.Namespace, output_dir: str) -> output_protocol.OutputState | None:
    """The output folder as it is now; a gs:// dry run touches no bucket."""
    if not files.is_local(output_dir) and args.dry_run:
        return None
    if not files.is_local(output_dir) and not files.bucket_exists(output_dir):
        bucket = files.split_gcs(output_dir)[0]
        raise UsageError(
            f"--output_dir {output_dir}: there is no bucket {bucket} (or these credentials "
            "cannot see it): create it, or check the name"
        )
    output = output_protocol.inspect_output(output_dir)
    if args.append and output.pending_commit and output.holder is None and not args.dry_run:
        # A plain prepare finishes a cut-short commit under its lock; an append must do so
        # before it plans on the output's metadata.json.
        recovered = output_protocol.recover_locked(output_dir)
        if recovered is not None:
            print(f"segprep: {printable(recovered)}", file=sys.stderr, flush=True)
        output = output_protocol.inspect_output(output_dir)
    if not args.dry_run or output.ours or output.foreign:
        output_protocol.check_output(output, overwrite=args.overwrite, append=args.append)
    return output


def _run_id() -> str:
    """Sortable by start time, unique across hosts and processes."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def _flags(args: argparse.Namespace, export: masks.Annotations | None) -> tuple[str, str]:
    """The flags that named the image and the mask side, for messages."""
    image = "--data_dir" if args.data_dir is not None else "--image_dir"
    if export is not None:
        return image, export.flag
    return image, "--data_dir" if args.data_dir is not None else "--mask_dir"


def _beam_parser() -> argparse.ArgumentParser:
    """Beam's own parser of every pipeline option, through Beam's public extension hook."""
    from apache_beam.options.pipeline_options import PipelineOptions

    captured: list[argparse.ArgumentParser] = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=captured.append)
    return captured[0]


def _parse_beam_flags(rest: list[str], ours: argparse.ArgumentParser) -> argparse.Namespace:
    parser = _beam_parser()
    one_line_errors(parser)
    known, unknown = parser.parse_known_args(rest)
    flags = [arg for arg in unknown if arg.startswith("-")]
    if unknown:
        if not flags:
            raise UsageError(f"unexpected argument {unknown[0]!r}: every value follows its --flag")
        name = flags[0].split("=", 1)[0]
        options = _known_options(ours, parser)
        raise UsageError(f"unknown flag {name}{_suggestion(name, options)}")
    if getattr(known, "no_wait_until_finish", False):
        raise UsageError("use --no_wait (segprep's name for Beam's --no_wait_until_finish)")
    return known


def _refuse_unknown_flags(argv: list[str], ours: argparse.ArgumentParser) -> None:
    """Raise for the first flag neither segprep's nor Beam's parser knows."""
    options = _known_options(ours, _beam_parser())
    for arg in argv:
        name = arg.split("=", 1)[0]
        if name.startswith("-") and not _is_number(name) and name not in options:
            raise UsageError(f"unknown flag {name}{_suggestion(name, options)}")


def _known_options(*parsers: argparse.ArgumentParser) -> list[str]:
    return [o for parser in parsers for a in parser._actions for o in a.option_strings]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _refuse_output_inside_inputs(
    output_dir: str, layout: Layout, args: argparse.Namespace, export: masks.Annotations | None
) -> None:
    """Shards written inside an input folder would be listed as input by the next run."""

    def real(path: str) -> str:  # through links, where the folders are local
        return os.path.realpath(path) + "/" if files.is_local(path) else path

    image_flag, mask_flag = _flags(args, export)
    for folder, flag in ((layout.image_dir, image_flag), (layout.mask_dir, mask_flag)):
        if folder and real(output_dir).startswith(real(folder)):
            raise UsageError(
                f"--output_dir {output_dir} lies inside {flag} {folder}: the next run would "
                "read the shards as input; write the output outside the data folders"
            )


def _suggestion(name: str, options: list[str]) -> str:
    underscored = "--" + name.lstrip("-").replace("-", "_")
    if underscored in options:
        return f": did you mean {underscored}?"
    close = difflib.get_close_matches(underscored, [o for o in options if o.startswith("--")], 1)
    return f": did you mean {close[0]}?" if close else " (segprep prepare --help lists them)"


def _layout(args: argparse.Namespace, export: masks.Annotations | None) -> Layout:
    layout = _folders(args, export)
    for flag, suffix in (
        ("--image_suffix", args.image_suffix),
        ("--mask_suffix", args.mask_suffix),
    ):
        if suffix is not None and ("/" in suffix or not suffix.strip()):
            raise UsageError(f"{flag} {suffix!r}: a suffix of a file name, e.g. _leftImg8bit.png")
    if args.mask_suffix is not None and layout.annotations is not None:
        raise UsageError("--mask_suffix names mask files: these masks come from the annotations")
    if (
        args.image_suffix is not None
        and args.mask_suffix is not None
        and args.image_suffix.lower() == args.mask_suffix.lower()
    ):
        raise UsageError("--image_suffix and --mask_suffix are the same: a file would be both")
    return dataclasses.replace(
        layout,
        image_suffix=args.image_suffix,
        mask_suffix=args.mask_suffix,
        ignore_files=tuple(args.ignore_files or ()),
        skip_unlabeled=args.images_without_mask == "skip",
    )


def _folders(args: argparse.Namespace, export: masks.Annotations | None) -> Layout:
    if export is not None:
        if (args.data_dir is None) == (args.image_dir is None):
            raise UsageError(f"{export.flag} goes with --image_dir (or --data_dir), one of them")
        folder = files.normalize_dir(args.image_dir or args.data_dir)
        return Layout(folder, None, export.normalized)
    if args.data_dir is not None:
        if args.image_dir is not None or args.mask_dir is not None:
            raise UsageError("give --data_dir, or --image_dir and --mask_dir, not both")
        folder = files.normalize_dir(args.data_dir)
        return Layout(folder, folder)
    missing = [flag for flag in ("--image_dir", "--mask_dir") if getattr(args, flag[2:]) is None]
    if missing:
        raise UsageError(
            f"{' and '.join(missing)} required (or --data_dir for images and masks in one folder)"
        )
    layout = Layout(files.normalize_dir(args.image_dir), files.normalize_dir(args.mask_dir))
    if not layout.one_folder:
        for inner, outer, flag in (
            (layout.mask_dir, layout.image_dir, "--mask_dir"),
            (layout.image_dir, layout.mask_dir, "--image_dir"),
        ):
            if inner.startswith(outer):
                raise UsageError(
                    f"{flag} {inner} lies inside the other folder: pass two separate folders, "
                    "or one folder as --data_dir"
                )
    return layout


def _runner(beam: argparse.Namespace, args: argparse.Namespace) -> RunnerPlan:
    name = dataflow.runner_name(beam.runner or DEFAULT_RUNNER)
    on_dataflow = dataflow.is_dataflow(name)
    local = name in LOCAL_RUNNERS
    mode = beam.direct_running_mode or "in_memory"
    if local and mode == "multi_processing":
        raise UsageError(
            "--direct_running_mode multi_processing is not supported: Beam's worker processes "
            "outlive a killed launcher by up to half a minute, and they measured slower than "
            "segprep's own writer processes (--writer_processes); use in_memory (the default) "
            "or multi_threading"
        )
    if beam.direct_num_workers is not None and not 0 <= beam.direct_num_workers <= MAX_WORKERS:
        # Beam starts each worker whatever the cores: 1,000 made no progress in 100 s
        raise UsageError(
            f"--direct_num_workers must be from 0 to {MAX_WORKERS}, got {beam.direct_num_workers}"
        )
    in_process = local and mode == "in_memory"
    workers = 1 if in_process or not local else beam.direct_num_workers or os.cpu_count() or 1
    template = bool(beam.template_location)
    submit_only = on_dataflow and (template or args.dry_run or args.no_wait)
    return RunnerPlan(name, local, in_process, workers, on_dataflow, submit_only, template)


def _beam_overrides(
    beam: argparse.Namespace, args: argparse.Namespace, runner: RunnerPlan
) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if beam.runner is None:
        overrides["runner"] = DEFAULT_RUNNER
    if runner.dataflow:
        if beam.save_main_session is None:
            overrides["save_main_session"] = False  # segprep's code lives in installed modules
        if args.no_wait:
            overrides["no_wait_until_finish"] = True
        if args.dry_run:
            overrides["dry_run"] = True  # Beam's own dry run: translate, stage nothing
    return overrides


def _may_use_writer_pool(args: argparse.Namespace, paths) -> bool:
    """A first look, before the runner is known: only decides whether the writers' fork
    server starts early; _writer_processes decides whether the run uses it."""
    return (
        not args.dry_run
        and args.writer_processes != 1
        and writer_pool.usable_cores() > 1
        and all(files.is_local(path) for path in paths)
    )


def _writer_processes(args: argparse.Namespace, runner: RunnerPlan, paths) -> int:
    """Writer processes only for the in-process runner on local files.

    Remote runners run their own workers, Beam's multi_threading mode writes in its own
    threads, and gs:// paths are latency-bound (threads hide that) and need this process's
    credentials. A dry run resolves the same number as the real run (it prints the plan the
    real run executes); it only starts no pool.
    """
    if not runner.in_process or not all(files.is_local(p) for p in paths):
        return 1
    return args.writer_processes or writer_pool.usable_cores()
