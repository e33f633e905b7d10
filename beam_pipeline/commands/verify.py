"""`segprep verify DIR`: re-read a published output and check it against its metadata.json.

A finished job writes metadata.json last, but copies, syncs and partial deletes happen
afterwards; this reads every shard the way a trainer would, so a broken dataset is found
before a training run trips over it. No Beam: plain TensorFlow (tf.io.gfile, so local and
gs:// paths both work) and numpy.

A class-id output (metadata.json `classes`) has each mask decoded at the stored bit depth,
every value checked to be a class id or the ignore index, and the per-split statistics
counted again from the masks read (a plain bincount) and compared with metadata.json.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import re
from typing import Any

import numpy as np
import tensorflow as tf

from beam_pipeline.commands.verify_duplicates import duplicate_files, duplicate_problems
from beam_pipeline.errors import UsageError
from shard_reader.decoding import FEATURE_SPEC
from shard_reader.metadata import IncompleteOutputError, load_metadata
from transforms.class_stats import ClassStats
from transforms.format import features, record_index, tfds_info
from transforms.format.dataset_info import ClassesInfo, DatasetInfo, FileRef, MetadataError
from transforms.format.naming import (
    INDEX_DIR,
    MANIFEST_FILE,
    METADATA_FILE,
    REJECTS_FILE,
    SHARD_SUFFIX,
    parse_shard_name,
)

# A stored JPEG mask pixel this close to the threshold could land on either side with a
# different decoder or quality setting: the mask no longer thresholds cleanly.
JPEG_MASK_MARGIN = 64
_CHUNK = 8 << 20
_SHOWN = 8  # values or differences listed in one problem line
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclasses.dataclass
class VerifyReport:
    """What was checked and what failed; `problems` empty means the output is sound."""

    directory: str
    problems: list[str] = dataclasses.field(default_factory=list)
    examples: dict[str, int] = dataclasses.field(default_factory=dict)  # split -> records read
    shards: int = 0
    rejects: int = 0
    indexed: bool = False  # metadata.json lists a record index, and it was checked
    classes: bool = False  # class ids and their statistics were checked

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        splits = ", ".join(f"{split} {count}" for split, count in self.examples.items())
        classes = ", class ids, class statistics" if self.classes else ""
        index = ", record index" if self.indexed else ""
        return (
            f"OK {self.directory}: {sum(self.examples.values())} examples ({splits}) in "
            f"{self.shards} shards, {self.rejects} rejects; CRCs, sha256, sizes, "
            f"images and masks{classes}{index} checked"
        )


def verify_output(directory: str) -> list[str]:
    """Problems found in a segprep output directory, one line each; empty when it is sound.

    Raises UsageError when `directory` is missing or has no metadata.json (not an output).
    """
    return check_output(directory).problems


def check_output(directory: str) -> VerifyReport:
    """The full report behind verify_output, with counts for the OK summary."""
    base = directory.rstrip("/") or "/"
    if not tf.io.gfile.isdir(base):
        raise UsageError(f"{directory} is not a directory: pass a `segprep prepare` output")
    report = VerifyReport(directory)
    try:
        metadata = load_metadata(base)
    except IncompleteOutputError as error:
        raise UsageError(str(error)) from None
    except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
        report.problems.append(f"metadata.json is not valid JSON: {error}")
        return report
    if not isinstance(metadata, dict) or not isinstance(metadata.get("splits"), dict):
        report.problems.append("metadata.json has no `splits` table")
        return report
    checker = _Checker(base, metadata, report)
    checker.check_splits()
    checker.check_class_stats()
    checker.check_index()
    checker.check_extra_shards()
    checker.check_rejects()
    checker.check_accounting()
    report.problems.extend(duplicate_problems(base, metadata))
    report.problems.extend(_protocol_problems(base, metadata))
    return report


def _protocol_problems(base: str, metadata: dict[str, Any]) -> list[str]:
    """The output protocol's state (runtime/output_protocol.py): no run writing, the last
    commit finished, and the manifest naming exactly the published files."""
    from beam_pipeline.runtime import output_protocol, storage

    names = {name.rstrip("/") for name in tf.io.gfile.listdir(base)}
    published = names - {INDEX_DIR}
    if INDEX_DIR in names:
        published |= {f"{INDEX_DIR}/{name}" for name in tf.io.gfile.listdir(f"{base}/{INDEX_DIR}")}
    manifest = None
    if tf.io.gfile.exists(f"{base}/{MANIFEST_FILE}"):
        with tf.io.gfile.GFile(f"{base}/{MANIFEST_FILE}", "rb") as handle:
            try:
                manifest = json.loads(handle.read())
            except ValueError:
                return [f"{MANIFEST_FILE} is not valid JSON"]
    holder = output_protocol.current_holder(storage.normalize_dir(base))
    listed = {REJECTS_FILE, METADATA_FILE}
    with contextlib.suppress(MetadataError):
        listed |= DatasetInfo.from_json(metadata).listed_files()
    return output_protocol.protocol_problems(published, manifest, holder is not None, listed)


def run_verify(directory: str) -> int:
    """CLI body: the OK line and exit 0, or one line per problem and exit 1."""
    report = check_output(directory)
    if report.ok:
        print(report.summary())
        return 0
    for problem in report.problems:
        print(problem)
    print(f"FAILED {directory}: {len(report.problems)} problems")
    return 1


def _short(error: Exception) -> str:
    """The first line of a TensorFlow error without its op and function-node decorations."""
    message = getattr(error, "message", None) or str(error)
    message = re.sub(r"\{\{function_node [^}]*\}\}|\[Op:[^\]]*\].*$", "", message, flags=re.S)
    lines = message.strip().splitlines()
    return f"{type(error).__name__}: {lines[0].strip()}" if lines else type(error).__name__


class _Checker:
    def __init__(self, base: str, metadata: dict[str, Any], report: VerifyReport) -> None:
        self.base = base
        self.metadata = metadata
        self.report = report
        self.mask_format = metadata.get("mask_format")
        self.listed: set[str] = set()
        self.keys: collections.Counter[str] = collections.Counter()
        self.records_complete = True  # False once a shard could not be read to its end
        # shard file -> (key, serialized length) of each record, for shards read to the end
        self.records: dict[str, list[tuple[str | None, int]]] = {}
        self.rejects_read = False
        self.has_classes = metadata.get("classes") is not None
        self.classes: ClassesInfo | None = None  # None with has_classes: a broken section
        self.class_counts: dict[str, _ClassCount] = {}  # split -> recounted statistics
        if self.has_classes:
            try:
                self.classes = ClassesInfo.from_json(metadata["classes"])
            except MetadataError as error:
                self.problem(f"{error}: class ids and statistics not checked")

    def problem(self, line: str) -> None:
        self.report.problems.append(line)

    def check_splits(self) -> None:
        if self.mask_format not in features.MASK_FORMATS:
            self.problem(
                f"metadata.json: mask_format {self.mask_format!r} is not one of "
                f"{list(features.MASK_FORMATS)}"
            )
        if self.has_classes and self.mask_format != "png":
            self.problem(f"metadata.json: class-id masks with mask_format {self.mask_format!r}")
        if self.classes is not None:
            self.report.classes = True
            self.class_counts = {
                split: _ClassCount(self.classes) for split in self.metadata["splits"]
            }
        for split, info in self.metadata["splits"].items():
            self._check_split(split, info)

    def _check_split(self, split: str, info: Any) -> None:
        shards = info.get("shards") if isinstance(info, dict) else None
        if not isinstance(shards, list):
            self.problem(f"metadata.json: split {split!r} has no shards list")
            self.records_complete = False
            self._uncounted(split)
            return
        if info.get("num_shards") != len(shards):
            self.problem(
                f"metadata.json: split {split!r} num_shards {info.get('num_shards')} "
                f"but {len(shards)} shards listed"
            )
        listed_total = sum(
            shard.get("num_examples", 0) for shard in shards if isinstance(shard, dict)
        )
        if info.get("num_examples") != listed_total:
            self.problem(
                f"metadata.json: split {split!r} num_examples {info.get('num_examples')} "
                f"but its shards list {listed_total}"
            )
        shape = info.get("image_shape")
        image_shape = tuple(shape) if shape else None
        read = 0
        for index, shard in enumerate(shards):
            name = shard.get("file") if isinstance(shard, dict) else None
            if not isinstance(name, str):
                self.problem(f"metadata.json: split {split!r} shard {index} has no file name")
                self.records_complete = False
                self._uncounted(split)
                continue
            self.listed.add(name)
            if parse_shard_name(name) != (split, index, len(shards)):
                self.problem(
                    f"{name}: name does not match its place in metadata.json "
                    f"(split {split!r}, shard {index} of {len(shards)})"
                )
            count = self._check_shard(name, shard, image_shape, split)
            read += count or 0
            self.report.shards += 1
        self.report.examples[split] = read

    def _uncounted(self, split: str) -> None:
        """A record of `split` was not counted: its statistics cannot be compared (the
        reason is already a problem line of its own)."""
        if split in self.class_counts:
            self.class_counts[split].complete = False

    def _check_shard(
        self, name: str, entry: dict[str, Any], image_shape: tuple[int, ...] | None, split: str
    ) -> int | None:
        """Records read from one shard, or None when it is missing or unreadable."""
        path = f"{self.base}/{name}"
        if not tf.io.gfile.exists(path):
            self.problem(f"{name}: missing (listed in metadata.json)")
            self.records_complete = False
            self._uncounted(split)
            return None
        size = tf.io.gfile.stat(path).length
        if size != entry.get("bytes"):
            self.problem(f"{name}: {size} bytes, metadata.json says {entry.get('bytes')}")
        digest = file_sha256(path)
        if digest != entry.get("sha256"):
            self.problem(f"{name}: sha256 {digest}, metadata.json says {entry.get('sha256')}")
        count = 0
        records = []
        try:
            # The TFRecord reader checks the length and data CRC of every record.
            for record in tf.data.TFRecordDataset(path):
                serialized = record.numpy()
                key = self._check_record(serialized, f"{name} record {count}", image_shape, split)
                records.append((key, len(serialized)))
                count += 1
        except tf.errors.OpError as error:
            self.problem(
                f"{name}: record {count} fails the TFRecord check (bad CRC or framing): "
                f"{_short(error)}"
            )
            self.records_complete = False
            self._uncounted(split)
            return count
        if count != entry.get("num_examples"):
            self.problem(f"{name}: {count} records, metadata.json says {entry.get('num_examples')}")
        self.records[name] = records
        return count

    def _check_record(
        self, serialized: bytes, where: str, image_shape: tuple[int, ...] | None, split: str
    ) -> str | None:
        """The record's key, after checking its features; None when it does not parse."""
        try:
            parsed = tf.io.parse_single_example(serialized, FEATURE_SPEC)
        except tf.errors.OpError as error:
            self.problem(f"{where}: not a segprep example: {_short(error)}")
            self._uncounted(split)
            return None
        key = parsed[features.KEY].numpy().decode("utf-8", "replace")
        self.keys[key] += 1
        where = f"{where} (key {key})"
        height = int(parsed[features.HEIGHT])
        width = int(parsed[features.WIDTH])
        if image_shape is not None and (height, width) != image_shape:
            self.problem(
                f"{where}: {height}x{width} (HxW) but metadata.json image_shape is "
                f"{list(image_shape)}"
            )
        try:
            image = tf.io.decode_jpeg(parsed[features.IMAGE]).shape
        except tf.errors.OpError as error:
            self.problem(f"{where}: image does not decode as JPEG: {_short(error)}")
        else:
            if tuple(image) != (height, width, 3):
                self.problem(f"{where}: image is {tuple(image)}, expected ({height}, {width}, 3)")
        if self.has_classes:
            if not self._check_class_mask(
                parsed[features.MASK].numpy(), where, height, width, split
            ):
                self._uncounted(split)
        else:
            self._check_mask(parsed[features.MASK], where, height, width)
        return key

    def _check_class_mask(
        self, data: bytes, where: str, height: int, width: int, split: str
    ) -> bool:
        """Check one class-id mask and count it into its split; False when it was not counted.

        The bit depth comes from the PNG header: decoding a 16-bit PNG as 8 bits (or the
        reverse) silently rescales every id, which is the very damage to look for.
        """
        if len(data) < 26 or not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
            self.problem(f"{where}: class mask is not a PNG")
            return False
        depth, colour_type = data[24], data[25]
        classes = self.classes
        if classes is not None and (depth, colour_type) != (classes.png_bit_depth, 0):
            self.problem(
                f"{where}: class mask is a {depth}-bit PNG of colour type {colour_type}, "
                f"metadata.json says {classes.png_bit_depth}-bit grey (colour type 0)"
            )
            return False
        try:
            dtype = tf.uint16 if depth == 16 else tf.uint8
            mask = tf.io.decode_png(data, dtype=dtype).numpy()
        except tf.errors.OpError as error:
            self.problem(f"{where}: mask does not decode as png: {_short(error)}")
            return False
        if mask.shape != (height, width, 1):
            self.problem(f"{where}: mask is {mask.shape}, expected ({height}, {width}, 1)")
            return False
        if classes is None:
            return False  # the classes section is broken (reported): nothing to check against
        counts = np.bincount(mask.ravel(), minlength=classes.num_classes)
        bad = counts.copy()
        bad[: classes.num_classes] = 0
        if classes.ignore_index < len(bad):
            bad[classes.ignore_index] = 0
        if bad.any():
            values = np.flatnonzero(bad)
            shown = ", ".join(str(value) for value in values[:_SHOWN].tolist())
            more = "" if len(values) <= _SHOWN else f", ... ({len(values)} distinct)"
            self.problem(
                f"{where}: {int(bad.sum())} mask pixels hold {{{shown}{more}}}: neither class "
                f"ids (0-{classes.num_classes - 1}) nor the ignore index {classes.ignore_index}"
            )
            return False
        self.class_counts[split].add(counts)
        return True

    def check_class_stats(self) -> None:
        """metadata.json's per-split class statistics against the counts from the masks."""
        if self.classes is None:
            return
        recorded = self.classes.stats
        for split, counted in self.class_counts.items():
            if split not in recorded:
                self.problem(f"metadata.json: classes has no statistics for split {split!r}")
            elif counted.complete:
                differences = _stat_differences(recorded[split], counted.stats())
                if differences:
                    shown = "; ".join(differences[:_SHOWN])
                    more = (
                        "" if len(differences) <= _SHOWN else f"; ... ({len(differences)} in all)"
                    )
                    self.problem(
                        f"metadata.json: class statistics of split {split!r} differ from its "
                        f"masks: {shown}{more}"
                    )
        for split in sorted(set(recorded) - set(self.class_counts)):
            self.problem(f"metadata.json: classes has statistics for split {split!r}, not a split")

    def _check_mask(self, encoded: tf.Tensor, where: str, height: int, width: int) -> None:
        try:
            if self.mask_format == "png":
                mask = tf.io.decode_png(encoded).numpy()
            elif self.mask_format == "jpeg":
                mask = tf.io.decode_jpeg(encoded).numpy()
            else:
                mask = tf.io.decode_image(encoded, expand_animations=False).numpy()
        except tf.errors.OpError as error:
            self.problem(f"{where}: mask does not decode as {self.mask_format}: {_short(error)}")
            return
        if mask.shape != (height, width, 1):
            self.problem(f"{where}: mask is {mask.shape}, expected ({height}, {width}, 1)")
            return
        if self.mask_format == "png":
            unclean = int(np.count_nonzero((mask != 0) & (mask != features.MASK_FOREGROUND)))
            if unclean:
                self.problem(f"{where}: {unclean} mask pixels are neither 0 nor 255")
            return
        low = features.MASK_THRESHOLD - JPEG_MASK_MARGIN
        high = features.MASK_THRESHOLD + JPEG_MASK_MARGIN
        ambiguous = int(np.count_nonzero((mask >= low) & (mask < high)))
        if ambiguous:
            self.problem(
                f"{where}: {ambiguous} mask pixels in {low}..{high - 1}, too close to the "
                f"threshold {features.MASK_THRESHOLD} to be clean 0/255"
            )

    def check_index(self) -> None:
        """The record index and TFDS files metadata.json lists against the shards as read."""
        listed = _lists_index(self.metadata)
        if not listed:
            return  # written before the index existed: `segprep index` adds it
        try:
            info = DatasetInfo.from_json(self.metadata)
        except MetadataError as error:
            self.problem(f"record index not checked: metadata.json: {error}")
            return
        self.report.indexed = True
        for split in info.splits.values():
            if not split.has_index:
                self.problem(
                    f"metadata.json: split {split.name!r} lacks part of its record index: "
                    "run `segprep index` to rebuild it"
                )
            expected_rows: list[record_index.KeyRow] | None = []
            for number, shard in enumerate(split.shards):
                records = self.records.get(shard.file)
                if records is None or expected_rows is None:
                    expected_rows = None  # the shard was not read to its end
                else:
                    expected_rows.extend(
                        record_index.KeyRow(key or "", number, position)
                        for position, (key, _) in enumerate(records)
                    )
                if shard.index is not None:
                    self._check_shard_index(shard.file, shard.index, records)
            if split.key_table is not None:
                self._check_key_table(split.key_table, expected_rows)
        expected = tfds_info.tfds_files(info)
        for ref in info.tfds_files:
            data = self._listed_file(ref)
            if data is not None and data != expected[ref.file]:
                self.problem(f"{ref.file}: does not describe the splits in metadata.json")
        self._check_extra_index_files(listed)

    def _listed_file(self, ref: FileRef) -> bytes | None:
        """The file's bytes when it exists with the size and sha256 metadata.json gives."""
        path = f"{self.base}/{ref.file}"
        if not tf.io.gfile.exists(path):
            self.problem(f"{ref.file}: missing (listed in metadata.json)")
            return None
        with tf.io.gfile.GFile(path, "rb") as handle:
            data = handle.read()
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != ref.bytes or digest != ref.sha256:
            self.problem(
                f"{ref.file}: {len(data)} bytes, sha256 {digest}; metadata.json says "
                f"{ref.bytes} bytes, sha256 {ref.sha256}"
            )
        return data

    def _check_shard_index(
        self, shard: str, ref: FileRef, records: list[tuple[str | None, int]] | None
    ) -> None:
        data = self._listed_file(ref)
        if data is None or records is None:
            return
        try:
            frames = record_index.parse_index(data)
        except record_index.IndexFormatError as error:
            self.problem(f"{ref.file}: {error}")
            return
        actual = record_index.frame_offsets(length for _, length in records)
        if frames != actual:
            first = next(
                (n for n, (a, b) in enumerate(zip(frames, actual, strict=False)) if a != b),
                min(len(frames), len(actual)),
            )
            self.problem(
                f"{ref.file}: offsets and lengths do not match {shard} from record {first} "
                f"({len(frames)} entries, {len(actual)} records)"
            )

    def _check_key_table(self, ref: FileRef, expected: list[record_index.KeyRow] | None) -> None:
        data = self._listed_file(ref)
        if data is None or expected is None:
            return
        try:
            rows = record_index.parse_key_table(data)
        except (record_index.IndexFormatError, UnicodeDecodeError) as error:
            self.problem(f"{ref.file}: {error}")
            return
        for line, (row, want) in enumerate(zip(rows, expected, strict=False), start=1):
            if row != want:
                self.problem(
                    f"{ref.file} line {line}: key {row.key!r} at shard {row.shard} record "
                    f"{row.record}, but the shards hold {want.key!r} at shard {want.shard} "
                    f"record {want.record}"
                )
                return
        if len(rows) != len(expected):
            self.problem(f"{ref.file}: {len(rows)} keys, the shards hold {len(expected)} records")

    def _check_extra_index_files(self, listed: set[str]) -> None:
        folder = f"{self.base}/{INDEX_DIR}"
        if not tf.io.gfile.isdir(folder):
            return
        for name in sorted(tf.io.gfile.listdir(folder)):
            relative = f"{INDEX_DIR}/{name.rstrip('/')}"
            if relative not in listed:
                self.problem(f"{relative}: extra file, present but not in metadata.json")

    def check_extra_shards(self) -> None:
        for name in sorted(tf.io.gfile.listdir(self.base)):
            name = name.rstrip("/")
            is_shard = parse_shard_name(name) is not None or name.endswith(SHARD_SUFFIX)
            if is_shard and name not in self.listed:
                self.problem(f"{name}: extra shard, present but not in metadata.json")

    def check_rejects(self) -> None:
        rejected = self.metadata.get("num_rejected")
        if not isinstance(rejected, dict) or not isinstance(rejected.get("total"), int):
            self.problem("metadata.json has no num_rejected total")
            return
        path = f"{self.base}/{REJECTS_FILE}"
        if not tf.io.gfile.exists(path):
            self.problem(f"{REJECTS_FILE}: missing (metadata.json counts {rejected['total']})")
            return
        with tf.io.gfile.GFile(path, "rb") as handle:
            lines = handle.read().decode("utf-8", "replace").splitlines()
        reasons: collections.Counter[str] = collections.Counter()
        count = 0
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            count += 1
            try:
                entry = json.loads(line)
                reasons[entry["reason"]] += 1
                key = entry["key"]
            except (ValueError, KeyError, TypeError):
                self.problem(f"{REJECTS_FILE} line {number}: not a JSON object with key and reason")
                continue
            if key in self.keys:
                self.problem(f"{REJECTS_FILE} line {number}: key {key} is also in a shard")
        self.report.rejects = count
        if count != rejected["total"]:
            self.problem(
                f"{REJECTS_FILE}: {count} lines, metadata.json num_rejected total is "
                f"{rejected['total']}"
            )
        self.rejects_read = True
        by_reason = rejected.get("by_reason")
        all_parsed = count == sum(reasons.values())
        if all_parsed and isinstance(by_reason, dict) and dict(reasons) != by_reason:
            self.problem(
                f"{REJECTS_FILE}: reasons {dict(sorted(reasons.items()))}, metadata.json says "
                f"{by_reason}"
            )

    def check_accounting(self) -> None:
        duplicates = sorted(key for key, count in self.keys.items() if count > 1)
        if duplicates:
            shown = ", ".join(duplicates[:10])
            more = f" and {len(duplicates) - 10} more" if len(duplicates) > 10 else ""
            self.problem(f"keys stored more than once (across all shards): {shown}{more}")
        discovered = self.metadata.get("num_discovered")
        if discovered is None or not (self.records_complete and self.rejects_read):
            return
        accepted = sum(self.report.examples.values())
        if accepted + self.report.rejects != discovered:
            self.problem(
                f"metadata.json num_discovered {discovered} but {accepted} records + "
                f"{self.report.rejects} rejects"
            )


