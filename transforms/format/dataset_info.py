"""metadata.json as typed values, and the one loader every reader and tool goes through.

metadata.json is the commit marker of an output directory: no marker, no dataset. Its
parsed form is checked once here (names, counts, version) so that readers can trust it:
exact epochs and sharding rely on the per-shard counts, and every file name in it is
checked against transforms.format.naming, so a tampered file cannot point a reader outside the
output directory.

Files are read through the file layer (transforms.files: local paths and gs://, bounded, no
TensorFlow), so a FIFO or a link to /dev/zero as metadata.json is a one-line error.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from transforms import files, json_shape
from transforms.class_stats import ClassStats, split_weights
from transforms.format import record_formats
from transforms.format.features import MASK_FORMATS, MAX_CLASS_ID, class_png_bit_depth
from transforms.format.naming import (
    COMMITTING,
    FIRST_VERSION,
    MANIFEST_FILE,
    MAX_VERSION,
    METADATA_FILE,
    SEGPREP_DIR,
    TFDS_FILES,
    UNLABELED_FILE,
    digest_table_name,
    hashes_version,
    index_name,
    is_split_name,
    key_table_name,
    parse_shard_name,
    shard_version,
)
from transforms.format.record_index import FRAME_OVERHEAD, is_count
from transforms.limits import DEFAULT_METADATA_LIMITS as LIMITS
from transforms.limits import FILE_LIMITS, KEY_ROW_BYTES

if TYPE_CHECKING:
    from transforms.codecs.class_mask import ClassMaskSettings

# Longest `.idx` line: two uint64 in decimal, a space and a newline.
INDEX_LINE_BYTES = 2 * 20 + 2

# Bumped only for changes an older reader would misread; added optional fields keep it.
FORMAT_VERSION = 1


class IncompleteOutputError(FileNotFoundError):
    """The directory has no metadata.json: the job did not finish, or it is not segprep output."""


class MetadataError(ValueError):
    """metadata.json exists but does not describe a readable dataset."""


@dataclasses.dataclass(frozen=True)
class FileRef:
    """A file segprep wrote beside the shards, with what it must hash to."""

    file: str  # relative to the output directory
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "bytes": self.bytes, "sha256": self.sha256}


class _Section:
    """A small metadata.json object: each field of a JSON kind (KINDS), None ones left out."""

    KINDS: ClassVar[Mapping[str, type | tuple[type, ...]]] = {}

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)  # type: ignore[call-overload]
        return {key: value for key, value in data.items() if value is not None}

    @classmethod
    def from_json(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not all(
            isinstance(data.get(name), kind) and not isinstance(data.get(name), bool)
            for name, kind in cls.KINDS.items()
        ):
            names = ", ".join(cls.KINDS)
            raise MetadataError(f"metadata.json {cls.__name__} is not {{{names}}} as written")
        return cls(**{name: data[name] for name in cls.KINDS if name in data})


@dataclasses.dataclass(frozen=True)
class RejectCounts(_Section):
    """metadata.json's `num_rejected`: rejects.jsonl's rows counted by reason, with each
    reason's first key (absent from outputs older than it: None)."""

    KINDS = {"total": int, "by_reason": dict, "example_key": (dict, type(None))}
    total: int
    by_reason: Mapping[str, int]
    example_key: Mapping[str, str] | None = None

    @classmethod
    def count(cls, rows: Iterable[tuple[str, str]]) -> RejectCounts:
        """Of (key, reason) rows in rejects.jsonl's order."""
        reasons: Counter[str] = Counter()
        examples: dict[str, str] = {}
        for key, reason in rows:
            reasons[reason] += 1
            examples.setdefault(reason, key)
        by_reason = dict(sorted(reasons.items()))
        return cls(sum(by_reason.values()), by_reason, dict(sorted(examples.items())))


