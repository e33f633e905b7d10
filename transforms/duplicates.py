"""Exact and near-duplicate images: the hashes, the band search, the check and the groups.

Pure code; the job (beam_pipeline/job/duplicates.py) runs it as Beam transforms.

Each image gets the sha256 of its bytes (exact copies), a 64-bit perceptual hash and a
colour signature, both from one 32x32 RGB thumbnail (`thumbnail`, `fingerprint`). The hash
is the signs, against their median, of the 8x8 lowest frequencies of the DCT of the grey
thumbnail. JPEGs are decoded DCT-scaled (Pillow's `draft`), about 1/64 of the pixels.
Low frequencies survive resizing, re-encoding and small crops; a brightness shift moves only
the DC term (left out of the median), a contrast change scales every term alike.

The hash mostly sees the silhouette: distinct portraits of one framing land within a few
bits of each other. So the hash only finds candidates, and a candidate pair counts when the
two colour signatures (the thumbnail at 8x8x3, less its mean, as int8) correlate closely
(`verified`). benchmarks/duplicates.py measures both stages.

Candidates are pairs within Hamming distance D. The search splits the 64 bits into D + 1
bands: two hashes within D differ in at most D bands, so (pigeonhole) they agree on at least
one whole band, and looking only inside buckets of equal band values finds every such pair.
A pair is reported from the first band it agrees on only, so no shuffle removes repeats.
Groups are complete linkage over the verified pairs (`complete_groups`): no chains.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import functools
import hashlib
import heapq
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image

from transforms import json_shape
from transforms.codecs.pixels import eight_bit, on_background

BITS = 64
_SIDE = 32  # the grey image the DCT sees
THUMB_SIDE = _SIDE  # the RGB thumbnail hashes and signatures are computed from
_LOW = 8  # its lowest 8x8 frequencies make the 64 bits
MAX_DISTANCE = 31  # D + 1 bands of at least 2 bits each
SIGNATURE_SIDE = 8  # the signature is the thumbnail box-filtered to 8x8x3 (192 bytes)
# A candidate's chroma must correlate this well too (verified); below CHROMA_FLOOR (the
# root mean square of a signature's chroma, in its int8 units) an image counts as grey.
# Chosen on portraits in front of near-identical backdrops and on held-out portraits
# (docs/duplicates.md): different people in dark clothes reach 0.89-0.925.
MIN_CHROMA_SIMILARITY = 0.93
CHROMA_FLOOR = 2.0
# Signatures this close are a re-encoded copy's (0.985-0.999 on photo tiles): JPEG keeps
# a small image's light and subsamples its colour, so its chroma may fall to 0.88.
CLOSE_SIMILARITY = 0.985
CLOSE_MIN_CHROMA_SIMILARITY = 0.88


class UnhashableImage(ValueError):
    """The image cannot be decoded for hashing (the writer will reject it with its reason)."""


@functools.cache
def _dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II as a matrix: coefficients = M @ x @ M.T. Made once per process
    (read-only): every image's hash multiplies by it."""
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    matrix = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    matrix[0] /= np.sqrt(2.0)
    matrix.flags.writeable = False
    return matrix


def _phashes(grey: np.ndarray) -> list[int]:
    """The 64-bit hash of each of a (count, 32, 32) float64 grey stack, in a few numpy calls:
    bit i set when low coefficient i is above the median of the 63 non-DC ones (row-major
    over the 8x8 block, DC bit always 0)."""
    count = len(grey)
    matrix = _dct_matrix(_SIDE)[:_LOW]  # only the low 8x8 coefficients are kept
    low = (matrix @ grey @ matrix.T).reshape(count, _LOW * _LOW)
    median = np.partition(low[:, 1:], 31, axis=1)[:, 31]  # of 63 values: no mean to take
    bits = low > median[:, None]
    bits[:, 0] = False
    return [int.from_bytes(row.tobytes(), "big") for row in np.packbits(bits, axis=1)]


def thumbnail(image: Image.Image) -> np.ndarray:
    """THUMB_SIDE x THUMB_SIDE x 3 uint8 RGB pixels of an opened image: what every hash and
    signature is computed from. The caller decides the decode (a JPEG draft scale); this
    only converts and box-filters, so hashing costs no second decode of the image."""
    image = eight_bit(image)
    if "A" in image.getbands():  # transparent pixels count as white, as most viewers show
        image = on_background(image, (255, 255, 255))
    if image.mode != "RGB":  # convert() copies even an RGB image: skipped, same pixels
        image = image.convert("RGB")
    small = image.resize((THUMB_SIDE, THUMB_SIDE), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.uint8)


