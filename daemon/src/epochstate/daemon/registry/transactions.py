"""ZooKeeper requests as the registry's writers make them: bounded waits and multi-op results.

Every request waits at most ``timeout`` seconds for its answer
(:func:`~epochstate.core.zookeeper.session.wait`); a transaction's results are
read with :func:`failure_of`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import RolledBackError, RuntimeInconsistency

from epochstate.core.zookeeper.session import wait

# ZooKeeper handles larger multi-ops, but a bounded transaction keeps each request
# well under jute.maxbuffer and each commit short.
MAX_OPS_PER_TRANSACTION = 100


class Requests:
    """Requests of ``client`` that wait at most ``timeout`` seconds each; one thread at a time.

    Raises (every method): the request's own kazoo exception, or KazooTimeoutError.
    """

    def __init__(self, client: KazooClient, timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self._paths: set[str] = set()  # made by ensure_path in this session

    def call(self, result: Any) -> Any:
        """The value of kazoo's asynchronous ``result``."""
        return wait(result, self.timeout)

    def commit(self, transaction: TransactionRequest) -> list[Any]:
        """Commit ``transaction``; one result per operation (see :func:`failure_of`)."""
        results: list[Any] = self.call(transaction.commit_async())
        return results

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents unless this session made them already."""
        if path not in self._paths:
            self.call(self.client.ensure_path_async(path))
            self._paths.add(path)

    def forget(self) -> None:
        """Forget the paths made (a new session: they may have gone meanwhile)."""
        self._paths.clear()


def failure_of(results: Sequence[Any]) -> Exception | None:
    """The exception that made a transaction fail, or None if it succeeded.

    ZooKeeper stops a multi-op at its first failing operation: that one carries its
    error, the others a RolledBackError or RuntimeInconsistency.
    """
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency)):
            return result
    return None


def batches(items: list[str], size: int, reserve: bool) -> Iterator[list[str]]:
    """``items`` in lists of ``size``; with ``reserve``, the first leaves one place free."""
    start = 0
    end = size - 1 if reserve else size
    while start < len(items):
        yield items[start:end]
        start, end = end, end + size
