"""File naming of the output directory: the only module that knows the names."""

from __future__ import annotations

import re

from transforms.format import record_formats

METADATA_FILE = "metadata.json"
REJECTS_FILE = "rejects.jsonl"
UNLABELED_FILE = "unlabeled.jsonl"  # images without a mask, under --unlabeled_images skip
DUPLICATES_FILE = "duplicates.jsonl"  # one line per group of duplicate images
# The default format's shard suffix; every registered format's is a shard suffix
# (record_formats: `.tfrecord`, `.array_record`).
SHARD_SUFFIX = record_formats.get(record_formats.DEFAULT).suffix
SHARD_SUFFIXES = tuple(sorted(fmt.suffix for fmt in record_formats.FORMATS.values()))
SPLITS = ("train", "validation")

# segprep's own folder inside an output directory (hidden: a `*.tfrecord` glob never sees it).
# It holds the run lock, the manifest of every final name segprep wrote, and each run's
# staging area; nothing under a final name exists until a run's commit moves it there.
SEGPREP_DIR = ".segprep"
LOCK_FILE = f"{SEGPREP_DIR}/lock"
MANIFEST_FILE = f"{SEGPREP_DIR}/manifest.json"
RUNS_DIR = f"{SEGPREP_DIR}/runs"
# The manifest's "state": a commit's journal while its files move, then the names it wrote.
COMMITTING = "committing"
COMMITTED = "committed"


# A run's id: its start time and 8 hex digits; `segprep index` puts "index-" before it
# (earlier versions wrote its time as 20261130-112520). Only folders so named under
# RUNS_DIR are segprep's to remove.
_RUN_ID_RE = re.compile(r"(?:index-)?\d{8}[T-]\d{6}-[0-9a-f]{8}")


def is_run_id(name: str) -> bool:
    return _RUN_ID_RE.fullmatch(name) is not None


def run_dir(run_id: str) -> str:
    """`.segprep/runs/<run_id>`: where one run stages everything before its commit.

    A refused or failed run's rejects stay here (`<run_dir>/rejects.jsonl`) for inspection.
    """
    return f"{RUNS_DIR}/{run_id}"


_SHARD_RE = re.compile(
    r"^(?P<split>[a-z]+)(?:_v(?P<version>\d{5}))?-(?P<index>\d{5})-of-(?P<count>\d{5})"
    r"(?P<suffix>\.\w+)$"
)
# Versions 2 and later of a dataset (`--append`) add shards `train_v00002-00000-of-00003`:
# new names that cannot collide with any earlier version's, that sort after them (`-` before
# `_`, versions zero-padded), and whose `train_v00002` prefix TFDS reads as a split name with
# its standard `{SPLIT}-{SHARD_X_OF_Y}` template (transforms/format/tfds_info.py).
FIRST_VERSION = 1
MAX_VERSION = 99999


def shard_name(
    split: str,
    index: int,
    num_shards: int,
    version: int = FIRST_VERSION,
    suffix: str = SHARD_SUFFIX,
) -> str:
    """`train-00003-of-00010.tfrecord` (version 1), `train_v00002-00000-of-00004.tfrecord`
    (shards a version >= 2 added): sortable, self-describing, TFDS-like; the suffix is the
    record format's (`train-00003-of-00010.array_record`)."""
    if not 0 <= index < num_shards:
        raise ValueError(f"shard index {index} outside 0..{num_shards - 1}")
    if suffix not in SHARD_SUFFIXES:
        raise ValueError(f"{suffix!r} is not a record format's suffix: {SHARD_SUFFIXES}")
    return f"{version_prefix(split, version)}-{index:05d}-of-{num_shards:05d}{suffix}"


def version_prefix(split: str, version: int = FIRST_VERSION) -> str:
    """`train` for version 1, `train_v00002` for version 2: the shard names' first part."""
    if not FIRST_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"version {version} outside {FIRST_VERSION}..{MAX_VERSION}")
    return split if version == FIRST_VERSION else f"{split}_v{version:05d}"


def parse_shard_name(name: str, suffix: str | None = None) -> tuple[str, int, int] | None:
    """(split, index, num_shards) for a shard file name, None for any other name.

    `index` and `num_shards` count the shards of the shard's version (shard_version);
    `suffix`: only shards of that record format; None: of any registered format.
    """
    match = _SHARD_RE.match(name)
    if not match or match["version"] == f"{FIRST_VERSION:05d}":
        return None
    if match["suffix"] not in ((suffix,) if suffix else SHARD_SUFFIXES):
        return None
    return match["split"], int(match["index"]), int(match["count"])


def looks_like_shard(name: str) -> bool:
    """A shard name, or any file ending in a record format's suffix."""
    return parse_shard_name(name) is not None or name.endswith(SHARD_SUFFIXES)


