"""Mask files, read by the writer: binary masks (`.mat` with a 0/1 variable, or PNG/JPEG
images of 0/1 or 0/255 values) and class-id masks (grey, palette or colour PNGs (8/16-bit)
and `.mat` label maps). One class serves both: only the record function differs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from transforms.record import Record, make_class_record, make_record
from transforms.sources.base import SourceSettings


@dataclasses.dataclass(frozen=True)
class MaskFiles:
    name: str  # the registry's key
    make: Callable[..., Record]  # transforms.record's make_record or make_class_record
    reads_mask_file: ClassVar[bool] = True

    def record(
        self,
        key: str,
        image_bytes: bytes,
        mask: Any,
        mask_bytes: bytes | None,
        settings: SourceSettings,
    ) -> Record:
        return self.make(
            key,
            image_bytes,
            mask_bytes or b"",
            mask.path,
            settings.spec,
            limits=settings.limits,
            thumbnail=settings.thumbnails,
        )


BINARY_FILES = MaskFiles("binary_files", make_record)
CLASS_FILES = MaskFiles("class_files", make_class_record)
