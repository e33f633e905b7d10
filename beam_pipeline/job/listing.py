"""List both folders and pair images with masks by key: only paths travel, never pixels."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata
from apache_beam.metrics import Metrics

from segcore.pairing import Pair, SourceFile, image_key, mask_key, resolve_pair
from segcore.rejects import Reason, Reject

REJECTS = "rejects"
_NAMESPACE = "segprep"


class _KeyFiles(beam.DoFn):
    """(key, SourceFile) for files that fit the naming rule; a reject for any other file."""

    def __init__(self, root: str, key_of, role: str) -> None:
        self._root = root
        self._key_of = key_of
        self._role = role
        self._unrecognized = Metrics.counter(_NAMESPACE, f"unrecognized_{role}_files")

    def process(self, metadata: FileMetadata):
        relative = metadata.path[len(self._root) :]
        key = self._key_of(relative)
        source = SourceFile(metadata.path, metadata.size_in_bytes)
        if key is None:
            self._unrecognized.inc()
            reject = Reject(
                relative,
                Reason.UNRECOGNIZED_FILE,
                f"{self._role} folder file with an unknown name or extension",
                **{self._role: metadata.path},
            )
            yield beam.pvalue.TaggedOutput(REJECTS, reject)
            return
        yield key, source


class ListFiles(beam.PTransform):
    """Every file under `root` (recursively), keyed by its entry key."""

    def __init__(self, root: str, role: str) -> None:
        super().__init__()
        self._root = root
        self._role = role
        self._key_of = image_key if role == "image" else mask_key

    def expand(self, pbegin):
        return (
            pbegin
            | "Match" >> fileio.MatchFiles(self._root + "**")
            | "Key"
            >> beam.ParDo(_KeyFiles(self._root, self._key_of, self._role)).with_outputs(
                REJECTS, main="keyed"
            )
        )


class _ResolvePairs(beam.DoFn):
    def __init__(self) -> None:
        self._discovered = Metrics.counter(_NAMESPACE, "discovered_keys")
        self._paired = Metrics.counter(_NAMESPACE, "paired_keys")

    def process(self, element):
        key, grouped = element
        self._discovered.inc()
        outcome = resolve_pair(key, list(grouped["image"]), list(grouped["mask"]))
        if isinstance(outcome, Pair):
            self._paired.inc()
            yield outcome
        else:
            Metrics.counter(_NAMESPACE, f"rejected_{outcome.reason.value}").inc()
            yield beam.pvalue.TaggedOutput(REJECTS, outcome)


class ListAndPair(beam.PTransform):
    """Pairs, plus rejects for unpaired, duplicated or unrecognized files."""

    def __init__(self, image_root: str, mask_root: str) -> None:
        super().__init__()
        self._image_root = image_root
        self._mask_root = mask_root

    def expand(self, pbegin):
        images = pbegin | "ListImages" >> ListFiles(self._image_root, "image")
        masks = pbegin | "ListMasks" >> ListFiles(self._mask_root, "mask")
        resolved = (
            {"image": images.keyed, "mask": masks.keyed}
            | "GroupPathsByKey" >> beam.CoGroupByKey()
            | "ResolvePairs" >> beam.ParDo(_ResolvePairs()).with_outputs(REJECTS, main="pairs")
        )
        rejects = (
            images[REJECTS],
            masks[REJECTS],
            resolved[REJECTS],
        ) | "FlattenListingRejects" >> beam.Flatten()
        return {"pairs": resolved.pairs, REJECTS: rejects}
