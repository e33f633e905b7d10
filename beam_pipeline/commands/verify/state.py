"""What one verify run has learnt so far, shared by its checks (records, classes, index,
duplicates, accounting): the problems found, the keys and record lengths read, what could
be counted."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from beam_pipeline.commands.shard_records import record_format
from beam_pipeline.commands.verify.class_count import ClassCount
from beam_pipeline.commands.verify.report import VerifyReport
from transforms import files
from transforms.format.dataset_info import ClassesInfo, MetadataError
from transforms.record_spec import stored_spec


def as_list(value: Any) -> list[Any]:
    """A list metadata.json holds, or none when it is damaged (the check of that field
    names it)."""
    return value if isinstance(value, list) else []


@dataclasses.dataclass
class Checked:
    base: str
    metadata: dict[str, Any]
    report: VerifyReport
    listed: set[str] = dataclasses.field(default_factory=set)  # shard names in metadata.json
    keys: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    records_complete: bool = True  # False once a shard could not be read to its end
    # shard file -> (key, serialized length) of each record, for shards read to the end
    records: dict[str, list[tuple[str | None, int]]] = dataclasses.field(default_factory=dict)
    rejects_read: bool = False
    kept_rejects: int = 0  # key_exists lines whose key a shard holds (counted once, stored)
    classes: ClassesInfo | None = None  # None with has_classes: a broken section
    class_counts: dict[str, ClassCount] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.mask_format = self.metadata.get("mask_format")
        self.adapter = record_format(self.metadata)  # check.py has refused a bad one
        self.spec = stored_spec(self.metadata)  # what every record must be
        self.has_classes = self.metadata.get("classes") is not None
        if self.has_classes:
            try:
                self.classes = ClassesInfo.from_json(self.metadata["classes"])
            except MetadataError as error:
                self.problem(f"{error}: class ids and statistics not checked")

    def problem(self, line: str) -> None:
        self.report.problems.append(line)

    def uncounted(self, split: str) -> None:
        """A record of `split` was not counted: its statistics cannot be compared (the
        reason is already a problem line of its own)."""
        if split in self.class_counts:
            self.class_counts[split].complete = False

    def unread(self, split: str) -> None:
        """Records of `split` were not read: nothing that needs every record is compared."""
        self.records_complete = False
        self.uncounted(split)

    def path(self, name: str) -> str:
        return f"{self.base}/{name}"

    def read(self, name: str, limit: int) -> bytes | None:
        """A file metadata.json lists, whole; a problem and None when it cannot be read."""
        path = self.path(name)
        if not files.exists(path):
            self.problem(f"{name}: missing (listed in metadata.json)")
            return None
        try:
            files.check_no_hole(path)
            return files.read_bounded(path, limit)
        except OSError as error:  # a FIFO, a device, a folder, a hole, larger than `limit`
            self.problem(f"{name}: not readable: {error}")
            return None
