"""The job's first stage: every entry, as a pair or a reject. Only paths travel, never pixels.

Local folders were listed and paired once by the launcher (runtime/local_listing.py), which
staged the pairs and rejects as record files: the job reads those files in parallel, one file
per work item, so the job graph holds their paths, never a list of entries. Cloud Storage
folders are listed by the job itself, in parallel; both paths apply the same pairing rule
(transforms/pairing.py).

Annotated runs: with local folders each pair carries its image record from the launcher. With
Cloud Storage folders the launcher staged the image records as record files
(launch/masks.py), which the job reads in parallel and keys like image files. Record files,
not text lines: Beam's text reader grows its buffer by concatenation, quadratic in a long
line, and a record's length is checked against a cap before it is read. The graph never
holds annotations: a large export would outgrow Dataflow's job-graph limit (10 MB).
"""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from beam_pipeline.runtime.local_listing import read_staged
from transforms.limits import STAGED_RECORD_BYTES
from transforms.pairing import (
    LISTED_REJECT,
    Layout,
    Pair,
    Role,
    SourceFile,
    StagedEntries,
    annotated_entry,
    is_hidden,
    may_share_key,
    resolve_pair,
    unrecognized,
)
from transforms.rejects import Reject
from transforms.spill import read_records

REJECTS = "rejects"
COUNTED = "counted"  # per bundle, how many entries (pairs and rejects) it found
_PAIRS = "pairs"  # a staged listing file of pairs (the others hold rejects)
_NAMESPACE = "segprep"


class _KeyFiles(beam.DoFn):
    """(key, (role, SourceFile)) for files that fit the naming rule; a reject for others."""

    def __init__(self, layout: Layout, root: str, role: Role | None) -> None:
        self._layout = layout
        self._root = root
        self._role = role
        self._hidden = Metrics.counter(_NAMESPACE, "hidden_files_ignored")

    def process(self, metadata: FileMetadata):
        relative = metadata.path[len(self._root) :]
        if is_hidden(relative):
            self._hidden.inc()
            return
        if self._layout.is_input_file(metadata.path):
            return
        if self._layout.is_ignored(relative):
            Metrics.counter(_NAMESPACE, "ignored_files").inc()
            return
        if self._layout.is_side_file(relative, self._role):
            Metrics.counter(_NAMESPACE, "side_files").inc()
            return
        classified = self._layout.classify(relative, self._role)
        if classified is None:
            Metrics.counter(_NAMESPACE, "unrecognized_files").inc()
            reject = unrecognized(metadata.path, self._role, self._layout)
            if may_share_key(reject, self._layout.annotations):  # met by the others of its key
                yield reject.key, (LISTED_REJECT, reject)
            else:
                yield beam.pvalue.TaggedOutput(REJECTS, reject)
            return
        role, key = classified
        yield key, (role, SourceFile(metadata.path, metadata.size_in_bytes))


class _KeyAnnotatedImages(beam.DoFn):
    """(key, (MASK, AnnotatedEntry carrying its record)) per image record of one staged file; a
    file_name that is no image name is keyed apart and resolved into its reject."""

    def __init__(self, annotations: str, image_dir: str) -> None:
        self._annotations = annotations
        self._image_dir = image_dir

    def setup(self) -> None:
        settle_worker_credentials()  # it reads gs:// through Beam's file system

    def process(self, path: str):
        for payload in _records(path, STAGED_RECORD_BYTES):
            line = payload.decode("utf-8")
            record = json.loads(line)
            image_id, name = record["image_id"], record["file_name"]
            key, entry = annotated_entry(self._annotations, self._image_dir, image_id, name, line)
            yield key, (Role.MASK, entry)


def _records(path: str, limit: int):
    """The records of one staged record file, on any Beam file system; linear in its size."""
    (match,) = FileSystems.match([path])
    size = match.metadata_list[0].size_in_bytes
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        yield from read_records(handle, path, size, limit)


def _annotated_images(pbegin, layout: Layout, staged: tuple[str, ...]):
    # each file one work item, spread over the workers (Create reshuffles what it makes)
    files = pbegin | "StagedImagesFiles" >> beam.Create(list(staged)).with_output_types(str)
    return files | "KeyAnnotatedImages" >> beam.ParDo(
        _KeyAnnotatedImages(layout.annotations, layout.image_dir)
    ).with_outputs(REJECTS, main="keyed")


class _ResolvePairs(beam.DoFn):
    def __init__(self, annotations: str | None, skip_unlabeled: bool = False) -> None:
        self._annotations = annotations
        self._skip_unlabeled = skip_unlabeled

    def process(self, element):
        key, files = element
        images = [source for role, source in files if role is Role.IMAGE]
        masks = [source for role, source in files if role is Role.MASK]
        listed = [source for role, source in files if role == LISTED_REJECT]
        outcome = resolve_pair(key, images, masks, self._annotations, self._skip_unlabeled, listed)
        if isinstance(outcome, Pair):
            yield outcome
        else:
            yield beam.pvalue.TaggedOutput(REJECTS, outcome)


def settle_worker_credentials() -> None:
    """Beam's gs:// credentials in this worker process, as the launcher settled its own."""
    from beam_pipeline.runtime.beam_gcs import use_storage_emulator_if_set

    use_storage_emulator_if_set()


class _UseEmulatorCredentials(beam.DoFn):
    """Passes patterns through; first settles this worker's gs:// credentials for an emulator.

    The launcher settles Beam's credential cache for an emulator (launch/credentials.py),
    but SDK workers in other processes (portable runners, Dataflow) start without it, and
    Beam's match would retry a credential search for tens of seconds before going
    anonymous. Fused with the match, so it runs in the process that matches.
    """

    def setup(self) -> None:
        settle_worker_credentials()

    def process(self, pattern: str):
        yield pattern