def fingerprint(key: str, image_bytes: bytes, thumb: np.ndarray) -> ImageHash:
    """The image's hashes from its bytes (sha256) and its thumbnail (perceptual hash and
    verification signature)."""
    return fingerprints([Unhashed(key, digest(image_bytes), thumb)])[0]


@dataclasses.dataclass(frozen=True)
class Unhashed:
    """An image whose sha256 is known and whose thumbnail waits to be hashed."""

    key: str
    sha256: str
    thumbnail: np.ndarray = dataclasses.field(compare=False, repr=False)
    mask: str | None = None


def fingerprints(images: Sequence[Unhashed]) -> list[ImageHash]:
    """The hashes of many thumbnails at once: the one function every hashing path calls. A
    writer hashes a few hundred images per call, so numpy's per-call cost is paid per batch,
    not per image, and each image gets the bits it gets alone (the test holds both equal)."""
    if not images:
        return []
    thumbs = np.stack([image.thumbnail for image in images])
    count = len(images)
    # PIL's own RGB -> L weights and rounding, on all thumbnails stacked into one tall image
    tall = Image.fromarray(thumbs.reshape(count * _SIDE, _SIDE, 3)).convert("L")
    grey = np.asarray(tall, dtype=np.float64).reshape(count, _SIDE, _SIDE)
    return [
        ImageHash(image.key, image.sha256, phash, image.mask, signature)
        for image, phash, signature in zip(
            images, _phashes(grey), _colour_signatures(thumbs), strict=True
        )
    ]


def _colour_signatures(thumbs: np.ndarray) -> list[bytes]:
    """The colour signature of each of a stack of thumbnails: SIGNATURE_SIDE^2 x 3 signed
    bytes, the thumbnail's colours box-filtered, minus their one mean over every pixel and
    channel, scaled to +-127. One mean for all channels, not one per channel, so the
    background's and the clothes' colours count; brightness (a factor) and contrast (a blend
    with the mean grey) change only that mean and the scale, which the correlation ignores.
    A flat image is all zeros, correlated with nothing but itself. The box sums are of
    integers, so exact in any order: each signature is the one its thumbnail gets alone."""
    block = THUMB_SIDE // SIGNATURE_SIDE
    count = len(thumbs)
    shape = (count * SIGNATURE_SIDE, block, SIGNATURE_SIDE, block, 3)
    # A block's rows added as whole slices, then its columns: ten times faster than
    # numpy's reduce over two strided axes, and the same integers.
    rows = thumbs.astype(np.int32).reshape(shape)
    columns = sum(rows[:, row] for row in range(block))
    sums = sum(columns[:, :, column] for column in range(block))
    pixels = (sums / float(block * block)).reshape(count, -1)
    centred = pixels - pixels.mean(axis=1, keepdims=True)
    peak = np.abs(centred).max(axis=1)
    scaled = np.round(centred / np.where(peak == 0, 1.0, peak)[:, None] * 127)
    return [row.tobytes() for row in scaled.astype(np.int8)]


def similarity(a: bytes, b: bytes) -> float:
    """Normalised correlation of two colour signatures, -1..1 (1.0 for two flat images)."""
    x = np.frombuffer(a, dtype=np.int8).astype(np.float64)
    y = np.frombuffer(b, dtype=np.int8).astype(np.float64)
    norms = float(np.sqrt((x @ x) * (y @ y)))
    if norms == 0:
        return 1.0 if not x.any() and not y.any() else 0.0
    return float(x @ y) / norms


def _chroma(signature: bytes) -> np.ndarray | None:
    """A signature's colour apart from its brightness: each cell less the mean of its three
    channels (the signature's one mean cancels). None when that is too faint to compare
    (a grey or nearly grey image, where it is JPEG's chroma noise)."""
    cells = np.frombuffer(signature, dtype=np.int8).astype(np.float64).reshape(-1, 3)
    chroma = (cells - cells.mean(axis=1, keepdims=True)).ravel()
    if float(np.sqrt(chroma @ chroma / chroma.size)) < CHROMA_FLOOR:
        return None
    return chroma


