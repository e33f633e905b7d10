import threading
import time

import pytest

from beam_pipeline.runtime.ordered_pool import ordered_map


def _slow_square(value: int) -> int:
    time.sleep(0.001 * (value % 5))  # finish out of order
    return value * value


@pytest.mark.parametrize("threads", [1, 3])
def test_results_come_back_in_input_order(threads):
    assert list(ordered_map(_slow_square, range(40), threads)) == [(i, i * i) for i in range(40)]


def test_work_runs_on_several_threads():
    seen = set()

    def record_thread(value):
        seen.add(threading.get_ident())
        time.sleep(0.01)
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
