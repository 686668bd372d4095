"""Counts of the requests a storage made, for metrics and benchmarks."""

from __future__ import annotations

import threading
from collections import Counter


class StorageStats:
    """Thread-safe counters: requests by operation (``list``, ``head``, ``get``,
    ``get_range``), retries, requests that failed for good, bytes read, and cache
    hits and misses of whole-file fetches.

    With ``trace`` set, every request is also recorded as ``(op, path)`` in
    :attr:`requests`, in order (for debugging and tests: it grows without bound).
    """

    def __init__(self, trace: bool = False) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self.requests: list[tuple[str, str]] | None = [] if trace else None

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def request(self, op: str, path: str) -> None:
        """Count one request ``op`` (``list``, ``head``, ``get``, ``get_range``) of ``path``."""
        with self._lock:
            self._counts[op] += 1
            if self.requests is not None:
                self.requests.append((op, path))

    def snapshot(self) -> dict[str, int]:
        """The counters now (a copy)."""
        with self._lock:
            return dict(self._counts)

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]
