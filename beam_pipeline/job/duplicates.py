"""Duplicates and leakage, found once the shards are written (docs/duplicates.md).

The shard writers hash each image in its validation decode (job/shard_work.py) -> each
hash's probe (source, key, phash, sha256 and mask digest prefixes, signature token) keyed
by its D + 1 band values (gathered into lists per bundle) -> inside each band bucket
(writer pool on local runs) this run's exact copies, and its images of one hash and one
colour signature, stand as one, pairs of identical bytes or of one look go straight to
the groups, and the other pairs within D (transforms/duplicates.py: pigeonhole, every pair
within D shares a band) are candidates -> one join by partition of image gives each
candidate its two images' whole hashes (signature, digests), which travel once rather than
D + 1 times -> the pairs whose colour signatures confirm them, with the exact ones, are
collected in one place for the complete-linkage groups -> without official splits, the
images a chain of pairs links all follow one split (the smallest key's, or the split an
appended output already stores a member in); under --split_file / --split_by_folder nobody
moves and groups that cross splits are reported; drop keeps one member per group (per split
under official splits, train's copies of validation/test images going). Hashes of other
outputs (--leakage_check) join the same buckets (this run's images close to one of them
become rejects), and so do, on an append, the hashes the output stores. What the search
decides (moves, verdicts) reaches only the shards it changes (job/relocate.py).

No step holds every hash: buckets hold the probes sharing one band value, the join one
partition's hashes and its candidates. The pairs are gathered by a one-key shuffle: exact
copies are reported once each (with the key standing for their bytes), so they number
about the images that have a copy, not their copies squared.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import pickle
import zlib
from concurrent.futures.process import BrokenProcessPool

import apache_beam as beam
import numpy as np

from beam_pipeline.job import image_hashes
from beam_pipeline.job.image_hashes import from_member
from beam_pipeline.job.settings import DuplicateSettings
from beam_pipeline.job.write_shards import in_global_window
from beam_pipeline.runtime import writer_pool
from transforms import duplicates as dups
from transforms import files
from transforms.format import side_tables
from transforms.format.naming import DUPLICATES_FILE, FIRST_VERSION, hashes_version
from transforms.rejects import Reason

_COMPARED = 20_000  # hashes per bucket-comparison task
_IN_FLIGHT = 4  # comparison tasks sent and not yet collected
_BUCKETED = 50_000  # hashes one bundle gathers into bucket lists before passing them on
# Another output's hashes read before their bucket lists are passed on: a few MB held;
# their whole hashes, by partition, four times as many.
_OTHER_BUCKETED = 4096
_OTHER_PARTED = 4 * _OTHER_BUCKETED

HASHES = "hashes"  # another output's whole hashes by partition, beside its bucket lists
EXACT = "exact"  # pairs of identical bytes, which go to the groups unverified


def _band_keys(tagged: dups.Tagged, distance: int):
    value = image_hashes.as_probe(tagged)
    for band, band_value in enumerate(dups.bands(tagged.image.phash, distance)):
        yield (band, band_value), value


def _part(identity: tuple[str, str], parts: int) -> int:
    """The join partition of the image (source, key) names: stable across processes. The
    join is keyed by partition, not by image, so a bundle sends a few hundred lists rather
    than one element per image (DuplicateSettings.join_parts sizes a partition)."""
    source, key = identity
    return zlib.crc32(f"{source}\0{key}".encode()) % parts


def _gather_bands(chunk: list[dups.ImageHash], gathered: dict, distance: int) -> None:
    """Each of this run's images' probe into the list of each of its D + 1 band buckets,
    (band, value) -> probes: a band's values computed at once (numpy), and each bucket's
    probes taken together, so the Python work is per bucket, not per image and band."""
    probes = [image_hashes.as_probe(dups.Tagged("", hashes)) for hashes in chunk]
    phashes = np.fromiter((hashes.phash for hashes in chunk), dtype=np.uint64, count=len(chunk))
    for band, (shift, width) in enumerate(dups.band_edges(distance)):
        values = (phashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)
        order = np.argsort(values, kind="stable")  # stable: probes keep the chunk's order
        ordered = values[order]
        runs = np.split(order, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1) if chunk else []
        for run in runs:
            bucket = gathered.setdefault((band, int(values[run[0]])), [])
            bucket.extend(probes[index] for index in run.tolist())


def _gather_parts(chunk: list[dups.ImageHash], gathered: dict, parts: int) -> None:
    """Each of this run's images' whole hash into its join partition's list: what
    verification joins back to the candidates."""
    for hashes in chunk:
        _add_whole(gathered, image_hashes.as_tuple(dups.Tagged("", hashes)), parts)


def _add_whole(by_part: dict[int, list[tuple]], whole: tuple, parts: int) -> None:
    by_part.setdefault(_part(image_hashes.identity(whole), parts), []).append(whole)


class _Gathered(beam.DoFn):
    """Chunks of this run's hashes -> (key, the bundle's values with that key), gathered
    by `gather(chunk, into)`: band buckets, or join partitions (`tag`: the values go as
    (tag, list), as the join takes them). One element per key and bundle rather than one
    per item, so the shuffle moves lists; at most _BUCKETED hashes are held before they are
    passed on."""

    def __init__(self, gather, tag: str | None = None) -> None:
        self._gather = gather
        self._tag = tag

    def start_bundle(self) -> None:
        self._gathered: dict = {}
        self._held = 0

    def process(self, chunk: list[dups.ImageHash]):
        self._gather(chunk, self._gathered)
        self._held += len(chunk)
        if self._held >= _BUCKETED:
            yield from self._passed()
            self.start_bundle()

    def finish_bundle(self):
        yield from map(in_global_window, self._passed())
        self.start_bundle()

    def _passed(self):
        if self._tag is None:
            return self._gathered.items()
        return ((key, (self._tag, values)) for key, values in self._gathered.items())


class _CompareInBuckets(beam.DoFn):
    """Candidate pairs inside each band bucket, each keyed by the join partition of both
    its images (_by_image), and (tagged EXACT, keyed None as the groups take them) the
    pairs of identical bytes: in the run's writer pool on local runs (chunks of about
    _COMPARED probes, at most _IN_FLIGHT chunks at a time, so memory stays that of a few
    chunks), else in this process (Dataflow)."""

    def __init__(self, distance: int, pool: str | None, parts: int) -> None:
        self._distance = distance
        self._pool = pool
        self._parts = parts

    def start_bundle(self) -> None:
        self._chunk: list[tuple[int, list[tuple]]] = []
        self._size = 0
        # An image is in D + 1 buckets, each decoded as its own tuples: one object per
        # image in a chunk, so the pickle sent to the pool holds it once (8.0 -> 3.4 MB,
        # half the pickling time, for the 98,800 probes of 7,600 images).
        self._same: dict[tuple, tuple] = {}
        self._futures: collections.deque = collections.deque()

    def process(self, element):
        (band, _), lists = element
        values = [self._same.setdefault(value, value) for values in lists for value in values]
        if len(values) < 2:
            return
        self._chunk.append((band, values))
        self._size += len(values)
        if self._size >= _COMPARED:
            yield from self._keyed(self._send())

    def finish_bundle(self):
        yield from map(in_global_window, self._keyed(self._send(drain=True)))

    def _keyed(self, found):
        for tag, value in found:
            if tag == "pairs":
                yield beam.pvalue.TaggedOutput(EXACT, (None, value))
            else:
                yield from _by_image(value, self._parts)

    def _send(self, drain: bool = False):
        chunk, self._chunk, self._size, self._same = self._chunk, [], 0, {}
        if self._pool is None:
            if chunk:
                yield from image_hashes.compare_buckets(chunk, self._distance)
            return
        try:
            if chunk:
                # Sent pickled: the pool keeps a task's arguments until its result is back,
                # and ~1.5 MB of pickle per chunk is a fifth of its decoded probes.
                packed = pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)
                del chunk
                pool = writer_pool.pool_of(self._pool)
                future = pool.submit(image_hashes.compare_pickled, packed, self._distance)
                self._futures.append(future)
            while self._futures and (drain or len(self._futures) > _IN_FLIGHT):
                yield from self._futures.popleft().result()
        except BrokenProcessPool as error:
            raise RuntimeError(
                "a writer process died while comparing image hashes: out of memory? "
                "(try --writer_processes 1)"
            ) from error


def _by_image(candidate, parts: int):
    """A candidate, keyed by the partition of each of its two images (its side named): one
    join gives both their whole hashes."""
    for side in (0, 1):
        yield _part(image_hashes.identity(candidate[side]), parts), (side, candidate)


def _with_whole(element):
    """A partition's whole hashes ((HASHES, list) values), each given to the candidates
    ((side, candidate) values) its image is in -> keyed by the candidate. (An image named
    twice, two --leakage_check folders that are one, keeps one of its equal hashes.)"""
    _, joined = element
    wholes, candidates = {}, []
    for tag, value in joined:
        if tag == HASHES:
            wholes.update((image_hashes.identity(whole), whole) for whole in value)
        else:
            candidates.append((tag, value))
    for side, candidate in candidates:
        whole = wholes.get(image_hashes.identity(candidate[side]))
        if whole is not None:
            yield candidate, (side, whole)


def _verified(element, min_similarity: float):
    """A candidate with both whole hashes -> a verified pair, keyed by None (the groups
    gather every pair under that one key), or a leak (tagged)."""
    candidate, sides = element
    by_side = dict(sides)
    found = image_hashes.verify(candidate, by_side[0], by_side[1], min_similarity)
    if found is not None:
        tag, value = found
        yield (None, value) if tag == "pairs" else beam.pvalue.TaggedOutput(tag, value)


def _other_hashes(pbegin, number: int, check, settings: DuplicateSettings):
    """The bucket lists, as _Gathered makes them, of the hashes another output stored
    (and, tagged HASHES, the whole hashes)."""
    return (
        pbegin
        | f"OtherHashTables{number}" >> beam.Create(list(check.hash_tables))
        | f"OtherBuckets{number}"
        >> beam.ParDo(_OtherBuckets(check.output_dir, settings)).with_outputs(
            HASHES, main="buckets"
        )
    )


def _existing_hashes(pbegin, settings: DuplicateSettings):
    """--append: the bucket lists of the hashes the output stores, each tagged with the
    split that holds it (read as another output's are, sha256 kept: exact copies)."""
    return [
        pbegin
        | f"ExistingHashTable{_table_label(split, ref)}" >> beam.Create([ref])
        | f"ExistingBuckets{_table_label(split, ref)}"
        >> beam.ParDo(
            _OtherBuckets(settings.existing_dir, settings, dups.existing_source(split))
        ).with_outputs(HASHES, main="buckets")
        for split, ref in settings.existing
    ]


def _table_label(split: str, ref) -> str:
    """`train` for version 1's table, `trainV3` for version 3's: a split has one table per
    version that searched, and Beam labels are unique (no `/`: it nests labels)."""
    version = hashes_version(split, ref.file) or FIRST_VERSION
    return split if version == FIRST_VERSION else f"{split}V{version}"


class _OtherBuckets(beam.DoFn):
    """One hash table of another output (--leakage_check) or of the appended output ->
    ((band, value), hashes) lists, read a bounded line at a time through side_tables (name,
    link, kind and size checked here; the sha256 in the launcher before the job, and again
    here as the lines go by), at most _OTHER_BUCKETED hashes held for the buckets and
    _OTHER_PARTED for the join: one element per bucket (or partition) and batch, not D + 1
    per hash. `source` tags the hashes (default: the folder)."""

    def __init__(self, output_dir: str, settings: DuplicateSettings, source: str = "") -> None:
        self._output_dir = output_dir
        self._distance = settings.distance
        self._parts = settings.join_parts
        self._source = source or output_dir

    def process(self, ref):
        buckets: dict[tuple[int, int], list[tuple]] = {}
        parts: dict[int, list[tuple]] = {}
        digest = hashlib.sha256()
        with side_tables.open_table(self._output_dir, ref, check_sha256=False) as table:
            for number, line in enumerate(table.lines(), start=1):
                digest.update(line)
                tagged = _tagged_row(line, self._source, f"{self._output_dir}{ref.file}", number)
                _add_whole(parts, image_hashes.as_tuple(tagged), self._parts)
                for key, value in _band_keys(tagged, self._distance):
                    buckets.setdefault(key, []).append(value)
                if number % _OTHER_BUCKETED == 0:
                    yield from buckets.items()
                    buckets = {}
                if number % _OTHER_PARTED == 0:
                    yield from _tagged_items(parts)
                    parts = {}
        if digest.hexdigest() != ref.sha256:
            raise side_tables.SideTableError(
                f"{self._output_dir}{ref.file} changed while it was read: run `segprep verify "
                f"{self._output_dir}`"
            )
        yield from buckets.items()
        yield from _tagged_items(parts)


def _tagged_items(parts: dict[int, list[tuple]]):
    for part, wholes in parts.items():
        yield beam.pvalue.TaggedOutput(HASHES, (part, (HASHES, wholes)))


def _tagged_row(line: bytes, source: str, path: str, number: int) -> dups.Tagged:
    """A stored row as a hash of `source`, with its signature (the check confirms a leak as
    it does a duplicate). Another output's sha256 is left out: a leak needs no exact-copy
    test, and it would travel the shuffle D + 1 times; the appended output's is kept."""
    try:
        stored = dups.ImageHash.from_row(json.loads(line))
    except (ValueError, KeyError, TypeError) as error:
        raise side_tables.SideTableError(f"{path} line {number}: {error}") from None
    sha256 = stored.sha256 if dups.is_existing(source) else ""
    return dups.Tagged(
        source, dups.ImageHash(stored.key, sha256, stored.phash, None, stored.signature)
    )


def _groups(pairs, settings: DuplicateSettings) -> tuple[list[dups.Group], list[tuple]]:
    """Complete-linkage groups of every verified pair (each a duplicates.jsonl line), and
    (key, split) for this run's images that follow a split other than their own key's:
    without official splits, every image a chain of pairs links (grouped or not) follows
    one split, but for an append's group holding a stored image: it follows that image's
    split (a chain can link stored images of two splits)."""
    tagged = [(from_member(a), from_member(b)) for a, b in filter(None, pairs)]
    stored = {t.image.key: dups.existing_split(t.source) for pair in tagged for t in pair}
    stored = {key: split for key, split in stored.items() if split}
    if not settings.official:
        # Two stored images of two splits stay apart: neither record moves, so a group of
        # both would name a split one of them is not in (a pair an earlier new image made,
        # near copy of both, grouped with one of them).
        tagged = [
            (a, b)
            for a, b in tagged
            if stored.get(a.image.key, "") == stored.get(b.image.key, "")
            or a.image.key not in stored
            or b.image.key not in stored
        ]
    groups, placed = [], []
    for linked in dups.linked_groups((a.image, b.image) for a, b in tagged):
        split = _linked_split(linked, stored, settings)
        follows: dict[str, str | None] = {}
        for members in _apart_by_stored_split(linked.groups, stored, settings):
            old = {m.key: stored[m.key] for m in members if m.key in stored}
            # A group with a stored member follows that member's split: a new image can
            # link stored images of two splits (near copies of both, which are not of each
            # other), and joins the group of the one it is grouped with.
            own = old[min(old)] if old else split
            follows.update((m.key, own) for m in members)
            named = _listed_splits(members, old, settings) if settings.official else own
            groups.append(dups.describe_group(members, named, old))
        if not settings.official and settings.mode == "group":
            for image in linked.images:
                target = follows.get(image.key, split)
                if image.key not in stored and settings.fractions.split_of(image.key) != target:
                    placed.append((image.key, target))
    return sorted(groups, key=lambda group: group.keys), placed


def _apart_by_stored_split(groups, stored: dict[str, str], settings: DuplicateSettings):
    """Without official splits, each group split where it holds images the output stores
    in two splits (a copy of one of them joins it as a class, whatever pair was left out):
    the part with the smallest stored key keeps the new members, each other split's stored
    members are a group of their own when they are two or more. No stored record moves, so
    no group names a split one of its records is not in."""
    for members in groups:
        splits = {stored[m.key] for m in members if m.key in stored}
        if settings.official or len(splits) < 2:
            yield members
            continue
        own = stored[min(m.key for m in members if m.key in stored)]
        parts: dict[str, list] = {}
        for member in members:
            parts.setdefault(stored.get(member.key, own), []).append(member)
        yield from (part for part in parts.values() if len(part) > 1)


def _listed_splits(members, old: dict[str, str], settings: DuplicateSettings) -> list[str]:
    """Under official splits, a group's `split`: every split its members are listed in."""
    splits = {old.get(m.key) or settings.fractions.split_of(m.key) for m in members}
    return sorted(split for split in splits if split is not None)


def _linked_split(linked, stored: dict[str, str], settings: DuplicateSettings) -> str | None:
    """The one split linked images follow without official splits: the output's, when it
    already stores one of them (the smallest such key), else the smallest key's."""
    old = [image.key for image in linked.images if image.key in stored]
    return stored[old[0]] if old else settings.fractions.split_of(linked.images[0].key)


def _member_split(key: str, group: dups.Group, settings: DuplicateSettings) -> str | None:
    """Where a member is by itself: the split the output stores it in (an append's earlier
    images), else the split its key gets (the official lists', or the key rule's)."""
    return group.stored.get(key) or settings.fractions.split_of(key)


def _grouped(keyed, settings: DuplicateSettings, reported: bool):
    """Every verified pair (under one key) -> the moves: (image, the split it follows) for
    this run's images placed apart from their key's split (none under official splits,
    where every entry stays in its listed split); and, tagged, the report when nothing
    else goes into it (`reported`), else the groups as found (drop's verdicts and the
    report with its leak count take them)."""
    found = _groups(keyed[1], settings)
    yield from found[1]
    if reported:
        yield beam.pvalue.TaggedOutput("report", _report(found, 0, settings))
    else:
        yield beam.pvalue.TaggedOutput("found", found)


def _flattened(pcollections: list, label: str):
    """One PCollection of several (Flatten), or the one there is (no step)."""
    if len(pcollections) == 1:
        return pcollections[0]
    return pcollections | label >> beam.Flatten()


def _dropped(found, settings: DuplicateSettings):
    """(key, verdict) for the members --duplicates drop rejects: in each split a group
    touches, all but one member (the output's own image if it stores one, else the smallest
    key); under official splits also every train member when the group reaches validation
    or test, so the copies leave train and never the other way. Images the output already
    stores are never dropped."""
    groups, _ = found
    for group in groups:
        by_split: dict[str | None, list[str]] = {}
        for key in group.keys:
            split = _member_split(key, group, settings) if settings.official else None
            by_split.setdefault(split, []).append(key)
        kept = {
            split: next((k for k in keys if k in group.stored), keys[0])
            for split, keys in by_split.items()
        }
        held = sorted(split for split in kept if split not in (None, "train"))
        for split, keys in by_split.items():
            if split == "train" and held:
                keeper = kept[held[0]]
                where = f", {held[0]}"
            else:
                keeper, where = kept[split], ""
            if keeper in group.stored:
                where += ", already in the output"
            for key in keys:
                if key == keeper or key in group.stored:
                    continue
                detail = f"{group.kind} duplicate of {keeper} (kept{where})"
                yield key, (0, Reason.DUPLICATE_IMAGE.value, detail)


def _leak_verdict(element):
    key, (distance, source, other_key) = element
    detail = f"near-duplicate (distance {distance}) of {other_key} in {source}"
    return key, (-1, Reason.LEAKS_INTO.value, detail)


def _report(found, leaks: int, settings: DuplicateSettings) -> dict:
    """Stage duplicates.jsonl; metadata.json's `duplicates` section (without the files)."""
    groups, placed = found
    data = b"".join(group.line() for group in groups)
    files.write_bytes(files.join(settings.staging_dir, DUPLICATES_FILE), data)
    straddling = sum(
        len({_member_split(key, group, settings) for key in group.keys}) > 1 for group in groups
    )
    crossing = [group for group in groups if settings.official and len(group.split) > 1]
    dropped = sum(1 for _ in _dropped(found, settings)) if settings.mode == "drop" else 0
    return {
        "mode": settings.mode,
        "threshold": settings.distance,
        "min_similarity": settings.min_similarity,
        "min_chroma_similarity": dups.MIN_CHROMA_SIMILARITY,
        "close_similarity": dups.CLOSE_SIMILARITY,
        "close_min_chroma_similarity": dups.CLOSE_MIN_CHROMA_SIMILARITY,
        "official_splits": settings.official,
        "groups": len(groups),
        "keys_in_groups": sum(len(group.keys) for group in groups),
        "exact_groups": sum(group.kind == "exact" for group in groups),
        "conflicting_mask_groups": sum(group.conflicting_masks for group in groups),
        # Without official splits every member follows its group: no group spans two splits.
        "cross_split_groups": len(crossing),
        "cross_split_train_keys": sum(
            sum(_member_split(k, g, settings) == "train" for k in g.keys) for g in crossing
        ),
        "cross_split_held_in": sorted(
            {split for group in crossing for split in group.split if split != "train"}
        ),
        "cross_split_groups_by_key_alone": straddling,
        "moved": _moved(placed, settings),
        "entries_moved": len(placed),
        "in_output_matches": sum(
            len(group.keys) - len(group.stored) for group in groups if group.stored
        ),
        "dropped": dropped,
        "leakage_checked": [check.output_dir for check in settings.leakage],
        "leaks": leaks,
    }


def _moved(placed: list[tuple], settings: DuplicateSettings) -> dict[str, int]:
    """Per split, the entries grouping brought in minus those it took out."""
    change: dict[str, int] = {}
    for key, split in placed:
        for name, step in ((settings.fractions.split_of(key), -1), (split, 1)):
            if name is not None:
                change[name] = change.get(name, 0) + step
    return dict(sorted(change.items()))


class FindDuplicates(beam.PTransform):
    """Lists of this run's image hashes (the shard writers', job/shard_work.py) -> {"moves":
    (key, the split its group follows) for the keys placed apart from their key's split;
    "verdicts": (key, (rank, reason, detail)) for the keys to reject (None when nothing can
    be rejected: group mode without --leakage_check); "report": the metadata section}."""

    def __init__(self, settings: DuplicateSettings) -> None:
        super().__init__()
        self._settings = settings

    def expand(self, own):
        settings = self._settings
        distance = settings.distance
        pipeline = own.pipeline
        bands = functools.partial(_gather_bands, distance=distance)
        parts = functools.partial(_gather_parts, parts=settings.join_parts)
        keyed = [own | "BandBuckets" >> beam.ParDo(_Gathered(bands))]
        whole = [own | "WholeHashes" >> beam.ParDo(_Gathered(parts, HASHES))]
        others = [
            _other_hashes(pipeline, number, check, settings)
            for number, check in enumerate(settings.leakage)
        ]
        for other in others + _existing_hashes(pipeline, settings):
            keyed.append(other.buckets)
            whole.append(other[HASHES])
        compare = _CompareInBuckets(distance, settings.pool, settings.join_parts)
        compared = (
            _flattened(keyed, "AllBandKeys")
            | "ByBand" >> beam.GroupByKey()
            | "CompareInBucket" >> beam.ParDo(compare).with_outputs(EXACT, main="candidates")
        )
        # Each candidate gets its two images' whole hashes (signature, digests) by partition
        # of image: they travel once each, not D + 1 times through the bucket shuffle; one
        # join for both (values tagged at their source, so a Flatten and one GroupByKey).
        found = (
            [*whole, compared.candidates]
            | "HashesAndCandidates" >> beam.Flatten()
            | "JoinHashes" >> beam.GroupByKey()
            | "WithWholeHashes" >> beam.FlatMap(_with_whole)
            | "ByCandidate" >> beam.GroupByKey()
            | "Verify"
            >> beam.FlatMap(_verified, settings.min_similarity).with_outputs("leaks", main="pairs")
        )
        # Every pair in one place through a shuffle on one key, not a side input (Beam's
        # state cache walks a side input object by object to size it). The seed gives the
        # key an element when no pair is found.
        seed = (
            pipeline
            | "GroupsSeed" >> beam.Impulse()
            | "OneKeySeed" >> beam.Map(lambda _: (None, None))
        )
        reported = settings.mode == "group" and not settings.leakage
        groups = (
            (seed, compared[EXACT], found.pairs)
            | "SeedAndPairs" >> beam.Flatten()
            | "AllPairs" >> beam.GroupByKey()
            | "Groups"
            >> beam.FlatMap(_grouped, settings, reported).with_outputs(
                "report", "found", main="moves"
            )
        )
        if reported:  # group mode without --leakage_check: no verdicts, no leak count
            return {"moves": groups.moves, "verdicts": None, "report": groups.report}
        leaks = (
            found.leaks
            | "ClosestLeak" >> beam.CombinePerKey(min)  # (distance, source, key): the closest
            | "LeakVerdict" >> beam.Map(_leak_verdict)
        )
        leak_count = leaks | "CountLeaks" >> beam.combiners.Count.Globally()
        verdicts = [leaks]
        if settings.mode == "drop":
            verdicts.append(groups.found | "Dropped" >> beam.FlatMap(_dropped, settings))
        verdict = verdicts | "AllVerdicts" >> beam.Flatten()
        report = groups.found | "Report" >> beam.Map(
            _report, leaks=beam.pvalue.AsSingleton(leak_count), settings=settings
        )
        moves = groups.moves
        return {"moves": moves, "verdicts": verdict, "report": report}
