"""The job's first stage: every entry, as a pair or a reject. Only paths travel, never pixels.

Local folders were listed and paired once by the launcher (runtime/local_listing.py): the job
starts from that result. Cloud Storage folders are listed by the job itself, in parallel;
both paths apply the same pairing rule (transforms/pairing.py).

COCO runs: the launcher staged one JSON line per image record of the annotations file
(launch/masks.py). The job reads that file in parallel (ReadFromText, split across workers)
and each image's annotations join its pair by key, so they travel with the pair's paths from
there on. Neither the launcher's pairs (beam.Create, part of the job graph) nor the graph
itself ever hold annotations: a graph holding a large COCO file would outgrow Dataflow's
job-graph limit (10 MB) and be copied into every worker's process.
"""

from __future__ import annotations

import dataclasses
import json

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.textio import ReadFromText
from apache_beam.metrics import Metrics

from beam_pipeline.job.settings import CocoSettings
from transforms.pairing import (
    Entries,
    Layout,
    Pair,
    Role,
    SourceFile,
    coco_entry,
    is_hidden,
    resolve_pair,
    unrecognized,
)
from transforms.rejects import Reject

REJECTS = "rejects"
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
        classified = self._layout.classify(relative, self._role)
        if classified is None:
            Metrics.counter(_NAMESPACE, "unrecognized_files").inc()
            yield beam.pvalue.TaggedOutput(REJECTS, unrecognized(metadata.path, self._role))
            return
        role, key = classified
        yield key, (role, SourceFile(metadata.path, metadata.size_in_bytes))


class _KeyCocoRecords(beam.DoFn):
    """(key, (MASK, CocoEntry carrying its staged line)) per image record of a COCO file; a
    reject for a file_name that is no image name."""

    def __init__(self, coco: CocoSettings, image_dir: str) -> None:
        self._coco = coco
        self._image_dir = image_dir

    def process(self, line: str):
        record = json.loads(line)
        outcome = coco_entry(
            self._coco.annotations, self._image_dir, record["image_id"], record["file_name"]
        )
        if isinstance(outcome, Reject):
            yield beam.pvalue.TaggedOutput(REJECTS, outcome)
            return
        key, entry = outcome
        yield key, (Role.MASK, dataclasses.replace(entry, payload=line))


def _coco_records(pbegin, coco: CocoSettings, image_dir: str):
    return (
        pbegin
        | "ReadStagedCoco" >> ReadFromText(coco.staged, validate=False)
        | "KeyCocoRecords"
        >> beam.ParDo(_KeyCocoRecords(coco, image_dir)).with_outputs(REJECTS, main="keyed")
    )


def _attach_annotations(element):
    """The launcher's COCO pair with its annotations; records of unpaired keys are dropped
    (the launcher's listing rejected those keys already)."""
    key, grouped = element
    pairs = list(grouped["pairs"])
    if not pairs:
        return
    (pair,) = pairs
    found = [entry for _, entry in grouped["coco"] if entry.image_id == pair.mask.image_id]
    if len(found) != 1:
        raise RuntimeError(
            f"{len(found)} staged COCO records for {key!r}, image {pair.mask.image_id}: the "
            "run's staging folder changed while it ran"
        )
    yield dataclasses.replace(pair, mask=found[0])


class AttachAnnotations(beam.PTransform):
    """Pairs whose mask is a COCO entry, with that image's annotations from the staged file."""

    def __init__(self, coco: CocoSettings, image_dir: str) -> None:
        super().__init__()
        self._coco = coco
        self._image_dir = image_dir

    def expand(self, pairs):
        records = _coco_records(pairs.pipeline, self._coco, self._image_dir)
        keyed = pairs | "PairByKey" >> beam.Map(lambda pair: (pair.key, pair))
        return (
            {"pairs": keyed, "coco": records.keyed}
            | "JoinAnnotations" >> beam.CoGroupByKey()
            | "AttachAnnotations" >> beam.FlatMap(_attach_annotations).with_output_types(Pair)
        )


