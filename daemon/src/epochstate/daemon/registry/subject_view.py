"""A read-only, cached view of the subjects in ZooKeeper, for reads pinned to aligned epochs.

Each znode is read once and left with a watch; the cached answer stands until
the watch fires (the znode or its children changed). When the connection is
suspended or lost the cache is dropped, since watches may be lost with it.
Subject epoch records are written once and stay cached (bounded), and so does
each subject's writer.

Bounds: watches are left only on znodes that exist (the subjects, each subject's
``sources`` and each source that is registered) and on a subject's ``sources``
while it has none; a source record is read only when the job is among the
children of ``sources``. So names a caller makes up (a job that reads no subject)
cost no watch at all, and the watches grow with the registry, which retention
bounds, never with the calls. The cache keeps at most ``max_cached`` znodes; past
it the least recently used is dropped (its watch, already set, fires at most
once more and then lapses).

Every change a watch reports moves :attr:`SubjectView.generation` on and wakes
:meth:`SubjectView.wait_for_change`, so a read waiting for a mapping entry wakes
as soon as it is recorded; :meth:`SubjectView.close` wakes every waiter.

A watch event reaches the cache some time after ZooKeeper acknowledged the change
to its writer (another session: Spark's driver, an operator's CLI). A resolution
calls :meth:`SubjectView.catch_up` first, so it sees every change acknowledged
before it started, never a cached answer the writer already knows is stale.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import Callback, KazooState, WatchedEvent

from epochstate.core.zookeeper.errors import InvalidRecord, RegistryUnavailable
from epochstate.core.zookeeper.layout import DEFAULT_ROOT, Layout, parse_epoch_name
from epochstate.core.zookeeper.session import CONNECTION_ERRORS, wait
from epochstate.core.zookeeper.subject_records import SubjectEpochRecord, SubjectSourceRecord

MAX_CACHED_EPOCHS = 4096
MAX_CACHED = 10_000
R = TypeVar("R")


class SubjectView:
    """Subjects under ``root`` as ``client`` sees them; safe to share between threads.

    Raises (every read):
        RegistryUnavailable: not connected, ZooKeeper did not answer within
            ``timeout`` seconds, or the view is closed.
        InvalidRecord: a znode does not hold the record its path promises.
    """

    def __init__(
        self,
        client: KazooClient,
        root: str = DEFAULT_ROOT,
        *,
        timeout: float = 5.0,
        max_cached: int = MAX_CACHED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.max_cached = max_cached
        self.layout = Layout(root)
        self.timeout = timeout
        self._clock = clock
        self._changed = threading.Condition()
        self._generation = 0
        self._closed = False
        # path -> data (bytes | None) or children (tuple[str, ...]), least recently used first.
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._epochs: OrderedDict[str, SubjectEpochRecord] = OrderedDict()
        self._writers: OrderedDict[str, SubjectEpochRecord] = OrderedDict()
        client.add_listener(self._on_state)

    # Reads.

    def topics(self) -> list[str]:
        """The subjects (topics) that have a znode, sorted."""
        return sorted(self._children(self.layout.subjects))

    def source(self, topic: str, job: str) -> SubjectSourceRecord | None:
        """The record of ``job`` reading ``topic``; None if it never registered as a source."""
        if job not in self._children(self.layout.subject_sources(topic)):
            return None  # no watch on a znode that does not exist: the children's fires
        path = self.layout.subject_source(topic, job)
        data = self._data(path)
        return None if data is None else _decoded(path, data, SubjectSourceRecord.decode)

    def writer(self, topic: str) -> SubjectEpochRecord | None:
        """The record of ``topic``'s lowest registered epoch, which names the writing job.

        One query writes all epochs of a subject (the sink refuses another), so
        the answer is cached for good once there is one; the epochs are listed
        (not watched: they grow by one per writer batch) only until then.
        """
        with self._changed:
            found = self._writers.get(topic)
        if found is not None:
            return found
        with self._reading():
            try:
                names = wait(self.client.get_children_async(self.layout.subject_epochs(topic)), self.timeout)
            except NoNodeError:
                names = []
        for epoch in sorted(e for name in names if (e := parse_epoch_name(name)) is not None):
            record = self.epoch(topic, epoch)  # None: retired between listing and reading
            if record is not None:
                with self._changed:
                    self._writers[topic] = record
                    while len(self._writers) > self.max_cached:
                        self._writers.popitem(last=False)
                return record
        return None

    def epoch(self, topic: str, epoch: int) -> SubjectEpochRecord | None:
        """Subject epoch ``epoch`` of ``topic``; None if it is not registered (or retired)."""
        path = self.layout.subject_epoch(topic, epoch)
        with self._changed:
            found = self._epochs.get(path)
        if found is not None:
            return found
        with self._reading():
            try:
                data, _ = wait(self.client.get_async(path), self.timeout)
            except NoNodeError:
                return None
        record = _decoded(path, data, SubjectEpochRecord.decode)
        with self._changed:
            self._epochs[path] = record
            while len(self._epochs) > MAX_CACHED_EPOCHS:
                self._epochs.popitem(last=False)
        return record

    def catch_up(self) -> None:
        """Return once the cache reflects every change ZooKeeper acknowledged before this call.

        ZooKeeper sends this session the watch events of changes it committed
        before a ``sync`` ahead of the sync's reply, and kazoo queues them, in
        order, for its event thread; a marker queued there after the reply runs
        once they have all emptied the cache entries they concern. One round trip.

        Not skipped when no watch event is pending here: ZooKeeper orders what one
        session receives, not one session against another, so an event owed to this
        session may still be in the socket, in kazoo's reader, or on a lagging
        follower when the writer has its reply and asks for the read. Only a sync
        delivers it first (docs/read-contract.md, aligned_with; the cost measured
        by bench/aligned_reads.py).

        Raises RegistryUnavailable: not connected, or no answer within ``timeout`` seconds.
        """
        with self._reading():
            wait(self.client.sync_async("/"), self.timeout)
        done = threading.Event()
        self.client.handler.dispatch_callback(Callback("watch", done.set, ()))
        if not done.wait(self.timeout):
            raise RegistryUnavailable(f"ZooKeeper's watch events were not handled within {self.timeout} s")

    # Waiting.

    @property
    def generation(self) -> int:
        """Moves on whenever a watched znode may have changed."""
        return self._generation

    def wait_for_change(self, generation: int, timeout: float | None) -> bool:
        """Wait until :attr:`generation` differs from ``generation``; False after ``timeout``.

        Raises RegistryUnavailable when the view closes while waiting.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._changed:
            while True:
                if self._closed:
                    raise RegistryUnavailable("the daemon is shutting down")
                if self._generation != generation:
                    return True
                remaining = None if deadline is None else deadline - self._clock()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)

    @property
    def cached(self) -> int:
        """How many znodes the cache holds (at most ``max_cached``)."""
        return len(self._cache)

    def close(self) -> None:
        """Wake every waiter (they raise RegistryUnavailable); the client is not stopped."""
        self.client.remove_listener(self._on_state)
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    # Plumbing.

    def _data(self, path: str) -> bytes | None:
        with self._changed:
            if path in self._cache:
                self._cache.move_to_end(path)
                cached: bytes | None = self._cache[path]
                return cached
        watch, generation = self._on_watch, self._generation
        with self._reading():
            # exists() leaves a watch on a missing znode too (get() would not).
            data: bytes | None = None
            if wait(self.client.exists_async(path, watch=watch), self.timeout) is not None:
                try:
                    data, _ = wait(self.client.get_async(path, watch=watch), self.timeout)
                except NoNodeError:
                    data = None
        self._remember(path, data, generation)
        return data

    def _children(self, path: str) -> tuple[str, ...]:
        with self._changed:
            if path in self._cache:
                self._cache.move_to_end(path)
                cached: tuple[str, ...] = self._cache[path]
                return cached
        watch, generation = self._on_watch, self._generation
        with self._reading():
            while True:
                try:
                    names = tuple(wait(self.client.get_children_async(path, watch=watch), self.timeout))
                    break
                except NoNodeError:
                    if wait(self.client.exists_async(path, watch=watch), self.timeout) is None:
                        names = ()
                        break  # the exists watch fires when it is created
        self._remember(path, names, generation)
        return names

    def _remember(self, path: str, value: Any, generation: int) -> None:
        """Cache what was read, unless a watch fired meanwhile (it may be stale then)."""
        with self._changed:
            if self._generation == generation:
                self._cache[path] = value
                while len(self._cache) > self.max_cached:
                    self._cache.popitem(last=False)

    def _on_watch(self, event: WatchedEvent) -> None:
        """The one watch function of every path: kazoo keeps a path's watchers in a set,
        so it is called once per event however often the path was read."""
        self._forget(event.path)

    def _forget(self, path: str | None) -> None:
        # Runs on kazoo's event thread: never blocks on more than this lock.
        with self._changed:
            if path is None:
                self._cache.clear()
            else:
                self._cache.pop(path, None)
            self._generation += 1
            self._changed.notify_all()

    def _on_state(self, state: KazooState) -> None:
        if state != KazooState.CONNECTED:
            self._forget(None)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        if self._closed:
            raise RegistryUnavailable("the daemon is shutting down")
        if not self.client.connected:
            raise RegistryUnavailable("not connected to ZooKeeper")
        try:
            yield
        except CONNECTION_ERRORS as error:
            raise RegistryUnavailable(f"ZooKeeper did not answer: {error!r}") from error


def _decoded(path: str, data: bytes, decode: Callable[[bytes], R]) -> R:
    try:
        return decode(data)
    except InvalidRecord as error:
        raise InvalidRecord(f"znode {path}: {error}") from error