@dataclasses.dataclass(frozen=True)
class RunInfo(_Section):
    """metadata.json's `run`: the run that wrote the latest version, and its figures (none
    when the run had no start time)."""

    KINDS = {
        "run_id": str,
        "started_at": (str, type(None)),  # ISO 8601, UTC
        **dict.fromkeys(("wall_seconds", "records_per_second"), (int, float, type(None))),
        "bytes_written": (int, type(None)),
    }
    run_id: str
    started_at: str | None = None
    wall_seconds: float | None = None
    records_per_second: float | None = None
    bytes_written: int | None = None


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    file: str
    num_examples: int
    bytes: int
    sha256: str
    index: FileRef | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # fields kept as read

    def to_json(self) -> dict[str, Any]:
        data = dict(self.extra)
        data.update(
            file=self.file, num_examples=self.num_examples, bytes=self.bytes, sha256=self.sha256
        )
        if self.index is not None:
            data["index"] = self.index.to_json()
        return data


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    name: str
    num_examples: int
    image_shape: tuple[int, int] | None  # (height, width) when every record has it
    shards: tuple[ShardInfo, ...]
    key_table: FileRef | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The record format's shards need an offset index each (record_formats: offset_index).
    offset_index: bool = dataclasses.field(default=True, compare=False)
    # Key tables of versions 2, 3, ... in order: rows of the records each version added,
    # numbered like key_table's (shard number in the split, record in the shard).
    appended_key_tables: tuple[FileRef, ...] = ()
    # Image-hash tables of versions 2, 3, ... that searched for duplicates, in version order
    # (`index/<split>.vN.hashes.jsonl`: the rows of the records version N added); version
    # 1's is `extra["hashes"]`, as it always was.
    appended_hashes: tuple[FileRef, ...] = ()

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def key_tables(self) -> tuple[FileRef, ...]:
        """Every key table of the split, in record order: concatenated, line i is record i."""
        return (*((self.key_table,) if self.key_table else ()), *self.appended_key_tables)

    @property
    def has_index(self) -> bool:
        """The split has its key table (or no shards), and every shard its offset index when
        the record format needs one."""
        offsets = not self.offset_index or all(shard.index is not None for shard in self.shards)
        return offsets and (self.key_table is not None or not self.shards)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.extra)
        data.update(
            num_examples=self.num_examples,
            num_shards=self.num_shards,
            image_shape=list(self.image_shape) if self.image_shape else None,
            shards=[shard.to_json() for shard in self.shards],
        )
        if self.key_table is not None:
            data["key_table"] = self.key_table.to_json()
        for field in ("appended_key_tables", "appended_hashes"):
            if refs := getattr(self, field):
                data[field] = [ref.to_json() for ref in refs]
        return data


@dataclasses.dataclass(frozen=True)
class VersionInfo:
    """One version of a dataset that grows (`segprep prepare --append`): the shards it added
    per split, and what the dataset holds as of it. Version 1 is the first prepare."""

    version: int
    created_at: str  # ISO 8601, UTC
    run_id: str
    shards: Mapping[str, tuple[str, ...]]  # split -> shard files this version added
    added: Mapping[str, int]  # split -> records this version added
    num_examples: Mapping[str, int]  # split -> records as of this version
    image_shape: Mapping[str, tuple[int, int] | None]  # split -> as of this version
    key_tables: Mapping[str, FileRef]  # split -> the rows of the records this version added
    digest_tables: Mapping[str, FileRef]  # split -> content digests of the keys it added
    skipped_identical: int = 0  # keys already present with the same image and mask bytes
    num_rejected: Mapping[str, int] = dataclasses.field(default_factory=dict)  # by reason
    # `--mask_type classes`: split -> ClassStats.to_json() as of this version.
    class_stats: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = {
            "version": self.version,
            "created_at": self.created_at,
            "run_id": self.run_id,
            "shards": {split: list(files) for split, files in self.shards.items()},
            "added": dict(self.added),
            "num_examples": dict(self.num_examples),
            "image_shape": {
                split: list(shape) if shape else None for split, shape in self.image_shape.items()
            },
            "key_tables": {split: ref.to_json() for split, ref in self.key_tables.items()},
            "digest_tables": {split: ref.to_json() for split, ref in self.digest_tables.items()},
            "skipped_identical": self.skipped_identical,
            "num_rejected": dict(self.num_rejected),
        }
        if self.class_stats is not None:
            data["class_stats"] = dict(self.class_stats)
        return data

    @classmethod
    def from_json(cls, data: Any, number: int) -> VersionInfo:
        where = f"metadata.json dataset_versions[{number - 1}]"
        if not isinstance(data, dict):
            raise MetadataError(f"{where}: not an object")
        version = data.get("version")
        if type(version) is not int or version != number:  # not True, not 1.0
            raise MetadataError(f"{where}: version {data.get('version')!r}, expected {number}")
        for field in ("created_at", "run_id"):
            if not isinstance(data.get(field), str):
                raise MetadataError(f"{where}: {field} is not a string")
        fields = ("shards", "added", "num_examples", "image_shape", "key_tables", "digest_tables")
        for field in fields:
            if not isinstance(data.get(field), dict):
                raise MetadataError(f"{where}: {field} is not an object")
        # Each table checked split by split, its values replaced by their typed form.
        tables = {field: dict(data[field]) for field in fields}
        for split, names in tables["shards"].items():
            if not isinstance(names, list) or not all(isinstance(f, str) for f in names):
                raise MetadataError(f"{where}: shards of {split!r} is not a list of names")
            for name in names:
                parsed = parse_shard_name(name)
                if parsed is None or parsed[0] != split or shard_version(name) != number:
                    raise MetadataError(f"{where}: {name!r} is no {split} shard of its version")
            tables["shards"][split] = tuple(names)
        for field in ("added", "num_examples"):
            for split, value in tables[field].items():
                if not is_count(value):
                    raise MetadataError(f"{where}: {field} of {split!r} is not a count")
        for split, shape in tables["image_shape"].items():
            if shape is not None and not is_image_shape(shape):
                raise MetadataError(f"{where}: image_shape of {split!r} is not [height, width]")
            tables["image_shape"][split] = (shape[0], shape[1]) if shape else None
        names = (("key_tables", key_table_name), ("digest_tables", digest_table_name))
        for field, name_of in names:
            for split, ref in tables[field].items():
                expected = name_of(split, number)
                tables[field][split] = _file_ref(ref, f"{where} {field} {split}", expected)
        skipped = data.get("skipped_identical", 0)
        rejected = data.get("num_rejected", {})
        if not is_count(skipped) or not isinstance(rejected, dict):
            raise MetadataError(f"{where}: skipped_identical or num_rejected is malformed")
        class_stats = data.get("class_stats")
        if class_stats is not None and not isinstance(class_stats, dict):
            raise MetadataError(f"{where}: class_stats is not an object")
        return cls(
            number,
            data["created_at"],
            data["run_id"],
            **tables,
            skipped_identical=skipped,
            num_rejected=dict(rejected),
            class_stats=class_stats,
        )


