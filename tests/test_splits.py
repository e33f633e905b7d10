import pytest

from tests.helpers.shard_plan import shard_specs
from transforms.format.naming import SPLITS
from transforms.splits import (
    MIN_SHARDS,
    ShardAssigner,
    ShardSpec,
    SplitFractions,
    SplitSize,
    num_shards_note,
    plan_num_shards,
    seed_keys,
    shard_hash,
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
    # At least MIN_SHARDS (8) by size: 5 by size alone, spread by entries.
    assert plan_num_shards(sizes, shard_size_mb=100) == {"train": 7, "validation": 1}
    assert plan_num_shards(sizes, shard_size_mb=10) == {"train": 45, "validation": 5}
    assert plan_num_shards(sizes, shard_size_mb=100, min_total_shards=1) == {
        "train": 4,
        "validation": 1,
    }
    assert plan_num_shards(sizes, num_shards=10) == {"train": 9, "validation": 1}
    # Never more shards than entries; an empty split gets none.
    tiny = {"train": SplitSize(3, 10)}
    assert plan_num_shards(tiny, num_shards=50) == {"train": 3, "validation": 0}
    assert plan_num_shards(tiny, shard_size_mb=100) == {"train": 3, "validation": 0}
    assert plan_num_shards({}, shard_size_mb=100) == {"train": 0, "validation": 0}
    # Both splits have entries: each gets a shard, even when one was asked for.
    both = {"train": SplitSize(24, 10), "validation": SplitSize(1, 1)}
    assert plan_num_shards(both, num_shards=1) == {"train": 1, "validation": 1}
    # The case: 25 entries and the 8-shard minimum.
    assert plan_num_shards(both, shard_size_mb=100) == {"train": 7, "validation": 1}


def test_num_shards_note_only_when_the_request_was_capped():
    assert num_shards_note(None, 8) is None
    assert num_shards_note(8, 8) is None
    assert num_shards_note(1, 2) is None  # one shard per split is not a cap
    note = num_shards_note(500, 190)
    assert note == (
        "note: --num_shards 500 capped at 190, one shard per entry at most, so that no shard "
        "is empty"
    )


def _assign_all(keys, fractions, **plan_args):
    """The plan and every key's shard, through the same pure functions PlanShards uses."""
    by_split = {split: [] for split in SPLITS}
    for key in keys:
        split = fractions.split_of(key)
        if split is not None:
            by_split[split].append(key)
    sizes = {
        split: SplitSize(len(members), 100 * len(members)) for split, members in by_split.items()
    }
    plan = plan_num_shards(sizes, **plan_args)
    seeds = {
        split: seed_keys(((shard_hash(key), key) for key in members), plan[split])
        for split, members in by_split.items()
    }
    assigner = ShardAssigner.from_seeds(plan, seeds)
    shards = {}
    for split, members in by_split.items():
        for key in members:
            shards.setdefault(assigner.assign(key, split), []).append(key)
    return by_split, plan, shards


def _check_no_empty_shard_and_complete(by_split, plan, shards, requested):
    entries = sum(len(members) for members in by_split.values())
    present = sum(1 for members in by_split.values() if members)
    assert sum(plan.values()) == max(min(requested, entries), present)
    # Every planned shard holds at least one key, and no key lands outside the plan.
    assert set(shards) == set(shard_specs(plan))
    for split, members in by_split.items():
        assert plan[split] <= len(members)
        placed = [key for spec, keys in shards.items() if spec.split == split for key in keys]
        assert sorted(placed) == sorted(members)  # complete, and each key exactly once


GRID = [1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 64, 99, 100, 101, 250, 499, 999, 1000]


@pytest.mark.parametrize("fractions", [SplitFractions(1.0, 0.0), SplitFractions(0.7, 0.2)])
def test_no_shard_is_empty_over_a_grid_of_sizes(fractions):
    for count in GRID:
        keys = KEYS[:count]
        for requested in GRID:
            result = _assign_all(keys, fractions, num_shards=requested)
            _check_no_empty_shard_and_complete(*result, requested)


def test_minimum_shards_never_gives_more_shards_than_entries():
    for count in range(1, 1001):
        sizes = {
            "train": SplitSize(count - count // 5, 10 * count),
            "validation": SplitSize(count // 5, count),
        }
        plan = plan_num_shards(sizes, shard_size_mb=100)
        present = sum(1 for size in sizes.values() if size.entries)
        assert sum(plan.values()) == max(min(MIN_SHARDS, count), present), count
        assert all(plan[split] <= sizes[split].entries for split in plan), count
    for count in (1, 3, 7, 8, 9, 40):
        result = _assign_all(KEYS[:count], SplitFractions(0.8, 0.2), shard_size_mb=100)
        _check_no_empty_shard_and_complete(*result, MIN_SHARDS)


def test_keys_that_all_hash_to_one_shard_still_fill_every_shard():
    """An attacker's key set: every key has shard_hash % 4 == 0, so hashing alone would
    leave shards 1..3 empty."""
    keys = [key for key in KEYS if shard_hash(key) % 4 == 0][:10]
    assert len(keys) == 10
    by_split, plan, shards = _assign_all(keys, SplitFractions(1.0, 0.0), num_shards=4)
    _check_no_empty_shard_and_complete(by_split, plan, shards, 4)
    assert sorted(len(members) for members in shards.values()) == [1, 1, 1, 7]


def test_seed_keys_depend_on_the_key_set_only():
    hashed = [(shard_hash(key), key) for key in KEYS[:300]]
    seeds = seed_keys(hashed, 20)
    assert seeds == seed_keys(reversed(hashed), 20) == seed_keys(sorted(hashed, key=str), 20)
    assert seeds == [key for _, key in sorted(hashed)[:20]]
    with pytest.raises(ValueError, match="need 5 seed keys"):
        ShardAssigner.from_seeds({"train": 5}, {"train": seeds[:4]})


def test_large_splits_spread_evenly():
    by_split, plan, shards = _assign_all(KEYS, SplitFractions(1.0, 0.0), num_shards=10)
    sizes = sorted(len(members) for members in shards.values())
    assert len(sizes) == 10 and sizes[0] > 400 and sizes[-1] < 600, sizes


def test_shard_names():
    plan = {"train": 4, "validation": 1}
    specs = shard_specs(plan)
    assert specs[0] == ShardSpec("train", 0, 4) and len(specs) == 5
    assert ShardSpec("train", 3, 4).name == "train-00003-of-00004.tfrecord"