def chroma_similarity(a: bytes, b: bytes) -> float | None:
    """Normalised correlation of two signatures' chroma; None when either image has too
    little colour to tell."""
    x, y = _chroma(a), _chroma(b)
    if x is None or y is None:
        return None
    return float(x @ y) / float(np.sqrt((x @ x) * (y @ y)))


def verified(a: ImageHash, b: ImageHash, min_similarity: float) -> bool:
    """A band-search candidate confirmed as a near copy (the job's default minimum is 0.95,
    DuplicateSettings.min_similarity): the same bytes, or signatures that correlate at
    `min_similarity` or more whose chroma also correlates at MIN_CHROMA_SIMILARITY or more
    (CLOSE_MIN_CHROMA_SIMILARITY when the signatures correlate at CLOSE_SIMILARITY or more).
    The chroma check is what tells two people apart in front of one backdrop: the backdrop
    and the silhouette make most of the signature, hair, skin and clothes most of its
    chroma; brightness and contrast changes scale the chroma, which the correlation ignores.
    A flat image (an all-zero signature: one colour, whatever its brightness) is confirmed
    only by identical bytes: a black and a white frame are not copies of each other.
    An image without a signature (a hash table written before signatures) is confirmed by
    the perceptual-hash distance alone."""
    if a.sha256 == b.sha256 or not a.signature or not b.signature:
        return True
    if not any(a.signature) or not any(b.signature):
        return False  # a flat image: its hash is rounding noise, its brightness not kept
    agree = similarity(a.signature, b.signature)
    return agree >= min_similarity and chroma_agrees(a.signature, b.signature, agree)


def chroma_agrees(a: bytes, b: bytes, agree: float) -> bool:
    """The chroma check of two signatures that correlate at `agree` (see verified)."""
    chroma = chroma_similarity(a, b)
    if chroma is None:
        return True
    close = agree >= CLOSE_SIMILARITY
    return chroma >= (CLOSE_MIN_CHROMA_SIMILARITY if close else MIN_CHROMA_SIMILARITY)


def perceptual_hash(image_bytes: bytes, *, mirrored: bool = False) -> int:
    """The 64-bit perceptual hash the job gives an image's bytes: the same decode (a kept
    RGB JPEG drafted as codecs/image.validate_image drafts it), thumbnail and DCT, so a tool
    that plants or checks copies (sample-data, the benchmarks) sees the job's distances.
    `mirrored`: of the horizontal mirror image (benchmarks/duplicates.py weighs it).
    UnhashableImage when the bytes cannot be decoded."""
    try:
        with Image.open(io.BytesIO(image_bytes)) as image:
            if image.format == "JPEG" and image.mode == "RGB":
                image.draft(None, (2 * THUMB_SIDE, 2 * THUMB_SIDE))
            thumb = thumbnail(image)
    except Exception as error:  # noqa: BLE001 - decoders raise many undocumented types
        raise UnhashableImage(f"{type(error).__name__}: {error}") from None
    if mirrored:
        thumb = np.ascontiguousarray(thumb[:, ::-1])
    return fingerprints([Unhashed("", "", thumb)])[0].phash


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


@dataclasses.dataclass(frozen=True, order=True)
class ImageHash:
    """One image's hashes; `mask` is the sha256 of its mask file (None: no mask file);
    `signature` is the verification signature that confirms a band-search candidate
    (b"": none stored, e.g. an output written before signatures existed)."""

    key: str
    sha256: str
    phash: int
    mask: str | None = None
    signature: bytes = dataclasses.field(default=b"", compare=False)

    def row(self) -> dict[str, str]:
        """Its line in index/<split>.hashes.jsonl; `mask`, the mask file's sha256, when
        there is one (an append's search tells exact copies with other masks by it); `sig`,
        the signature in base64 (256 characters), only when there is one."""
        row = {"key": self.key, "sha256": self.sha256, "phash": f"{self.phash:016x}"}
        if self.mask is not None:
            row["mask"] = self.mask
        if self.signature:
            row["sig"] = base64.b64encode(self.signature).decode("ascii")
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> ImageHash:
        phash = _hex_field(row["phash"], 16, "phash")
        sig = row.get("sig", "")
        if not isinstance(sig, str):
            raise ValueError(f"sig {sig!r} is not base64")
        signature = base64.b64decode(sig, validate=True)  # binascii.Error is a ValueError
        if signature and len(signature) != _SIGNATURE_BYTES:  # correlated with this run's
            raise ValueError(f"sig holds {len(signature)} bytes, not {_SIGNATURE_BYTES}")
        mask = row.get("mask")  # None: no mask file, or a table written before masks were
        if mask is not None:
            mask = _hex_field(mask, 64, "mask")
        sha256 = _hex_field(row["sha256"], 64, "sha256")  # the search takes its bytes
        return cls(str(row["key"]), sha256, int(phash, 16), mask, signature)


