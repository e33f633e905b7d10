import pytest

from segcore.splits import (
    ShardSpec,
    SplitFractions,
    SplitSize,
    assign_shard,
    plan_num_shards,
    shard_specs,
)

KEYS = [f"{i:05d}" for i in range(5000)]


def test_split_is_deterministic_and_close_to_fractions():
    fractions = SplitFractions(0.8, 0.1)
    splits = [fractions.split_of(key) for key in KEYS]
    assert splits == [SplitFractions(0.8, 0.1).split_of(key) for key in KEYS]
    assert abs(splits.count("train") / len(KEYS) - 0.8) < 0.03
    assert abs(splits.count("validation") / len(KEYS) - 0.1) < 0.02
    assert abs(splits.count(None) / len(KEYS) - 0.1) < 0.02


def test_adding_keys_never_moves_existing_ones():
    fractions = SplitFractions(0.9, 0.1)
    before = {key: fractions.split_of(key) for key in KEYS[:1000]}
    after = {key: fractions.split_of(key) for key in KEYS}  # 4000 new keys arrive
    assert all(after[key] == split for key, split in before.items())


def test_blog_defaults_train_only():
    assert {SplitFractions(1.0, 0.0).split_of(key) for key in KEYS} == {"train"}


@pytest.mark.parametrize("train,validation", [(-0.1, 0.1), (0.8, 0.3), (0, 0), (1.5, 0)])
def test_bad_fractions_are_refused(train, validation):
    with pytest.raises(ValueError):
        SplitFractions(train, validation)


def test_plan_by_size_and_by_count():
    sizes = {"train": SplitSize(900, 450_000_000), "validation": SplitSize(100, 50_000_000)}
    assert plan_num_shards(sizes, shard_size_mb=100) == {"train": 4, "validation": 1}
    assert plan_num_shards(sizes, num_shards=10) == {"train": 9, "validation": 1}
    # Local runs: at least 8 similar shards, spread by entries.
    assert plan_num_shards(sizes, shard_size_mb=1000, min_total_shards=8) == {
        "train": 7,
        "validation": 1,
    }
    # Never more shards than entries; an empty split gets none.
    tiny = {"train": SplitSize(3, 10)}
    assert plan_num_shards(tiny, num_shards=50) == {"train": 3, "validation": 0}
    assert plan_num_shards({}, shard_size_mb=100) == {"train": 0, "validation": 0}


def test_shard_assignment_covers_every_planned_shard():
    plan = {"train": 4, "validation": 1}
    specs = shard_specs(plan)
    assert specs[0] == ShardSpec("train", 0, 4) and len(specs) == 5
    used = {assign_shard(key, "train", plan) for key in KEYS[:400]}
    assert used == {spec for spec in specs if spec.split == "train"}
    assert ShardSpec("train", 3, 4).name == "train-00003-of-00004.tfrecord"
