"""Hashing one chunk of pairs: plain Python, so a local run's writer pool can run it.

Imports no Beam: the writer processes import this module when their first chunk arrives.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Sequence

from PIL import Image

from beam_pipeline.job.settings import DuplicateSettings
from beam_pipeline.job.shard_work import read_source
from transforms.duplicates import (
    THUMB_SIDE,
    ImageHash,
    UnhashableImage,
    digest,
    fingerprint,
    thumbnail,
)
from transforms.pairing import Pair, SourceFile
from transforms.rejects import Reason, RejectError


@dataclasses.dataclass(frozen=True, order=True)
class HashedFile(SourceFile):
    """An image file with its hashes, carried by the pair to the shard writer, which stores
    them for the accepted entries (None: not decodable; the writer rejects it with a reason)."""

    hashes: ImageHash | None = dataclasses.field(default=None, compare=False)


def hash_pair(settings: DuplicateSettings, pair: Pair) -> Pair:
    """The pair, its image carrying its hashes when the image can be read and decoded."""
    limits = settings.limits
    image = pair.image
    hashes = None
    try:
        data = read_source(image, limits.image_bytes, Reason.IMAGE_TOO_LARGE)
        thumb = _thumbnail(data, limits.pixels)
        mask = None
        if settings.mask_digests and isinstance(pair.mask, SourceFile):
            mask = digest(read_source(pair.mask, limits.mask_bytes, Reason.MASK_TOO_LARGE))
        hashes = fingerprint(pair.key, data, thumb, mask)
    except (RejectError, UnhashableImage):
        pass  # the writer reads the entry again and rejects it with the precise reason
    hashed = HashedFile(image.path, image.size, image.regular, hashes)
    return dataclasses.replace(pair, image=hashed)


def _thumbnail(data: bytes, max_pixels: int | None):
    """The image's hashing thumbnail; JPEGs decoded DCT-scaled (Pillow's draft) to the
    smallest size above twice the thumbnail's side, about 1/64 of the pixels."""
    try:
        with Image.open(io.BytesIO(data)) as opened:
            width, height = opened.size
            if max_pixels is not None and width * height > max_pixels:
                raise UnhashableImage(f"{width}x{height} is over the pixel limit")
            opened.draft("RGB", (2 * THUMB_SIDE, 2 * THUMB_SIDE))
            return thumbnail(opened)
    except UnhashableImage:
        raise
    except Exception as error:  # noqa: BLE001 - decoders raise many undocumented types
        raise UnhashableImage(f"{type(error).__name__}: {error}") from None


def hash_pairs(settings: DuplicateSettings, pairs: Sequence[Pair]) -> list[Pair]:
    return [hash_pair(settings, pair) for pair in pairs]


def hashes_of(pair: Pair) -> ImageHash | None:
    return getattr(pair.image, "hashes", None)