RGB = tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class ClassesInfo:
    """metadata.json's `classes` section: what the stored mask values of a `--mask_type
    classes` output mean, and their counts per split."""

    num_classes: int
    ignore_index: int
    names: tuple[str, ...] | None = None
    colormap: tuple[RGB, ...] | None = None
    stats: Mapping[str, ClassStats] = dataclasses.field(default_factory=dict)  # per split
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # coco, ...

    @property
    def png_bit_depth(self) -> int:
        """Of the stored single-channel PNGs: 8 or 16, as the ignore index needs."""
        return class_png_bit_depth(self.ignore_index)

    @property
    def mask_dtype(self) -> np.dtype:
        """The dtype readers return class ids in: uint8 for 8-bit PNGs, else int32.

        Not uint16 for 16-bit PNGs: TensorFlow's losses, one_hot and gather take int32 or
        int64 class ids and few of its kernels take uint16 (nor do torch's); int32 holds
        every id and the ignore index as they are.
        """
        return np.dtype(np.uint8 if self.png_bit_depth == 8 else np.int32)

    def split_stats(self, split: str) -> ClassStats:
        if split not in self.stats:
            raise ValueError(f"no class statistics for split {split!r}; have {sorted(self.stats)}")
        return self.stats[split]

    def weights(self, split: str = "train") -> np.ndarray:
        """Median-frequency class weights [num_classes] of `split` (float64; formula in
        transforms.class_stats.median_frequency_weights)."""
        return split_weights(self.split_stats(split), split)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.extra)
        data.update(
            num_classes=self.num_classes,
            ids=list(range(self.num_classes)),
            names=None if self.names is None else list(self.names),
            ignore_index=self.ignore_index,
            colormap=None if self.colormap is None else [list(c) for c in self.colormap],
            png_bit_depth=self.png_bit_depth,
            splits={split: stats.to_json() for split, stats in self.stats.items()},
        )
        return data

    @classmethod
    def of(
        cls,
        settings: ClassMaskSettings,
        stats: Mapping[str, ClassStats],
        annotations: Mapping[str, Any] | None = None,
    ) -> ClassesInfo:
        """The section a run writes: what its ids mean, how they are stored, their counts."""
        for split, counted in stats.items():
            if counted.num_classes != settings.num_classes:
                raise ValueError(
                    f"{split} stats have {counted.num_classes} classes, "
                    f"expected {settings.num_classes}"
                )
        extra: dict[str, Any] = {}
        if settings.class_map is not None:
            extra["class_map"] = settings.class_map.to_json()
        if annotations is not None:  # how an export's labels became ids: "coco" in every output
            extra["coco"] = dict(annotations)
        return cls(
            num_classes=settings.num_classes,
            ignore_index=settings.ignore_index,
            names=None if settings.class_names is None else tuple(settings.class_names),
            colormap=None if settings.colormap is None else tuple(settings.colormap),
            stats=dict(sorted(stats.items())),
            extra=extra,
        )

    @classmethod
    def from_json(cls, data: Any) -> ClassesInfo:
        """Parse and check a `classes` section: a reader that trusted a wrong bit depth or
        ignore index would misread every mask, so any inconsistency is a MetadataError."""
        where = "metadata.json classes"
        if not isinstance(data, dict):
            raise MetadataError(f"{where}: not an object")
        n, ignore, depth = (data.get(k) for k in ("num_classes", "ignore_index", "png_bit_depth"))
        if not (is_count(n) and 2 <= n <= MAX_CLASS_ID):
            raise MetadataError(f"{where}: num_classes {n!r} is not from 2 to {MAX_CLASS_ID}")
        if not (is_count(ignore) and n <= ignore <= MAX_CLASS_ID):
            raise MetadataError(
                f"{where}: ignore_index {ignore!r} is not from num_classes {n} to {MAX_CLASS_ID}"
            )
        if depth != class_png_bit_depth(ignore):
            raise MetadataError(
                f"{where}: png_bit_depth {depth!r}, but ignore_index {ignore} is stored in "
                f"{class_png_bit_depth(ignore)}-bit PNGs"
            )
        if data.get("ids", list(range(n))) != list(range(n)):
            raise MetadataError(f"{where}: ids are not 0..{n - 1}")
        names = data.get("names")
        if names is not None and not (
            isinstance(names, list) and len(names) == n and all(isinstance(x, str) for x in names)
        ):
            raise MetadataError(f"{where}: names is not a list of {n} strings")
        colormap = data.get("colormap")
        if colormap is not None and not (
            isinstance(colormap, list)
            and len(colormap) == n
            and all(isinstance(c, list) and len(c) == 3 for c in colormap)
            and all(type(v) is int and 0 <= v <= 255 for c in colormap for v in c)
        ):
            raise MetadataError(f"{where}: colormap is not a list of {n} [r, g, b]")
        splits = data.get("splits", {})
        if not isinstance(splits, dict):
            raise MetadataError(f"{where}: splits is not an object")
        stats = {}
        for split, entry in splits.items():
            try:
                stats[split] = ClassStats.from_json(entry)
            except ValueError as error:
                raise MetadataError(f"{where}: split {split!r}: {error}") from None
            if stats[split].num_classes != n:
                raise MetadataError(
                    f"{where}: split {split!r} counts {stats[split].num_classes} classes, not {n}"
                )
        known = ("num_classes", "ids", "names", "ignore_index", "colormap", "png_bit_depth")
        return cls(
            num_classes=n,
            ignore_index=ignore,
            names=None if names is None else tuple(names),
            colormap=None if colormap is None else tuple((c[0], c[1], c[2]) for c in colormap),
            stats=stats,
            extra={k: v for k, v in data.items() if k not in (*known, "splits")},
        )


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    format_version: int
    mask_format: str
    splits: Mapping[str, SplitInfo]
    tfds_files: tuple[FileRef, ...] = ()
    classes: ClassesInfo | None = None  # a `--mask_type classes` output; None: binary masks
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # rejects, run, ...
    # metadata.json's record_format; absent in outputs older than the field: tfrecord.
    record_format: str = record_formats.DEFAULT
    # What the run saw and how it ran; each None in outputs older than its field.
    num_discovered: int | None = None  # every entry the latest version accounts for
    num_rejected: RejectCounts | None = None
    num_unlabeled: int | None = None  # --images_without_mask skip: listed in unlabeled.jsonl
    exif_orientation_ignored: int | None = None  # accepted images, all versions
    run: RunInfo | None = None
    # Sections kept as written: the run's parameters (flags, output_dir), package versions,
    # the record features, the record spec (transforms/record_spec.py), the duplicates
    # search's report (beam_pipeline/job/duplicates.py, docs/duplicates.md).
    parameters: Mapping[str, Any] | None = None
    versions: Mapping[str, str] | None = None
    features: Mapping[str, Any] | None = None
    record_spec: Mapping[str, Any] | None = None
    duplicates: Mapping[str, Any] | None = None

    @property
    def adapter(self) -> record_formats.RecordFormat:
        """The record format's adapter: how to write, read and name this output's shards."""
        return record_formats.get(self.record_format)

    # Versions 1..N (`--append`); empty for an output written before segprep kept versions,
    # which is its own version 1. The splits describe the latest version.
    dataset_versions: tuple[VersionInfo, ...] = ()

    @property
    def latest_version(self) -> int:
        return self.dataset_versions[-1].version if self.dataset_versions else FIRST_VERSION

    def at_version(self, version: int | None = None) -> DatasetInfo:
        """This dataset as version `version` (None: the latest) was published: the splits hold
        exactly the shards of versions 1..version, in the order they had then, so a reader
        pinned to a version reads the same records in the same order after later appends."""
        if version is None or version == self.latest_version:
            return self
        if not is_count(version) or not FIRST_VERSION <= version < self.latest_version:
            raise ValueError(
                f"version {version!r} is not a version of this dataset (1..{self.latest_version})"
            )
        pinned = self.dataset_versions[version - 1]
        splits = {}
        for name, split in self.splits.items():
            shards = tuple(s for s in split.shards if shard_version(s.file) <= version)
            tables = split.key_tables[:version] if split.key_table else ()
            appended = split.appended_hashes
            hashes = tuple(h for h in appended if (hashes_version(name, h.file) or 0) <= version)
            splits[name] = dataclasses.replace(
                split,
                num_examples=sum(s.num_examples for s in shards),
                image_shape=pinned.image_shape.get(name),
                shards=shards,
                key_table=tables[0] if tables else None,
                appended_key_tables=tuple(tables[1:]),
                appended_hashes=hashes,
            )
        classes = self.classes
        if classes is not None and pinned.class_stats is not None:
            classes = dataclasses.replace(
                classes,
                stats={s: ClassStats.from_json(v) for s, v in pinned.class_stats.items()},
            )
        return dataclasses.replace(
            self,
            splits=splits,
            classes=classes,
            dataset_versions=self.dataset_versions[:version],
            tfds_files=(),  # they describe the latest version
        )

    def split(self, name: str) -> SplitInfo:
        if name not in self.splits:
            raise ValueError(f"unknown split {name!r}; this dataset has {sorted(self.splits)}")
        return self.splits[name]

    @property
    def has_index(self) -> bool:
        return all(split.has_index for split in self.splits.values())

    def listed_files(self) -> set[str]:
        """Every file this metadata names: shards, their indexes, key tables, TFDS files."""
        names = {ref.file for ref in self.tfds_files}
        for split in self.splits.values():
            names.update(shard.file for shard in split.shards)
            names.update(shard.index.file for shard in split.shards if shard.index)
            names.update(ref.file for ref in split.key_tables)
            hashes = split.extra.get("hashes")  # beam_pipeline/job/hash_tables.py
            if isinstance(hashes, dict) and isinstance(hashes.get("file"), str):
                names.add(hashes["file"])
            names.update(ref.file for ref in split.appended_hashes)
        for version in self.dataset_versions:
            names.update(ref.file for ref in version.digest_tables.values())
        listed = (self.duplicates or {}).get("file")
        if isinstance(listed, dict) and isinstance(listed.get("file"), str):
            names.add(listed["file"])
        return names

    def to_json(self) -> dict[str, Any]:
        data = dict(self.extra)
        data.update(
            format_version=self.format_version,
            mask_format=self.mask_format,
            record_format=self.record_format,
            splits={name: split.to_json() for name, split in self.splits.items()},
        )
        if self.tfds_files:
            data["tfds_files"] = [ref.to_json() for ref in self.tfds_files]
        if self.classes is not None:
            data["classes"] = self.classes.to_json()
        if self.dataset_versions:
            data["dataset_versions"] = [version.to_json() for version in self.dataset_versions]
        for name in _OPTIONAL_FIELDS:
            value = getattr(self, name)
            if value is not None:
                data[name] = value.to_json() if hasattr(value, "to_json") else value
        if self.num_unlabeled is not None:
            data["num_unlabeled"] = {"total": self.num_unlabeled, "file": UNLABELED_FILE}
        return data

    def to_bytes(self) -> bytes:
        """metadata.json's bytes: sorted keys, so equal values are equal bytes."""
        text = json.dumps(self.to_json(), indent=2, sort_keys=True, ensure_ascii=False)
        return (text + "\n").encode()

    @classmethod
    def from_json(cls, data: Any) -> DatasetInfo:
        """Parse and check a metadata.json object; MetadataError says what is wrong."""
        if not isinstance(data, dict):
            raise MetadataError("metadata.json is not a JSON object")
        version = data.get("format_version")
        if not is_count(version) or version < 1:
            raise MetadataError(f"format_version {version!r} is not a version number")
        if version > FORMAT_VERSION:
            raise MetadataError(
                f"format_version {version}: written by a newer segprep than this reader "
                f"(reads up to {FORMAT_VERSION}); upgrade segprep to read it"
            )
        mask_format = data.get("mask_format")
        if mask_format not in MASK_FORMATS:
            raise MetadataError(f"mask_format {mask_format!r} is not one of {MASK_FORMATS}")
        splits = data.get("splits")
        if not isinstance(splits, dict):
            raise MetadataError("metadata.json lacks a `splits` table")
        listed = data.get("tfds_files") or []
        if not isinstance(listed, list):
            raise MetadataError("metadata.json tfds_files is not a list")
        tfds_files = tuple(
            _file_ref(entry, f"tfds_files[{number}]") for number, entry in enumerate(listed)
        )
        for ref in tfds_files:
            if ref.file not in TFDS_FILES:
                raise MetadataError(f"tfds_files lists {ref.file!r}, not one of {TFDS_FILES}")
            _capped(ref.bytes, LIMITS.side_file_bytes, "bytes", f"tfds_files {ref.file}")
        if len({ref.file for ref in tfds_files}) != len(tfds_files):
            raise MetadataError("tfds_files lists a file twice")
        record_format = data.get("record_format", record_formats.DEFAULT)
        if not isinstance(record_format, str) or record_format not in record_formats.FORMATS:
            raise MetadataError(
                f"record_format {record_format!r} is not one of {record_formats.names()}: "
                "written by a newer segprep? upgrade segprep to read it"
            )
        adapter = record_formats.get(record_format)
        classes = None
        if data.get("classes") is not None:
            classes = ClassesInfo.from_json(data["classes"])
            if mask_format != "png":
                raise MetadataError(f"class-id masks stored as {mask_format}: only png is lossless")
        parsed = {name: _split(name, entry, adapter) for name, entry in splits.items()}
        versions = _versions(data.get("dataset_versions"), parsed)
        known = {*_TOP_FIELDS, *_OPTIONAL_FIELDS}
        return cls(
            format_version=version,
            mask_format=mask_format,
            splits=parsed,
            tfds_files=tfds_files,
            classes=classes,
            extra={key: value for key, value in data.items() if key not in known},
            record_format=record_format,
            dataset_versions=versions,
            **_optional_fields(data),
        )


