"""One frozen settings object per stage of the job, made once by the run plan.

Kept free of Beam imports: the launcher builds these while a writer pool warms up beside it.
Kept free of numpy and Pillow too (transforms.codecs.class_mask is imported when a settings
object is made, not when this module is): `segprep --help` imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from transforms.format import record_formats
from transforms.limits import DEFAULT_LIMITS, InputLimits
from transforms.pairing import Layout, StagedEntries
from transforms.splits import FolderSplits, SplitFractions, SplitLists

if TYPE_CHECKING:
    from transforms.codecs.class_mask import ClassMaskSettings
    from transforms.format.dataset_info import FileRef
    from transforms.record_spec import RecordSpec
    from transforms.sources.base import SourceSettings


def _binary_spec() -> RecordSpec:
    from transforms.record_spec import RecordSpec

    return RecordSpec()


@dataclasses.dataclass(frozen=True)
class PlanningSettings:
    """Split fractions and how many shards: exactly one of num_shards and shard_size_mb."""

    # How a key finds its split: fractions by hash, official lists, or its first folder.
    fractions: SplitFractions | SplitLists | FolderSplits
    num_shards: int | None = None
    shard_size_mb: float | None = None
    min_total_shards: int = 1
    # transforms.format.record_formats: each ShardSpec carries it, naming and writing its shard
    record_format: str = record_formats.DEFAULT


@dataclasses.dataclass(frozen=True)
class ShardWriterSettings:
    """What writing a shard needs; resolved by the run plan, nothing left to guess here."""

    staging_dir: str  # the run's staging folder (local or gs://), ending in '/'
    spec: RecordSpec = dataclasses.field(default_factory=_binary_spec)  # what records are
    threads: int = 1  # threads that read and decode one shard's pairs
    pool: str | None = None  # key of this run's local writer pool; None: write in this process
    progress_dir: str | None = None  # local folder for progress count files; None: no progress
    limits: InputLimits = DEFAULT_LIMITS
    annotation_fill: int | None = None  # annotated runs: unlabeled pixels; None: masks are files
    mask_source: str = "binary_files"  # a name in transforms.sources.registry
    store_hashes: bool = False  # built records carry image hashes: stage them per shard

    @property
    def classes(self) -> ClassMaskSettings:
        return self.spec.classes

    @property
    def source_settings(self) -> SourceSettings:
        from transforms.sources.base import SourceSettings

        return SourceSettings(
            self.spec,
            self.annotation_fill,
            self.limits,
            thumbnails=self.store_hashes,  # the duplicate search hashes in the validation decode
        )


@dataclasses.dataclass(frozen=True)
class AppendSettings:
    """`--append`: the version this run adds, and what it was planned against."""

    version: int  # the new version's number: the output's latest + 1
    previous_sha256: str  # of the output's metadata.json when planned; the commit rechecks it
    # split -> (version, its digest table as metadata.json lists it: name relative to the
    # output, size, sha256) for the earlier versions that have the split
    digest_tables: Mapping[str, tuple[tuple[int, FileRef], ...]] = dataclasses.field(
        default_factory=dict
    )


@dataclasses.dataclass(frozen=True)
class CommitSettings:
    output_dir: str
    run_id: str
    parameters: Mapping[str, Any]
    spec: RecordSpec = dataclasses.field(default_factory=_binary_spec)  # what records are
    max_reject_fraction: float = 1.0
    started_at: float | None = None  # epoch seconds when the run was planned
    release_lock: bool = False  # remote runners: the job, not the launcher, ends the run
    # annotated runs: how the export's labels became class ids (metadata.json's classes.coco)
    annotations: Mapping[str, Any] | None = None
    append: AppendSettings | None = None  # `--append`: a new version of the output

    @property
    def classes(self) -> ClassMaskSettings:
        return self.spec.classes


@dataclasses.dataclass(frozen=True)
class LeakageCheck:
    """--leakage_check: another output folder (normalised, ending in '/') and its image-hash
    tables (index/*.hashes.jsonl) as its metadata.json lists them, checked by the launcher."""

    output_dir: str
    hash_tables: tuple[FileRef, ...]


@dataclasses.dataclass(frozen=True)
class DuplicateSettings:
    """Duplicate search before the split (docs/duplicates.md); None in JobSettings: off."""

    mode: str  # "group" or "drop"
    distance: int  # Hamming distance of near-duplicates
    fractions: SplitFractions | SplitLists | FolderSplits
    staging_dir: str
    pool: str | None = None  # key of the run's writer pool (hashing runs there too)
    leakage: tuple[LeakageCheck, ...] = ()
    # --append: (split, hashes table) of the images the output already stores, in
    # existing_dir (the output, normalised)
    existing: tuple[tuple[str, FileRef], ...] = ()
    existing_dir: str = ""
    # signature correlation confirming a candidate pair (benchmarks/duplicates.py chose it)
    min_similarity: float = 0.95
    # partitions of the whole-hash join (job/duplicates.py): about 2,000 hashes each at most
    join_parts: int = 512

    @property
    def official(self) -> bool:
        """--split_file or --split_by_folder: no entry may leave its listed split."""
        return not isinstance(self.fractions, SplitFractions)


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """Everything the graph needs, stage by stage."""

    layout: Layout
    entries: StagedEntries | None  # local folders: listed, paired and staged by the launcher
    planning: PlanningSettings
    writing: ShardWriterSettings
    commit: CommitSettings
    # gs:// annotated runs: the export's image records, staged by the launcher as record files
    # (launch/masks.py) that the job reads in parallel; the graph carries paths, never shapes
    staged_images: tuple[str, ...] = ()
    duplicates: DuplicateSettings | None = None