class _ResolvePairs(beam.DoFn):
    def __init__(self, annotations: str | None) -> None:
        self._annotations = annotations

    def process(self, element):
        key, files = element
        images = [source for role, source in files if role is Role.IMAGE]
        masks = [source for role, source in files if role is Role.MASK]
        outcome = resolve_pair(key, images, masks, self._annotations)
        if isinstance(outcome, Pair):
            yield outcome
        else:
            yield beam.pvalue.TaggedOutput(REJECTS, outcome)


class ListAndPair(beam.PTransform):
    """List the folder(s) of a layout (any Beam file system) and pair the files by key; the
    image records of a COCO file are the masks."""

    def __init__(self, layout: Layout, coco: CocoSettings | None = None) -> None:
        super().__init__()
        self._layout = layout
        self._coco = coco

    def expand(self, pbegin):
        keyed, rejects = [], []
        for root, role in self._layout.roots():
            label = role.value.capitalize() if role else "Data"
            listed = (
                pbegin
                | f"Match{label}Files" >> fileio.MatchFiles(root + "**")
                | f"Key{label}Files"
                >> beam.ParDo(_KeyFiles(self._layout, root, role)).with_outputs(
                    REJECTS, main="keyed"
                )
            )
            keyed.append(listed.keyed)
            rejects.append(listed[REJECTS])
        if self._coco is not None:
            records = _coco_records(pbegin, self._coco, self._layout.image_dir)
            keyed.append(records.keyed)
            rejects.append(records[REJECTS])
        resolved = (
            keyed
            | "AllKeyedFiles" >> beam.Flatten()
            | "GroupFilesByKey" >> beam.GroupByKey()
            | "ResolvePairs"
            >> beam.ParDo(_ResolvePairs(self._layout.annotations)).with_outputs(
                REJECTS, main="pairs"
            )
        )
        all_rejects = (*rejects, resolved[REJECTS]) | "FlattenListingRejects" >> beam.Flatten()
        return {"pairs": resolved.pairs, REJECTS: all_rejects}


class FromListing(beam.PTransform):
    """Entries the launcher already listed and paired (local folders)."""

    def __init__(self, entries: Entries) -> None:
        super().__init__()
        self._entries = entries

    def expand(self, pbegin):
        pairs = pbegin | "ListedPairs" >> beam.Create(self._entries.pairs).with_output_types(Pair)
        rejects = pbegin | "ListedRejects" >> beam.Create(self._entries.rejects).with_output_types(
            Reject
        )
        return {"pairs": pairs, REJECTS: rejects}


class DiscoverEntries(beam.PTransform):
    """Pairs and listing rejects, from the launcher's listing or listed here."""

    def __init__(
        self, layout: Layout, entries: Entries | None, coco: CocoSettings | None = None
    ) -> None:
        super().__init__()
        self._layout = layout
        self._entries = entries
        self._coco = coco

    def expand(self, pbegin):
        if self._entries is not None:
            found = pbegin | "FromListing" >> FromListing(self._entries)
            if self._coco is not None:
                attached = found["pairs"] | "WithAnnotations" >> AttachAnnotations(
                    self._coco, self._layout.image_dir
                )
                found = {"pairs": attached, REJECTS: found[REJECTS]}
        else:
            found = pbegin | "ListAndPair" >> ListAndPair(self._layout, self._coco)
        counted = found["pairs"] | "CountPairs" >> beam.Map(_count, "paired_keys")
        rejected = found[REJECTS] | "CountListingRejects" >> beam.Map(_count_reject)
        return {"pairs": counted, REJECTS: rejected}


def _count(element, name: str):
    Metrics.counter(_NAMESPACE, "discovered_keys").inc()
    Metrics.counter(_NAMESPACE, name).inc()
    return element


def _count_reject(reject: Reject) -> Reject:
    Metrics.counter(_NAMESPACE, "discovered_keys").inc()
    Metrics.counter(_NAMESPACE, f"rejected_{reject.reason.value}").inc()
    return reject
