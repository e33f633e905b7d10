"""Hashing one chunk of pairs: plain Python, so a local run's writer pool can run it.

Imports no Beam: the writer processes import this module when their first chunk arrives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from beam_pipeline.job.settings import DuplicateSettings
from beam_pipeline.job.shard_work import read_source
from transforms.duplicates import ImageHash, UnhashableImage, digest, perceptual_hash
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
        phash = perceptual_hash(data, limits.pixels)
        mask = None
        if settings.mask_digests and isinstance(pair.mask, SourceFile):
            mask = digest(read_source(pair.mask, limits.mask_bytes, Reason.MASK_TOO_LARGE))
        hashes = ImageHash(pair.key, digest(data), phash, mask)
    except (RejectError, UnhashableImage):
        pass  # the writer reads the entry again and rejects it with the precise reason
    hashed = HashedFile(image.path, image.size, image.regular, hashes)
    return dataclasses.replace(pair, image=hashed)


def hash_pairs(settings: DuplicateSettings, pairs: Sequence[Pair]) -> list[Pair]:
    return [hash_pair(settings, pair) for pair in pairs]


def hashes_of(pair: Pair) -> ImageHash | None:
    return getattr(pair.image, "hashes", None)
