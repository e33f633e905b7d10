"""Class-id mask files: grey, palette or colour PNGs (8/16-bit) and `.mat` label maps."""

from __future__ import annotations

from typing import Any, ClassVar

from transforms.record import Record, make_class_record
from transforms.sources.base import SourceSettings


class ClassMaskFiles:
    name: ClassVar[str] = "class_files"
    reads_mask_file: ClassVar[bool] = True

    def record(
        self,
        key: str,
        image_bytes: bytes,
        mask: Any,
        mask_bytes: bytes | None,
        settings: SourceSettings,
    ) -> Record:
        return make_class_record(
            key,
            image_bytes,
            mask_bytes or b"",
            mask.path,
            settings.spec,
            limits=settings.limits,
            thumbnail=settings.thumbnails,
        )