def _hex_field(value: object, digits: int, name: str) -> str:
    """A stored row's hex field, exactly `digits` hex digits: int(x, 16) would also take a
    sign, "_" and spaces ("-000000000000001" is -1 to it), bytes.fromhex spaces."""
    if not (isinstance(value, str) and re.fullmatch(f"[0-9a-fA-F]{{{digits}}}", value)):
        raise ValueError(f"{name} {value!r} is not {digits} hex digits")
    return value


_SIGNATURE_BYTES = SIGNATURE_SIDE * SIGNATURE_SIDE * 3


def hash_rows_bytes(hashes: Iterable[ImageHash]) -> bytes:
    return b"".join(
        (json.dumps(h.row(), ensure_ascii=False, sort_keys=True) + "\n").encode() for h in hashes
    )


def _parsed_lines(data: bytes, parse: Callable[[str], Any]) -> list:
    """`parse` of each non-blank line of a JSON-lines file; ValueError naming the first bad
    line. Split on its newlines only: str.splitlines would also split on U+2028, U+2029 and
    U+0085, which a key may hold unescaped."""
    parsed = []
    lines = [line.decode("utf-8") for line in data.splitlines()]
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed.append(parse(line))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"line {number}: {error}") from None
    return parsed


def parse_hash_rows(data: bytes) -> list[ImageHash]:
    """The rows of a hashes file; ValueError naming the first bad line."""
    return _parsed_lines(
        data, lambda line: ImageHash.from_row(json_shape.loads(line, "hashes file"))
    )


# ---- the band search -------------------------------------------------------------------


@functools.cache
def band_edges(distance: int) -> tuple[tuple[int, int], ...]:
    """(shift, width) of the D + 1 bands covering the 64 bits, widths differing by 1 at most."""
    if not 0 <= distance <= MAX_DISTANCE:
        raise ValueError(f"distance {distance} outside 0..{MAX_DISTANCE}")
    count = distance + 1
    edges, start = [], 0
    for band in range(count):
        width = BITS // count + (band < BITS % count)
        edges.append((BITS - start - width, width))
        start += width
    return tuple(edges)


def bands(phash: int, distance: int) -> list[int]:
    """The value of each band of `phash`, band 0 first."""
    return [(phash >> shift) & ((1 << width) - 1) for shift, width in band_edges(distance)]


@dataclasses.dataclass(frozen=True)
class Tagged:
    """A hash in the search, with where it comes from: "" for this run's images, the output
    folder it was read from (--leakage_check), or existing_source(split) for the images an
    appended output already stores."""

    source: str
    image: ImageHash


_ROWS = 256  # bucket members compared against the whole bucket per numpy block
_OWN, _STORED, _OTHER = 0, 1, 2  # where a probe's image comes from (its source)


def _kind(source: str) -> int:
    return _OWN if not source else _STORED if is_existing(source) else _OTHER


