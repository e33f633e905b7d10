"""Binary mask files: `.mat` (a 0/1 variable) or PNG/JPEG images of 0/1 or 0/255 values."""

from __future__ import annotations

from typing import Any, ClassVar

from transforms.record import Record, make_record
from transforms.sources.base import SourceSettings


class BinaryMaskFiles:
    name: ClassVar[str] = "binary_files"
    reads_mask_file: ClassVar[bool] = True

    def record(
        self,
        key: str,
        image_bytes: bytes,
        mask: Any,
        mask_bytes: bytes | None,
        settings: SourceSettings,
    ) -> Record:
        return make_record(
            key,
            image_bytes,
            mask_bytes or b"",
            mask.path,
            settings.spec,
            limits=settings.limits,
            thumbnail=settings.thumbnails,
        )
