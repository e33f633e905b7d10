"""Every key accounted for: no extra shard, rejects.jsonl as metadata.json counts it, no key
both stored and rejected or stored twice, and the output protocol's state."""

from __future__ import annotations

import collections
import contextlib
import os
from typing import Any

from beam_pipeline.commands.verify.state import Checked
from transforms import files, json_shape
from transforms.format.dataset_info import DatasetInfo, MetadataError
from transforms.format.naming import (
    INDEX_DIR,
    MANIFEST_FILE,
    METADATA_FILE,
    REJECTS_FILE,
    UNLABELED_FILE,
    looks_like_shard,
)
from transforms.limits import FILE_LIMITS

_BAD_LINES_SHOWN = 20  # lines of each problem kind named one by one; the rest are counted
_NOT_A_REJECT = "not a JSON object with key and reason"


class _LineProblems:
    """One kind of problem a line of `file` can have: the first _BAD_LINES_SHOWN lines named,
    the rest only counted, so a file of a million bad lines is a problem list of a few dozen
    lines and memory of one count."""

    def __init__(self, state: Checked, file: str, kind: str) -> None:
        self.state, self.file, self.kind = state, file, kind
        self.count = 0

    def add(self, number: int, detail: str) -> None:
        self.count += 1
        if self.count <= _BAD_LINES_SHOWN:
            self.state.problem(f"{self.file} line {number}: {detail}")

    def close(self) -> None:
        if self.count > _BAD_LINES_SHOWN:
            more = self.count - _BAD_LINES_SHOWN
            self.state.problem(f"{self.file}: {more:,} more lines: {self.kind}")


def check_extra_shards(state: Checked) -> None:
    for name in files.listdir(state.base):
        if looks_like_shard(name) and name not in state.listed:
            state.problem(f"{name}: extra shard, present but not in metadata.json")


def check_rejects(state: Checked) -> None:
    rejected = state.metadata.get("num_rejected")
    if not isinstance(rejected, dict) or not isinstance(rejected.get("total"), int):
        state.problem("metadata.json has no num_rejected total")
        return
    path = state.path(REJECTS_FILE)
    if not files.exists(path):
        state.problem(f"{REJECTS_FILE}: missing (metadata.json counts {rejected['total']})")
        return
    reasons: collections.Counter[str] = collections.Counter()
    try:
        count = _check_reject_lines(state, path, reasons)
    except (OSError, files.LineTooLongError) as error:
        state.problem(f"{REJECTS_FILE}: not readable: {error}")
        return
    state.report.rejects = count
    if count != rejected["total"]:
        state.problem(
            f"{REJECTS_FILE}: {count} lines, metadata.json num_rejected total is "
            f"{rejected['total']}"
        )
    state.rejects_read = True
    by_reason = rejected.get("by_reason")
    all_parsed = count == sum(reasons.values())
    if all_parsed and isinstance(by_reason, dict) and dict(reasons) != by_reason:
        state.problem(
            f"{REJECTS_FILE}: reasons {dict(sorted(reasons.items()))}, metadata.json says "
            f"{by_reason}"
        )


def _check_reject_lines(state: Checked, path: str, reasons: collections.Counter[str]) -> int:
    """Count rejects.jsonl's lines and their reasons, streamed (memory: one line, whatever
    the file's size), naming the first bad lines; the number of lines."""
    count = 0
    malformed = _LineProblems(state, REJECTS_FILE, _NOT_A_REJECT)
    stored = _LineProblems(state, REJECTS_FILE, "key also in a shard")
    unordered = _LineProblems(state, REJECTS_FILE, "key out of key order")
    surrogate = _LineProblems(state, REJECTS_FILE, "a lone UTF-16 surrogate, not UTF-8 text")
    # A run writes its rejects sorted by key, so a key rejected twice is two adjacent lines
    # and an edited key breaks the order: both seen with one key held, whatever the size.
    previous: str | None = None
    twice: list[str] = []  # the first 10 keys rejected twice, named; the rest counted
    twice_count = 0
    with files.opened(path) as (handle, size):
        if size > FILE_LIMITS.rejects_bytes:
            raise files.TooLargeError(
                f"{size:,} bytes, more than the {FILE_LIMITS.rejects_bytes:,} allowed"
            )
        lines = files.bounded_lines(handle, FILE_LIMITS.jsonl_line_bytes, REJECTS_FILE)
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            count += 1
            source = f"{REJECTS_FILE} line {number}"
            try:
                entry = json_shape.loads(line, source)
                key, reason = entry["key"], entry["reason"]
                if not (isinstance(key, str) and isinstance(reason, str)):
                    raise TypeError("key or reason not a string")
                reasons[reason] += 1
            except json_shape.LoneSurrogateError as error:
                surrogate.add(number, str(error).removeprefix(f"{source}: "))
                continue
            except (ValueError, KeyError, TypeError):
                malformed.add(number, _NOT_A_REJECT)
                continue
            # key_exists: an append left the key's earlier record as it was, by design.
            if key in state.keys and reason != "key_exists":
                stored.add(number, f"key {key} is also in a shard")
            elif key in state.keys:
                state.kept_rejects += 1
            if key == previous:
                twice_count += 1
                if len(twice) < 10:
                    twice.append(key)
            elif previous is not None and key < previous:
                unordered.add(number, f"key {key} is out of key order")
            previous = key
    if twice:  # a run rejects a key once: an edited line names another's key
        more = f" and {twice_count - 10} more" if twice_count > 10 else ""
        state.problem(f"{REJECTS_FILE}: keys rejected more than once: {', '.join(twice)}{more}")
    for kind in (malformed, surrogate, stored, unordered):
        kind.close()
    return count


