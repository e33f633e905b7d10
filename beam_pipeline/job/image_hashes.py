"""The duplicate search's plain-Python work: a pair's hashes, and band buckets compared.

Imports no Beam, so a local run's writer pool can compare buckets (job/duplicates.py sends
them there, as it sends chunks of pairs to job/built_records.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from transforms import duplicates as dups
from transforms.pairing import Pair

# Between stages a hash travels as a plain tuple (source, key, phash, sha256, mask digest,
# signature):
# Beam encodes tuples of str and int with its fast coder, dataclasses only by pickling, and
# each image is keyed D + 1 times.


def as_tuple(tagged: dups.Tagged) -> tuple:
    image = tagged.image
    return tagged.source, image.key, image.phash, image.sha256, image.mask, image.signature


def from_tuple(value: tuple) -> dups.Tagged:
    source, key, phash, sha256, mask, signature = value
    return dups.Tagged(source, dups.ImageHash(key, sha256, phash, mask, signature))


def hashes_of(pair: Pair) -> dups.ImageHash | None:
    """The image's hashes a built pair carries (None: rejected, or not built)."""
    return getattr(pair.image, "hashes", None)


def compare_buckets(
    buckets: Sequence[tuple[int, Sequence[tuple]]], distance: int, min_similarity: float
):
    """Every verified near copy in each (band, hash tuples) bucket: pairs with this run's or
    the appended output's images (dups.EXISTING sources) as member pairs, and leaks
    (another output's image) as (key, (distance, other output, other key)).

    This run's exact copies stand as one (dups.collapse_copies): each is reported once,
    paired with the key standing for its bytes, in band 0 (the first band identical hashes
    share); a leak of the standing key is a leak of each copy."""
    found, leaks = [], []
    for band, values in buckets:
        standing, copies = dups.collapse_copies([from_tuple(value) for value in values])
        if band == 0:
            for kept, *same in copies.values():
                found += [(as_member(kept), as_member(copy)) for copy in same]
        for a, b, distance_ab in dups.bucket_pairs(band, standing, distance):
            if not dups.verified(a.image, b.image, min_similarity):
                continue
            if b.source and not dups.is_existing(b.source):
                for own in copies.get(a.image.key, (a,)):
                    leaks.append((own.image.key, (distance_ab, b.source, b.image.key)))
            else:
                found.append((as_member(a), as_member(b)))
    return found, leaks


def as_member(tagged: dups.Tagged) -> tuple:
    """A hash as the groups need it: as_tuple without the signature (192 bytes that only the
    bucket comparison reads)."""
    image = tagged.image
    return tagged.source, image.key, image.phash, image.sha256, image.mask


def from_member(value: tuple) -> dups.Tagged:
    source, key, phash, sha256, mask = value
    return dups.Tagged(source, dups.ImageHash(key, sha256, phash, mask))
