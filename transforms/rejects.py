"""Reject reasons: every key that does not reach a shard leaves with one of these."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable


class Reason(enum.StrEnum):
    MISSING_IMAGE = "missing_image"
    MISSING_MASK = "missing_mask"
    DUPLICATE_KEY = "duplicate_key"
    UNRECOGNIZED_FILE = "unrecognized_file"
    NOT_A_FILE = "not_a_file"
    BAD_FILE_NAME = "bad_file_name"
    IMAGE_EMPTY = "image_empty"
    IMAGE_TRUNCATED = "image_truncated"
    IMAGE_UNREADABLE = "image_unreadable"
    IMAGE_TOO_LARGE = "image_too_large"
    MASK_EMPTY = "mask_empty"
    MASK_UNREADABLE = "mask_unreadable"
    MASK_TOO_LARGE = "mask_too_large"
    MASK_VARIABLE = "mask_variable"
    MASK_NOT_2D = "mask_not_2d"
    MASK_VALUES = "mask_values"
    SIZE_MISMATCH = "size_mismatch"
    NOT_IN_SPLIT = "not_in_split"
    # Not a reject: an image with no mask under --unlabeled_images skip, listed in
    # unlabeled.jsonl instead of rejects.jsonl (job/commit.py sets these apart).
    UNLABELED = "unlabeled"
    READ_ERROR = "read_error"
    KEY_EXISTS = "key_exists"  # `--append`: the output holds the key with other bytes
    DUPLICATE_IMAGE = "duplicate_image"  # --duplicates drop: a copy of the group's kept key
    LEAKS_INTO = "leaks_into"  # --leakage_check: a near-copy of an image of another output


class RejectError(Exception):
    """Raised by record logic when an entry must be rejected; carries the reason code."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True, order=True)
class Reject:
    """One line of rejects.jsonl."""

    key: str
    reason: Reason
    detail: str
    image: str | None = None
    mask: str | None = None

    def to_json_dict(self) -> dict[str, str | None]:
        return {
            "key": self.key,
            "image": self.image,
            "mask": self.mask,
            "reason": self.reason.value,
            "detail": self.detail,
        }


def rejects_jsonl(rejects: Iterable[Reject]) -> bytes:
    """rejects.jsonl's bytes: one sorted-key JSON line per reject, in reject order."""
    lines = [
        json.dumps(r.to_json_dict(), ensure_ascii=False, sort_keys=True) for r in sorted(rejects)
    ]
    return ("\n".join(lines) + "\n" if lines else "").encode()