def bucket_pairs(
    band: int, members: Sequence[Tagged], distance: int
) -> Iterator[tuple[Tagged, Tagged, int]]:
    """Pairs within `distance` among the hashes sharing band `band`'s value, each reported
    once over all bands (here only if no earlier band is shared): pairs with one of this
    run's images, and (an append) pairs of two images the output stores, so the groups are
    those of the whole dataset; never two of another output's, nor one of another output's
    with a stored one. The run's own image comes first in a mixed pair.

    Work is that of the members a pair can start from (this run's, the appended output's)
    times the bucket, in numpy blocks of _ROWS rows (a few numpy calls per block, not per
    member); memory is that of one block.
    """
    kinds = np.array([_kind(m.source) for m in members], dtype=np.int8)
    own, stored = kinds == _OWN, kinds == _STORED
    if len(members) < 2 or not (own.any() or stored.sum() > 1):
        return
    values = np.array([m.image.phash for m in members], dtype=np.uint64)
    columns = np.arange(len(members))
    pairing = kinds != _OTHER
    starts = np.flatnonzero(pairing)  # another output's hash starts no pair
    for start in range(0, len(starts), _ROWS):
        rows = starts[start : start + _ROWS]
        apart = np.bitwise_count(values[rows, None] ^ values[None, :])
        # Each pair once (i < j between two that start pairs, else from the one that does);
        # another output's hash only against this run's.
        close = (apart <= distance) & ((columns[None, :] > rows[:, None]) | ~pairing[None, :])
        close &= own[rows, None] | own[None, :] | (stored[rows, None] & stored[None, :])
        block, second = np.nonzero(close)
        first = rows[block]
        keep = _first_shared_band_is(values[first] ^ values[second], band, distance)
        found = zip(first[keep].tolist(), second[keep].tolist(), block[keep].tolist(), strict=True)
        for i, j, row in found:
            a, b = (members[i], members[j]) if own[i] or not own[j] else (members[j], members[i])
            if b.source == "" and b.image.key == a.image.key:
                continue
            yield a, b, int(apart[row, j])


def within_distance_of_another(probes: Sequence[tuple], distance: int) -> list[tuple]:
    """The probes (source, key, phash, sha256 prefix, ...) of a bucket that a pair can hold,
    in their order: those within `distance` of another probe they can pair with (another
    output's only with this run's; the appended output's with this run's and its own), and
    those whose bytes another probe claims too (the copies collapse_copies joins). The
    per-member work that follows is then that of the few close hashes, not of the whole
    bucket: of 8,000 distinct photos' 98,800 bucket entries, 16,702 are kept.

    Distances are taken between distinct hash values, and only from the values a pair can
    start from (this run's and the appended output's) to every value: a bucket of n rows of
    one hash (another output's blank frames, a restamped table) costs n, not n^2, and
    another output's hashes are never compared with each other."""
    count = len(probes)
    if count < 2:
        return []
    values = np.fromiter((probe[2] for probe in probes), dtype=np.uint64, count=count)
    kinds = np.fromiter((_kind(probe[0]) for probe in probes), dtype=np.int8, count=count)
    unique, inverse = np.unique(values, return_inverse=True)
    held = np.zeros((len(unique), 3), dtype=np.int64)  # probes of each kind per value
    np.add.at(held, (inverse, kinds), 1)
    own, pairing = held[:, _OWN] > 0, held[:, _OWN] + held[:, _STORED] > 0
    near_any = np.zeros(len(unique), dtype=bool)  # another value within distance
    near_pairing = np.zeros(len(unique), dtype=bool)  # another own or stored value
    near_own = own.copy()  # an own value within distance (its own value included)
    starts = np.flatnonzero(pairing)
    for start in range(0, len(starts), _ROWS):
        rows = starts[start : start + _ROWS]
        close = np.bitwise_count(unique[rows, None] ^ unique[None, :]) <= distance
        close[np.arange(len(rows)), rows] = False  # the value itself: counted in `held`
        near_any[rows] = close.any(axis=1)
        near_pairing[rows] = (close & pairing[None, :]).any(axis=1)
        near_own |= (close & own[rows, None]).any(axis=0)
    keep = np.empty((3, len(unique)), dtype=bool)
    keep[_OWN] = near_any | (held.sum(axis=1) > 1)
    keep[_STORED] = near_pairing | (held[:, _OWN] + held[:, _STORED] > 1)
    keep[_OTHER] = near_own
    near = keep[kinds, inverse].tolist()
    # another output's bytes are not compared (its rows carry none)
    bytes_of = [
        probe[3] if kind != _OTHER else None
        for probe, kind in zip(probes, kinds.tolist(), strict=True)
    ]
    claimed = collections.Counter(bytes_of)
    return [
        probe
        for probe, close, same in zip(probes, near, bytes_of, strict=True)
        if close or (same is not None and claimed[same] > 1)
    ]


