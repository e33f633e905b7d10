"""The job's first stage: every entry, as a pair or a reject. Only paths travel, never pixels.

Local folders were listed and paired once by the launcher (runtime/local_listing.py): the job
starts from that result. Cloud Storage folders are listed by the job itself, in parallel;
both paths apply the same pairing rule (segcore/pairing.py).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.metrics import Metrics

from segcore.pairing import (
    Entries,
    Layout,
    Pair,
    Role,
    SourceFile,
    is_hidden,
    resolve_pair,
    unrecognized,
)
from segcore.rejects import Reject

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
        classified = self._layout.classify(relative, self._role)
        if classified is None:
            Metrics.counter(_NAMESPACE, "unrecognized_files").inc()
            yield beam.pvalue.TaggedOutput(REJECTS, unrecognized(metadata.path, self._role))
            return
        role, key = classified
        yield key, (role, SourceFile(metadata.path, metadata.size_in_bytes))


class _ResolvePairs(beam.DoFn):
    def process(self, element):
        key, files = element
        images = [source for role, source in files if role is Role.IMAGE]
        masks = [source for role, source in files if role is Role.MASK]
        outcome = resolve_pair(key, images, masks)
        if isinstance(outcome, Pair):
            yield outcome
        else:
            yield beam.pvalue.TaggedOutput(REJECTS, outcome)


class ListAndPair(beam.PTransform):
    """List the folder(s) of a layout (any Beam file system) and pair the files by key."""

    def __init__(self, layout: Layout) -> None:
        super().__init__()
        self._layout = layout

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
        resolved = (
            keyed
            | "AllKeyedFiles" >> beam.Flatten()
            | "GroupFilesByKey" >> beam.GroupByKey()
            | "ResolvePairs" >> beam.ParDo(_ResolvePairs()).with_outputs(REJECTS, main="pairs")
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

    def __init__(self, layout: Layout, entries: Entries | None) -> None:
        super().__init__()
        self._layout = layout
        self._entries = entries

    def expand(self, pbegin):
        if self._entries is not None:
            found = pbegin | "FromListing" >> FromListing(self._entries)
        else:
            found = pbegin | "ListAndPair" >> ListAndPair(self._layout)
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
