"""shard_reader.torch on PyTorch's terms: per-sample transforms in the workers with
reproducible draws, DataLoader options passed through, len after resume, evaluation with
every record once (uneven_ranks), the worker default, and an empty split's error."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shard_reader import load_classes  # noqa: E402
from shard_reader.samples import current_seed, sample_seed  # noqa: E402
from shard_reader.source import RecordSource  # noqa: E402
from shard_reader.torch import default_collate, default_num_workers, make_loader  # noqa: E402
from tests.helpers.augment import (  # noqa: E402
    HandmadeAugment,
    torchvision_augment,
    torchvision_or_skip,
)

SIZE = (48, 40)


def probe(sample):
    """A transform that records where it ran and what it drew."""
    return {
        **sample,
        "pid": os.getpid(),
        "draw": float(torch.rand(1)),
        "numpy_draw": float(np.random.random()),
        "seed": current_seed(),
    }


def probe_collate(samples):
    images, masks, keys = default_collate(samples)
    draws = {s["key"]: (s["draw"], s["numpy_draw"], s["seed"]) for s in samples}
    return images, masks, keys, draws, {s["pid"] for s in samples}


def epoch_draws(loader, epoch):
    loader.set_epoch(epoch)
    draws, pids = {}, set()
    for *_, batch_draws, batch_pids in loader:
        draws.update(batch_draws)
        pids |= batch_pids
    return draws, pids


def test_transform_runs_per_sample_in_the_workers_with_its_own_draws(indexed):
    def loader(workers):
        return make_loader(
            indexed, "train", 4, num_workers=workers, transform=probe, collate_fn=probe_collate
        )

    in_workers = loader(2)
    draws, pids = epoch_draws(in_workers, 0)
    assert os.getpid() not in pids and len(pids) == 2  # in the 2 worker processes
    assert len(draws) == len(RecordSource(indexed, "train"))
    values = [draw for draw, _, _ in draws.values()]
    assert len(set(values)) == len(values)  # every sample its own draw, also within a batch
    assert all(
        seed == sample_seed(0, 0, RecordSource(indexed, "train").index_of(key))
        for key, (_, _, seed) in draws.items()
    )
    again, _ = epoch_draws(in_workers, 1)
    assert all(again[key][0] != draws[key][0] for key in draws)  # a new draw each epoch
    # The same draws in-process, and the caller's own generators go on as without them
    # (the DataLoader itself draws its base seed from torch's, with or without transform).
    torch.manual_seed(7)
    np.random.seed(7)
    list(make_loader(indexed, "train", 4, num_workers=0))
    expected = (float(torch.rand(1)), float(np.random.random()))
    torch.manual_seed(7)
    np.random.seed(7)
    in_process, pids = epoch_draws(loader(0), 0)
    assert pids == {os.getpid()} and in_process == draws
    assert (float(torch.rand(1)), float(np.random.random())) == expected


def test_a_resumed_run_draws_the_same_augmentations(indexed):
    def loader(workers):
        return make_loader(
            indexed, "train", 3, num_workers=workers, seed=5, with_keys=True,
            transform=HandmadeAugment(SIZE, mask_fill=0),
        )  # fmt: skip

    full = loader(2)
    full.set_epoch(1)
    batches = [(images.clone(), masks.clone(), keys) for images, masks, keys in full]
    partial = loader(2)
    partial.set_epoch(1)
    for step, _ in enumerate(partial):
        if step == 1:
            state = partial.state_dict()
            break
    resumed = loader(0)  # another worker count
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    rest = list(resumed)
    assert len(rest) == len(batches) - 2
    for (images, masks, keys), (want_images, want_masks, want_keys) in zip(
        rest, batches[2:], strict=True
    ):
        assert keys == want_keys
        assert torch.equal(images, want_images) and torch.equal(masks, want_masks)
    assert images.shape[1:] == (3, *SIZE) and images.dtype == torch.uint8


AUGMENTATIONS = [
    pytest.param(HandmadeAugment, id="handmade"),
    pytest.param(torchvision_augment, id="torchvision-v2"),
]


@pytest.mark.parametrize("make", AUGMENTATIONS)
def test_joint_augmentation_keeps_masks_valid_ids(class_outputs, make):
    if make is torchvision_augment:
        torchvision_or_skip()
    output = class_outputs["8-bit"].directory
    classes = load_classes(output)
    transform = make(SIZE, degrees=30, mask_fill=classes.ignore_index)
    loader = make_loader(output, "train", 4, num_workers=2, transform=transform)
    allowed = set(range(classes.num_classes)) | {classes.ignore_index}
    filled = 0
    for images, masks in loader:
        assert images.shape[1:] == (3, *SIZE) and masks.shape[1:] == (1, *SIZE)
        assert type(images) is torch.Tensor and masks.dtype == torch.uint8
        assert set(masks.unique().tolist()) <= allowed  # no interpolated ids
        filled += int((masks[:, :, 0, 0] == classes.ignore_index).sum())
    assert filled > 0  # rotated corners took the fill


def test_numpy_sample_form_is_hwc_arrays(indexed):
    seen = []

    def flip(sample):
        seen.append({name: (type(value), getattr(value, "shape", None))
                     for name, value in sample.items()})  # fmt: skip
        return {**sample, "image": sample["image"][:, ::-1], "mask": sample["mask"][:, ::-1]}

    loader = make_loader(
        indexed, "train", 2, num_workers=0, shuffle=False, with_keys=True,
        transform=flip, sample_format="numpy",
    )  # fmt: skip
    images, masks, keys = next(iter(loader))
    source = RecordSource(indexed, "train")
    assert seen[0]["image"] == (np.ndarray, (160, 120, 3))
    assert seen[0]["mask"] == (np.ndarray, (160, 120, 1))
    expected = source[source.index_of(keys[0])]["image"][:, ::-1]
    assert np.array_equal(images[0].permute(1, 2, 0).numpy(), expected)


def test_albumentations_where_it_installs(class_outputs):
    albumentations = pytest.importorskip("albumentations")
    output = class_outputs["8-bit"].directory
    classes = load_classes(output)
    augment = albumentations.Compose(
        [
            albumentations.RandomResizedCrop(SIZE, scale=(0.3, 1.0)),
            albumentations.HorizontalFlip(),
            albumentations.Rotate(limit=30, fill=0, fill_mask=classes.ignore_index),
        ]
    )

    def transform(sample):
        return {**sample, **augment(image=sample["image"], mask=sample["mask"])}

    loader = make_loader(output, "train", 4, num_workers=2, transform=transform,
                         sample_format="numpy")  # fmt: skip
    allowed = set(range(classes.num_classes)) | {classes.ignore_index}
    for images, masks in loader:
        assert images.shape[1:] == (3, *SIZE)
        assert set(masks.unique().tolist()) <= allowed


def test_samples_of_different_shapes_need_a_collate_fn(indexed):
    def crop(sample):
        size = int(torch.randint(20, 60, (1,)))
        return {**sample, "image": sample["image"][:, :size], "mask": sample["mask"][:, :size]}

    with pytest.raises(ValueError, match="collate_fn"):
        list(make_loader(indexed, "train", 4, num_workers=0, transform=crop))
    loader = make_loader(indexed, "train", 4, num_workers=2, transform=crop, collate_fn=list)
    batches = list(loader)
    assert sum(len(batch) for batch in batches) == len(RecordSource(indexed, "train"))
    assert len({sample["image"].shape[1] for batch in batches for sample in batch}) > 1


def test_dataloader_options_pass_through(indexed, tmp_path):
    def note_worker(worker_id):
        (tmp_path / f"{os.getpid()}-{worker_id}").touch()

    loader = make_loader(
        indexed, "train", 4, num_workers=2, worker_init_fn=note_worker, pin_memory=True,
        prefetch_factor=3,
    )  # fmt: skip
    dataloader = loader.dataloader
    assert dataloader.pin_memory and dataloader.prefetch_factor == 3
    assert dataloader.persistent_workers  # the default with workers
    for epoch in range(2):
        loader.set_epoch(epoch)
        assert sum(len(images) for images, _ in loader) == len(loader.dataset)
    assert len(list(tmp_path.iterdir())) == 2  # 2 workers, kept across both epochs
    assert len(loader.sampler) == len(loader) and loader.batch_sampler is loader.sampler
    assert set(loader.dataset[0]) == {"image", "mask", "key"}
    assert loader.dataset[0]["image"].shape == (3, 160, 120)

    fresh = tmp_path / "fresh"
    fresh.mkdir()

    def note_fresh(worker_id):
        (fresh / f"{os.getpid()}-{worker_id}").touch()

    loader = make_loader(indexed, "train", 4, num_workers=2, worker_init_fn=note_fresh,
                         persistent_workers=False)  # fmt: skip
    for epoch in range(2):
        loader.set_epoch(epoch)
        list(loader)
    assert len(list(fresh.iterdir())) == 4  # new workers each epoch
    keys = make_loader(
        indexed, "train", 4, num_workers=0, collate_fn=lambda s: [x["key"] for x in s]
    )
    assert all(isinstance(batch, list) and len(batch) <= 4 for batch in keys)


def test_abandoned_passes_with_persistent_workers_free_their_buffers(indexed):
    loader = make_loader(indexed, "train", 2, num_workers=2, with_keys=True)
    for epoch in range(4):  # each pass left after one batch: batches in flight are dropped
        loader.set_epoch(epoch)
        next(iter(loader))
    ring = loader.dataset.ring
    import gc

    gc.collect()
    loader.set_epoch(9)
    list(loader)
    gc.collect()
    assert ring is loader.dataset.ring and not ring.busy.numpy().any()


def test_len_after_resume_is_the_batches_still_to_come(indexed):
    loader = make_loader(indexed, "train", 3, num_workers=0, seed=1)
    full = len(loader)
    iterator = iter(loader)
    for _ in range(2):
        next(iterator)
    state = loader.state_dict()
    iterator.close()
    resumed = make_loader(indexed, "train", 3, num_workers=0, seed=1)
    resumed.load_state_dict(state)
    assert len(resumed) == full - 2
    assert len(list(resumed)) == full - 2
    assert len(resumed) == full  # the next pass is a whole epoch again


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_uneven_ranks_read_every_record_exactly_once(indexed, world_size):
    source = RecordSource(indexed, "train")
    everything = {source[i]["key"] for i in range(len(source))}
    parts = []
    for rank in range(world_size):
        loader = make_loader(
            indexed, "train", 2, num_workers=0, rank=rank, world_size=world_size,
            uneven_ranks=True, with_keys=True, shuffle=False,
        )  # fmt: skip
        batches = [keys for _, _, keys in loader]
        assert len(batches) == len(loader)
        parts.append([key for keys in batches for key in keys])
    flat = [key for part in parts for key in part]
    assert len(flat) == len(everything) and set(flat) == everything
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1
    if len(everything) % world_size:
        assert max(sizes) != min(sizes)  # the default would have left records out


def test_the_worker_default_shares_cores_among_local_ranks(indexed, monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert default_num_workers() == cores
    assert make_loader(indexed, "train", 2).dataloader.num_workers == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores * 4))
    assert default_num_workers() == 1  # never 0: at least one
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert make_loader(indexed, "train", 2).dataloader.num_workers == max(1, cores // 2)


def test_image_size_may_be_an_int(indexed):
    images, masks = next(iter(make_loader(indexed, "train", 2, num_workers=0, image_size=64)))
    assert images.shape == (2, 3, 64, 64) and masks.shape == (2, 1, 64, 64)
    with pytest.raises(ValueError, match="image_size"):
        make_loader(indexed, "train", 2, image_size=(64,))
    with pytest.raises(ValueError, match="resize"):
        make_loader(indexed, "train", 2, image_size=64, resize="crop")


def test_samples_are_tv_tensors_wherever_torchvision_imports(indexed):
    """torchvision v2's semantics (image bilinear, masks nearest) come from these types."""
    torchvision_or_skip()
    from torchvision import tv_tensors

    seen = {}

    def record(sample):
        seen.update(image=type(sample["image"]), mask=type(sample["mask"]))
        return sample

    next(iter(make_loader(indexed, "train", 4, num_workers=0, transform=record)))
    assert seen == {"image": tv_tensors.Image, "mask": tv_tensors.Mask}
