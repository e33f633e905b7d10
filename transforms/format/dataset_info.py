"""metadata.json as typed values, and the one loader every reader and tool goes through.

metadata.json is the commit marker of an output directory: no marker, no dataset. Its
parsed form is checked once here (names, counts, version) so that readers can trust it:
exact epochs and sharding rely on the per-shard counts, and every file name in it is
checked against transforms.format.naming, so a tampered file cannot point a reader outside the
output directory.

Local paths are read with the standard library, gs:// objects with google-cloud-storage
(transforms.gcs_client): no TensorFlow either way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from transforms import gcs_client
from transforms.class_stats import ClassStats, median_frequency_weights
from transforms.format.features import MASK_FORMATS, MAX_CLASS_ID, class_png_bit_depth
from transforms.format.naming import (
    METADATA_FILE,
    SEGPREP_DIR,
    TFDS_FILES,
    index_name,
    key_table_name,
    parse_shard_name,
)
from transforms.format.record_index import is_count

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

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def has_index(self) -> bool:
        """Every shard has its index file and the split its key table (or it is empty)."""
        return all(shard.index is not None for shard in self.shards) and (
            self.key_table is not None or not self.shards
        )

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
        return data


RGB = tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class ClassesInfo:
    """metadata.json's `classes` section (transforms.class_stats.classes_section): what the
    stored mask values of a `--mask_type classes` output mean, and their counts per split."""

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
        return median_frequency_weights(self.split_stats(split))

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
            if split.key_table:
                names.add(split.key_table.file)
            hashes = split.extra.get("hashes")  # beam_pipeline/job/hash_tables.py
            if isinstance(hashes, dict) and isinstance(hashes.get("file"), str):
                names.add(hashes["file"])
        listed = (self.extra.get("duplicates") or {}).get("file")
        if isinstance(listed, dict) and isinstance(listed.get("file"), str):
            names.add(listed["file"])
        return names

    def to_json(self) -> dict[str, Any]:
        data = dict(self.extra)
        data.update(
            format_version=self.format_version,
            mask_format=self.mask_format,
            splits={name: split.to_json() for name, split in self.splits.items()},
        )
        if self.tfds_files:
            data["tfds_files"] = [ref.to_json() for ref in self.tfds_files]
        if self.classes is not None:
            data["classes"] = self.classes.to_json()
        return data

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
        tfds_files = tuple(
            _file_ref(entry, f"tfds_files[{number}]")
            for number, entry in enumerate(data.get("tfds_files") or [])
        )
        for ref in tfds_files:
            if ref.file not in TFDS_FILES:
                raise MetadataError(f"tfds_files lists {ref.file!r}, not one of {TFDS_FILES}")
        classes = None
        if data.get("classes") is not None:
            classes = ClassesInfo.from_json(data["classes"])
            if mask_format != "png":
                raise MetadataError(f"class-id masks stored as {mask_format}: only png is lossless")
        known = ("format_version", "mask_format", "splits", "tfds_files", "classes")
        return cls(
            format_version=version,
            mask_format=mask_format,
            splits={name: _split(name, entry) for name, entry in splits.items()},
            tfds_files=tfds_files,
            classes=classes,
            extra={key: value for key, value in data.items() if key not in known},
        )


def _count(entry: Mapping[str, Any], field: str, where: str) -> int:
    value = entry.get(field)
    if not is_count(value):
        raise MetadataError(f"{where}: {field} {value!r} is not a count")
    return value


def _file_ref(entry: Any, where: str, expected_name: str | None = None) -> FileRef:
    if not isinstance(entry, dict):
        raise MetadataError(f"{where}: not a {{file, bytes, sha256}} object")
    name, digest = entry.get("file"), entry.get("sha256")
    if expected_name is not None and name != expected_name:
        raise MetadataError(f"{where}: file {name!r}, expected {expected_name!r}")
    if not isinstance(name, str) or not isinstance(digest, str):
        raise MetadataError(f"{where}: file and sha256 must be strings")
    return FileRef(name, _count(entry, "bytes", where), digest)


def _split(name: Any, entry: Any) -> SplitInfo:
    where = f"split {name!r}"
    if not re.fullmatch(r"[a-z]+", name):
        raise MetadataError(f"{where}: a split name is lowercase letters only")
    if not isinstance(entry, dict) or not isinstance(entry.get("shards"), list):
        raise MetadataError(f"{where} has no shards list")
    shards = tuple(_shard(name, number, shard) for number, shard in enumerate(entry["shards"]))
    num_examples = _count(entry, "num_examples", where)
    sizes = [shard.num_examples for shard in shards]
    if sum(sizes) != num_examples:
        raise MetadataError(f"{where}: shard counts {sizes} do not add up to {num_examples}")
    if entry.get("num_shards", len(shards)) != len(shards):
        raise MetadataError(f"{where}: num_shards {entry['num_shards']} but {len(shards)} listed")
    shape = entry.get("image_shape")
    if shape is not None and not (
        isinstance(shape, list) and len(shape) == 2 and all(is_count(n) and n for n in shape)
    ):
        raise MetadataError(f"{where}: image_shape {shape!r} is not [height, width]")
    key_table = entry.get("key_table")
    known = ("num_examples", "num_shards", "image_shape", "shards", "key_table")
    return SplitInfo(
        name=name,
        num_examples=num_examples,
        image_shape=(shape[0], shape[1]) if shape else None,
        shards=shards,
        key_table=None
        if key_table is None
        else _file_ref(key_table, f"{where} key_table", key_table_name(name)),
        extra={key: value for key, value in entry.items() if key not in known},
    )


def _shard(split: str, number: int, entry: Any) -> ShardInfo:
    if not isinstance(entry, dict):
        raise MetadataError(f"split {split!r} shard {number}: not an object")
    name = entry.get("file")
    parsed = parse_shard_name(name) if isinstance(name, str) else None
    if parsed is None or parsed[0] != split:
        raise MetadataError(f"{name!r} is not a shard name of split {split!r}")
    where = f"shard {name}"
    digest = entry.get("sha256")
    if not isinstance(digest, str):
        raise MetadataError(f"{where}: sha256 {digest!r} is not a string")
    index = entry.get("index")
    known = ("file", "num_examples", "bytes", "sha256", "index")
    return ShardInfo(
        file=name,
        num_examples=_count(entry, "num_examples", where),
        bytes=_count(entry, "bytes", where),
        sha256=digest,
        index=None if index is None else _file_ref(index, f"{where} index", index_name(name)),
        extra={key: value for key, value in entry.items() if key not in known},
    )


def join(data_dir: str | os.PathLike, name: str) -> str:
    """`name` (relative, from metadata.json) inside the output directory."""
    return f"{str(data_dir).rstrip('/')}/{name}"


def is_remote(path: str | os.PathLike) -> bool:
    return "://" in str(path)


def read_file(path: str) -> bytes:
    """Bytes of a local file (standard library) or a gs:// object (google-cloud-storage)."""
    if not is_remote(path):
        with open(path, "rb") as handle:
            return handle.read()
    return gcs_client.read_object(path)