class _MatchFiles(beam.PTransform):
    """fileio.MatchFiles, with the worker's credentials settled before the match."""

    def __init__(self, pattern: str) -> None:
        super().__init__()
        self._pattern = pattern

    def expand(self, pbegin):
        return (
            pbegin
            | "Pattern" >> beam.Create([self._pattern])
            | "Credentials" >> beam.ParDo(_UseEmulatorCredentials())
            | "Match" >> fileio.MatchAll(fileio.EmptyMatchTreatment.ALLOW_IF_WILDCARD)
        )


class ListAndPair(beam.PTransform):
    """List the folder(s) of a layout (any Beam file system) and pair the files by key; the
    image records of an annotation export are the masks."""

    def __init__(self, layout: Layout, staged_images: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._layout = layout
        self._staged_images = staged_images

    def expand(self, pbegin):
        keyed, rejects = [], []
        for root, role in self._layout.roots():
            label = role.value.capitalize() if role else "Data"
            listed = (
                pbegin
                | f"Match{label}Files" >> _MatchFiles(root + "**")
                | f"Key{label}Files"
                >> beam.ParDo(_KeyFiles(self._layout, root, role)).with_outputs(
                    REJECTS, main="keyed"
                )
            )
            keyed.append(listed.keyed)
            rejects.append(listed[REJECTS])
        if self._staged_images:
            records = _annotated_images(pbegin, self._layout, self._staged_images)
            keyed.append(records.keyed)
            rejects.append(records[REJECTS])
        resolved = (
            keyed
            | "AllKeyedFiles" >> beam.Flatten()
            | "GroupFilesByKey" >> beam.GroupByKey()
            | "ResolvePairs"
            >> beam.ParDo(
                _ResolvePairs(self._layout.annotations, self._layout.skip_unlabeled)
            ).with_outputs(REJECTS, main="pairs")
        )
        all_rejects = (*rejects, resolved[REJECTS]) | "FlattenListingRejects" >> beam.Flatten()
        return {"pairs": resolved.pairs, REJECTS: all_rejects}


class FromListing(beam.PTransform):
    """Entries the launcher already listed, paired and staged (local folders): its pair and
    reject files as one spread collection, each file one work item, each entry counted."""

    def __init__(self, staged: StagedEntries) -> None:
        super().__init__()
        self._staged = staged

    def expand(self, pbegin):
        staged = self._staged
        listed = [(_PAIRS, path) for path in staged.pair_files]
        listed += [(REJECTS, path) for path in staged.reject_files]
        return (
            pbegin
            | "ListedFiles" >> beam.Create(listed)  # spread over workers: Create reshuffles
            | "ReadListed"
            >> beam.ParDo(_ReadListed(staged.record_limit)).with_outputs(
                REJECTS, COUNTED, main="pairs"
            )
        )


class DiscoverEntries(beam.PTransform):
    """Pairs and listing rejects, from the launcher's staged listing or listed here."""

    def __init__(
        self,
        layout: Layout,
        entries: StagedEntries | None,
        staged_images: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self._layout = layout
        self._entries = entries
        self._staged_images = staged_images

    def expand(self, pbegin):
        if self._entries is not None:  # counted as the staged files are read
            found = pbegin | "FromListing" >> FromListing(self._entries)
            return {"pairs": found.pairs, REJECTS: found[REJECTS], COUNTED: found[COUNTED]}
        found = pbegin | "ListAndPair" >> ListAndPair(self._layout, self._staged_images)
        pairs = found["pairs"] | "CountPairs" >> beam.ParDo(_Counted()).with_outputs(
            COUNTED, main="entries"
        )
        rejects = found[REJECTS] | "CountListingRejects" >> beam.ParDo(_Counted()).with_outputs(
            COUNTED, main="entries"
        )
        counts = (pairs[COUNTED], rejects[COUNTED]) | "AllCounts" >> beam.Flatten()
        return {"pairs": pairs.entries, REJECTS: rejects.entries, COUNTED: counts}


class _Counted(beam.DoFn):
    """Entries (pairs or rejects) passed on, each counted (Dataflow's job page shows the
    counters; made once, since making one costs more than the entry's whole step); tagged
    COUNTED, how many the bundle passed (the commit's accounting sums them)."""

    def __init__(self) -> None:
        self._discovered = Metrics.counter(_NAMESPACE, "discovered_keys")
        self._paired = Metrics.counter(_NAMESPACE, "paired_keys")

    def start_bundle(self) -> None:
        self._seen = 0

    def process(self, entry: Pair | Reject):
        yield from self.process_all((entry,))

    def process_all(self, entries):
        for entry in entries:
            self._seen += 1
            self._discovered.inc()
            if isinstance(entry, Reject):
                Metrics.counter(_NAMESPACE, f"rejected_{entry.reason.value}").inc()
            else:
                self._paired.inc()
            yield entry

    def finish_bundle(self):
        if self._seen:
            yield beam.pvalue.TaggedOutput(COUNTED, GlobalWindows.windowed_value(self._seen))
        self._seen = 0


class _ReadListed(_Counted):
    """(kind, staged file) -> its pairs, or its rejects (tagged), each counted as found;
    tagged COUNTED, how many entries the bundle found."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit

    def process(self, listed: tuple[str, str]):
        kind, path = listed
        entries = self.process_all(read_staged(path, self._limit))
        if kind == _PAIRS:
            yield from entries
        else:
            for reject in entries:
                yield beam.pvalue.TaggedOutput(REJECTS, reject)