def _first_shared_band_is(xor: np.ndarray, band: int, distance: int) -> np.ndarray:
    """Which of the pairs (their hashes' XOR) share no band before `band`: the ones this
    band reports (they share `band` itself, being in its bucket)."""
    first = np.ones(len(xor), dtype=bool)
    for shift, width in band_edges(distance)[:band]:
        first &= ((xor >> np.uint64(shift)) & np.uint64((1 << width) - 1)) != 0
    return first


def collapse_copies(members: Sequence[Tagged]) -> tuple[list[Tagged], dict[Any, list[Tagged]]]:
    """Images that pair with exactly the same images stand as one in the search, the
    smallest key for all of them: this run's of one sha256, or of one perceptual hash and
    one colour signature (`look`); so do the appended output's own (apart from this run's:
    a leak is looked for with this run's images only). Returns the members that stand
    (one per look of another output's, whose others are left out: a leak names the
    closest image, the smallest key among equals) and, per standing image of two or more
    copies, all of them (the standing one first), keyed by its key (this run's) or
    (STORED, key). A copy-heavy scrape, or thousands of re-encodes or frames of one hash
    and signature, then costs the search its distinct images, not its copies squared."""
    by_look: dict[tuple, list[Tagged]] = {}
    standing: list[Tagged] = []
    for member in members:
        kind = _kind(member.source)
        same = look(member.image)
        if same is None and (kind == _OTHER or not member.image.sha256):
            standing.append(member)
            continue
        where = member.source if kind == _OTHER else kind
        by_look.setdefault((where, same or member.image.sha256), []).append(member)
    copies: dict[Any, list[Tagged]] = {}
    for (where, _), same in by_look.items():
        same.sort(key=lambda member: member.image.key)
        standing.append(same[0])
        if len(same) > 1 and where in (_OWN, _STORED):
            copies[(STORED, same[0].image.key) if where == _STORED else same[0].image.key] = same
    return standing, copies


FLAT = b"\0"  # signature_token of a flat signature (one colour)


def signature_token(signature: bytes) -> bytes:
    """What the search carries of a colour signature past verification: b"" for none,
    FLAT for a flat one, else the first 16 bytes of its sha256 (equal tokens, equal
    signatures). A token is its own token, so a probe's image can carry it as its
    signature."""
    if len(signature) <= 16:
        return signature
    if not any(signature):
        return FLAT
    return hashlib.sha256(signature).digest()[:16]


def look(image: ImageHash) -> tuple[int, bytes] | None:
    """(perceptual hash, signature token) when they make the image interchangeable with
    any other of the same: one hash gives the same distances, one non-flat signature the
    same verdict against anything, and two such images verify each other (correlation 1).
    None without a signature (judged by distance alone) or with a flat one (confirmed by
    identical bytes only)."""
    token = signature_token(image.signature)
    return None if token in (b"", FLAT) else (image.phash, token)


STORED = "stored"  # collapse_copies' key of an appended output's own copies


# ---- groups -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Group:
    """One line of duplicates.jsonl: keys sorted, so keys[0] is the kept / anchoring key."""

    keys: tuple[str, ...]
    # the one split every member follows (None: outside every split); under official splits
    # (--split_file, --split_by_folder) the sorted list of the splits the members are in
    split: str | list[str] | None
    kind: str  # "exact": every member has the same bytes; "near" otherwise
    max_distance: int  # largest Hamming distance between two members
    conflicting_masks: bool  # byte-identical images whose mask files differ
    # --append: member -> split, for the members the output already stores (not written)
    stored: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    def line(self) -> bytes:
        data = {
            "keys": list(self.keys),
            "split": self.split,
            "kind": self.kind,
            "max_distance": self.max_distance,
            "conflicting_masks": self.conflicting_masks,
        }
        return (json.dumps(data, ensure_ascii=False) + "\n").encode()


EXISTING = "existing:"  # the source tag of an appended output's own images, then the split


def existing_source(split: str) -> str:
    return EXISTING + split


def is_existing(source: str) -> bool:
    return source.startswith(EXISTING)


def existing_split(source: str) -> str | None:
    """The split an appended output stores the image in; None for other sources."""
    return source[len(EXISTING) :] if is_existing(source) else None