# DatasetInfo's fields that an output older than them lacks, written only when set, with what
# each holds: a count, a section of that class, or an object kept as written.
_OPTIONAL_FIELDS: dict[str, Any] = {
    "num_discovered": int,
    "num_rejected": RejectCounts,
    "exif_orientation_ignored": int,
    "run": RunInfo,
    **dict.fromkeys(("parameters", "versions", "features", "record_spec", "duplicates"), dict),
}
# The fields every DatasetInfo reads (the rest of metadata.json is `extra`).
_TOP_FIELDS = ("format_version", "mask_format", "record_format", "splits", "tfds_files")
_TOP_FIELDS += ("classes", "dataset_versions", "num_unlabeled")


def _optional_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The optional fields present in `data`, each checked and typed as its kind says."""
    fields: dict[str, Any] = {}
    for name, kind in _OPTIONAL_FIELDS.items():
        value = data.get(name)
        if value is None:
            continue
        if kind is int and not is_count(value):
            raise MetadataError(f"metadata.json {name} {value!r} is not a count")
        if kind is dict and not isinstance(value, dict):
            raise MetadataError(f"metadata.json {name} is not an object")
        fields[name] = value if kind in (int, dict) else kind.from_json(value)
    unlabeled = data.get("num_unlabeled")
    if unlabeled is not None:
        if not (isinstance(unlabeled, dict) and is_count(unlabeled.get("total"))) or (
            unlabeled.get("file") != UNLABELED_FILE
        ):
            raise MetadataError(f"metadata.json num_unlabeled is not {{total, {UNLABELED_FILE}}}")
        fields["num_unlabeled"] = unlabeled["total"]
    return fields


def _versions(data: Any, splits: Mapping[str, SplitInfo]) -> tuple[VersionInfo, ...]:
    """The checked version list: versions 1..N, each split's shards those of the versions in
    version order, and every earlier version's counts and key tables as the splits hold them."""
    if data is None:
        return ()
    if not isinstance(data, list) or not data:
        raise MetadataError("metadata.json dataset_versions is not a non-empty list")
    if len(data) > MAX_VERSION:
        raise MetadataError(f"metadata.json lists more than {MAX_VERSION} versions")
    versions = tuple(VersionInfo.from_json(entry, number) for number, entry in enumerate(data, 1))
    # The splits are the latest version; each earlier one must be a prefix of them, as a
    # reader pinned to it reads exactly those shards (the latest record only describes, so
    # a reader does not refuse it: check_latest_version holds it to the same rule).
    _check_version_records(splits, versions, versions[:-1])
    return versions