class _ClassCount:
    """Statistics of one split, counted from the masks verify reads (numpy accumulators)."""

    def __init__(self, classes: ClassesInfo) -> None:
        self.num_classes = classes.num_classes
        self.ignore_index = classes.ignore_index
        self.pixels = np.zeros(self.num_classes, np.int64)
        self.images = np.zeros(self.num_classes, np.int64)
        self.image_pixels = np.zeros(self.num_classes, np.int64)
        self.ignored = 0
        self.num_images = 0
        self.complete = True  # every record of the split was counted

    def add(self, counts: np.ndarray) -> None:
        """One mask, as the bincount of its values (only class ids and the ignore index)."""
        pixels = counts[: self.num_classes]
        ignored = int(counts[self.ignore_index]) if self.ignore_index < len(counts) else 0
        labelled = int(counts.sum()) - ignored
        present = pixels > 0
        self.pixels += pixels
        self.images += present
        self.image_pixels += present * labelled
        self.ignored += ignored
        self.num_images += 1

    def stats(self) -> ClassStats:
        return ClassStats(
            tuple(self.pixels.tolist()),
            tuple(self.images.tolist()),
            tuple(self.image_pixels.tolist()),
            self.ignored,
            self.num_images,
        )


def _stat_differences(recorded: ClassStats, counted: ClassStats) -> list[str]:
    """'field[class] recorded, counted' for every number that differs."""
    found = []
    for field in ("pixels", "images", "image_pixels"):
        pairs = zip(getattr(recorded, field), getattr(counted, field), strict=True)
        found.extend(
            f"{field}[{class_id}] {said} in metadata.json, {seen} counted"
            for class_id, (said, seen) in enumerate(pairs)
            if said != seen
        )
    for field in ("ignored_pixels", "num_images"):
        said, seen = getattr(recorded, field), getattr(counted, field)
        if said != seen:
            found.append(f"{field} {said} in metadata.json, {seen} counted")
    return found


def _lists_index(metadata: dict[str, Any]) -> set[str]:
    """Every index or TFDS file name metadata.json lists, read leniently (it may be damaged)."""
    names = set()
    for entry in metadata.get("tfds_files") or []:
        names.add(entry.get("file") if isinstance(entry, dict) else None)
    for split in metadata["splits"].values():
        if not isinstance(split, dict):
            continue
        refs = [split.get("key_table")]
        refs += [s.get("index") for s in split.get("shards") or [] if isinstance(s, dict)]
        names.update(ref.get("file") for ref in refs if isinstance(ref, dict))
    names.discard(None)
    names |= {name for name in duplicate_files(metadata) if name.startswith(f"{INDEX_DIR}/")}
    return {name for name in names if isinstance(name, str)}


def file_sha256(path: str) -> str:
    """Hex sha256 of a local or gs:// file, read in chunks."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
