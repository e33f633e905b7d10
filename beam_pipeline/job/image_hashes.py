"""The duplicate search's plain-Python work: a pair's hashes, and band buckets compared.

Imports no Beam, so a local run's writer pool can compare buckets (job/duplicates.py sends
them there, as job/write_shards.py sends shards).
"""

from __future__ import annotations

from collections.abc import Sequence

from transforms import duplicates as dups

# Between stages a hash travels as plain tuples (Beam encodes tuples of str, int and bytes
# with its fast coder, dataclasses only by pickling). Each image is keyed D + 1 times into
# the band buckets, so there it travels as a small probe (source, key, phash, the first 16
# bytes of its sha256); the rest (full sha256, mask digest, signature) travels once, as a
# member, and is joined back only to the candidate pairs the buckets find.

_PREFIX = 16  # bytes of sha256 a probe carries: collisions need ~2^64 work, not 2^32


def as_tuple(tagged: dups.Tagged) -> tuple:
    """The whole hash: (source, key, phash, sha256, mask digest, signature)."""
    image = tagged.image
    return tagged.source, image.key, image.phash, image.sha256, image.mask, image.signature


def from_tuple(value: tuple) -> dups.Tagged:
    source, key, phash, sha256, mask, signature = value
    return dups.Tagged(source, dups.ImageHash(key, sha256, phash, mask, signature))


def as_probe(tagged: dups.Tagged) -> tuple:
    image = tagged.image
    prefix = bytes.fromhex(image.sha256[: 2 * _PREFIX]) if image.sha256 else b""
    return tagged.source, image.key, image.phash, prefix


def from_probe(value: tuple) -> dups.Tagged:
    """A probe as a hash the bucket search can compare (its sha256 the prefix, in hex)."""
    source, key, phash, prefix = value
    return dups.Tagged(source, dups.ImageHash(key, prefix.hex(), phash))


def identity(value: tuple) -> tuple[str, str]:
    """(source, key): what names one hash of the search, as a probe or a whole tuple."""
    return value[0], value[1]


def compare_buckets(buckets: Sequence[tuple[int, Sequence[tuple]]], distance: int) -> list:
    """Candidate pairs (probe, probe, distance) in each (band, probes) bucket: within the
    distance, each reported in one band only, this run's image first.

    This run's exact copies stand as one (dups.collapse_copies): each is reported once,
    paired with the key standing for its bytes, in band 0 (the first band identical hashes
    share); a candidate of the standing key with another output's image (a leak, once
    verified) is one for each copy too."""
    found = []
    for band, values in buckets:
        standing, copies = dups.collapse_copies([from_probe(value) for value in values])
        if band == 0:
            for kept, *same in copies.values():
                found += [(as_probe(kept), as_probe(copy), 0) for copy in same]
        for a, b, distance_ab in dups.bucket_pairs(band, standing, distance):
            leak = b.source and not dups.is_existing(b.source)
            for own in copies.get(a.image.key, (a,)) if leak else (a,):
                found.append((as_probe(own), as_probe(b), distance_ab))
    return found


def verify(candidate: tuple, a: tuple, b: tuple, min_similarity: float):
    """A candidate pair, given both whole hashes: a member pair ("pairs", (a, b)) with this
    run's or the appended output's images, a leak ("leaks", (key, (distance, other output,
    other key))) with another output's image, or nothing when the signatures disagree."""
    tagged_a, tagged_b = from_tuple(a), from_tuple(b)
    if not dups.verified(tagged_a.image, tagged_b.image, min_similarity):
        return None
    if tagged_b.source and not dups.is_existing(tagged_b.source):
        return "leaks", (tagged_a.image.key, (candidate[2], tagged_b.source, tagged_b.image.key))
    return "pairs", (as_member(tagged_a), as_member(tagged_b))


def as_member(tagged: dups.Tagged) -> tuple:
    """A hash as the groups need it: as_tuple without the signature (192 bytes that only the
    verification reads)."""
    image = tagged.image
    return tagged.source, image.key, image.phash, image.sha256, image.mask


def from_member(value: tuple) -> dups.Tagged:
    source, key, phash, sha256, mask = value
    return dups.Tagged(source, dups.ImageHash(key, sha256, phash, mask))
