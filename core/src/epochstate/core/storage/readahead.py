"""Whole-file reads started before they are needed, on a few threads.

Following a job on an object store is a chain of small reads, each a round trip:
the state file of every partition, the offset log entry. Ingest, on one thread,
would wait for them one by one; told which files it will read next (the next
epoch's, once committed), the storage fetches them meanwhile, several at once.
Only files that never change once written, and that exist before anyone asks for
them (a committed epoch's log entry and state files), are read ahead: so an early
copy is the file, and a file found missing early is missing. A read that failed
otherwise (refused, a fault) is simply made again when asked for, with the usual
retries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class ReadAhead:
    """At most ``max_files`` reads ahead, on ``workers`` threads; the oldest unclaimed
    one is dropped first."""

    def __init__(self, read: Callable[[str], bytes], workers: int = 4, max_files: int = 256) -> None:
        self._read = read
        self._max_files = max_files
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="read-ahead")
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, Future[bytes]] = OrderedDict()

    def start(self, path: str) -> None:
        """Start reading ``path`` unless it is being read ahead already."""
        with self._lock:
            if path in self._pending:
                return
            while len(self._pending) >= self._max_files:
                _, dropped = self._pending.popitem(last=False)
                dropped.cancel()
            self._pending[path] = self._pool.submit(self._read, path)

    def take(self, path: str) -> bytes | None:
        """The content read ahead for ``path`` (waiting for it), or ``None`` when it was
        not read ahead or that read failed.

        Raises:
            FileNotFoundError: the file was missing when read ahead.
        """
        with self._lock:
            future = self._pending.pop(path, None)
        if future is None:
            return None
        try:
            return future.result()
        except FileNotFoundError:
            raise
        except Exception:  # made again by the caller, with its retries and errors
            return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)
