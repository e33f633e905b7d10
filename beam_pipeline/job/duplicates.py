"""Duplicates and leakage, found before the split (docs/duplicates.md).

Build every record once, hashing in its validation decode (job/built_records.py, in the
run's writer pool on local runs) -> key each hash by its D + 1 band values (gathered into
lists per bundle) -> compare inside each band bucket (transforms/duplicates.py: pigeonhole,
every pair within D shares a band; in the writer pool on local runs) -> collect the
pairs found, only those, in one place for the connected components -> each group's members
follow its smallest key into one split, or (drop) all but that key become rejects. Hashes
of other outputs (--leakage_check) join the same buckets; this run's images close to one of
them become rejects.

No step holds every hash: buckets hold the images sharing one band value, and the side
inputs hold what concerns duplicates only (group members, rejected keys).
"""

from __future__ import annotations

import collections
import json
from concurrent.futures.process import BrokenProcessPool

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from beam_pipeline.job import built_records, image_hashes
from beam_pipeline.job.settings import DuplicateSettings, ShardWriterSettings
from beam_pipeline.runtime import storage, writer_pool
from transforms import duplicates as dups
from transforms.format.naming import DUPLICATES_FILE
from transforms.pairing import Pair
from transforms.rejects import Reason, Reject

REJECTS = "rejects"
_CHUNK = 64  # pairs per pool task (and spill file): large enough to amortise the round trip
_COMPARED = 20_000  # hashes per bucket-comparison task
_IN_FLIGHT = 4  # comparison tasks sent and not yet collected
_BUCKETED = 50_000  # hashes one bundle gathers into bucket lists before passing them on
_NAMESPACE = "segprep"


class _BuildRecords(beam.DoFn):
    """Each pair read once, its record spilled and its hashes made (job/built_records.py);
    chunks go to the run's writer pool in finish_bundle (as shards do, job/write_shards.py),
    so every core reads and decodes, or are built in this process (Dataflow)."""

    def __init__(self, writing: ShardWriterSettings) -> None:
        self._writing = writing
        self._read = Metrics.counter(_NAMESPACE, "images_read")

    def start_bundle(self) -> None:
        self._pending: list[Pair] = []

    def process(self, pair: Pair):
        self._pending.append(pair)
        if self._writing.pool is None and len(self._pending) >= _CHUNK:
            chunk, self._pending = self._pending, []  # built here: hold one chunk at most
            for built in built_records.build_records(self._writing, chunk):
                self._read.inc()
                yield built

    def finish_bundle(self):
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        chunks = [pending[i : i + _CHUNK] for i in range(0, len(pending), _CHUNK)]
        if self._writing.pool is None:
            results = (built_records.build_records(self._writing, chunk) for chunk in chunks)
            yield from self._emit(results)
            return
        try:
            pool = writer_pool.pool_of(self._writing.pool)
            futures = [pool.submit(built_records.build_records, self._writing, c) for c in chunks]
            yield from self._emit(future.result() for future in futures)
        except BrokenProcessPool as error:
            raise RuntimeError(
                "a writer process died while reading images: out of memory? "
                "(try --writer_processes 1)"
            ) from error

    def _emit(self, results):
        for built in results:
            for pair in built:
                self._read.inc()
                yield GlobalWindows.windowed_value(pair)


_as_tuple, _from_tuple = image_hashes.as_tuple, image_hashes.from_tuple


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


class _CompareInBuckets(beam.DoFn):
    """Close pairs inside each band bucket: in the run's writer pool on local runs (chunks
    of about _COMPARED hashes, at most _IN_FLIGHT chunks at a time, so memory stays that of
    a few chunks), else in this process (Dataflow)."""

    def __init__(self, distance: int, pool: str | None) -> None:
        self._distance = distance
        self._pool = pool

    def start_bundle(self) -> None:
        self._chunk: list[tuple[int, list[tuple]]] = []
        self._size = 0
        self._futures: collections.deque = collections.deque()

    def process(self, element):
        (band, _), lists = element
        values = [value for values in lists for value in values]
        if len(values) < 2:
            return
        self._chunk.append((band, values))
        self._size += len(values)
        if self._size >= _COMPARED:
            yield from self._send()

    def finish_bundle(self):
        for output in self._send(drain=True):
            if isinstance(output, beam.pvalue.TaggedOutput):
                yield beam.pvalue.TaggedOutput(
                    output.tag, GlobalWindows.windowed_value(output.value)
                )
            else:
                yield GlobalWindows.windowed_value(output)

    def _send(self, drain: bool = False):
        chunk, self._chunk, self._size = self._chunk, [], 0
        if self._pool is None:
            if chunk:
                yield from _found(image_hashes.compare_buckets(chunk, self._distance))
            return
        try:
            if chunk:
                pool = writer_pool.pool_of(self._pool)
                future = pool.submit(image_hashes.compare_buckets, chunk, self._distance)
                self._futures.append(future)
            while self._futures and (drain or len(self._futures) > _IN_FLIGHT):
                yield from _found(self._futures.popleft().result())
        except BrokenProcessPool as error:
            raise RuntimeError(
                "a writer process died while comparing image hashes: out of memory? "
                "(try --writer_processes 1)"
            ) from error


def _found(result):
    pairs, leaks = result
    yield from pairs
    for leak in leaks:
        yield beam.pvalue.TaggedOutput("leaks", leak)


def _other_hashes(pbegin, number: int, check):
    """The hashes another output stored, tagged with its folder."""
    return (
        pbegin
        | f"OtherHashFiles{number}" >> beam.Create(list(check.hash_files))
        | f"ReadOtherHashes{number}" >> beam.io.ReadAllFromText()
        | f"ParseOtherHashes{number}" >> beam.Map(_tagged_row, check.output_dir)
    )


def _tagged_row(line: str, source: str) -> dups.Tagged:
    return dups.Tagged(source, dups.ImageHash.from_row(json.loads(line)))


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

    def __init__(self, settings: DuplicateSettings, writing: ShardWriterSettings) -> None:
        super().__init__()
        self._settings = settings
        self._writing = writing

    def expand(self, pairs):
        settings = self._settings
        distance = settings.distance
        hashed = pairs | "BuildRecords" >> beam.ParDo(_BuildRecords(self._writing))
        keyed = [hashed | "BandBuckets" >> beam.ParDo(_OwnBuckets(distance))]
        for number, check in enumerate(settings.leakage):
            others = _other_hashes(pairs.pipeline, number, check)
            keyed.append(
                others
                | f"OtherBandKeys{number}" >> beam.FlatMap(_band_keys, distance)
                | f"OtherAsLists{number}" >> beam.MapTuple(lambda key, value: (key, [value]))
            )
        found = (
            keyed
            | "AllBandKeys" >> beam.Flatten()
            | "ByBand" >> beam.GroupByKey()
            | "CompareInBucket"
            >> beam.ParDo(_CompareInBuckets(distance, settings.pool)).with_outputs(
                "leaks", main="pairs"
            )
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
