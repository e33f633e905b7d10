"""PyTorch: batches of a segprep split with a global shuffle, equal rank parts and exact resume.

    loader = make_loader("build/output", "train", 8, rank=rank, world_size=world_size)
    for epoch in range(start_epoch, epochs):
        loader.set_epoch(epoch)
        for images, masks in loader:        # uint8 [B,3,H,W] and [B,1,H,W] of 0/1 (*)
            ...
        checkpoint = {"loader": loader.state_dict(), ...}

(*) With class-id masks (metadata.json `classes`): [B,1,H,W] class ids as stored, uint8, or
int32 for 16-bit PNGs (cast to long for torch's cross_entropy; ignore_index from
shard_reader.load_classes).

Built on torch.utils.data: a map-style dataset over shard_reader.source.RecordSource (one
pread per record, no TensorFlow) and a batch sampler that walks a permutation of the
split's record numbers drawn from (seed, epoch), so the shuffle is global without a buffer.

Rank parts: the epoch's order is dealt out round-robin, record j to rank j % world_size.
Every rank gets the same number of records, floor(remaining / world_size): the last
(remaining % world_size) records of the order are left out of that epoch (with shuffle on,
a different few each epoch), so all ranks run the same number of steps and none waits for
a batch that never comes. Dealing round-robin makes what all ranks have consumed after k
steps a prefix of the order; a state_dict() records that prefix's length, which is why it
restores exactly with any number of workers, and with a different world_size too (the
new ranks deal out the rest of the order; with a batch size that changed as well).

gs:// outputs are read through a bounded local cache of whole, sha256-checked shards
(cache_dir=, cache_limit_bytes=; shard_reader/remote_cache.py), prefetched in the order
this rank will read them. shuffle="window" reads a window of shards at a time
(shard_reader/read_order.py): the order for a cache smaller than the dataset.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.utils.data

from shard_reader import read_order, remote_cache
from shard_reader.source import RecordSource, usable_cores

STATE_VERSION = 1
# RecordSource's mask dtypes: 0/1 and 8-bit class ids, 16-bit class ids widened.
_TORCH = {np.dtype(np.uint8): torch.uint8, np.dtype(np.int32): torch.int32}


def epoch_order(
    num_records: int,
    seed: int,
    epoch: int,
    shuffle: bool | str,
    shard_sizes: Sequence[int] | None = None,
    window_shards: int = read_order.DEFAULT_WINDOW_SHARDS,
) -> np.ndarray:
    """The split's record numbers in the order of `epoch`: the same on every rank and worker."""
    return read_order.epoch_order(num_records, seed, epoch, shuffle, shard_sizes, window_shards)


def rank_part(order: np.ndarray, start: int, rank: int, world_size: int) -> np.ndarray:
    """Records rank `rank` reads of `order[start:]`: every world_size-th, equal counts."""
    rest = order[start:]
    per_rank = len(rest) // world_size
    return rest[: per_rank * world_size][rank::world_size]


class _Ringed(NamedTuple):
    """A worker's batch, left in slot `slot` of its part of the ring: only this is pickled."""

    worker: int
    slot: int
    size: int
    keys: list[str]


class _Ring:
    """Batch buffers in shared memory, reused once the batch handed out from them is gone.

    A batch in fresh shared memory costs a page fault and a zeroed page per 4 KB: measured
    here, decoding into fresh shared memory ran at 60 % of the rate of decoding into reused
    memory, and copying each batch out in the main process cost another tenth. So a worker
    decodes into a free slot of its own, and the main process hands out tensors over that
    slot itself; the slot is free again when the last reference to them is dropped (a
    finalizer on the arrays under them). A slot is never written while anything can still
    see it. A worker that finds none free within GRACE_SECONDS (the caller keeps batches)
    decodes into fresh memory instead of waiting: slower, never stuck.
    """

    GRACE_SECONDS = 0.05

    def __init__(
        self, workers: int, slots: int, batch: int, shape: tuple[int, int], mask_dtype: np.dtype
    ) -> None:
        self.images = torch.empty((workers, slots, batch, *shape, 3), dtype=torch.uint8)
        self.masks = torch.empty((workers, slots, batch, *shape, 1), dtype=_TORCH[mask_dtype])
        self.busy = torch.zeros((workers, slots, 2), dtype=torch.int32)  # images, masks held
        for tensor in (self.images, self.masks, self.busy):
            tensor.share_memory_()

    def acquire(self, worker: int) -> int | None:
        """In a worker: a slot nobody holds, or None after GRACE_SECONDS."""
        busy = self.busy.numpy()[worker]
        deadline = time.monotonic() + self.GRACE_SECONDS
        while True:
            free = np.flatnonzero(~busy.any(axis=1))
            if free.size:
                busy[free[0]] = 1
                return int(free[0])
            if time.monotonic() > deadline:
                return None
            time.sleep(0.0005)

    def hand_over(self, batch: _Ringed) -> tuple[torch.Tensor, torch.Tensor]:
        """In the main process: tensors over the slot; it is freed when they are gone."""
        busy = self.busy.numpy()
        where = (batch.worker, batch.slot, slice(0, batch.size))
        images, masks = self.images.numpy()[where], self.masks.numpy()[where]
        for flag, array in enumerate((images, masks)):
            weakref.finalize(array, _release, busy, batch.worker, batch.slot, flag)
        return torch.from_numpy(images), torch.from_numpy(masks)


def _release(busy: np.ndarray, worker: int, slot: int, flag: int) -> None:
    busy[worker, slot, flag] = 0


class _Records(torch.utils.data.Dataset):
    """RecordSource as batches: __getitems__ decodes a whole batch into its tensors."""

    def __init__(self, source: RecordSource, image_size: tuple[int, int] | None) -> None:
        self.source = source
        self.image_size = image_size
        self.ring: _Ring | None = None  # set for each pass with worker processes

    @property
    def shape(self) -> tuple[int, int] | None:
        """(height, width) of every batch, when known before reading."""
        return self.image_size or self.source.image_shape

    def __len__(self) -> int:
        return len(self.source)

    def __getitems__(self, indices: Sequence[int]) -> tuple | _Ringed:
        """torch.utils.data fetches a batch through this: (images, masks, keys), [B,H,W,C]."""
        worker = torch.utils.data.get_worker_info()
        slot = None if self.ring is None or worker is None else self.ring.acquire(worker.id)
        if slot is not None:
            out = (
                self.ring.images[worker.id, slot, : len(indices)].numpy(),
                self.ring.masks[worker.id, slot, : len(indices)].numpy(),
            )
            batch = self.source.read_batch(indices, image_size=self.image_size, out=out)
            return _Ringed(worker.id, slot, len(indices), batch["key"])
        batch = self.source.read_batch(indices, image_size=self.image_size)
        return torch.from_numpy(batch["image"]), torch.from_numpy(batch["mask"]), batch["key"]


def _as_is(batch: Any) -> Any:
    """collate_fn: __getitems__ already made the batch."""
    return batch


def _batches(part: np.ndarray, size: int, drop_last: bool) -> Iterator[list[int]]:
    stop = len(part) - len(part) % size if drop_last else len(part)
    for first in range(0, stop, size):
        yield part[first : first + size].tolist()


class _BatchSampler(torch.utils.data.Sampler):
    """This rank's batches of record numbers, from where the loader's pass starts."""

    def __init__(self, loader: SegmentationLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[list[int]]:
        # The part is taken now, when the DataLoader asks, not when the first batch is due.
        loader = self.loader
        return _batches(loader._part(loader._start), loader.batch_size, loader.drop_last)

    def __len__(self) -> int:
        return self.loader._num_batches(len(self.loader._part(self.loader._start)))


class SegmentationLoader:
    """Iterable of batches; see make_loader and the module docstring."""

    def __init__(
        self,
        source: RecordSource,
        batch_size: int,
        *,
        shuffle: bool | str,
        seed: int,
        rank: int,
        world_size: int,
        num_workers: int,
        drop_last: bool,
        with_keys: bool,
        image_size: tuple[int, int] | None,
        prefetch_factor: int | None,
        window_shards: int = read_order.DEFAULT_WINDOW_SHARDS,
    ) -> None:
        self.source = source
        self.window_shards = window_shards
        self.batch_size = batch_size
        self.shuffle, self.seed = shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.drop_last = drop_last
        self.with_keys = with_keys
        self._workers, self._prefetch = num_workers, prefetch_factor or 2
        self._epoch = 0
        self._resume: int | None = None  # a loaded state's position, for the next pass
        self._start = 0  # records of the epoch's order all ranks had read when this pass began
        self._yielded = 0  # records this rank has yielded in this pass
        self._loader = torch.utils.data.DataLoader(
            _Records(source, image_size),
            batch_sampler=_BatchSampler(self),
            num_workers=num_workers,
            collate_fn=_as_is,
            # Workers start with each pass (a fork, ~0.1 s): each pass has its own ring.
            persistent_workers=False,
            prefetch_factor=prefetch_factor if num_workers > 0 else None,
        )

    def _part(self, start: int) -> np.ndarray:
        order = epoch_order(
            len(self.source),
            self.seed,
            self._epoch,
            self.shuffle,
            self.source.shard_sizes,
            self.window_shards,
        )
        return rank_part(order, start, self.rank, self.world_size)

    def _num_batches(self, records: int) -> int:
        return records // self.batch_size if self.drop_last else -(-records // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (the shuffle order) of the next pass, as DistributedSampler does.

        Setting the epoch a loaded state is in keeps that state's position; any other epoch
        starts from its beginning.
        """
        if epoch != self._epoch:
            self._epoch, self._resume, self._start, self._yielded = epoch, None, 0, 0

    def __len__(self) -> int:
        """Batches in a full epoch on this rank."""
        return self._num_batches(len(self.source) // self.world_size)

    def __iter__(self) -> Iterator[tuple]:
        self._start = self._resume or 0
        self._resume, self._yielded = None, 0
        records: _Records = self._loader.dataset
        ring = None
        if self._workers > 0 and records.shape is not None:
            slots = self._prefetch + 1
            ring = _Ring(
                self._workers, slots, self.batch_size, records.shape, self.source.mask_dtype
            )
        records.ring = ring  # the workers started by this pass inherit it
        prefetcher = None
        try:
            batches = iter(self._loader)  # forks the workers first: no lock goes with them
            prefetcher = self._prefetcher()
            for step, batch in enumerate(batches):
                if prefetcher is not None:
                    prefetcher.advance(step)
                if isinstance(batch, _Ringed):
                    images, masks = ring.hand_over(batch)
                    keys = batch.keys
                else:
                    images, masks, keys = batch
                self._yielded += len(images)
                # [B,H,W,C] -> [B,C,H,W]: torch's order, kept channels_last in memory.
                pair = (images.permute(0, 3, 1, 2), masks.permute(0, 3, 1, 2))
                yield (*pair, keys) if self.with_keys else pair
        finally:
            records.ring = None
            if prefetcher is not None:
                prefetcher.stop()

    def _prefetcher(self) -> remote_cache.Prefetcher | None:
        """For a gs:// output: fetches this pass's shards in the order its batches need them."""
        if self.source.cache is None:
            return None
        part = self._part(self._start)
        shards = self.source.shard_of(part)
        steps = [
            list(dict.fromkeys(shards[first : first + self.batch_size].tolist()))
            for first in range(0, len(part), self.batch_size)
        ]
        return remote_cache.Prefetcher(self.source.cache, self.source.remote_shards(), steps)

    def state_dict(self) -> dict[str, Any]:
        """Position after the batches yielded so far (torchdata StatefulDataLoader style)."""
        if self._resume is not None:
            consumed = self._resume
        else:
            consumed = self._start + self._yielded * self.world_size
        return {
            "version": STATE_VERSION,
            "num_records": len(self.source),
            "shuffle": self.shuffle,
            "seed": self.seed,
            "epoch": self._epoch,
            "consumed": consumed,  # records of the epoch's order read by all ranks together
            "world_size": self.world_size,
            **({"window_shards": self.window_shards} if self.shuffle == read_order.WINDOW else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next pass yields what the saved loader would have yielded next.

        The state may come from any rank, and from a run with another world_size or batch
        size; it must come from the same split, seed and shuffle setting.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"loader state version {state.get('version')!r} is not supported")
        mine = {"num_records": len(self.source), "shuffle": self.shuffle, "seed": self.seed}
        if self.shuffle == read_order.WINDOW:
            mine["window_shards"] = self.window_shards
        differing = {key: state.get(key) for key, value in mine.items() if state.get(key) != value}
        if differing:
            raise ValueError(
                f"loader state is of another order ({differing}, this loader has {mine}): "
                "resuming it would repeat or skip records"
            )
        consumed = state["consumed"]
        if not 0 <= consumed <= len(self.source):
            raise ValueError(f"loader state consumed {consumed} outside 0..{len(self.source)}")
        self._epoch, self._resume, self._start, self._yielded = state["epoch"], consumed, 0, 0


def make_loader(
    data_dir: str | os.PathLike,
    split: str,
    batch_size: int,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    num_workers: int | None = None,
    drop_last: bool = False,
    with_keys: bool = False,
    image_size: tuple[int, int] | None = None,
    prefetch_factor: int | None = 2,
    window_shards: int = read_order.DEFAULT_WINDOW_SHARDS,
    cache_dir: str | os.PathLike | None = None,
    cache_limit_bytes: int | None = None,
    version: int | None = None,
) -> SegmentationLoader:
    """Batches `(image uint8 [B,3,H,W], mask [B,1,H,W][, keys])` of one split; mask uint8 0/1,
    or class ids (uint8, int32 for 16-bit PNGs) for a class-id output.

    shuffle: a fresh permutation of the whole split each epoch, from (seed, epoch); off,
        records come in shard order; "window": shards permuted, then the records of each
        window of `window_shards` shards (shard_reader/read_order.py: for a gs:// output
        whose cache is smaller than the dataset). Call set_epoch(e) before each epoch.
    rank, world_size: this process's part (see the module docstring for the remainder).
    num_workers: decoding processes (default: one per usable core); 0 decodes in-process.
    drop_last: drop each rank's last, short batch (equal on every rank either way).
    image_size: (height, width) to resize to (image bilinear, mask nearest); needed for
        batches when the split's records differ in size.
    cache_dir, cache_limit_bytes: for a gs:// output, the local shard cache (defaults
        ~/.cache/segprep/shards and min(64 GiB, half its free space)); the ranks and jobs of
        one host can share it. The limit must hold (workers + 2) shards.
    version: read exactly the records of this version of a dataset that grew (`segprep
        prepare --append`), in the same order for the same seed; None: the latest.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
    read_order.check_shuffle(shuffle, window_shards)
    source = RecordSource(
        data_dir,
        split,
        version=version,
        cache_dir=cache_dir,
        cache_limit_bytes=cache_limit_bytes,
    )
    workers = usable_cores() if num_workers is None else num_workers
    if source.cache is not None:
        source.cache.check_limit([shard.size for shard in source.remote_shards()], max(1, workers))
    if world_size > len(source):
        raise ValueError(f"{world_size} ranks for {len(source)} records: some would get none")
    if source.image_shape is None and image_size is None and batch_size > 1:
        raise ValueError(
            f"records of split {split!r} differ in size (metadata image_shape is null): "
            "pass image_size=(height, width), or batch_size=1"
        )
    return SegmentationLoader(
        source,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        rank=rank,
        world_size=world_size,
        num_workers=workers,
        drop_last=drop_last,
        with_keys=with_keys,
        image_size=tuple(image_size) if image_size is not None else None,
        prefetch_factor=prefetch_factor,
        window_shards=window_shards,
    )
