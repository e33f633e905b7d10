"""The duplicate search's plain-Python work: a pair's hashes, and band buckets compared.

Imports no Beam, so a local run's writer pool can compare buckets (job/duplicates.py sends
them there, as job/write_shards.py sends shards).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence

from transforms import duplicates as dups

# Between stages a hash travels as plain tuples (Beam encodes tuples of str, int and bytes
# with its fast coder, dataclasses only by pickling). Each image is keyed D + 1 times into
# the band buckets, so there it travels as a small probe (source, key, phash, the first 16
# bytes of its sha256 and of its mask's); the signature travels once, in the whole hash,
# and is joined back only to the candidate pairs whose bytes differ. Exact copies need no
# signature: the buckets give them to the groups as they are. The groups compare digests
# for equality only, so a member carries the same prefixes as a probe.

_PREFIX = 16  # bytes of a sha256 a probe carries: collisions need ~2^64 work, not 2^32


def as_tuple(tagged: dups.Tagged) -> tuple:
    """The whole hash: (source, key, phash, sha256, mask digest, signature)."""
    image = tagged.image
    return tagged.source, image.key, image.phash, image.sha256, image.mask, image.signature


def from_tuple(value: tuple) -> dups.Tagged:
    """A whole hash, or a member (as_member: the same fields, cut to what the groups need)."""
    source, key, phash, sha256, mask, signature = value
    return dups.Tagged(source, dups.ImageHash(key, sha256, phash, mask, signature))


def _prefix(digest: str) -> bytes:
    return bytes.fromhex(digest[: 2 * _PREFIX])


def as_probe(tagged: dups.Tagged) -> tuple:
    """(source, key, phash, sha256 prefix, mask digest prefix, signature token)."""
    image = tagged.image
    mask = None if image.mask is None else _prefix(image.mask)
    token = dups.signature_token(image.signature)
    return tagged.source, image.key, image.phash, _prefix(image.sha256), mask, token


def from_probe(value: tuple) -> dups.Tagged:
    """A probe as a hash the bucket search can compare (its digests the prefixes, in hex;
    its signature the token, which tells images of one look: dups.collapse_copies)."""
    source, key, phash, prefix, mask, token = value
    mask = None if mask is None else mask.hex()
    return dups.Tagged(source, dups.ImageHash(key, prefix.hex(), phash, mask, token))


def identity(value: tuple) -> tuple[str, str]:
    """(source, key): what names one hash of the search, as a probe or a whole tuple."""
    return value[0], value[1]


def compare_buckets(buckets: Sequence[tuple[int, Sequence[tuple]]], distance: int) -> list:
    """What each (band, probes) bucket finds within the distance, each pair in one band
    only, this run's image first: ("pairs", (member, member)) for identical bytes, which
    need no verification, and ("candidates", (probe, probe, distance)) to verify.

    This run's exact copies, and its images of one look (one hash, one non-flat signature),
    stand as one (dups.collapse_copies): each is reported once, paired with the key standing
    for it, in band 0 (the first band identical hashes share), unverified (identical
    signatures correlate at 1); a candidate of the standing key with another output's image
    (a leak, once verified) is one for each copy too."""
    found = []
    for band, values in buckets:
        values = dups.within_distance_of_another(values, distance)
        if not values:
            continue
        standing, copies = dups.collapse_copies([from_probe(value) for value in values])
        if band == 0:
            for kept, *same in copies.values():
                found += [("pairs", (as_member(kept), as_member(copy))) for copy in same]
        for a, b, distance_ab in dups.bucket_pairs(band, standing, distance):
            if a.image.sha256 and a.image.sha256 == b.image.sha256:  # stored and own copies
                found.append(("pairs", (as_member(a), as_member(b))))
                continue
            leak = b.source and not dups.is_existing(b.source)
            for own in copies.get(a.image.key, (a,)) if leak else (a,):
                found.append(("candidates", (as_probe(own), as_probe(b), distance_ab)))
    return found


def compare_pickled(buckets: bytes, distance: int) -> list:
    """compare_buckets of pickled buckets (what job/duplicates.py sends the pool)."""
    return compare_buckets(pickle.loads(buckets), distance)


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
    """A hash as the groups need it: its digests' prefixes in hex (the groups only compare
    them), its signature's token (images of one look are one class, as identical bytes)."""
    image = tagged.image
    mask = None if image.mask is None else image.mask[: 2 * _PREFIX]
    token = dups.signature_token(image.signature)
    return tagged.source, image.key, image.phash, image.sha256[: 2 * _PREFIX], mask, token


from_member = from_tuple  # a member has a whole hash's layout