def shard_version(name: str) -> int:
    """The dataset version that added shard `name`: 1, or N for `<split>_vN-...`."""
    match = _SHARD_RE.match(name)
    if not match:
        raise ValueError(f"{name!r} is not a shard name")
    return int(match["version"] or FIRST_VERSION)


# The record index (transforms/format/record_index.py) lives in its own folder, so a shard glob
# such as
# `train-*-of-*.tfrecord` run at the top of the output never sees it. Its `.idx` offset files
# exist for formats that need them (record_formats: `offset_index`).
INDEX_DIR = "index"
INDEX_SUFFIX = ".idx"
KEY_TABLE_SUFFIX = ".keys.jsonl"
# Per split and version: ["key", "<sha256 of the source image and mask>"] sorted by key
# (transforms/format/digest_table.py), what `--append` looks keys up in.
DIGEST_TABLE_SUFFIX = ".digests.jsonl"
HASHES_SUFFIX = ".hashes.jsonl"
# What tfds.builder_from_directory reads (transforms/format/tfds_info.py writes them).
TFDS_DATASET_INFO = "dataset_info.json"
TFDS_FEATURES = "features.json"
TFDS_FILES = (TFDS_DATASET_INFO, TFDS_FEATURES)


def tfds_file_template(suffix: str) -> str:
    """TFDS's name for the shards, in its template language: it expands to shard_name()'s."""
    return "{SPLIT}-{SHARD_X_OF_Y}" + suffix


def index_name(shard_file: str) -> str:
    """`index/train-00003-of-00010.tfrecord.idx`: the record index of one shard."""
    if parse_shard_name(shard_file) is None:
        raise ValueError(f"{shard_file!r} is not a shard name")
    return f"{INDEX_DIR}/{shard_file}{INDEX_SUFFIX}"


def key_table_name(split: str, version: int = FIRST_VERSION) -> str:
    """`index/train.keys.jsonl`: key -> (shard, record number) for one split; a later
    version's rows (the records it added) are in `index/train.v2.keys.jsonl`."""
    return f"{INDEX_DIR}/{split}{_version_part(split, version)}{KEY_TABLE_SUFFIX}"


def digest_table_name(split: str, version: int = FIRST_VERSION) -> str:
    """`index/train.digests.jsonl`, `index/train.v2.digests.jsonl`: the content digests of
    the keys one version added to one split."""
    return f"{INDEX_DIR}/{split}{_version_part(split, version)}{DIGEST_TABLE_SUFFIX}"


def is_split_name(name: object) -> bool:
    """Lowercase letters only: every file name of a split is made from it."""
    return isinstance(name, str) and re.fullmatch(r"[a-z]+", name) is not None


def _version_part(split: str, version: int) -> str:
    if not is_split_name(split):
        raise ValueError(f"{split!r} is not a split name")
    if not FIRST_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"version {version} outside {FIRST_VERSION}..{MAX_VERSION}")
    return "" if version == FIRST_VERSION else f".v{version}"


# A key, digest or hash table name inside index/ (the version part never names version 1).
SIDE_TABLE_RE = re.compile(
    r"[a-z]+(?:\.v(?:[2-9]|[1-9]\d{1,4}))?(?:"
    + "|".join(
        re.escape(suffix) for suffix in (KEY_TABLE_SUFFIX, DIGEST_TABLE_SUFFIX, HASHES_SUFFIX)
    )
    + ")"
)


def hashes_name(split: str, version: int = FIRST_VERSION) -> str:
    """`index/train.hashes.jsonl`: the image hashes of one split, in key-table order; an
    append's rows (the records it added) are in `index/train.v2.hashes.jsonl`."""
    return key_table_name(split, version).removesuffix(KEY_TABLE_SUFFIX) + HASHES_SUFFIX


def hashes_version(split: str, name: str) -> int | None:
    """The version whose hash table of `split` is `name` (hashes_name's inverse); None for
    any other name."""
    match = re.fullmatch(
        rf"{INDEX_DIR}/{re.escape(split)}(?:\.v(?P<version>[2-9]|[1-9]\d{{1,4}}))?"
        + re.escape(HASHES_SUFFIX),
        name,
    )
    if match is None:
        return None
    return int(match["version"] or FIRST_VERSION)


def is_output_name(name: str) -> bool:
    """True for every top-level name a segprep run may publish in its output directory.

    A foreign file under such a name stops a run: segprep would have to replace it.
    """
    return name in (
        METADATA_FILE,
        REJECTS_FILE,
        UNLABELED_FILE,
        DUPLICATES_FILE,
        INDEX_DIR,
        *TFDS_FILES,
    ) or (parse_shard_name(name) is not None)
