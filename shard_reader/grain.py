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

A gs:// output is read through a bounded local cache of whole, sha256-checked shards
(cache_dir=, cache_limit_bytes=; shard_reader/remote_cache.py): each reading process
prefetches shards in the order of the batches ahead of the one it reads. shuffle="window"
reads a window of shards at a time (shard_reader/read_order.py), for a cache smaller than
the dataset; its order, like the global one, is a function of (seed, epoch), so Grain's
state resumes it exactly.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import threading
import time

import numpy as np

from shard_reader import read_order, remote_cache, resizing, samples
from shard_reader.source import RecordSource, usable_cores


def _not_jax_profiler_note(record: logging.LogRecord) -> bool:
    """Grain's import logs `Failed to load jax profiler` when JAX is absent; segprep's Grain
    loader needs no JAX, so that one line is noise on every run."""
    return not str(record.msg).startswith("Failed to load jax profiler")


_absl_logger = logging.getLogger("absl")  # where absl.logging writes
_absl_logger.addFilter(_not_jax_profiler_note)
try:
    import grain
finally:
    _absl_logger.removeFilter(_not_jax_profiler_note)


def make_loader(
    data_dir: str | os.PathLike,
    split: str,
    batch_size: int,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    num_epochs: int | None = 1,
    shard_options: grain.sharding.ShardOptions | None = None,
    drop_remainder: bool = False,
    worker_count: int = 0,
    image_size: int | tuple[int, int] | None = None,
    resize: str = resizing.STRETCH,
    with_valid: bool = False,
    transform: samples.Transform | None = None,
    sample_format: str = samples.NUMPY_FORMAT,
    version: int | None = None,
    window_shards: int = read_order.DEFAULT_WINDOW_SHARDS,
    cache_dir: str | os.PathLike | None = None,
    cache_limit_bytes: int | None = None,
) -> grain.IterDataset:
    """A Grain IterDataset of batches; `iter()` it for a checkpointable iterator.

    num_epochs: passes over the split (None: forever); each pass is shuffled anew.
    shard_options: this process's part, e.g. grain.sharding.ShardByJaxProcess() (the
        remainder is always dropped so that parts are equal; see the module docstring).
    worker_count: processes that read and decode (grain's mp_prefetch); 0: threads in this
        process, one per core (simplejpeg decodes without holding the GIL).
    image_size: an int (square) or (height, width) to resize to; needed for batches when
        sizes differ. resize: "stretch" or "fit" (aspect kept, padded; see
        shard_reader.resizing); with_valid adds "valid" [B,H,W,1], 0 on the padding.
    transform: f(sample) -> sample per record before batching, with its own random state
        from (seed, epoch, record) (see shard_reader.samples); sample_format "numpy" (HWC
        arrays, as albumentations takes; the default here) or "torch". Outputs are stacked
        into the batch, so they must share one shape.
    version: read exactly the records of this version of a dataset that grew (`segprep
        prepare --append`), in the same order for the same seed; None: the latest.
    shuffle: True, a global permutation per epoch; "window", shards permuted and the
        records of each window of `window_shards` shards permuted; False, shard order.
    cache_dir, cache_limit_bytes: for a gs:// output, the local shard cache (defaults
        ~/.cache/segprep/shards and min(64 GiB, half its free space)).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    size = resizing.image_size_arg(image_size)
    resize = resizing.resize_arg(resize, size)
    samples.check_format(sample_format)
    read_order.check_shuffle(shuffle, window_shards)
    source = RecordSource(
        data_dir, split, version=version, cache_dir=cache_dir, cache_limit_bytes=cache_limit_bytes
    )
    source.check_not_empty()
    if source.image_shape is None and size is None and batch_size > 1 and transform is None:
        raise ValueError(
            f"records of split {split!r} differ in size (metadata image_shape is null): "
            "pass image_size=(height, width), or batch_size=1"
        )
    shard_options = shard_options or grain.sharding.NoSharding()
    index, count = shard_options.shard_index, shard_options.shard_count
    if count > len(source):
        raise ValueError(
            f"{count} processes for the {len(source)} records of split {split!r}: "
            "some would get none"
        )
    # Record numbers are shuffled, split and batched; each batch is then read straight into
    # its arrays (RecordSource.read_batch), not stacked from per-record arrays (a copy).
    end = len(source) // count * count
    if shuffle == read_order.WINDOW:
        # Positions in this process's part, mapped to records through the epoch's order.
        positions = grain.MapDataset.range(end // count)
        positions = positions.batch(batch_size, drop_remainder=drop_remainder)
        per_epoch = len(positions)
        window = _WindowOrder(source.shard_sizes, seed, window_shards, index, count, per_epoch)
        dataset = positions.repeat(num_epochs).map_with_index(window)
    else:
        dataset = grain.MapDataset.range(len(source))
        if shuffle:
            dataset = dataset.shuffle(seed=seed)
        # Slicing keeps the epoch in the index, so the shuffle still draws a new order per
        # epoch.
        dataset = dataset[index:end:count]
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
        per_epoch = len(dataset)
        dataset = dataset.repeat(num_epochs)
    threads = usable_cores() if worker_count == 0 else 1
    if source.cache is not None:
        readers = threads * max(1, worker_count)
        source.cache.check_limit([shard.size for shard in source.remote_shards()], readers)
        dataset = dataset.map_with_index(_Prefetch(source, dataset))
    if transform is None:
        read = functools.partial(
            _read, source=source, image_size=size, resize=resize, valid=with_valid
        )
        dataset = dataset.map(read)
    else:
        made = _Transformed(source, size, resize, with_valid, transform, sample_format, seed)
        made.per_epoch = per_epoch
        dataset = dataset.map_with_index(made)
    # Elements are whole batches here: Grain's default read-ahead (500 elements, 16 threads,
    # tuned for KB-sized records) would hold gigabytes of pixels. One thread per core in
    # this process, or one per worker process, each with two batches ahead.
    options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2 * threads)
    iterable = dataset.to_iter_dataset(options)
    if worker_count > 0:
        iterable = iterable.mp_prefetch(
            grain.MultiprocessingOptions(num_workers=worker_count),
            worker_init_fn=_ExitWithStarter(),
        )
    return iterable


# How often a worker without pidfds (not Linux 5.3+) checks that its starter is alive.
_PARENT_POLL_SECONDS = 1.0


class _ExitWithStarter:
    """worker_init_fn: the worker exits as soon as the process that started it is gone.

    Grain's workers are spawned processes: a SIGKILLed training process (OOM killer,
    preemption) runs no cleanup, so they were re-parented to init and kept running. Not
    PR_SET_PDEATHSIG: it fires when the starting *thread* exits, and Grain starts workers
    from its own threads. The starter is the process that pickles this object for the
    worker (Grain does so as it starts each one), so its pid is recorded then.
    """

    def __init__(self) -> None:
        self.starter = os.getpid()

    def __getstate__(self) -> dict[str, int]:
        return {"starter": os.getpid()}

    def __call__(self, worker_index: int, worker_count: int) -> None:
        try:
            lifeline = os.pidfd_open(self.starter)
        except ProcessLookupError:
            os._exit(1)
        except (AttributeError, OSError):
            lifeline = None
        # The pid may already name another process: then this worker has a new parent.
        if os.getppid() != self.starter:
            os._exit(1)
        threading.Thread(
            target=_exit_with, args=(self.starter, lifeline), name="segprep-lifeline", daemon=True
        ).start()


def _exit_with(starter: int, lifeline: int | None) -> None:
    if lifeline is not None:
        select.select([lifeline], [], [])  # a pidfd turns readable when its process exits
    else:
        while os.getppid() == starter:
            time.sleep(_PARENT_POLL_SECONDS)
    # No cleanup to wait for: the multiprocessing resource tracker unlinks this worker's
    # shared memory once the last process holding it is gone.
    os._exit(1)


def _read(
    indices: np.ndarray,
    *,
    source: RecordSource,
    image_size: tuple[int, int] | None,
    resize: str,
    valid: bool,
):
    batch = source.read_batch(indices.tolist(), image_size=image_size, resize=resize, valid=valid)
    return {**batch, "key": np.array(batch["key"])}


class _WindowOrder:
    """(step, positions in the part) -> record numbers, through the window order of the
    step's epoch; the last epoch's order is kept (a few bytes per record)."""

    def __init__(self, shard_sizes, seed, window_shards, index, count, per_epoch) -> None:
        self.shard_sizes, self.seed, self.window_shards = list(shard_sizes), seed, window_shards
        self.index, self.count, self.per_epoch = index, count, per_epoch
        self._cached: tuple[int, np.ndarray] | None = None

    def __call__(self, step: int, positions: np.ndarray) -> np.ndarray:
        epoch = step // self.per_epoch
        if self._cached is None or self._cached[0] != epoch:
            total = sum(self.shard_sizes)
            order = read_order.epoch_order(
                total, self.seed, epoch, read_order.WINDOW, self.shard_sizes, self.window_shards
            )
            end = total // self.count * self.count
            self._cached = (epoch, order[self.index : end : self.count])
        return self._cached[1][positions]


_PREFETCH_LOCK = threading.Lock()


class _Prefetch:
    """(step, record numbers) -> the same record numbers, moving this process's
    remote_cache.Prefetcher along: it starts on the first batch read here and fetches the
    shards of the steps ahead of it (Grain reads a few steps ahead)."""

    def __init__(self, source: RecordSource, steps: grain.MapDataset) -> None:
        self.source, self.steps = source, steps
        self._prefetcher: remote_cache.Prefetcher | None = None
        self._pid = None

    def __getstate__(self):
        return {**self.__dict__, "_prefetcher": None, "_pid": None}

    def __call__(self, step: int, indices: np.ndarray) -> np.ndarray:
        with _PREFETCH_LOCK:  # reader threads arrive together at the first batch
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._prefetcher = remote_cache.Prefetcher(
                    self.source.cache,
                    self.source.remote_shards(),
                    _Steps(self.source, self.steps),
                )
        self._prefetcher.advance(step)
        return indices


class _Steps:
    """The shards each step reads, computed when asked (the steps may never end)."""

    def __init__(self, source: RecordSource, steps: grain.MapDataset) -> None:
        self.source, self.steps = source, steps

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, step: int) -> list[int]:
        return list(dict.fromkeys(self.source.shard_of(self.steps[step]).tolist()))


class _Transformed(samples.SampleReader):
    """Batches of transformed samples: each record read, sized, transformed, then stacked."""

    per_epoch = 1  # batches in an epoch

    def __call__(self, position: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        # The batch's place in the repeated dataset tells its epoch (batches never span two).
        epoch = position // self.per_epoch
        made = [self.sample(int(index), epoch) for index in indices]
        names = ["image", "mask"] + (["valid"] if self.with_valid else [])
        batch = {}
        for name in names:
            values = [self._hwc(sample[name]) for sample in made]
            if len({value.shape for value in values}) > 1:
                raise ValueError(
                    f"transformed samples' {name}s differ in shape: make the transform give "
                    "one size (e.g. end with a crop or resize)"
                )
            batch[name] = np.stack(values)
        batch["key"] = np.array([sample["key"] for sample in made])
        return batch

    def to_torch(self, item: dict) -> dict:
        from shard_reader.torch import torch_form  # only this form needs torch

        return torch_form(item)

    def _hwc(self, value) -> np.ndarray:
        if self.sample_format == samples.TORCH_FORMAT:
            return np.asarray(value).transpose(1, 2, 0)
        return np.asarray(value)
