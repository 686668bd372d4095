"""Call limits that hold for the daemon as a whole when several processes serve it.

A daemon with serving processes (:mod:`epochstate.daemon.server.processes`) admits
each call in the process the kernel gave its connection to; ``limit_streams: 100``
means 100 streams at once on the daemon, not 100 on each process. So the processes
count their calls in flight in one small file in the daemon's serving directory,
mapped into every process: a row per process, a counter per kind of call. A call
is admitted when the sum of its kind's counters over every row is below the limit;
the check and the increment of the process's own counter happen under an exclusive
``flock`` on the file (and a thread lock, since ``flock`` does not tell the threads
of one process apart), so two processes never both take the last slot. Giving a
slot back needs no file lock (see :meth:`SharedCalls.leave`).

The file lock is first tried without letting go of the interpreter's lock (see
:func:`_lock`): ``fcntl.flock`` always lets go of it, and in a process whose other
threads wait for it, each letting go costs a switch to one of them and a wait to get
it back, a cost per call several times that of the call's own work.

A process only ever writes its own row. When one dies (killed, crashed) with calls
in flight, their slots are not lost: the main process clears the dead process's row
(:meth:`SharedCalls.clear`) before starting it again, and the kernel drops a lock a
dead process held.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import threading
from pathlib import Path

_COUNTER = 4  # bytes: an unsigned 32-bit counter ("I")

# The C library's flock, called through PyDLL: the interpreter's lock stays held.
_flock = ctypes.PyDLL(None, use_errno=True).flock
_flock.argtypes = (ctypes.c_int, ctypes.c_int)
_flock.restype = ctypes.c_int


def _lock(fd: int) -> None:
    """Take the exclusive lock of ``fd``: at once when no other process holds it, keeping the
    interpreter's lock; otherwise by waiting for it, letting the interpreter's lock go."""
    if _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB) != 0:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _unlock(fd: int) -> None:
    """Let go of the lock of ``fd`` (never waits, so the interpreter's lock stays held)."""
    if _flock(fd, fcntl.LOCK_UN) != 0:
        fcntl.flock(fd, fcntl.LOCK_UN)  # raises the error


class SharedCalls:
    """The calls in flight of each of ``kinds`` kinds in each process of a daemon, in the file
    at ``path``: this is process ``index``'s view (0: the main process, which creates it
    for ``processes`` processes with :meth:`create`). Thread-safe."""

    def __init__(self, path: Path, index: int, kinds: int) -> None:
        self.path = path
        self.index = index
        self._kinds = kinds
        self._fd = os.open(path, os.O_RDWR)
        size = os.fstat(self._fd).st_size
        self._map = mmap.mmap(self._fd, size)
        self._counts = memoryview(self._map).cast("I")
        self.processes = size // (_COUNTER * kinds)
        if not 0 <= index < self.processes:
            raise ValueError(f"process {index} of a daemon with {self.processes} processes")
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: Path, processes: int, kinds: int) -> SharedCalls:
        """The file for ``processes`` processes, every counter zero, and the main process's view."""
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, processes * kinds * _COUNTER)
        finally:
            os.close(fd)
        return cls(path, 0, kinds)

    def enter(self, kind: int, limit: int) -> bool:
        """Take a slot of ``kind`` if the daemon has fewer than ``limit`` such calls in flight."""
        counts, kinds = self._counts, self._kinds
        with self._lock:
            _lock(self._fd)
            try:
                if sum(counts[kind::kinds]) >= limit:
                    return False
                counts[self.index * kinds + kind] += 1
                return True
            finally:
                _unlock(self._fd)

    def leave(self, kind: int) -> None:
        """Give back a slot of ``kind`` this process took.

        No file lock: only this process writes its row (under the thread lock), and an
        aligned 4-byte store is seen whole by the others, before or after.
        """
        slot = self.index * self._kinds + kind
        with self._lock:
            self._counts[slot] -= 1

    def in_flight(self, kind: int) -> int:
        """The daemon's calls of ``kind`` in flight now, every process's."""
        with self._lock:
            return sum(self._counts[kind :: self._kinds])

    def mine(self, kind: int) -> int:
        """This process's calls of ``kind`` in flight now."""
        return int(self._counts[self.index * self._kinds + kind])

    def clear(self, index: int) -> None:
        """Forget every call of process ``index`` (it died: its calls ended with it)."""
        start = index * self._kinds
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                for slot in range(start, start + self._kinds):
                    self._counts[slot] = 0
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self._counts.release()
        self._map.close()
        os.close(self._fd)