def complete_groups(pairs: Iterable[tuple[ImageHash, ImageHash]]) -> list[list[ImageHash]]:
    """Groups in which every member is a verified near copy of every other (complete
    linkage), so A~B and B~C never chain A to C. Within each connected component of the
    pair graph, groups are grown from the best-connected images, the closest images first,
    keeping the largest (_cliques); those left over form groups the same way. Singletons
    are no group. Each group sorted by key; the groups sorted."""
    return sorted(group for linked in linked_groups(pairs) for group in linked.groups)


@dataclasses.dataclass(frozen=True)
class Linked:
    """The images a chain of verified pairs links (sorted by key), and their groups."""

    images: list[ImageHash]
    groups: list[list[ImageHash]]


def linked_groups(pairs: Iterable[tuple[ImageHash, ImageHash]]) -> list[Linked]:
    """complete_groups, gathered per connected component of the pairs, with every image of
    the component, grouped or not (the job places a component in one split, so no verified
    pair ever straddles two splits). Components in order of their smallest key.

    A pair of identical bytes (same non-empty sha256), or of one look (one hash and one
    non-flat signature), makes its two images one class: each pairs with whatever the other
    pairs with, so the search reports a copy only with the key that stands for it
    (collapse_copies) and never its copies squared."""
    images: dict[str, ImageHash] = {}
    near: list[tuple[str, str]] = []
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for a, b in pairs:
        if a.key == b.key:
            continue
        for image in (a, b):
            images.setdefault(image.key, image)
        if (a.sha256 and a.sha256 == b.sha256) or (look(a) is not None and look(a) == look(b)):
            first, second = sorted((root(a.key), root(b.key)))
            parent[second] = first
        else:
            near.append((a.key, b.key))
    klass = {key: root(key) for key in images}
    neighbours: dict[str, set[str]] = {k: set() for k in set(klass.values())}
    for a, b in near:
        if klass[a] != klass[b]:
            neighbours[klass[a]].add(klass[b])
            neighbours[klass[b]].add(klass[a])
    members_of: dict[str, list[str]] = {}
    for key in sorted(images):
        members_of.setdefault(klass[key], []).append(key)
    linked = []
    for component in _components(neighbours):
        every = sorted(key for name in component for key in members_of[name])
        groups = [
            [images[key] for key in sorted(k for name in clique for k in members_of[name])]
            for clique in _cliques(component, neighbours, members_of, images)
        ]
        linked.append(Linked([images[key] for key in every], sorted(groups, key=_keys)))
    return linked


def _keys(group: list[ImageHash]) -> list[str]:
    return [member.key for member in group]


_ANCHORS_TRIED = 8  # the best-connected classes each group is tried from


def _cliques(component, neighbours, members_of, images) -> Iterator[list[str]]:
    """A component's groups of classes (identical bytes), each verified with every other.
    A group is grown from an anchor: then, one at a time, the class closest to the members
    so far (the least summed hash distance, then the smallest key) among those verified with
    every one of them. It is tried from each of the _ANCHORS_TRIED classes with the most
    verified neighbours left (then the most copies, then the smallest key), and the group
    that comes out with the most images is kept (then the closest, then the anchor's rank);
    again with what is left. So an original stays with its copies when one of its copies has
    more neighbours (a crop and a brightness copy that pair with it but not with the
    original), and a crop that pairs with some of the original's copies but not with the
    original itself stays out, whatever its key. Trying a few anchors, not all, keeps a
    component of n near-identical images at O(n^2) work. Groups of one image are dropped."""
    left = set(component)
    degree = {name: len(neighbours[name] & left) for name in left}

    def rank(name: str) -> tuple:
        return (-degree[name], -len(members_of[name]), members_of[name][0])

    def phash(name: str) -> int:
        return images[members_of[name][0]].phash

    def grown(anchor: str) -> tuple[tuple, list[str]]:
        members, candidates = [anchor], neighbours[anchor] & left
        apart = {name: (phash(name) ^ phash(anchor)).bit_count() for name in candidates}
        summed = 0
        while candidates:
            joining = min(candidates, key=lambda name: (apart[name], members_of[name][0]))
            members.append(joining)
            summed += apart[joining]
            candidates = (candidates & neighbours[joining]) - {joining}
            for name in candidates:
                apart[name] += (phash(name) ^ phash(joining)).bit_count()
        size = sum(len(members_of[name]) for name in members)
        return (-size, summed, rank(anchor)), members

    heap = [(*rank(name), name) for name in left]
    heapq.heapify(heap)
    while heap:
        anchors: list[str] = []
        while heap and len(anchors) < _ANCHORS_TRIED:
            *ranked, name = heapq.heappop(heap)
            if name in left and tuple(ranked) == rank(name) and name not in anchors:
                anchors.append(name)  # else taken, or its degree fell since it was pushed
        if not anchors:
            break
        _, members = min(grown(anchor) for anchor in anchors)
        left -= set(members)
        for name in anchors:
            if name in left:
                heapq.heappush(heap, (*rank(name), name))
        for name in {other for member in members for other in neighbours[member]} & left:
            degree[name] = len(neighbours[name] & left)
            heapq.heappush(heap, (*rank(name), name))
        if sum(len(members_of[name]) for name in members) > 1:
            yield members