def file_exists(path: str) -> bool:
    return os.path.exists(path) if not is_remote(path) else gcs_client.object_exists(path)


def read_metadata_json(data_dir: str | os.PathLike) -> dict[str, Any]:
    """The parsed metadata.json of `data_dir`, unchecked (for tools that report problems)."""
    if not is_remote(data_dir) and not os.path.isdir(data_dir):
        reason = "is not a directory" if os.path.exists(data_dir) else "does not exist"
        raise IncompleteOutputError(f"{data_dir} {reason}: pass a segprep output directory")
    path = join(data_dir, METADATA_FILE)
    if not file_exists(path):
        if is_remote(data_dir) or os.path.isdir(join(data_dir, SEGPREP_DIR)):
            raise IncompleteOutputError(
                f"{path} not found: {data_dir} is not a finished segprep output "
                "(the job failed or is still running); re-run `segprep prepare`"
            )
        raise IncompleteOutputError(
            f"{path} not found: no segprep run ever wrote into {data_dir}; pass the "
            "--output_dir of `segprep prepare`"
        )
    try:
        return json.loads(read_file(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MetadataError(f"{path} is not valid JSON: {error}") from error


def load(data_dir: str | os.PathLike) -> DatasetInfo:
    """The checked metadata of a segprep output directory (local path or gs://)."""
    return DatasetInfo.from_json(read_metadata_json(data_dir))
