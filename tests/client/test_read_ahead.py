"""ReadAhead: a stream's items in order, its error in their place, and a caller that stops early."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from epochstate.client.read_ahead import ReadAhead


def test_items_come_in_order_then_the_end() -> None:
    ahead = ReadAhead(iter(range(100)), depth=3)
    assert list(ahead) == list(range(100))
    assert list(ahead) == []  # ended stays ended


def test_an_error_comes_in_place_of_the_next_item() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise RuntimeError("the call failed")

    ahead = ReadAhead(failing())
    assert [next(ahead), next(ahead)] == [1, 2]
    with pytest.raises(RuntimeError, match="the call failed"):
        next(ahead)


def test_a_caller_that_stops_ends_the_reading_at_the_next_item() -> None:
    read: list[int] = []
    finished = threading.Event()

    def endless() -> Iterator[int]:
        try:
            n = 0
            while True:
                read.append(n)
                yield n
                n += 1
        finally:
            finished.set()

    ahead = ReadAhead(endless(), depth=2)
    assert next(ahead) == 0
    ahead.close()
    # The reader, blocked on a full queue (two items ahead), gives up within its poll
    # instead of reading on: the source is never read past what the queue held.
    finished.wait(0.3)
    assert len(read) <= 4, read
