"""Whole remote files kept on local disk, least recently used first out, within a size bound.

Snapshot zips and the table files they name are read whole and often more than
once (a zip for its metadata, then its tables); fetching each once saves requests
and time. An entry is keyed by the file's location *and* its size and version tag
(ETag or modification time), so a file rewritten in place (a re-run batch's zip)
is fetched again. Files are written to a temporary name and renamed, so a crash
never leaves a partial entry under a real name.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path


class FileCache:
    """At most ``max_bytes`` of files under ``directory`` (an entry larger than the
    bound is still served, then dropped first)."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()
        self._bytes = 0
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.iterdir():  # a previous process's entries: unknown tags
            stale.unlink(missing_ok=True)

    def get(self, key: str, fetch: Callable[[Path], None]) -> tuple[Path, bool]:
        """The cached file for ``key`` (fetched with ``fetch(path)`` on a miss), and
        whether it was a hit."""
        name = hashlib.sha256(key.encode()).hexdigest()
        path = self.directory / name
        with self._lock:
            if name in self._entries and path.exists():
                self._entries.move_to_end(name)
                return path, True
        tmp = self.directory / f".{name}.{threading.get_ident()}.tmp"
        try:
            fetch(tmp)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        size = path.stat().st_size
        with self._lock:
            old = self._entries.pop(name, None)
            self._bytes -= old or 0
            self._entries[name] = size
            self._bytes += size
            self._evict(keep=name)
        return path, False

    def _evict(self, keep: str) -> None:
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            name, size = next(iter(self._entries.items()))
            if name == keep:
                self._entries.move_to_end(name)
                continue
            del self._entries[name]
            self._bytes -= size
            (self.directory / name).unlink(missing_ok=True)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes
