"""PyTorch: batches of a segprep split with a global shuffle, equal rank parts and exact resume.

    loader = make_loader("build/output", "train", 8)  # ranks from torch.distributed
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
Without a transform, workers decode each batch straight into shared-memory buffers
(shard_reader.batch_ring); with one, each record is decoded, transformed under its own
seed (shard_reader.samples) and the batch stacked, in the worker.

Under torch.distributed, rank and world_size come from the process group and the worker
count from torchrun's LOCAL_WORLD_SIZE (shard_reader.ranks).

Rank parts: the epoch's order is dealt out round-robin, record j to rank j % world_size.
Every rank gets the same number of records, floor(remaining / world_size): the last
(remaining % world_size) records of the order are left out of that epoch (with shuffle on,
a different few each epoch), so all ranks run the same number of steps and none waits for
a batch that never comes. Dealing round-robin makes what all ranks have consumed after k
steps a prefix of the order; a state_dict() records that prefix's length, which is why it
restores exactly with any number of workers, and with a different world_size too (the
new ranks deal out the rest of the order; with a batch size that changed as well).
For evaluation, uneven_ranks=True deals out the whole order instead: every record once,
ranks differing by at most one record.

gs:// outputs are read through a bounded local cache of whole, sha256-checked shards
(cache_dir=, cache_limit_bytes=; shard_reader/remote_cache.py), prefetched in the order
this rank will read them. shuffle="window" reads a window of shards at a time
(shard_reader/read_order.py): the order for a cache smaller than the dataset.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.utils.data

from shard_reader import read_order, remote_cache, resizing, samples
from shard_reader.batch_ring import Ring, Ringed
from shard_reader.ranks import default_num_workers, resolve_ranks
from shard_reader.read_order import epoch_order
from shard_reader.source import RecordSource
from transforms.files import NotAFileError
from transforms.format.dataset_info import MetadataError
from transforms.format.tfrecord import CorruptRecordError

STATE_VERSION = 1


def rank_part(
    order: np.ndarray, start: int, rank: int, world_size: int, uneven: bool = False
) -> np.ndarray:
    """Records rank `rank` reads of `order[start:]`: every world_size-th, equal counts (or
    with `uneven`, all of them: counts differ by at most one)."""
    rest = order[start:]
    if uneven:
        return rest[rank::world_size]
    per_rank = len(rest) // world_size
    return rest[: per_rank * world_size][rank::world_size]


class _Indices(list):
    """A batch of record numbers, with the epoch its transforms draw for."""

    epoch = 0


class _Collated(NamedTuple):
    """A batch made per sample in a worker: `size` records, `value` what collate made."""

    size: int
    value: Any


def _plain(value: Any) -> torch.Tensor:
    """A CHW tensor (a tv_tensor made plain, so batches are ordinary tensors)."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value)).permute(2, 0, 1)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"a transformed sample holds a {type(value).__name__}, not a tensor")
    return value.as_subclass(torch.Tensor)


def default_collate(samples: list[dict[str, Any]]) -> tuple:
    """(images, masks[, valid], keys) stacked from samples of one shape.

    Samples whose shapes differ (a transform that crops to random sizes) cannot be stacked:
    pass collate_fn= to combine them another way (pad, or return lists).
    """
    names = ["image", "mask"] + (["valid"] if "valid" in samples[0] else [])
    stacked = []
    for name in names:
        values = [_plain(sample[name]) for sample in samples]
        shapes = {tuple(value.shape) for value in values}
        if len(shapes) > 1:
            raise ValueError(
                f"transformed samples' {name}s differ in shape ({sorted(shapes)}): make the "
                "transform give one size (e.g. end with a crop or resize), or pass collate_fn= "
                "that combines samples of different shapes"
            )
        stacked.append(_stack(values))
    return (*stacked, [sample["key"] for sample in samples])


def _stack(values: list[torch.Tensor]) -> torch.Tensor:
    """[B,C,H,W] of CHW tensors, by numpy: torch.stack measured 10-300x slower here for
    uint8 images (a strided, threaded copy). Views of HWC arrays (untransformed samples, or
    a transform that kept them so) are stacked as HWC, and stay channels_last in memory as
    the loader's other batches."""
    if all(value.permute(1, 2, 0).is_contiguous() for value in values):
        hwc = np.stack([value.permute(1, 2, 0).numpy() for value in values])
        return torch.from_numpy(hwc).permute(0, 3, 1, 2)
    return torch.from_numpy(np.stack([value.numpy() for value in values]))


class _Records(samples.SampleReader, torch.utils.data.Dataset):
    """RecordSource as batches: __getitems__ decodes a whole batch into its tensors.

    `loader.dataset` is this: dataset[i] is record i as a sample in the loader's
    sample_format (see shard_reader.samples), transformed (with epoch 0's draws) when the
    loader has a transform.
    """

    collate_fn: Callable[[list], Any] | None = None  # the user's, when given
    ring: Ring | None = None  # set before the first pass with worker processes

    @property
    def per_sample(self) -> bool:
        """Samples are made one by one (transform or collate_fn), not decoded into a batch."""
        return self.transform is not None or self.collate_fn is not None

    @property
    def shape(self) -> tuple[int, int] | None:
        """(height, width) of every batch, when known before reading."""
        return self.image_size or self.source.image_shape

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.sample(int(index), 0)

    def to_torch(self, item: dict[str, Any]) -> dict[str, Any]:
        return torch_form(item)

    def __getitems__(self, indices: Sequence[int]) -> tuple | Ringed | _Collated:
        """torch.utils.data fetches a batch through this: (images, masks, keys), [B,H,W,C]."""
        if self.per_sample:
            epoch = getattr(indices, "epoch", 0)
            made = [self.sample(int(index), epoch) for index in indices]
            return _Collated(len(made), (self.collate_fn or default_collate)(made))
        worker = torch.utils.data.get_worker_info()
        slot = None if self.ring is None or worker is None else self.ring.acquire(worker.id)
        if slot is not None:
            out = (
                self.ring.images[worker.id, slot, : len(indices)].numpy(),
                self.ring.masks[worker.id, slot, : len(indices)].numpy(),
            )
            batch = self.source.read_batch(
                indices, image_size=self.image_size, out=out, resize=self.resize
            )
            return Ringed(self.ring.id, worker.id, slot, len(indices), batch["key"])
        batch = self.source.read_batch(
            indices, image_size=self.image_size, resize=self.resize, valid=self.with_valid
        )
        pixels = [
            torch.from_numpy(batch[name]) for name in ("image", "mask", "valid") if name in batch
        ]
        return (*pixels, batch["key"])


def torch_form(item: dict[str, Any]) -> dict[str, Any]:
    """A RecordSource item in the "torch" sample form: CHW tv_tensors (or plain tensors)."""
    image_type, mask_type = _tv_types()
    sample = {
        "image": image_type(_chw(item["image"])),
        "mask": mask_type(_chw(item["mask"])),
        "key": item["key"],
    }
    if "valid" in item:
        sample["valid"] = mask_type(_chw(item["valid"]))
    return sample


def _chw(array: np.ndarray) -> torch.Tensor:
    """HWC array -> CHW tensor sharing its memory; a read-only array (decoded straight from a
    record's bytes) is copied first, since a transform may write into the tensor and torch
    warns on every such array."""
    if not array.flags.writeable:
        array = array.copy()
    return torch.from_numpy(array).permute(2, 0, 1)


@functools.cache
def _tv_types() -> tuple[Callable, Callable]:
    """tv_tensors.Image and tv_tensors.Mask when torchvision imports, else identity.

    A torchvision built for another torch (PyPI's CUDA build of 0.28.0 beside torch
    2.13.0+cpu) fails at import with RuntimeError `operator torchvision::nms does not exist`:
    the samples are then plain tensors, as without torchvision (docs/frameworks.md)."""
    try:
        from torchvision import tv_tensors
    except (ImportError, RuntimeError):
        return (lambda tensor: tensor), (lambda tensor: tensor)
    return tv_tensors.Image, tv_tensors.Mask


def _as_is(batch: Any) -> Any:
    """collate_fn: __getitems__ already made the batch."""
    return batch


def _batches(part: np.ndarray, size: int, drop_last: bool, epoch: int) -> Iterator[_Indices]:
    stop = len(part) - len(part) % size if drop_last else len(part)
    for first in range(0, stop, size):
        batch = _Indices(part[first : first + size].tolist())
        batch.epoch = epoch
        yield batch


class _BatchSampler(torch.utils.data.Sampler):
    """This rank's batches of record numbers, from where the loader's pass starts.

    `loader.sampler` is this: it yields whole batches (lists of record numbers), since the
    rank part, the epoch's order and the resume position are the loader's, not a sampler's.
    """

    def __init__(self, loader: SegmentationLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[list[int]]:
        # The part is taken now, when the DataLoader asks, not when the first batch is due.
        loader = self.loader
        part = loader._part(loader._start)
        return _batches(part, loader.batch_size, loader.drop_last, loader._epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """As DistributedSampler.set_epoch: the loader's set_epoch."""
        self.loader.set_epoch(epoch)


def _from_worker(error: Exception) -> Exception:
    """A worker's segprep error as it was raised: torch's DataLoader re-raises it as its type
    around the worker's whole traceback ("Caught CorruptRecordError in DataLoader worker
    process 0.\nOriginal Traceback ...", the reason on its last line), which buried the
    one-line reason; `error` itself when it is not so wrapped."""
    text = str(error)
    if not text.startswith("Caught ") or "\nOriginal Traceback" not in text:
        return error
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    name = f"{type(error).__module__}.{type(error).__qualname__}: "
    if not last.startswith(name):
        return error
    try:
        return type(error)(last[len(name) :])
    except Exception:  # noqa: BLE001 - a type that takes other arguments: as torch gave it
        return error


class SegmentationLoader:
    """Iterable of batches; see make_loader and the module docstring."""

    def __init__(
        self,
        records: _Records,
        batch_size: int,
        *,
        shuffle: bool | str,
        seed: int,
        rank: int,
        world_size: int,
        num_workers: int,
        drop_last: bool,
        with_keys: bool,
        prefetch_factor: int | None,
        uneven_ranks: bool = False,
        pin_memory: bool = False,
        persistent_workers: bool | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
        window_shards: int = read_order.DEFAULT_WINDOW_SHARDS,
    ) -> None:
        self.source = records.source
        self.window_shards = window_shards
        self.batch_size = batch_size
        self.shuffle, self.seed = shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.uneven_ranks = uneven_ranks
        self.drop_last = drop_last
        self.with_keys = with_keys
        self.pin_memory = pin_memory
        self._workers, self._prefetch = num_workers, prefetch_factor or 2
        self._epoch = 0
        self._resume: int | None = None  # a loaded state's position, for the next pass
        self._start = 0  # records of the epoch's order all ranks had read when this pass began
        self._yielded = 0  # records this rank has yielded in this pass
        self._running = False  # a pass is under way
        self._finished = False  # this pass yielded its last batch
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        self._batch_sampler = _BatchSampler(self)
        self._loader = torch.utils.data.DataLoader(
            records,
            batch_sampler=self._batch_sampler,
            num_workers=num_workers,
            collate_fn=_as_is,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers and num_workers > 0,
            worker_init_fn=worker_init_fn,
            prefetch_factor=prefetch_factor if num_workers > 0 else None,
        )

    @property
    def dataset(self) -> torch.utils.data.Dataset:
        """The map-style dataset the workers read: dataset[i] is record i as a sample."""
        return self._loader.dataset

    @property
    def sampler(self) -> _BatchSampler:
        """This rank's batch sampler (whole batches of record numbers; see _BatchSampler)."""
        return self._batch_sampler

    batch_sampler = sampler

    @property
    def dataloader(self) -> torch.utils.data.DataLoader:
        """The torch.utils.data.DataLoader underneath (its options as passed through)."""
        return self._loader

    def _part(self, start: int) -> np.ndarray:
        order = epoch_order(
            len(self.source),
            self.seed,
            self._epoch,
            self.shuffle,
            self.source.shard_sizes,
            self.window_shards,
        )
        return rank_part(order, start, self.rank, self.world_size, self.uneven_ranks)

    def _part_size(self, start: int) -> int:
        rest = len(self.source) - start
        if self.uneven_ranks:
            return len(range(self.rank, rest, self.world_size))
        return rest // self.world_size

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (the shuffle order) of the next pass, as DistributedSampler does.

        Setting the epoch a loaded state is in keeps that state's position; any other epoch
        starts from its beginning.
        """
        if epoch != self._epoch:
            self._epoch, self._resume, self._start, self._yielded = epoch, None, 0, 0
            self._finished = False

    def __len__(self) -> int:
        """Batches of the pass under way, or else of the next one: a full epoch on this
        rank, or what is left of it after load_state_dict (so tqdm and step-based
        schedulers see the right total)."""
        start = self._start if self._running else (self._resume or 0)
        records = self._part_size(start)
        return records // self.batch_size if self.drop_last else -(-records // self.batch_size)

    def __iter__(self) -> Iterator[tuple]:
        self._start = self._resume or 0
        self._resume, self._yielded, self._finished = None, 0, False
        records: _Records = self._loader.dataset
        ringable = self._workers > 0 and not records.per_sample and not records.with_valid
        if records.ring is None and ringable and records.shape is not None:
            slots = self._prefetch + 1
            records.ring = Ring(
                self._workers, slots, self.batch_size, records.shape, self.source.mask_dtype
            )
        ring = records.ring
        # Pinning needs an accelerator; without one torch's DataLoader skips it too.
        pin = self.pin_memory and torch.accelerator.is_available()
        self._running = True
        prefetcher = None
        try:
            if self._workers > 0 and getattr(self._loader, "_iterator", None) is None:
                # Workers are about to be forked: collect here what earlier loaders left in
                # reference cycles, or a worker inherits their iterators and its own
                # collector runs their __del__, which prints "can only test a child process".
                gc.collect()
            batches = iter(self._loader)  # forks the workers first: no lock goes with them
            prefetcher = self._prefetcher()
            for step, batch in enumerate(batches):
                if prefetcher is not None:
                    prefetcher.advance(step)
                if isinstance(batch, _Collated):
                    self._yielded += batch.size
                    # The user's collate: as it made it; default_collate's ends with the keys.
                    keep_keys = records.collate_fn is not None or self.with_keys
                    yield batch.value if keep_keys else batch.value[:-1]
                    continue
                if isinstance(batch, Ringed):
                    images, masks = ring.hand_over(batch)
                    pixels, keys = [images, masks], batch.keys
                    if pin:
                        pixels = [tensor.pin_memory() for tensor in pixels]
                else:
                    *pixels, keys = batch
                self._yielded += len(pixels[0])
                # [B,H,W,C] -> [B,C,H,W]: torch's order, kept channels_last in memory.
                out = tuple(tensor.permute(0, 3, 1, 2) for tensor in pixels)
                yield (*out, keys) if self.with_keys else out
            self._finished = True
        except (CorruptRecordError, MetadataError, NotAFileError) as error:
            plain = _from_worker(error)
            if plain is error:
                raise
            raise plain from None
        finally:
            self._running = False
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
        elif self._finished and self.uneven_ranks:
            consumed = len(self.source)  # the ranks together read every record
        else:
            consumed = min(self._start + self._yielded * self.world_size, len(self.source))
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
        self._finished = False


def make_loader(
    data_dir: str | os.PathLike,
    split: str,
    batch_size: int,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    num_workers: int | None = None,
    drop_last: bool = False,
    with_keys: bool = False,
    image_size: int | tuple[int, int] | None = None,
    resize: str = resizing.STRETCH,
    with_valid: bool = False,
    transform: samples.Transform | None = None,
    sample_format: str = samples.TORCH_FORMAT,
    uneven_ranks: bool = False,
    collate_fn: Callable[[list], Any] | None = None,
    pin_memory: bool = False,
    persistent_workers: bool | None = None,
    worker_init_fn: Callable[[int], None] | None = None,
    prefetch_factor: int | None = 2,
    version: int | None = None,
    window_shards: int = read_order.DEFAULT_WINDOW_SHARDS,
    cache_dir: str | os.PathLike | None = None,
    cache_limit_bytes: int | None = None,
) -> SegmentationLoader:
    """Batches `(image uint8 [B,3,H,W], mask [B,1,H,W][, valid][, keys])` of one split; mask
    uint8 0/1, or class ids (uint8, int32 for 16-bit PNGs) for a class-id output.

    shuffle: a fresh permutation of the whole split each epoch, from (seed, epoch); off,
        records come in shard order; "window": shards permuted, then the records of each
        window of `window_shards` shards (shard_reader/read_order.py: for a gs:// output
        whose cache is smaller than the dataset). Call set_epoch(e) before each epoch.
    rank, world_size: this process's part (see the module docstring for the remainder).
        Left out, they are torch.distributed's when its process group is initialised
        (else 0 and 1); given and different from the group's, ValueError.
    uneven_ranks: for evaluation: every record of the split exactly once across the ranks,
        which may then differ by one record (and one step); off (training), equal steps.
    num_workers: decoding processes; default: usable cores // LOCAL_WORLD_SIZE (torchrun
        sets it to the ranks on this host), at least 1; 0 decodes in-process.
    drop_last: drop each rank's last, short batch (equal on every rank either way).
    image_size: an int (square) or (height, width) to resize to (image bilinear, mask
        nearest); needed for batches when the split's records differ in size.
    resize: "stretch" (to exactly image_size) or "fit" (aspect kept, padded: images with 0,
        class ids with the ignore index, 0/1 masks with 0; see shard_reader.resizing).
    with_valid: add `valid`, uint8 [B,1,H,W]: 0 on fit's padding, 1 elsewhere; multiply a
        binary mask's per-pixel loss by it so padding never counts as background.
    transform: f(sample) -> sample, per record in the workers before batching, with its
        own random state from (seed, epoch, record); see shard_reader.samples for the
        sample form (sample_format "torch": torchvision v2 tv_tensors; "numpy": HWC arrays,
        as albumentations takes). Its outputs are stacked, so they must share one shape
        unless collate_fn combines them.
    collate_fn: f(list of samples) -> batch, in the workers; the batch is yielded as is.
    pin_memory, persistent_workers (default: on when num_workers > 0), worker_init_fn,
    prefetch_factor: as torch.utils.data.DataLoader's.
    version: read exactly the records of this version of a dataset that grew (`segprep
        prepare --append`), in the same order for the same seed; None: the latest.
    cache_dir, cache_limit_bytes: for a gs:// output, the local shard cache (defaults
        ~/.cache/segprep/shards and min(64 GiB, half its free space)); the ranks and jobs of
        one host can share it. The limit must hold (workers + 2) shards.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    image_size = resizing.image_size_arg(image_size)
    resize = resizing.resize_arg(resize, image_size)
    samples.check_format(sample_format)
    rank, world_size = resolve_ranks(rank, world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside 0..{world_size - 1}")
    read_order.check_shuffle(shuffle, window_shards)
    source = RecordSource(
        data_dir, split, version=version, cache_dir=cache_dir, cache_limit_bytes=cache_limit_bytes
    )
    workers = default_num_workers() if num_workers is None else num_workers
    if source.cache is not None:
        source.cache.check_limit([shard.size for shard in source.remote_shards()], max(1, workers))
    source.check_not_empty()
    if world_size > len(source) and not uneven_ranks:
        raise ValueError(
            f"{world_size} ranks for the {len(source)} records of split {split!r}: some would "
            "get none (uneven_ranks=True lets ranks differ, for evaluation)"
        )
    records = _Records(source, image_size, resize, with_valid, transform, sample_format, seed)
    records.collate_fn = collate_fn
    if records.shape is None and batch_size > 1 and not records.per_sample:
        raise ValueError(
            f"records of split {split!r} differ in size (metadata image_shape is null): "
            "pass image_size=(height, width), or batch_size=1"
        )
    return SegmentationLoader(
        records,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        rank=rank,
        world_size=world_size,
        num_workers=workers,
        drop_last=drop_last,
        with_keys=with_keys,
        prefetch_factor=prefetch_factor,
        uneven_ranks=uneven_ranks,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers,
        worker_init_fn=worker_init_fn,
        window_shards=window_shards,
    )
