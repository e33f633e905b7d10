"""An append's first check: which discovered keys the output already holds.

Each pair's key is looked up in the digest tables of the output's versions
(transforms/format/digest_table.py: bisected on disk, nothing loaded), in every split's: the
split its key hashes to first, then the others, since a duplicate group or an official list
may have stored it elsewhere. A new key goes on to planning; a key present with the same
image and mask bytes is skipped and counted; a key present with other bytes is a
`key_exists` reject. The tables are opened through transforms/format/side_tables.py (name,
link, kind and size checked; the launcher checked their sha256 before the job started).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_pipeline.job.settings import AppendSettings, ShardWriterSettings
from beam_pipeline.job.shard_work import pair_digest
from transforms.format import digest_table, side_tables
from transforms.pairing import Pair
from transforms.rejects import Reason, Reject, RejectError
from transforms.splits import FolderSplits, SplitFractions, SplitLists

REJECTS = "rejects"
SKIPPED = "skipped"


class _CheckExisting(beam.DoFn):
    def __init__(
        self,
        output_dir: str,
        append: AppendSettings,
        fractions: SplitFractions | SplitLists | FolderSplits,
        writing: ShardWriterSettings,
    ) -> None:
        self._output_dir = output_dir
        self._append = append
        self._fractions = fractions
        self._writing = writing
        self._tables: dict[str, list[tuple[int, digest_table.SortedTable]]] = {}
        self._skipped = Metrics.counter("segprep", "skipped_identical")
        self._exists = Metrics.counter("segprep", f"rejected_{Reason.KEY_EXISTS.value}")

    def _tables_of(self, split: str) -> list[tuple[int, digest_table.SortedTable]]:
        if split not in self._tables:
            refs = self._append.digest_tables.get(split, ())
            self._tables[split] = [
                (number, side_tables.open_digest_table(self._output_dir, ref, check_sha256=False))
                for number, ref in refs
            ]
        return self._tables[split]

    def _splits_to_search(self, key: str) -> tuple[str, ...]:
        """Every split that has tables, the one the key's hash gives first: a duplicate
        group, a list or a folder may have stored the key in another."""
        splits = tuple(self._append.digest_tables)
        if isinstance(self._fractions, SplitFractions):
            own = self._fractions.split_of(key)
            if own in splits:
                return (own, *(split for split in splits if split != own))
        return splits

    def _find(self, key: str) -> tuple[int, str, str] | None:
        """(version, stored content digest, split) of a key the output holds, else None."""
        for split in self._splits_to_search(key):
            for version, table in self._tables_of(split):
                stored = table.get(key)
                if stored is not None:
                    return version, stored, split
        return None

    def process(self, pair: Pair):
        found = self._find(pair.key)
        if found is None:
            yield pair
            return
        version, stored, split = found
        listed = None if isinstance(self._fractions, SplitFractions) else self._fractions
        if listed is not None and listed.split_of(pair.key) not in (None, split):
            # The user's lists moved a stored key: a stored record never moves, so the list
            # and the output disagree, and that is said, not hidden.
            yield self._exists_reject(
                pair,
                f"listed in {listed.split_of(pair.key)}, but version {version} of the output "
                f"stores it in {split}: an append never moves a stored record (it is kept "
                "where it is)",
            )
            return
        digest = pair_digest(self._writing, pair)
        if isinstance(digest, RejectError):
            yield self._exists_reject(
                pair,
                f"version {version} of the output holds this key; this run's files cannot "
                f"be read ({digest.reason.value}: {digest.detail}): it is kept as it is",
            )
        elif digest == stored:
            self._skipped.inc()
            yield beam.pvalue.TaggedOutput(SKIPPED, pair.key)
        else:
            yield self._exists_reject(
                pair,
                f"version {version} of the output holds this key with other image or mask "
                f"bytes (content sha256 {stored[:16]}..., these {digest[:16]}...): it is kept "
                "as it is",
            )

    def _exists_reject(self, pair: Pair, detail: str):
        self._exists.inc()
        reject = Reject(pair.key, Reason.KEY_EXISTS, detail, pair.image.path, pair.mask.path)
        return beam.pvalue.TaggedOutput(REJECTS, reject)


class _StoredKeysOfRejects(_CheckExisting):
    """The listing's rejects (an image without its mask, a mask without its image, and an
    unlabeled image of --images_without_mask skip) for keys the output already holds become
    `key_exists` rejects: the stored record stays, and a key is never both stored and
    rejected or listed unlabeled."""

    def process(self, reject: Reject):
        found = self._find(reject.key)
        if found is None:
            yield reject
            return
        self._exists.inc()
        Metrics.counter("segprep", f"rejected_{reject.reason.value}").dec()
        yield Reject(
            reject.key,
            Reason.KEY_EXISTS,
            f"version {found[0]} of the output holds this key; this run's entry is "
            f"{reject.reason.value} ({reject.detail}): it is kept as it is",
            reject.image,
            reject.mask,
        )


class CheckExistingKeys(beam.PTransform):
    """{"pairs", "rejects"} of the listing -> {"pairs": new pairs, "rejects": the
    listing's, with stored keys' as key_exists, and key_exists, "skipped": a count}."""

    def __init__(
        self,
        output_dir: str,
        append: AppendSettings,
        fractions: SplitFractions | SplitLists | FolderSplits,
        writing: ShardWriterSettings,
    ) -> None:
        super().__init__()
        self._dofn = _CheckExisting(output_dir, append, fractions, writing)
        self._of_rejects = _StoredKeysOfRejects(output_dir, append, fractions, writing)

    def expand(self, found):
        checked = found["pairs"] | "LookUpKeys" >> beam.ParDo(self._dofn).with_outputs(
            REJECTS, SKIPPED, main="pairs"
        )
        listed = found[REJECTS] | "LookUpRejectedKeys" >> beam.ParDo(self._of_rejects)
        rejects = (checked[REJECTS], listed) | "Rejects" >> beam.Flatten()
        skipped = checked[SKIPPED] | "CountSkipped" >> beam.combiners.Count.Globally()
        return {"pairs": checked.pairs, REJECTS: rejects, SKIPPED: skipped}
