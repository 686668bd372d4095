"""A response stream read ahead in a thread of its own, so that the daemon's work and the caller's overlap.

A gRPC client receives a stream's next message only while someone waits for it; a
caller that spends a while on each message (building Arrow batches of it) leaves
the daemon blocked on flow control meanwhile, and the two take turns. Read ahead,
the daemon makes the next messages while the caller works on this one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

# How often a reader blocked on a full queue looks whether the caller stopped.
_POLL = 0.05


class ReadAhead(Generic[T]):
    """The items of ``source``, read up to ``depth`` ahead by a daemon thread, in order.

    An exception ``source`` raises is raised to the caller in its place. :meth:`close`
    (a caller that stops early) ends the reading at its next item; the caller cancels
    the call itself, which ends a reader waiting for a message.
    """

    def __init__(self, source: Iterable[T], depth: int = 2) -> None:
        self._items: queue.Queue[tuple[bool, T | BaseException | None]] = queue.Queue(maxsize=depth)
        self._closed = threading.Event()
        self._ended = False
        reader = threading.Thread(target=self._read, args=(source,), name="read-ahead", daemon=True)
        reader.start()

    def _read(self, source: Iterable[T]) -> None:
        try:
            for item in source:
                if not self._put((True, item)):
                    return
        except BaseException as error:  # handed to the caller, who raises it
            self._put((False, error))
            return
        self._put((False, None))

    def _put(self, entry: tuple[bool, T | BaseException | None]) -> bool:
        while not self._closed.is_set():
            try:
                self._items.put(entry, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> ReadAhead[T]:
        return self

    def __next__(self) -> T:
        if self._ended:
            raise StopIteration
        more, item = self._items.get()
        if more:
            return item  # type: ignore[return-value]
        self._ended = True
        if isinstance(item, BaseException):
            raise item
        raise StopIteration

    def close(self) -> None:
        self._closed.set()
