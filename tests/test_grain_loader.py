"""shard_reader.grain: RecordSource as a Grain source; shuffle, process parts, resume."""

from __future__ import annotations

import numpy as np
import pytest

grain = pytest.importorskip("grain")

from shard_reader.grain import make_loader  # noqa: E402
from shard_reader.source import RecordSource  # noqa: E402


def keys(batches) -> list[str]:
    return [str(key) for batch in batches for key in batch["key"]]


@pytest.fixture(scope="module")
def all_keys(indexed) -> list[str]:
    source = RecordSource(indexed, "train")
    return [source[index]["key"] for index in range(len(source))]


def test_batches_and_epochs(indexed, all_keys):
    dataset = make_loader(indexed, "train", 4, seed=3, num_epochs=2)
    batches = list(dataset)
    first = next(iter(dataset))
    assert first["image"].shape == (4, 160, 120, 3) and first["image"].dtype == np.uint8
    assert first["mask"].shape == (4, 160, 120, 1) and set(np.unique(first["mask"])) == {0, 1}
    per_epoch = -(-len(all_keys) // 4)
    assert len(batches) == 2 * per_epoch  # batches never straddle two epochs
    epochs = keys(batches[:per_epoch]), keys(batches[per_epoch:])
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(all_keys)
    assert epochs[0] != epochs[1]  # reshuffled each epoch
    source = RecordSource(indexed, "train")
    item = source[source.index_of(str(first["key"][2]))]
    np.testing.assert_array_equal(first["image"][2], item["image"])
    unshuffled = make_loader(indexed, "train", 4, shuffle=False)
    assert keys(unshuffled) == all_keys


@pytest.mark.parametrize("count", [2, 3])
def test_processes_get_disjoint_equal_parts(indexed, all_keys, count):
    parts = []
    for index in range(count):
        options = grain.sharding.ShardOptions(shard_index=index, shard_count=count)
        parts.append(keys(make_loader(indexed, "train", 2, seed=5, shard_options=options)))
    union = [key for part in parts for key in part]
    assert len(union) == len(set(union)) and set(union) <= set(all_keys)
    assert {len(part) for part in parts} == {len(all_keys) // count}


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_gives_the_same_remaining_order(indexed, workers):
    def new():
        return make_loader(indexed, "train", 3, seed=8, num_epochs=2, worker_count=workers)

    everything = keys(new())
    iterator = iter(new())
    taken = [next(iterator) for _ in range(5)]
    state = iterator.get_state()
    resumed = iter(new())
    resumed.set_state(state)
    assert keys(taken) + keys(resumed) == everything


def test_record_source_is_a_grain_data_source(indexed, all_keys):
    source = RecordSource(indexed, "train")
    sampler = grain.samplers.IndexSampler(
        num_records=len(source),
        shard_options=grain.sharding.NoSharding(),
        shuffle=True,
        num_epochs=1,
        seed=0,
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[grain.transforms.Batch(batch_size=5)],
        worker_count=0,
    )
    assert sorted(keys(loader)) == sorted(all_keys)


def test_mixed_sizes_need_image_size(tmp_path):
    from tests.helpers.handmade import write_output

    directory = tmp_path / "out"
    write_output(directory, [[(40, 32), (32, 40)], [(48, 24)]])
    with pytest.raises(ValueError, match="differ in size"):
        make_loader(directory, "train", 2)
    batch = next(iter(make_loader(directory, "train", 3, image_size=(20, 16))))
    assert batch["image"].shape == (3, 20, 16, 3) and batch["mask"].shape == (3, 20, 16, 1)
    assert set(np.unique(batch["mask"])) <= {0, 1}
    shapes = [b["image"].shape for b in make_loader(directory, "train", 1, shuffle=False)]
    assert shapes == [(1, 40, 32, 3), (1, 32, 40, 3), (1, 48, 24, 3)]


def _flip_by_draw(sample):
    """Flips left-right on a coin from the global generator; marks the flip in the key."""
    flip = np.random.random() < 0.5
    image = sample["image"][:, ::-1] if flip else sample["image"]
    return {**sample, "image": image, "key": f"{sample['key']}:{int(flip)}"}


def test_transform_draws_per_sample_and_resumes_the_same(indexed, all_keys):
    dataset = make_loader(
        indexed, "train", 4, seed=1, num_epochs=2, transform=_flip_by_draw, shuffle=False
    )
    batches = list(dataset)
    marks = [str(key) for batch in batches for key in batch["key"]]
    first, second = marks[: len(all_keys)], marks[len(all_keys) :]
    assert {mark.split(":")[1] for mark in first} == {"0", "1"}  # each sample its own draw
    assert first != second  # and new draws in the next epoch
    source = RecordSource(indexed, "train")
    for batch in batches[:2]:
        for row, mark in enumerate(batch["key"]):
            key, flip = str(mark).split(":")
            stored = source[source.index_of(key)]["image"]
            assert np.array_equal(batch["image"][row], stored[:, ::-1] if flip == "1" else stored)
    iterator = iter(dataset)
    for _ in range(3):
        next(iterator)
    state = iterator.get_state()
    resumed = iter(dataset)
    resumed.set_state(state)
    assert [str(k) for b in resumed for k in b["key"]] == [
        str(k) for b in batches[3:] for k in b["key"]
    ]


LOADER_CHILD = """
import os, sys, time
from shard_reader.grain import make_loader
if __name__ == "__main__":
    loader = make_loader(sys.argv[1], "train", 1, seed=0, worker_count=2, num_epochs=None)
    batches = iter(loader)
    next(batches)
    print("ready", flush=True)
    for _ in batches:
        time.sleep(0.2)
"""
# A guard against a leak, far above the moment the workers take to notice; never a speed check.
LEAK_GUARD_SECONDS = 120


def test_workers_exit_with_a_sigkilled_training_process(indexed, tmp_path):
    """SIGKILL runs no cleanup in the training process: its spawned Grain workers (and the
    resource tracker, which outlives them only by its pipe) were re-parented to init and
    kept running. Every process below it must exit."""
    import os
    import select
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers.process_tree import descendants, survivors

    script = tmp_path / "loader.py"
    script.write_text(LOADER_CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(indexed)], stdout=subprocess.PIPE, text=True
    )
    tree, lifelines = {}, {}
    try:
        assert child.stdout.readline().strip() == "ready"
        tree = descendants(child.pid)
        assert len(tree) >= 2, tree  # the two workers, at least
        for pid in tree:
            try:
                lifelines[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                pass
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + LEAK_GUARD_SECONDS
        while lifelines:  # a pidfd turns readable when its process exits
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select(list(lifelines.values()), [], [], left)
            assert ready, f"still running {LEAK_GUARD_SECONDS} s after the SIGKILL: {lifelines}"
            for pid, fd in list(lifelines.items()):
                if fd in ready:
                    os.close(lifelines.pop(pid))
    finally:
        child.kill()
        child.wait()
        for fd in lifelines.values():
            os.close(fd)
        for pid in survivors(tree):  # none, unless the test failed
            os.kill(pid, signal.SIGKILL)