def check_latest_version(info: DatasetInfo) -> None:
    """The latest version's record (shards, counts, key tables) as from_json holds every
    earlier one's to the splits, else MetadataError. No reader needs it, but an append makes
    it an earlier version, and its commit would refuse it after the whole job."""
    if not info.dataset_versions:
        return  # written before versions were kept: its splits are all there is
    _check_version_records(info.splits, info.dataset_versions, info.dataset_versions)


def _check_version_records(
    splits: Mapping[str, SplitInfo],
    versions: tuple[VersionInfo, ...],
    checked: tuple[VersionInfo, ...],
) -> None:
    """`checked` (versions 1..k of `versions`) added exactly the splits' first shards, in
    version order, with the counts those shards hold; any shard after them is the latest's."""
    for name, split in splits.items():
        earlier = [file for v in checked for file in v.shards.get(name, ())]
        files = [shard.file for shard in split.shards]
        later = {shard_version(file) for file in files[len(earlier) :]}
        after = set() if len(checked) == len(versions) else {len(versions)}
        if files[: len(earlier)] != earlier or later - after:
            raise MetadataError(
                f"split {name!r}: its shards are not those its versions added, in version order"
            )
        sizes = {shard.file: shard.num_examples for shard in split.shards}
        total = 0
        for v in checked:
            added = sum(sizes[file] for file in v.shards.get(name, ()))
            total += added
            if v.added.get(name, 0) != added or v.num_examples.get(name, 0) != total:
                raise MetadataError(
                    f"split {name!r} version {v.version}: counts {v.added.get(name)} added, "
                    f"{v.num_examples.get(name)} in all, but its shards hold {added} of {total}"
                )
        tables = split.key_tables
        expected = [v.key_tables[name] for v in checked if name in v.key_tables]
        if split.key_table is not None and (
            list(tables[: len(expected)]) != expected or len(tables) > len(versions)
        ):
            raise MetadataError(f"split {name!r}: its key tables are not its versions' ones")


