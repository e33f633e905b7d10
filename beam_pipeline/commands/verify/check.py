"""`segprep verify DIR` as a whole: load metadata.json, run every check, print the report."""

from __future__ import annotations

from beam_pipeline.commands.shard_records import record_format
from beam_pipeline.commands.verify import accounting, classes, duplicates, indexes, records
from beam_pipeline.commands.verify.report import VerifyReport
from beam_pipeline.commands.verify.state import Checked
from beam_pipeline.errors import UsageError, printable
from transforms import files
from transforms.format.dataset_info import IncompleteOutputError, MetadataError, read_metadata_json
from transforms.format.naming import LOCK_FILE, MANIFEST_FILE, is_split_name
from transforms.limits import FILE_LIMITS


def verify_output(directory: str) -> list[str]:
    """Problems found in a segprep output directory, one line each; empty when it is sound.

    Raises UsageError when `directory` is missing or has no metadata.json (not an output).
    """
    return check_output(directory).problems


def check_output(directory: str) -> VerifyReport:
    """The full report behind verify_output, with counts for the OK summary.

    Verify reads without the lock, so a run that holds it (an append, `index`, a prepare
    --overwrite) or that commits while verify reads would have its half-moved files
    reported as damage ("extra shard", rejects.jsonl counts, dataset_info.json sizes): 30
    false problems for an append caught in its commit. Such a report is one line instead,
    saying which run wrote and to verify again."""
    base = directory.rstrip("/") or "/"
    if not files.isdir(base):
        raise UsageError(f"{directory} is not a directory: pass a `segprep prepare` output")
    before = _writer_state(base)
    if before[0] is not None:
        return _written_meanwhile(directory, before[0])
    report = _check(base, directory)
    after = _writer_state(base)
    if after != before:
        return _written_meanwhile(directory, after[0])
    return report


def _writer_state(base: str) -> tuple[str | None, bytes | None]:
    """Who holds the lock now (None: no run) and the manifest's bytes, which every commit
    rewrites: a run that started and committed while verify read changes them.

    Only a local lock is asked (flock: held only by a live process). A gs:// lock can stay
    after its run is gone (a remote job's, or a launcher's on another host); verify still
    checks such an output and names the lock among its problems, as before."""
    from beam_pipeline.runtime import output_protocol

    holder = None
    if files.is_local(base):
        holder = output_protocol.current_holder(files.normalize_dir(base))
    try:
        manifest = files.read_bounded(f"{base}/{MANIFEST_FILE}", FILE_LIMITS.metadata_bytes)
    except (OSError, ValueError):  # none (an older segprep), or unreadable: checked later
        manifest = None
    return (holder.describe() if holder is not None else None), manifest


def _written_meanwhile(directory: str, holder: str | None) -> VerifyReport:
    report = VerifyReport(directory)
    if holder is not None:
        report.problems.append(
            f"{LOCK_FILE}: {holder} is writing into this folder right now: "
            "nothing was checked; run segprep verify again once it has ended"
        )
    else:
        report.problems.append(
            f"{MANIFEST_FILE}: a run committed into this folder while verify read it: "
            "what was read mixes two outputs; run segprep verify again"
        )
    return report


def _check(base: str, directory: str) -> VerifyReport:
    report = VerifyReport(directory)
    try:
        metadata = read_metadata_json(base)
    except IncompleteOutputError as error:
        raise UsageError(str(error)) from None
    except MetadataError as error:
        report.problems.append(f"metadata.json: {error}")
        return report
    if not isinstance(metadata, dict) or not isinstance(metadata.get("splits"), dict):
        report.problems.append("metadata.json has no `splits` table")
        return report
    named = [name for name in metadata["splits"] if not is_split_name(name)]
    if named:  # every file name below is made from it, so nothing else is checked
        report.problems.append(f"metadata.json: split {named[0]!r} is not a split name")
        return report
    try:
        record_format(metadata)
    except (ValueError, TypeError) as error:  # TypeError: not a string
        report.problems.append(f"metadata.json: record_format: {error}")
        return report
    state = Checked(base, metadata, report)
    records.check_splits(state)
    classes.check_class_stats(state)
    indexes.check_index(state)
    accounting.check_extra_shards(state)
    accounting.check_rejects(state)
    accounting.check_accounting(state)
    duplicates.check_duplicates(state)
    report.problems.extend(accounting.protocol_problems(base, metadata))
    return report


def run_verify(directory: str, *, repair: bool = False) -> int:
    """CLI body: the OK line and exit 0, or one line per problem and exit 1. `repair` first
    finishes a commit cut short (runtime/output_protocol.py repair)."""
    if repair:
        from beam_pipeline.runtime import output_protocol

        for line in output_protocol.repair(files.normalize_dir(directory)):
            print(f"repaired: {printable(line)}")
    report = check_output(directory)
    if report.ok:
        print(printable(report.summary()))
        return 0
    for problem in report.problems:
        print(printable(problem))
    print(f"FAILED {printable(directory)}: {len(report.problems)} problems")
    return 1
