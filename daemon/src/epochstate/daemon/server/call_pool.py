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
keeping its thread, and another thread (a spare, or a new one) takes its place at
the queue. So the queue never waits for a held call; the threads are at most
``quick``, plus the held calls, plus spares (threads whose held call ended, kept for
the next one until :data:`IDLE_SECONDS` unused), never above ``most``.

gRPC hands a call to its pool before the call's request arrived, and reads the
request on the pool's thread: whether a call is held is known only once it runs. A
call can also hold a quick thread without saying so: a client that never sends its
request, a read slowed by a huge value. So when calls wait and none was taken for a
whole :data:`STALL_SECONDS`, the pool lends each waiting call a thread of its own, as
a pool of a thread per call would; a lent thread goes back to being a spare once no
call waits. Quick calls wait behind quick calls, then, only while those move.

Some calls must not wait even that long: a health check, answered from memory, is how
a load balancer or an operator tells a busy server from a dead one, and behind 64
callers' reads it would wait for tens of them. The calls :meth:`CallPool.run_first`
picks skip the queue: one thread of their own runs them as they come.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")
# The call, and whether it is counted among the calls :meth:`CallPool.waiting` tells.
_Work = tuple["futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any], bool]


class _Running(threading.local):
    """What this thread runs: its pool, and whether its call still counts as quick."""

    pool: CallPool | None = None
    quick: bool = False


_running = _Running()


def _every(args: tuple[Any, ...]) -> bool:
    return True


def _none(args: tuple[Any, ...]) -> bool:
    return False


IDLE_SECONDS = 30.0
"""How long a spare thread waits to be needed before it ends."""

STALL_SECONDS = 0.25
"""How long calls may wait while no thread takes one before each is lent a thread."""


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

    ``quick`` threads take calls from one queue, as a plain thread pool's do: a call costs
    no lock of the pool's own (a lock contended while threads take turns at the
    interpreter's lock would cost a switch). A thread whose call is held leaves the
    queue to a spare thread (an idle one, or a new one) and, once its call ended, becomes
    a spare itself; spares end after :data:`IDLE_SECONDS` unused. A call cancelled before
    it started (its future) is skipped. :meth:`waiting` is the number of calls waiting
    for a thread. The calls :meth:`run_first` picks run on one more thread, ahead of them."""

    def __init__(
        self, quick: int, most: int, thread_name_prefix: str = "calls", stall_seconds: float = STALL_SECONDS
    ) -> None:
        if not 1 <= quick <= most:
            raise ValueError(f"need 1 <= quick ({quick}) <= most ({most})")
        super().__init__(max_workers=most, thread_name_prefix=thread_name_prefix)
        self.quick = quick
        self.most = most
        self._name = thread_name_prefix
        self._calls: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        # One item per counted call queued: deque's append and pop are atomic, no lock.
        self._counted: collections.deque[None] = collections.deque()
        self._counts: Callable[[tuple[Any, ...]], bool] = _every
        self._first: Callable[[tuple[Any, ...]], bool] = _none
        self._firsts: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._first_thread: threading.Thread | None = None
        self._lock = threading.Lock()  # only when a call is held, or ends held
        self._spares: list[threading.Lock] = []  # what wakes each spare thread
        self._takers = 0  # threads taking calls from the queue (at most quick + lent)
        self._lent = 0  # threads lent to calls that waited through a stall, not yet back
        self._taken = 0  # calls taken so far (a lost increment still changes it)
        self._stall_seconds = stall_seconds
        self._watch: threading.Thread | None = None
        self._started = 0
        self._alive: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> futures.Future[_T]:
        if self._closed:
            raise RuntimeError("cannot schedule new calls after shutdown")
        future: futures.Future[_T] = futures.Future()
        if self._first(args):
            self._firsts.put((future, fn, args, kwargs, False))
            if self._first_thread is None:
                with self._lock:
                    if self._first_thread is None:
                        self._first_thread = threading.Thread(
                            target=self._work_first, name=f"{self._name}_first", daemon=True
                        )
                        self._first_thread.start()
            return future
        counted = self._counts(args)
        if counted:
            self._counted.append(None)
        self._calls.put((future, fn, args, kwargs, counted))
        if self._takers < self.quick:  # only until the takers are all started
            with self._lock:
                self._more()
                if self._watch is None:
                    self._watch = threading.Thread(
                        target=self._watch_stalls, name=f"{self._name}_watch", daemon=True
                    )
                    self._watch.start()
        return future

    def waiting(self) -> int:
        """Calls submitted that no thread runs yet, of those :meth:`count_only` picks (default:
        every call)."""
        return len(self._counted)

    def count_only(self, counts: Callable[[tuple[Any, ...]], bool]) -> None:
        """Have :meth:`waiting` tell only the calls whose submitted arguments ``counts`` picks
        (gRPC submits a call with its handler among them). Before the first call."""
        self._counts = counts

    def run_first(self, picks: Callable[[tuple[Any, ...]], bool]) -> None:
        """Run the calls whose submitted arguments ``picks`` picks ahead of every waiting
        call, one at a time on a thread of their own, never counted by :meth:`waiting`:
        for calls answered at once from memory only (a call that waited there would make
        the others wait). Before the first call."""
        self._first = picks

    def threads(self) -> int:
        """Threads started and not ended."""
        with self._lock:
            return len(self._alive)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new calls; spare threads end, the others once the calls queued ran (with
        ``cancel_futures``, the calls not started are cancelled first)."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while not self._calls.empty():
                    work = self._calls.get()
                    if work is not None:
                        work[0].cancel()
                        if work[4]:
                            self._counted.pop()
            for _ in range(self._takers):
                self._calls.put(None)
            self._firsts.put(None)
            while self._spares:
                self._spares.pop().release()
            threads = list(self._alive)
            if self._first_thread is not None:
                threads.append(self._first_thread)
        if wait:
            for thread in threads:
                thread.join()

    def _more(self) -> None:
        """One more thread taking calls, if fewer than ``quick`` (and those lent) do: the
        spare idle the shortest time, or a new one below ``most``. Under the lock."""
        if self._takers >= self.quick + self._lent or self._closed:
            return
        if self._spares:
            self._takers += 1
            self._spares.pop().release()
        elif len(self._alive) < self.most:
            self._takers += 1
            self._started += 1
            thread = threading.Thread(target=self._work, name=f"{self._name}_{self._started}", daemon=True)
            self._alive.append(thread)
            thread.start()

    def _held(self) -> None:
        with self._lock:
            self._takers -= 1
            self._more()

    def _spare(self, wake: threading.Lock) -> bool:
        """After a held call: take calls again if the takers are short, else wait as a spare
        until needed (True) or until unused too long, or the pool shut down (False)."""
        with self._lock:
            if self._closed:
                self._alive.remove(threading.current_thread())
                return False
            if self._takers < self.quick + self._lent:
                self._takers += 1
                return True
            self._spares.append(wake)
        woken = wake.acquire(timeout=IDLE_SECONDS)
        with self._lock:
            if not woken:
                if wake in self._spares:  # no one woke it: no one counts on it
                    self._spares.remove(wake)
                    self._alive.remove(threading.current_thread())
                    return False
                wake.acquire()  # woken as it gave up: released under the lock, so at once
            if self._closed:
                self._alive.remove(threading.current_thread())
                return False
            return True

    def _work(self) -> None:
        _running.pool = self
        wake = threading.Lock()
        wake.acquire()
        calls = self._calls
        while True:
            _running.quick = True
            work = calls.get()
            if work is None:  # shut down
                with self._lock:
                    self._alive.remove(threading.current_thread())
                return
            self._taken += 1
            if work[4]:
                self._counted.pop()
            _run(work)
            del work
            back = not _running.quick or (self._lent and calls.empty() and self._give_back())
            if back and not self._spare(wake):
                return

    def _work_first(self) -> None:
        firsts = self._firsts
        while (work := firsts.get()) is not None:
            _run(work)
            del work

    def _give_back(self) -> bool:
        """Whether this thread, its call ended and no call waiting, stops taking calls:
        the pool takes back a lent thread (any taker will do) once no call waits."""
        with self._lock:
            if not self._lent:
                return False
            self._lent -= 1
            self._takers -= 1
            return True

    def _watch_stalls(self) -> None:
        """Every ``stall_seconds``: if calls waited through the whole interval and no thread
        took one, lend each waiting call a thread (up to ``most``)."""
        seen_taken, seen_waiting = -1, False
        while not self._closed:
            time.sleep(self._stall_seconds)
            taken, waiting = self._taken, self._calls.qsize()
            if waiting and seen_waiting and taken == seen_taken:
                with self._lock:
                    for _ in range(waiting):
                        before = self._takers
                        self._lent += 1
                        self._more()
                        if self._takers == before:  # at most threads: nothing to lend
                            self._lent -= 1
                            break
            seen_taken, seen_waiting = taken, bool(waiting)


def _run(work: _Work) -> None:
    """Run ``work``'s call, unless cancelled before it started, setting its future."""
    future, fn, args, kwargs, _ = work
    if future.set_running_or_notify_cancel():
        try:
            result = fn(*args, **kwargs)
        except BaseException as error:
            future.set_exception(error)
        else:
            future.set_result(result)
