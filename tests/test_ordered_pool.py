import threading

import pytest

from beam_pipeline.runtime.ordered_pool import ordered_map

HANG_GUARD = 60  # seconds; only a broken pool waits this long


@pytest.mark.parametrize("threads", [1, 3])
def test_results_come_back_in_input_order(threads):
    """With threads, each even item finishes only after the odd one behind it."""
    finished = [threading.Event() for _ in range(40)]
    order = []

    def square(value: int) -> int:
        if threads > 1 and value % 2 == 0:
            assert finished[value + 1].wait(HANG_GUARD)
        order.append(value)
        finished[value].set()
        return value * value

    assert list(ordered_map(square, range(40), threads)) == [(i, i * i) for i in range(40)]
    if threads > 1:
        assert order != sorted(order)  # the results really did come back out of order


def test_work_runs_on_several_threads():
    seen = set()
    together = threading.Barrier(3, timeout=HANG_GUARD)  # the first three run at once

    def record_thread(value):
        seen.add(threading.get_ident())
        if value < 3:
            together.wait()
        return value

    assert [r for _, r in ordered_map(record_thread, range(12), 3)] == list(range(12))
    assert len(seen) == 3


def test_an_error_surfaces_at_its_turn_and_stops_the_rest():
    started = []

    def fail_on_five(value):
        started.append(value)
        if value == 5:
            raise OSError("disk gone")
        return value

    results = []
    with pytest.raises(OSError, match="disk gone"):
        for _, value in ordered_map(fail_on_five, range(100), 2):
            results.append(value)
    assert results == [0, 1, 2, 3, 4]
    assert len(started) < 100  # bounded look-ahead: not everything was submitted


def test_input_is_consumed_lazily_with_a_bounded_window():
    consumed = []

    def items():
        for value in range(1000):
            consumed.append(value)
            yield value

    iterator = ordered_map(lambda v: v, items(), 4)
    next(iterator)
    assert len(consumed) <= 2 * 4 + 1
