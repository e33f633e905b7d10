"""shard_reader.torch: exact epochs, equal disjoint rank parts, exact resume (also across sizes)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shard_reader.source import RecordSource  # noqa: E402
from shard_reader.torch import epoch_order, make_loader  # noqa: E402
from tests.helpers.handmade import write_output  # noqa: E402


def keys_of(loader) -> list[list[str]]:
    return [list(batch[2]) for batch in loader]


def flat(batches) -> list[str]:
    return [key for batch in batches for key in batch]


@pytest.fixture(scope="module")
def all_keys(indexed) -> list[str]:
    source = RecordSource(indexed, "train")
    return [source[index]["key"] for index in range(len(source))]


def test_batches_are_channel_first_uint8_and_match_the_source(indexed):
    source = RecordSource(indexed, "train")
    for workers in (0, 2):
        loader = make_loader(
            indexed, "train", 4, num_workers=workers, with_keys=True, shuffle=False
        )
        images, masks, keys = next(iter(loader))
        assert images.shape == (4, 3, 160, 120) and images.dtype == torch.uint8
        assert masks.shape == (4, 1, 160, 120) and masks.dtype == torch.uint8
        assert set(masks.unique().tolist()) == {0, 1}
        for row, key in enumerate(keys):
            item = source[source.index_of(key)]
            assert np.array_equal(images[row].permute(1, 2, 0).numpy(), item["image"])
            assert np.array_equal(masks[row].permute(1, 2, 0).numpy(), item["mask"])
        assert keys == [source[i]["key"] for i in range(4)]  # no shuffle: shard order


def test_batches_kept_by_the_caller_are_never_overwritten(indexed):
    """Workers reuse batch buffers only once nothing refers to them any more."""
    source = RecordSource(indexed, "train")

    def check(images, masks, keys):
        for row, key in enumerate(keys):
            item = source[source.index_of(key)]
            assert np.array_equal(images[row].permute(1, 2, 0).numpy(), item["image"])
            assert np.array_equal(masks[row].permute(1, 2, 0).numpy(), item["mask"])

    def loader():
        return make_loader(indexed, "train", 2, num_workers=2, with_keys=True, prefetch_factor=1)

    iterator = iter(loader())
    images, masks, keys = next(iterator)
    view, snapshot = images[1, 0], images[1, 0].clone()  # a view outlives its batch
    del images, masks
    seen = [keys]
    for images, masks, keys in iterator:  # batches dropped at once: their buffers reused
        check(images, masks, keys)
        seen.append(keys)
    assert torch.equal(view, snapshot)
    kept = list(loader())  # every batch held at once: far more than the buffers
    for images, masks, keys in kept:
        check(images, masks, keys)
    assert [keys for _, _, keys in kept] == seen


def test_an_epoch_is_every_record_once_in_a_new_order_each_epoch(indexed, all_keys):
    loader = make_loader(indexed, "train", 5, num_workers=0, with_keys=True, seed=4)
    epochs = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        batches = keys_of(loader)
        assert len(batches) == len(loader) == -(-len(all_keys) // 5)
        assert sorted(flat(batches)) == sorted(all_keys)
        epochs.append(flat(batches))
    assert len({tuple(order) for order in epochs}) == 3
    again = make_loader(indexed, "train", 5, num_workers=0, with_keys=True, seed=4)
    again.set_epoch(1)
    assert flat(keys_of(again)) == epochs[1]
    other = make_loader(indexed, "train", 5, num_workers=0, with_keys=True, seed=5)
    other.set_epoch(1)
    assert flat(keys_of(other)) != epochs[1]


@pytest.mark.parametrize("world_size", [2, 4, 5])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_get_disjoint_equal_parts(indexed, all_keys, world_size, drop_last):
    total = len(all_keys)
    for epoch in (0, 1):
        parts = []
        for rank in range(world_size):
            loader = make_loader(
                indexed, "train", 3, rank=rank, world_size=world_size, num_workers=0,
                with_keys=True, drop_last=drop_last, seed=9,
            )  # fmt: skip
            loader.set_epoch(epoch)
            batches = keys_of(loader)
            assert len(batches) == len(loader)
            parts.append(batches)
        assert len({len(batches) for batches in parts}) == 1  # same steps: no rank waits
        assert len({tuple(map(len, batches)) for batches in parts}) == 1
        records = [flat(batches) for batches in parts]
        union = [key for part in records for key in part]
        assert len(union) == len(set(union))  # disjoint
        per_rank = total // world_size
        expected = per_rank - per_rank % 3 if drop_last else per_rank
        assert all(len(part) == expected for part in records)
        # The remainder: the last total % world_size records of the epoch's order.
        order = [all_keys[i] for i in epoch_order(total, 9, epoch, True)]
        if not drop_last:
            assert set(union) == set(order[: per_rank * world_size])


def _run(loader, epoch: int, *, stop_after: int | None = None):
    """(batches, state): keys and pixel tensors of the batches yielded, state after them."""
    loader.set_epoch(epoch)
    batches = []
    for batch in loader:
        batches.append((list(batch[2]), batch[0].clone(), batch[1].clone()))
        if stop_after is not None and len(batches) == stop_after:
            break
    return batches, loader.state_dict()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(("rank", "world_size"), [(0, 1), (1, 3)])
def test_a_restored_loader_continues_exactly(indexed, workers, rank, world_size):
    def new():
        return make_loader(
            indexed, "train", 3, rank=rank, world_size=world_size, num_workers=workers,
            with_keys=True, seed=2,
        )  # fmt: skip

    uninterrupted, _ = _run(new(), epoch=1)
    for k in (1, 4):
        _, state = _run(new(), epoch=1, stop_after=k)
        restored = new()
        restored.load_state_dict(state)
        restored.set_epoch(1)  # the saved epoch: the saved position is kept
        rest, _ = _run(restored, epoch=1)
        assert [keys for keys, _, _ in rest] == [keys for keys, _, _ in uninterrupted[k:]]
        for (_, image, mask), (_, want_image, want_mask) in zip(
            rest, uninterrupted[k:], strict=True
        ):
            assert torch.equal(image, want_image) and torch.equal(mask, want_mask)
        restored.set_epoch(2)  # the next epoch is whole again
        assert len(_run(restored, epoch=2)[0]) == len(uninterrupted)


def test_state_at_the_end_of_an_epoch_resumes_into_nothing(indexed, all_keys):
    loader = make_loader(indexed, "train", 4, num_workers=0, with_keys=True)
    _, state = _run(loader, epoch=0)
    restored = make_loader(indexed, "train", 4, num_workers=0, with_keys=True)
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    assert _run(restored, epoch=0)[0] == []
    next_epoch, _ = _run(restored, epoch=1)
    assert sorted(key for keys, _, _ in next_epoch for key in keys) == sorted(all_keys)


@pytest.mark.parametrize(
    ("old", "new", "batch", "new_batch", "steps"),
    [(3, 2, 2, 2, 3), (2, 3, 3, 2, 2), (4, 1, 2, 5, 1)],
)
def test_a_new_world_size_reads_exactly_what_was_not_seen(
    indexed, all_keys, old, new, batch, new_batch, steps
):
    total = len(all_keys)

    def loader(rank, world_size, size):
        return make_loader(
            indexed, "train", size, rank=rank, world_size=world_size, num_workers=0,
            with_keys=True, seed=11,
        )  # fmt: skip

    seen, states = [], []
    for rank in range(old):
        batches, state = _run(loader(rank, old, batch), epoch=3, stop_after=steps)
        seen += [key for keys, _, _ in batches for key in keys]
        states.append(state)
    assert len({state["consumed"] for state in states}) == 1  # any rank's state will do
    remaining = []
    for rank in range(new):
        resumed = loader(rank, new, new_batch)
        resumed.load_state_dict(states[-1])
        resumed.set_epoch(3)
        part = [key for keys, _, _ in _run(resumed, epoch=3)[0] for key in keys]
        remaining.append(part)
    assert len({len(part) for part in remaining}) == 1
    union = [key for part in remaining for key in part]
    assert len(union) == len(set(union)) and not set(union) & set(seen)
    order = [all_keys[i] for i in epoch_order(total, 11, 3, True)]
    assert order[: len(seen)] == sorted(seen, key=order.index)  # seen is a prefix of the order
    unseen = order[len(seen) :]
    left_out = len(unseen) % new  # the documented remainder: the end of the order
    assert set(union) == set(unseen[: len(unseen) - left_out])


def test_a_state_of_another_order_is_refused(indexed):
    state = make_loader(indexed, "train", 4, num_workers=0, seed=1).state_dict()
    with pytest.raises(ValueError, match="another order"):
        make_loader(indexed, "train", 4, num_workers=0, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="another order"):
        make_loader(indexed, "validation", 4, num_workers=0, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        make_loader(indexed, "train", 4, num_workers=0, seed=1).load_state_dict({})


def test_mixed_sizes_need_image_size(tmp_path):
    directory = tmp_path / "out"
    write_output(directory, [[(40, 32), (32, 40)], [(48, 24)]])
    with pytest.raises(ValueError, match="differ in size"):
        make_loader(directory, "train", 2, num_workers=0)
    images, masks = next(
        iter(make_loader(directory, "train", 3, num_workers=0, image_size=(20, 16)))
    )
    assert images.shape == (3, 3, 20, 16) and masks.shape == (3, 1, 20, 16)
    assert set(masks.unique().tolist()) <= {0, 1}
    single = [
        tuple(images.shape)
        for images, _ in make_loader(directory, "train", 1, num_workers=0, shuffle=False)
    ]
    assert single == [(1, 3, 40, 32), (1, 3, 32, 40), (1, 3, 48, 24)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"rank": 2, "world_size": 2}, "rank 2"),
        ({"world_size": 10_000}, "some would get none"),
    ],
)
def test_bad_arguments(indexed, kwargs, message):
    arguments = {"batch_size": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        make_loader(indexed, "train", num_workers=0, **arguments)


def test_workers_are_forked_after_earlier_loaders_are_collected(indexed):
    """An earlier loader freed only by the cycle collector still held its persistent
    workers' iterator when a new loader forked its workers: each worker inherited it, its
    collector ran the iterator's __del__ there, and every worker printed 'can only test a
    child process'. The collector now runs before the fork, in the parent."""
    import gc
    import weakref

    old = make_loader(indexed, "train", batch_size=4, num_workers=1)
    assert sum(1 for _ in old) > 0
    freed = weakref.ref(old._loader._iterator)
    cycle = [old]
    cycle.append(cycle)  # only the cycle collector can free it now
    del old, cycle
    gc.disable()
    try:
        new = make_loader(indexed, "train", batch_size=4, num_workers=1)
        next(iter(new))
        assert freed() is None
    finally:
        gc.enable()