def _components(neighbours: Mapping[str, set[str]]) -> Iterator[set[str]]:
    seen: set[str] = set()
    for start in sorted(neighbours):
        if start in seen:
            continue
        component, frontier = {start}, [start]
        while frontier:
            for other in neighbours[frontier.pop()]:
                if other not in component:
                    component.add(other)
                    frontier.append(other)
        seen |= component
        yield component


def describe_group(
    members: Sequence[ImageHash],
    split: str | list[str] | None,
    stored: Mapping[str, str] | None = None,
) -> Group:
    """The group's line: kind, largest distance, and whether exact copies disagree on masks
    (a stored member without a mask digest, from a table written before they were kept,
    is not compared)."""
    stored = stored or {}
    exact = len({m.sha256 for m in members}) == 1
    largest = _largest_distance(np.array([m.phash for m in members], dtype=np.uint64))
    masks_by_image: dict[str, set[str | None]] = {}
    for member in members:
        if member.mask is not None or member.key not in stored:
            masks_by_image.setdefault(member.sha256, set()).add(member.mask)
    conflict = any(len(masks) > 1 for masks in masks_by_image.values())
    return Group(
        tuple(m.key for m in members),
        split,
        "exact" if exact else "near",
        largest,
        conflict,
        dict(stored),
    )


def _largest_distance(hashes: np.ndarray, rows: int = 512) -> int:
    """The largest Hamming distance between any two of `hashes`: every pair, vectorised in
    blocks of `rows` (a group of thousands of near-copies is millions of pairs)."""
    largest = 0
    for start in range(0, len(hashes), rows):
        block = np.bitwise_xor(hashes[start : start + rows, None], hashes[None, start:])
        largest = max(largest, int(np.bitwise_count(block).max(initial=0)))
    return largest


def parse_groups(data: bytes) -> list[dict]:
    """The lines of a duplicates.jsonl file; ValueError naming the first bad line."""
    return _parsed_lines(data, parse_group)


def parse_group(line: str | bytes) -> dict:
    """One line of duplicates.jsonl as segprep writes it; ValueError, KeyError or TypeError
    saying what is wrong with it (verify's and report's check of each line)."""
    group = json_shape.loads(line, "duplicates.jsonl")
    if not isinstance(group, dict):
        raise ValueError("not a JSON object")
    for field in ("keys", "kind", "split", "max_distance", "conflicting_masks"):
        if field not in group:  # present, even when null
            raise ValueError(f"no {field} field")
    keys = group["keys"]
    if not (isinstance(keys, list) and len(keys) >= 2):
        raise ValueError("keys is not a list of two or more keys")
    if not all(isinstance(key, str) for key in keys):
        raise ValueError("keys are not all strings")
    if group["kind"] not in ("exact", "near"):
        raise ValueError(f"kind {group['kind']!r} is not exact or near")
    split = group["split"]
    names = split if isinstance(split, list) else [split]
    if split is not None and not all(isinstance(name, str) for name in names):
        raise ValueError(f"split {str(split)[:40]} is not a split name or list of them")
    distance = group["max_distance"]
    if type(distance) is not int or not 0 <= distance <= 64:
        raise ValueError(f"max_distance {str(distance)[:40]} is not a distance of 0 to 64")
    if not isinstance(group["conflicting_masks"], bool):
        raise ValueError("conflicting_masks is not true or false")
    return group
