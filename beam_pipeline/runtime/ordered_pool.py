"""Map a function over items on a few threads, yielding results in input order.

Decoders (Pillow, zlib, libjpeg) release the GIL, and remote reads wait on the network, so
threads keep every core (or the connection) busy within one shard while the records still
come out sorted by key: same inputs, same bytes. At most `window` results are held.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def ordered_map(
    function: Callable[[Item], Result], items: Iterable[Item], threads: int
) -> Iterator[tuple[Item, Result]]:
    """(item, function(item)) in input order; an exception is raised at its item's turn."""
    if threads <= 1:
        for item in items:
            yield item, function(item)
        return
    window = 2 * threads
    pending: collections.deque[tuple[Item, Future[Result]]] = collections.deque()
    with ThreadPoolExecutor(threads, thread_name_prefix="segprep-record") as pool:
        try:
            for item in items:
                pending.append((item, pool.submit(function, item)))
                if len(pending) >= window:
                    done, future = pending.popleft()
                    yield done, future.result()
            while pending:
                done, future = pending.popleft()
                yield done, future.result()
        finally:
            for _, future in pending:
                future.cancel()
