"""The order records are read in an epoch: a global permutation, or shard windows.

Both orders are functions of (seed, epoch) alone, the same on every rank, worker and host,
so the loaders deal them out to ranks, resume them from a count of records consumed, and
know in advance which shards will be read when (for prefetching gs:// shards).

global (shuffle=True): a permutation of all the split's records. Every batch mixes records
    from the whole split; each batch touches up to batch_size shards, so reading from a
    cache smaller than the dataset fetches shards over and over.
window (shuffle="window"): the shards are permuted, cut into windows of `window_shards`
    consecutive shards, and the records of each window permuted. Only one window (plus the
    next, prefetched) needs to be in the cache at once, so a cache of a few windows reads at
    full speed. The trade-off: a batch holds records of at most `window_shards` shards, and
    two records of one shard are more likely to be close in the epoch than under the
    global order. segprep assigns records to shards by a hash of their keys, so a shard is
    itself a uniform sample of the split; the wider the window, the closer to global.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

WINDOW = "window"
DEFAULT_WINDOW_SHARDS = 4


def check_shuffle(shuffle: bool | str, window_shards: int) -> None:
    if shuffle not in (True, False, WINDOW):
        raise ValueError(f"shuffle must be True, False or {WINDOW!r}, got {shuffle!r}")
    if shuffle == WINDOW and window_shards < 1:
        raise ValueError(f"window_shards must be at least 1, got {window_shards}")


def epoch_order(
    num_records: int,
    seed: int,
    epoch: int,
    shuffle: bool | str,
    shard_sizes: Sequence[int] | None = None,
    window_shards: int = DEFAULT_WINDOW_SHARDS,
) -> np.ndarray:
    """The split's record numbers in the order of `epoch` (see the module docstring)."""
    if shuffle is False:
        return np.arange(num_records, dtype=np.int64)
    if shuffle != WINDOW:
        return np.random.default_rng([seed, epoch]).permutation(num_records)
    if shard_sizes is None or sum(shard_sizes) != num_records:
        raise ValueError("the window shuffle needs the split's shard sizes")
    starts = np.concatenate([[0], np.cumsum(shard_sizes, dtype=np.int64)])
    # A third word keeps the window order's stream apart from the global one's.
    rng = np.random.default_rng([seed, epoch, 1])
    shards = rng.permutation(len(shard_sizes))
    parts = []
    for first in range(0, len(shards), window_shards):
        window = shards[first : first + window_shards]
        records = np.concatenate(
            [np.arange(starts[s], starts[s + 1], dtype=np.int64) for s in window]
        )
        parts.append(rng.permutation(records))
    return np.concatenate(parts) if parts else np.arange(0, dtype=np.int64)
