"""JAX: a Grain pipeline over a segprep split, with global shuffle and checkpointable state.

    dataset = make_loader("build/output", "train", 8, seed=0, num_epochs=None)
    iterator = iter(dataset)
    batch = next(iterator)           # {"image": uint8 [B,H,W,3], "mask": [B,H,W,1], "key": [B]}
    # mask: uint8 0/1; class ids (uint8, int32 for 16-bit PNGs) for a class-id output
    state = iterator.get_state()     # Grain's own state; iterator.set_state(state) resumes

shard_reader.source.RecordSource is a Grain random-access data source as it is (len and
getitem, picklable for worker processes: grain.MapDataset.source(RecordSource(...)) and
grain.DataLoader take it). This module chains Grain's own steps over record numbers:

    MapDataset.range -> shuffle (index_shuffle: a global permutation per epoch, computed,
    not stored) -> this process's part -> batch -> repeat -> read the batch (one array per
    feature, each record decoded into its row) -> to_iter_dataset [-> mp_prefetch]

The part of process i of n is every n-th record of the epoch's order from i, over the
first n * floor(N / n) records: parts are disjoint and equal, and the last N % n records of
each epoch's order are left out of that epoch (a different few each epoch), as in
shard_reader.torch. Batches stay within an epoch: an epoch's last batch may be short unless
drop_remainder. Channels last (NHWC), as JAX models take them.
"""

from __future__ import annotations

import functools
import os

import grain
import numpy as np

from shard_reader.source import RecordSource, usable_cores


def make_loader(
    data_dir: str | os.PathLike,
    split: str,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    num_epochs: int | None = 1,
    shard_options: grain.sharding.ShardOptions | None = None,
    drop_remainder: bool = False,
    worker_count: int = 0,
    image_size: tuple[int, int] | None = None,
    version: int | None = None,
) -> grain.IterDataset:
    """A Grain IterDataset of batches; `iter()` it for a checkpointable iterator.

    num_epochs: passes over the split (None: forever); each pass is shuffled anew.
    shard_options: this process's part, e.g. grain.sharding.ShardByJaxProcess() (the
        remainder is always dropped so that parts are equal; see the module docstring).
    worker_count: processes that read and decode (grain's mp_prefetch); 0: threads in this
        process, one per core (simplejpeg decodes without holding the GIL).
    image_size: (height, width) to resize to; needed for batches when sizes differ.
    version: read exactly the records of this version of a dataset that grew (`segprep
        prepare --append`), in the same order for the same seed; None: the latest.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    source = RecordSource(data_dir, split, version=version)
    if source.image_shape is None and image_size is None and batch_size > 1:
        raise ValueError(
            f"records of split {split!r} differ in size (metadata image_shape is null): "
            "pass image_size=(height, width), or batch_size=1"
        )
    shard_options = shard_options or grain.sharding.NoSharding()
    index, count = shard_options.shard_index, shard_options.shard_count
    if count > len(source):
        raise ValueError(f"{count} processes for {len(source)} records: some would get none")
    # Record numbers are shuffled, split and batched; each batch is then read straight into
    # its arrays (RecordSource.read_batch), not stacked from per-record arrays (a copy).
    dataset = grain.MapDataset.range(len(source))
    if shuffle:
        dataset = dataset.shuffle(seed=seed)
    # Slicing keeps the epoch in the index, so the shuffle still draws a new order per epoch.
    dataset = dataset[index : len(source) // count * count : count]
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder).repeat(num_epochs)
    size = None if image_size is None else (int(image_size[0]), int(image_size[1]))
    dataset = dataset.map(functools.partial(_read, source=source, image_size=size))
    # Elements are whole batches here: Grain's default read-ahead (500 elements, 16 threads,
    # tuned for KB-sized records) would hold gigabytes of pixels. One thread per core in
    # this process, or one per worker process, each with two batches ahead.
    threads = usable_cores() if worker_count == 0 else 1
    options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2 * threads)
    iterable = dataset.to_iter_dataset(options)
    if worker_count > 0:
        iterable = iterable.mp_prefetch(grain.MultiprocessingOptions(num_workers=worker_count))
    return iterable


def _read(indices: np.ndarray, *, source: RecordSource, image_size: tuple[int, int] | None):
    batch = source.read_batch(indices.tolist(), image_size=image_size)
    return {**batch, "key": np.array(batch["key"])}