def check_accounting(state: Checked) -> None:
    duplicates = sorted(key for key, count in state.keys.items() if count > 1)
    if duplicates:
        shown = ", ".join(duplicates[:10])
        more = f" and {len(duplicates) - 10} more" if len(duplicates) > 10 else ""
        state.problem(f"keys stored more than once (across all shards): {shown}{more}")
    discovered = state.metadata.get("num_discovered")
    if discovered is None or not (state.records_complete and state.rejects_read):
        return
    accepted = sum(state.report.examples.values())
    unlabeled = _unlabeled(state)
    if unlabeled is None:
        return
    # A key_exists reject's key is also in a shard: discovered counts it once. An output
    # appended to before segprep counted it so counted it twice; that sum is taken too.
    kept = state.kept_rejects
    counted = accepted + state.report.rejects + unlabeled
    if discovered not in (counted - kept, counted):
        state.problem(
            f"metadata.json num_discovered {discovered} but {accepted} records + "
            f"{state.report.rejects} rejects"
            + (f" + {unlabeled} unlabeled" if unlabeled else "")
            + (f" - {kept} key_exists rejects of stored keys" if kept else "")
        )


def _unlabeled(state: Checked) -> int | None:
    """Lines of unlabeled.jsonl (--unlabeled_images skip), checked against metadata.json and
    the shards; None after a problem."""
    section = state.metadata.get("num_unlabeled") or {}
    if not isinstance(section, dict):
        state.problem(f"metadata.json: num_unlabeled {str(section)[:80]!r} is not a JSON object")
        return None
    counted = section.get("total", 0)
    path = state.path(UNLABELED_FILE)
    if not counted and not files.exists(path):
        return 0
    try:
        data = files.read_bounded(path, FILE_LIMITS.rejects_bytes)
    except OSError as error:
        state.problem(f"{UNLABELED_FILE}: not readable ({error}); metadata.json counts {counted}")
        return None
    lines = [
        line
        for line in (raw.decode("utf-8", "replace") for raw in data.splitlines())
        if line.strip()
    ]
    stored = _LineProblems(state, UNLABELED_FILE, "key also in a shard")
    for number, line in enumerate(lines, start=1):
        try:
            key = json_shape.loads(line, UNLABELED_FILE)["key"]
            if not isinstance(key, str):
                raise TypeError("key not a string")
        except (ValueError, KeyError, TypeError):
            stored.close()
            state.problem(f"{UNLABELED_FILE} line {number}: not a JSON object with a key")
            return None
        if key in state.keys:
            stored.add(number, f"key {key} is also in a shard")
    stored.close()
    if len(lines) != counted:
        state.problem(f"{UNLABELED_FILE}: {len(lines)} lines, metadata.json counts {counted}")
        return None
    return counted


def protocol_problems(base: str, metadata: dict[str, Any]) -> list[str]:
    """The output protocol's state (runtime/output_protocol.py): no run writing, the last
    commit finished, and the manifest naming exactly the published files."""
    from beam_pipeline.runtime import output_protocol

    names = set(files.listdir(base))
    published = names - {INDEX_DIR}
    if INDEX_DIR in names and files.isdir(f"{base}/{INDEX_DIR}"):
        published |= {f"{INDEX_DIR}/{name}" for name in files.listdir(f"{base}/{INDEX_DIR}")}
    manifest = None
    path = f"{base}/{MANIFEST_FILE}"
    if files.exists(path):
        try:
            manifest = json_shape.loads(files.read_bounded(path, FILE_LIMITS.metadata_bytes), path)
        except json_shape.JsonShapeError as error:
            return [str(error)]
        except ValueError:
            return [f"{MANIFEST_FILE} is not valid JSON"]
        except OSError as error:
            return [f"{MANIFEST_FILE}: not readable: {error}"]
        if not isinstance(manifest, dict):
            return [f"{MANIFEST_FILE} is not a JSON object: damaged or tampered"]
    holder = output_protocol.current_holder(files.normalize_dir(base))
    listed = {REJECTS_FILE, METADATA_FILE}
    if metadata.get("num_unlabeled"):
        listed.add(UNLABELED_FILE)
    with contextlib.suppress(MetadataError):
        listed |= DatasetInfo.from_json(metadata).listed_files()
    ours = {name for name in published if output_protocol.is_output_name(name.split("/")[0])}
    problems = _links(base, {*ours, INDEX_DIR, MANIFEST_FILE})
    return problems + output_protocol.protocol_problems(
        published, manifest, holder is not None, listed
    )


def _links(base: str, names: set[str]) -> list[str]:
    """segprep writes only regular files and folders: a link at one of its names was put
    there by someone else, and what verify read through it is not what segprep wrote."""
    if not files.is_local(base):
        return []
    return [
        f"{name}: a link (to {os.readlink(os.path.join(base, name))}), not a regular file "
        "segprep wrote"
        for name in sorted(names)
        if os.path.islink(os.path.join(base, name))
    ]
