"""The threads that run a server's calls: few run quick calls, any held call gets its own.

A thread pool with one thread per call the limits admit at once (hundreds) keeps a
held call (a waiting read, a stream, an admin call) from ever making a quick one
wait, but costs every call: the more threads take turns at the calls, the more of
them are woken and switched to, and the more contend for the interpreter's lock.
A pool of a few threads costs least, but a few held calls would stop it.

:class:`CallPool` does both. It runs the calls in the order they came, at most
``quick`` of them at once while they are not known to be held; the others wait in
its queue, behind quick calls only. A call that turns out to be held (the limiter
knows once it admitted it, :func:`held`) stops counting against ``quick`` at once,
keeping its thread, and the next waiting call starts on another thread (an idle
one, or a new one). So the queue never waits for a held call, and the number of
threads is at most ``quick`` plus the held calls, never above ``most``.

gRPC hands a call to its pool before the call's request arrived, and reads the
request on the pool's thread: whether a call is held is known only once it runs.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")
_Work = tuple["futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Running(threading.local):
    """What this thread runs: its pool, and whether its call still counts as quick."""

    pool: CallPool | None = None
    quick: bool = False


_running = _Running()

IDLE_SECONDS = 30.0
"""How long a thread waits for work before it ends."""


def held() -> None:
    """Tell the pool running this thread's call that the call may last (it waits, streams,
    or waits for another process): it stops counting against the pool's quick calls, and
    a waiting call starts. Does nothing outside a :class:`CallPool`, or when said twice."""
    pool = _running.pool
    if pool is not None and _running.quick:
        _running.quick = False
        pool._held()


class CallPool(futures.ThreadPoolExecutor):
    """Runs what gRPC submits, in order, at most ``quick`` calls at once among those not
    known to be :func:`held`, on at most ``most`` threads (see the module docstring).

    A thread is started only when a call would wait for one and fewer than ``most``
    exist; idle threads wait for work, and end after :data:`IDLE_SECONDS` without any, or
    at :meth:`shutdown`. A call cancelled before it started (its future) is skipped.
    :meth:`waiting` is the number of calls waiting for a thread."""

    def __init__(self, quick: int, most: int, thread_name_prefix: str = "calls") -> None:
        if not 1 <= quick <= most:
            raise ValueError(f"need 1 <= quick ({quick}) <= most ({most})")
        super().__init__(max_workers=most, thread_name_prefix=thread_name_prefix)
        self.quick = quick
        self.most = most
        self._name = thread_name_prefix
        self._lock = threading.Lock()
        self._queue: collections.deque[_Work] = collections.deque()
        self._running_quick = 0
        self._idle: list[threading.Lock] = []  # what wakes each thread waiting for work
        self._coming = 0  # threads woken or started for the queue, not there yet
        self._started = 0
        self._alive: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> futures.Future[_T]:
        future: futures.Future[_T] = futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new calls after shutdown")
            self._queue.append((future, fn, args, kwargs))
            self._more()
        return future

    def waiting(self) -> int:
        """Calls submitted that no thread runs yet."""
        return len(self._queue)

    def threads(self) -> int:
        """Threads started and not ended."""
        with self._lock:
            return len(self._alive)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new calls; idle threads end, the others once the queue is empty (with
        ``cancel_futures``, the calls not started are cancelled first)."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while self._queue:
                    self._queue.popleft()[0].cancel()
            while self._idle:
                self._idle.pop().release()
            threads = list(self._alive)
        if wait:
            for thread in threads:
                thread.join()

    def _more(self) -> None:
        """Get one more thread to the queue if a waiting call may start and none is on its way:
        the thread idle the shortest time, or a new one below ``most``. Under the lock."""
        if not self._queue or self._running_quick + self._coming >= self.quick:
            return
        if self._idle:
            self._coming += 1
            self._idle.pop().release()
        elif len(self._alive) < self.most:
            self._coming += 1
            self._started += 1
            thread = threading.Thread(target=self._work, name=f"{self._name}_{self._started}", daemon=True)
            self._alive.append(thread)
            thread.start()

    def _held(self) -> None:
        with self._lock:
            self._running_quick -= 1
            self._more()

    def _take(self, wake: threading.Lock) -> _Work | None:
        """The next call for this thread (which ``wake`` wakes), counted quick; None once the
        pool shut down or the thread was idle too long."""
        with self._lock:
            if _running.quick:
                self._running_quick -= 1
                _running.quick = False
            while not (self._queue and self._running_quick < self.quick):
                if self._closed:
                    self._alive.remove(threading.current_thread())
                    return None
                self._idle.append(wake)
                self._lock.release()
                try:
                    woken = wake.acquire(timeout=IDLE_SECONDS)
                finally:
                    self._lock.acquire()
                if not woken:
                    if wake in self._idle:  # no one woke it: no one counts on it
                        self._idle.remove(wake)
                        self._alive.remove(threading.current_thread())
                        return None
                    wake.acquire()  # woken as it gave up: released under the lock, so at once
                if not self._closed:
                    self._coming -= 1
            self._running_quick += 1
            _running.quick = True
            work = self._queue.popleft()
            self._more()  # the next call may start too, on another thread
            return work

    def _work(self) -> None:
        _running.pool = self
        wake = threading.Lock()
        wake.acquire()
        with self._lock:
            self._coming -= 1
        while (work := self._take(wake)) is not None:
            future, fn, args, kwargs = work
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:
                future.set_exception(error)
            else:
                future.set_result(result)
            del work, future, fn, args, kwargs