def parse_json(data: bytes, where: str = "metadata.json") -> Any:
    """`data` parsed as JSON, its shape checked first (json_shape: nesting, UTF-8, token
    lengths); MetadataError when it is not JSON or is shaped as no segprep file is."""
    try:
        return json_shape.loads(data, where, LIMITS.json_depth, unique_keys=True)
    except json_shape.JsonShapeError as error:
        raise MetadataError(f"{error} (tampered file?)") from None
    except json_shape.DuplicateKeyError as error:
        raise MetadataError(f"{where}: {error} (tampered file?)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MetadataError(f"{where} is not valid JSON: {error}") from error


def _capped(value: int, cap: int, what: str, where: str) -> int:
    if value > cap:
        raise MetadataError(f"{where}: {what} {value:,} is more than the {cap:,} allowed")
    return value


def _count(entry: Mapping[str, Any], field: str, where: str, cap: int | None = None) -> int:
    value = entry.get(field)
    if not is_count(value):
        raise MetadataError(f"{where}: {field} {value!r} is not a count")
    return value if cap is None else _capped(value, cap, field, where)


def _file_ref(entry: Any, where: str, expected_name: str | None = None) -> FileRef:
    if not isinstance(entry, dict):
        raise MetadataError(f"{where}: not a {{file, bytes, sha256}} object")
    name, digest = entry.get("file"), entry.get("sha256")
    if expected_name is not None and name != expected_name:
        raise MetadataError(f"{where}: file {name!r}, expected {expected_name!r}")
    if not isinstance(name, str) or not isinstance(digest, str):
        raise MetadataError(f"{where}: file and sha256 must be strings")
    return FileRef(name, _count(entry, "bytes", where), digest)


def is_image_shape(value: Any) -> bool:
    """An image_shape as metadata.json writes it: [height, width], both positive counts."""
    return isinstance(value, list) and len(value) == 2 and all(is_count(n) and n for n in value)


def _split(name: Any, entry: Any, adapter: record_formats.RecordFormat) -> SplitInfo:
    where = f"split {name!r}"
    if not is_split_name(name):
        raise MetadataError(f"{where}: a split name is lowercase letters only")
    if not isinstance(entry, dict) or not isinstance(entry.get("shards"), list):
        raise MetadataError(f"{where} has no shards list")
    shards = tuple(
        _shard(name, number, shard, adapter) for number, shard in enumerate(entry["shards"])
    )
    twice = sorted(file for file, n in Counter(s.file for s in shards).items() if n > 1)
    if twice:
        # A shard listed twice would be served twice per epoch.
        raise MetadataError(f"{where}: shard {twice[0]} is listed more than once")
    num_examples = _count(entry, "num_examples", where, LIMITS.split_examples)
    sizes = [shard.num_examples for shard in shards]
    if sum(sizes) != num_examples:
        raise MetadataError(f"{where}: shard counts {sizes} do not add up to {num_examples}")
    if entry.get("num_shards", len(shards)) != len(shards):
        raise MetadataError(f"{where}: num_shards {entry['num_shards']} but {len(shards)} listed")
    shape = entry.get("image_shape")
    if shape is not None and not is_image_shape(shape):
        raise MetadataError(f"{where}: image_shape {shape!r} is not [height, width]")
    if shape is not None and shape[0] * shape[1] > LIMITS.image_pixels:
        raise MetadataError(
            f"{where}: image_shape {shape[0]}x{shape[1]} is more than the "
            f"{LIMITS.image_pixels:,} pixels segprep writes"
        )
    key_table = entry.get("key_table")
    if key_table is not None:
        key_table = _file_ref(key_table, f"{where} key_table", key_table_name(name))
        _capped(key_table.bytes, LIMITS.key_table_bytes, "bytes", f"{where} key_table")
    appended = entry.get("appended_key_tables") or []
    if not isinstance(appended, list) or (appended and key_table is None):
        raise MetadataError(f"{where}: appended_key_tables is not a list after a key_table")
    appended_tables = tuple(
        _file_ref(ref, f"{where} appended_key_tables", key_table_name(name, number))
        for number, ref in enumerate(appended, start=FIRST_VERSION + 1)
    )
    for ref in appended_tables:
        _capped(ref.bytes, LIMITS.key_table_bytes, "bytes", f"{where} {ref.file}")
    if key_table is not None:
        # The tables hold one line per record, so the records bound them: a restamped
        # size far over what the records need is refused before a reader reads it whole.
        tables = (key_table, *appended_tables)
        largest = max(tables, key=lambda ref: ref.bytes).file
        _capped(
            sum(ref.bytes for ref in tables),
            num_examples * KEY_ROW_BYTES,
            "bytes",
            f"{where} key table {largest} ({num_examples:,} records, key tables together)",
        )
    appended_hashes = _appended_hashes(name, entry.get("appended_hashes"), where)
    known = ("num_examples", "num_shards", "image_shape", "shards", "key_table")
    known += ("appended_key_tables", "appended_hashes")
    return SplitInfo(
        name=name,
        num_examples=num_examples,
        image_shape=(shape[0], shape[1]) if shape else None,
        shards=shards,
        key_table=key_table,
        extra={key: value for key, value in entry.items() if key not in known},
        offset_index=adapter.offset_index,
        appended_key_tables=appended_tables,
        appended_hashes=appended_hashes,
    )


def _appended_hashes(split: str, entry: Any, where: str) -> tuple[FileRef, ...]:
    """A split's `appended_hashes`: refs named `index/<split>.vN.hashes.jsonl`, N >= 2 and
    increasing (a version that did not search has none)."""
    if entry is None:
        return ()
    if not isinstance(entry, list):
        raise MetadataError(f"{where}: appended_hashes is not a list")
    refs = tuple(_file_ref(ref, f"{where} appended_hashes") for ref in entry)
    numbers = [hashes_version(split, ref.file) or FIRST_VERSION for ref in refs]
    if any(n <= FIRST_VERSION for n in numbers) or numbers != sorted(set(numbers)):
        raise MetadataError(
            f"{where}: appended_hashes {[ref.file for ref in refs]} are not "
            f"index/{split}.vN.hashes.jsonl tables of increasing versions N >= 2"
        )
    for ref in refs:
        _capped(ref.bytes, LIMITS.key_table_bytes, "bytes", f"{where} {ref.file}")
    return refs


def _shard(split: str, number: int, entry: Any, adapter: record_formats.RecordFormat) -> ShardInfo:
    if not isinstance(entry, dict):
        raise MetadataError(f"split {split!r} shard {number}: not an object")
    name = entry.get("file")
    parsed = parse_shard_name(name, adapter.suffix) if isinstance(name, str) else None
    if parsed is None or parsed[0] != split:
        raise MetadataError(
            f"{name!r} is not a shard name of split {split!r} in record format {adapter.name}"
        )
    where = f"shard {name}"
    digest = entry.get("sha256")
    if not isinstance(digest, str):
        raise MetadataError(f"{where}: sha256 {digest!r} is not a string")
    size = _count(entry, "bytes", where, LIMITS.shard_bytes)
    num_examples = _count(entry, "num_examples", where)
    if num_examples * FRAME_OVERHEAD > size:
        raise MetadataError(
            f"{where}: {num_examples:,} records cannot fit in {size:,} bytes "
            f"(a record takes at least {FRAME_OVERHEAD})"
        )
    index = entry.get("index")
    if index is not None and not adapter.offset_index:
        raise MetadataError(f"{where}: lists an offset index, which {adapter.name} has none of")
    if index is not None:
        index = _file_ref(index, f"{where} index", index_name(name))
        cap = num_examples * INDEX_LINE_BYTES
        _capped(index.bytes, cap, "bytes", f"{where} index of {num_examples} records")
    known = ("file", "num_examples", "bytes", "sha256", "index")
    extra = {key: value for key, value in entry.items() if key not in known}
    return ShardInfo(name, num_examples, size, digest, index, extra)


def read_metadata_bytes(data_dir: str | os.PathLike) -> bytes:
    """metadata.json's bytes, bounded by FILE_LIMITS.metadata_bytes: the one read of the file
    (every loader below, an append's witness sha256, the commit's recheck)."""
    return files.read_bounded(files.join(data_dir, METADATA_FILE), FILE_LIMITS.metadata_bytes)


def read_metadata_json(data_dir: str | os.PathLike) -> dict[str, Any]:
    """The parsed metadata.json of `data_dir`, unchecked (for tools that report problems)."""
    if not files.isdir(data_dir):
        reason = "is not a directory" if files.exists(data_dir) else "does not exist"
        raise IncompleteOutputError(f"{data_dir} {reason}: pass a segprep output directory")
    path = files.join(data_dir, METADATA_FILE)
    if not files.exists(path):
        if _committing(data_dir):
            raise IncompleteOutputError(
                f"{path} not found: a segprep run is committing into {data_dir} right now "
                "(its metadata.json is put in place last): open it again in a moment; if no "
                f"run is alive, `segprep verify --repair {data_dir}` finishes its commit"
            )
        if files.is_remote(data_dir) or files.isdir(files.join(data_dir, SEGPREP_DIR)):
            raise IncompleteOutputError(
                f"{path} not found: {data_dir} is not a finished segprep output "
                "(the job failed or is still running); re-run `segprep prepare`, or, if a run "
                f"was cut short while committing, `segprep verify --repair {data_dir}` "
                "finishes its commit"
            )
        raise IncompleteOutputError(
            f"{path} not found: no segprep run ever wrote into {data_dir}; pass the "
            "--output_dir of `segprep prepare`"
        )
    try:
        data = read_metadata_bytes(data_dir)
    except (files.NotAFileError, files.TooLargeError) as error:
        raise MetadataError(str(error)) from None
    return parse_json(data, path)


def _committing(data_dir: str | os.PathLike) -> bool:
    """Whether the output's manifest is a commit's journal: its metadata.json is then aside
    for the moment the commit's files move (or the commit was cut short)."""
    try:
        manifest = json_shape.loads(
            files.read_bounded(files.join(data_dir, MANIFEST_FILE), FILE_LIMITS.metadata_bytes),
            MANIFEST_FILE,
        )
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("state") == COMMITTING


def load(data_dir: str | os.PathLike, version: int | None = None) -> DatasetInfo:
    """The checked metadata of a segprep output directory (local path or gs://), as of
    `version` (None: the latest; DatasetInfo.at_version)."""
    info = DatasetInfo.from_json(read_metadata_json(data_dir))
    try:
        return info.at_version(version)
    except ValueError as error:
        raise MetadataError(f"{data_dir}: {error}") from None
