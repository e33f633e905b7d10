"""The mask-source protocol: where one entry's mask comes from, and how it becomes a record.

A source is a class in a module of its own and one line in `transforms.sources.registry` (the
two kinds of mask file share mask_files.py's class). The run plan picks the source once (by
name); each shard writer asks it for every pair's record.
What a source decides is its own: whether the mask is a file whose bytes the writer reads
(`reads_mask_file`), how those bytes or the entry's staged annotations become a mask, and
whether the record stores a binary or a class-id mask. The shared steps (image validation,
EXIF alignment, encoding, the Example) are `transforms.record`'s.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from transforms.limits import DEFAULT_LIMITS, InputLimits

if TYPE_CHECKING:
    from transforms.record import Record
    from transforms.record_spec import RecordSpec


@dataclasses.dataclass(frozen=True)
class SourceSettings:
    """What every source may need, resolved once by the run plan."""

    spec: RecordSpec  # what every record of the run is (classes, formats, sizes)
    fill: int | None = None  # annotation sources: the value of pixels nothing covers
    limits: InputLimits = DEFAULT_LIMITS
    thumbnails: bool = False  # records carry the duplicate search's thumbnail (Record.thumbnail)


class MaskSource(Protocol):
    name: ClassVar[str]  # the registry's key
    reads_mask_file: ClassVar[bool]  # True: the writer reads the entry's mask file for it

    def record(
        self,
        key: str,
        image_bytes: bytes,
        mask: Any,
        mask_bytes: bytes | None,
        settings: SourceSettings,
    ) -> Record:
        """The record of one pair; raises RejectError with the reason it cannot be made.

        `mask` is the pair's mask side (transforms.pairing: a SourceFile, or an annotation
        entry); `mask_bytes` its file's bytes when `reads_mask_file`, else None.
        """
        ...
