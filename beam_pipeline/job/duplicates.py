"""Duplicates and leakage, found before the split (docs/duplicates.md).

Hash every image (in the run's writer pool on local runs) -> key each hash by its D + 1
band values (gathered into lists per bundle) -> compare inside each band bucket
(transforms/duplicates.py: pigeonhole, every pair within D shares a band) -> collect the
pairs found, only those, in one place for the connected components -> each group's members
follow its smallest key into one split, or (drop) all but that key become rejects. Hashes
of other outputs (--leakage_check) join the same buckets; this run's images close to one of
them become rejects.

No step holds every hash: buckets hold the images sharing one band value, and the side
inputs hold what concerns duplicates only (group members, rejected keys).
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures.process import BrokenProcessPool

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from beam_pipeline.job import image_hashes
from beam_pipeline.job.settings import DuplicateSettings
from beam_pipeline.runtime import storage, writer_pool
from transforms import duplicates as dups
from transforms.format import side_tables
from transforms.format.naming import DUPLICATES_FILE
from transforms.pairing import Pair
from transforms.rejects import Reason, Reject

REJECTS = "rejects"
_CHUNK = 64  # pairs per pool task: large enough to amortise the round trip
_BUCKETED = 50_000  # hashes one bundle gathers into bucket lists before passing them on
_NAMESPACE = "segprep"
# Another output's hashes read before their bucket lists are passed on: a few MB held.
_OTHER_BUCKETED = 4096


class _HashImages(beam.DoFn):
    """Each pair with its image's hashes; with a writer pool, chunks go to its processes
    in finish_bundle (as shards do, job/write_shards.py), so every core hashes."""

    def __init__(self, settings: DuplicateSettings) -> None:
        self._settings = settings
        self._hashed = Metrics.counter(_NAMESPACE, "images_hashed")

    def start_bundle(self) -> None:
        self._pending: list[Pair] = []

    def process(self, pair: Pair):
        if self._settings.pool is None:
            self._hashed.inc()
            yield image_hashes.hash_pair(self._settings, pair)
        else:
            self._pending.append(pair)

    def finish_bundle(self):
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        chunks = [pending[i : i + _CHUNK] for i in range(0, len(pending), _CHUNK)]
        try:
            pool = writer_pool.pool_of(self._settings.pool)
            futures = [pool.submit(image_hashes.hash_pairs, self._settings, c) for c in chunks]
            for future in futures:
                for pair in future.result():
                    self._hashed.inc()
                    yield GlobalWindows.windowed_value(pair)
        except BrokenProcessPool as error:
            raise RuntimeError(
                "a writer process died while hashing images: out of memory? "
                "(try --writer_processes 1)"
            ) from error


# Between stages a hash travels as a plain tuple (source, key, phash, sha256, mask digest):
# Beam encodes tuples of str and int with its fast coder, dataclasses only by pickling, and
# each image is keyed D + 1 times.


def _as_tuple(tagged: dups.Tagged) -> tuple:
    image = tagged.image
    return tagged.source, image.key, image.phash, image.sha256, image.mask


def _from_tuple(value: tuple) -> dups.Tagged:
    source, key, phash, sha256, mask = value
    return dups.Tagged(source, dups.ImageHash(key, sha256, phash, mask))


def _band_keys(tagged: dups.Tagged, distance: int):
    value = _as_tuple(tagged)
    for band, band_value in enumerate(dups.bands(tagged.image.phash, distance)):
        yield (band, band_value), value


class _OwnBuckets(beam.DoFn):
    """(band, value) -> the bundle's hashes with that band value: one element per bucket
    and bundle rather than D + 1 per image, so the shuffle moves lists, not single hashes.
    At most _BUCKETED hashes are held before they are passed on."""

    def __init__(self, distance: int) -> None:
        self._distance = distance

    def start_bundle(self) -> None:
        self._buckets: dict[tuple[int, int], list[tuple]] = {}
        self._held = 0

    def process(self, pair: Pair):
        hashes = image_hashes.hashes_of(pair)
        if hashes is None:
            return
        for key, value in _band_keys(dups.Tagged("", hashes), self._distance):
            self._buckets.setdefault(key, []).append(value)
        self._held += 1
        if self._held >= _BUCKETED:
            yield from self._buckets.items()
            self.start_bundle()

    def finish_bundle(self):
        for item in self._buckets.items():
            yield GlobalWindows.windowed_value(item)
        self.start_bundle()


def _bucket_pairs(element, distance: int):
    (band, _), lists = element
    tagged = [_from_tuple(value) for values in lists for value in values]
    for a, b, distance_ab in dups.bucket_pairs(band, tagged, distance):
        if b.source:
            yield beam.pvalue.TaggedOutput(
                "leaks", (a.image.key, (distance_ab, b.source, b.image.key))
            )
        else:
            yield _as_tuple(a), _as_tuple(b)


def _other_hashes(pbegin, number: int, check, distance: int):
    """The bucket lists, as _OwnBuckets makes them, of the hashes another output stored."""
    return (
        pbegin
        | f"OtherHashTables{number}" >> beam.Create(list(check.hash_tables))
        | f"OtherBuckets{number}" >> beam.ParDo(_OtherBuckets(check.output_dir, distance))
    )


class _OtherBuckets(beam.DoFn):
    """One hash table of another output (--leakage_check) -> ((band, value), hashes) lists,
    read a bounded line at a time through side_tables (name, link, kind and size checked
    here; the sha256 in the launcher before the job, and again here as the lines go by), at
    most _OTHER_BUCKETED hashes held: one element per bucket and batch, not D + 1 per hash."""

    def __init__(self, output_dir: str, distance: int) -> None:
        self._output_dir = output_dir
        self._distance = distance

    def process(self, ref):
        buckets: dict[tuple[int, int], list[tuple]] = {}
        held = 0
        digest = hashlib.sha256()
        with side_tables.open_table(self._output_dir, ref, check_sha256=False) as table:
            for number, line in enumerate(table.lines(), start=1):
                digest.update(line)
                tagged = _tagged_row(line, self._output_dir, ref.file, number)
                for key, value in _band_keys(tagged, self._distance):
                    buckets.setdefault(key, []).append(value)
                held += 1
                if held >= _OTHER_BUCKETED:
                    yield from buckets.items()
                    buckets, held = {}, 0
        if digest.hexdigest() != ref.sha256:
            raise side_tables.SideTableError(
                f"{self._output_dir}{ref.file} changed while it was read: run `segprep verify "
                f"{self._output_dir}`"
            )
        yield from buckets.items()


def _tagged_row(line: bytes, source: str, name: str, number: int) -> dups.Tagged:
    """A stored row as a hash of `source`. A leak is found by perceptual distance alone, so
    the other image's sha256 is left out: it would travel the shuffle D + 1 times (about
    half of what a stored hash costs there)."""
    try:
        stored = dups.ImageHash.from_row(json.loads(line))
    except (ValueError, KeyError, TypeError) as error:
        raise side_tables.SideTableError(f"{source}{name} line {number}: {error}") from None
    return dups.Tagged(source, dups.ImageHash(stored.key, "", stored.phash))


def _groups(_, pairs, settings: DuplicateSettings) -> list[dups.Group]:
    """Connected components of every pair found, each a duplicates.jsonl line."""
    pairs = ((_from_tuple(a).image, _from_tuple(b).image) for a, b in pairs)
    return [
        dups.describe_group(members, settings.fractions.split_of(members[0].key))
        for members in dups.connected_groups(pairs)
    ]


def _anchors(groups: list[dups.Group]):
    """(member, the group's smallest key) for every member but that key."""
    for group in groups:
        for key in group.keys[1:]:
            yield key, group.keys[0]


def _dropped(groups: list[dups.Group]):
    for group in groups:
        for key in group.keys[1:]:
            detail = f"{group.kind} duplicate of {group.keys[0]} (kept)"
            yield key, (0, Reason.DUPLICATE_IMAGE.value, detail)


def _leak_verdict(element):
    key, (distance, source, other_key) = element
    detail = f"near-duplicate (distance {distance}) of {other_key} in {source}"
    return key, (-1, Reason.LEAKS_INTO.value, detail)


def _first_verdict(verdicts):
    return min(verdicts)  # a leak outranks a dropped duplicate; then the closest


def _closest(found):
    return min(found)


class _Verdict(beam.DoFn):
    """Pairs no verdict concerns go on; the others become rejects."""

    def process(self, pair: Pair, verdicts):
        verdict = verdicts.get(pair.key)
        if verdict is None:
            yield pair
            return
        _, reason, detail = verdict
        Metrics.counter(_NAMESPACE, f"rejected_{reason}").inc()
        yield beam.pvalue.TaggedOutput(
            REJECTS, Reject(pair.key, Reason(reason), detail, pair.image.path, pair.mask.path)
        )


def _report(groups: list[dups.Group], leaks: int, settings: DuplicateSettings) -> dict:
    """Stage duplicates.jsonl; metadata.json's `duplicates` section (without the files)."""
    data = b"".join(group.line() for group in groups)
    storage.write_bytes(storage.join(settings.staging_dir, DUPLICATES_FILE), data)
    straddling = sum(
        len({settings.fractions.split_of(key) for key in group.keys}) > 1 for group in groups
    )
    return {
        "mode": settings.mode,
        "threshold": settings.distance,
        "groups": len(groups),
        "keys_in_groups": sum(len(group.keys) for group in groups),
        "exact_groups": sum(group.kind == "exact" for group in groups),
        "conflicting_mask_groups": sum(group.conflicting_masks for group in groups),
        # Every member follows its group's smallest key: no group spans two splits.
        "cross_split_groups": 0,
        "cross_split_groups_by_key_alone": straddling,
        "dropped": sum(len(g.keys) - 1 for g in groups) if settings.mode == "drop" else 0,
        "leakage_checked": [check.output_dir for check in settings.leakage],
        "leaks": leaks,
    }


class FindDuplicates(beam.PTransform):
    """pairs -> {"pairs": pairs carrying their hashes, minus rejects; "rejects" (None when
    nothing can be rejected: group mode without --leakage_check);
    "anchors": (member, smallest key of its group); "report": the metadata section}."""

    def __init__(self, settings: DuplicateSettings) -> None:
        super().__init__()
        self._settings = settings

    def expand(self, pairs):
        settings = self._settings
        distance = settings.distance
        hashed = pairs | "HashImages" >> beam.ParDo(_HashImages(settings))
        keyed = [hashed | "BandBuckets" >> beam.ParDo(_OwnBuckets(distance))]
        for number, check in enumerate(settings.leakage):
            keyed.append(_other_hashes(pairs.pipeline, number, check, distance))
        found = (
            keyed
            | "AllBandKeys" >> beam.Flatten()
            | "ByBand" >> beam.GroupByKey()
            | "CompareInBucket"
            >> beam.FlatMap(_bucket_pairs, distance).with_outputs("leaks", main="pairs")
        )
        seed = pairs.pipeline | "GroupsSeed" >> beam.Create([None])
        groups = seed | "Groups" >> beam.Map(
            _groups, pairs=beam.pvalue.AsList(found.pairs), settings=settings
        )
        anchors = groups | "Anchors" >> beam.FlatMap(_anchors)
        if settings.mode == "group" and not settings.leakage:
            # Nothing can be rejected: the pairs go on as hashed, with no verdict stages.
            report = groups | "Report" >> beam.Map(_report, leaks=0, settings=settings)
            return {"pairs": hashed, REJECTS: None, "anchors": anchors, "report": report}
        leaks = (
            found.leaks
            | "ClosestLeak" >> beam.CombinePerKey(_closest)
            | "LeakVerdict" >> beam.Map(_leak_verdict)
        )
        leak_count = leaks | "CountLeaks" >> beam.combiners.Count.Globally()
        verdicts = [leaks]
        if settings.mode == "drop":
            verdicts.append(groups | "Dropped" >> beam.FlatMap(_dropped))
        verdict = (
            verdicts
            | "AllVerdicts" >> beam.Flatten()
            | "FirstVerdict" >> beam.CombinePerKey(_first_verdict)
        )
        kept = hashed | "ApplyVerdicts" >> beam.ParDo(
            _Verdict(), verdicts=beam.pvalue.AsDict(verdict)
        ).with_outputs(REJECTS, main="pairs")
        report = groups | "Report" >> beam.Map(
            _report, leaks=beam.pvalue.AsSingleton(leak_count), settings=settings
        )
        return {"pairs": kept.pairs, REJECTS: kept[REJECTS], "anchors": anchors, "report": report}
