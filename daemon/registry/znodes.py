"""Writing one node's part of the registry: idempotent, write-once where required.

Every method can be repeated after any failure (a lost connection, a timeout
whose request ran anyway) and ends in the same ZooKeeper state. Methods raise
``ForceRetryError`` when a retry is expected to succeed; callers wrap them in a
``KazooRetry``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import suppress
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.retry import ForceRetryError

from epochstate.core.zookeeper.errors import EpochConflict, RegistryError
from epochstate.core.zookeeper.layout import Layout, parse_epoch_name
from epochstate.core.zookeeper.records import same_record
from epochstate.core.zookeeper.session import session_id, wait

# ZooKeeper handles larger multi-ops, but a bounded transaction keeps each request
# well under jute.maxbuffer and each commit short.
MAX_OPS_PER_TRANSACTION = 100


class StaleEphemeral(RegistryError):
    """One of this node's ephemeral znodes is held by another session.

    Usually the session of this node's previous process (or a session the client
    gave up on) that ZooKeeper has not expired yet; it goes away within that
    session's timeout. Otherwise two daemons run with the same node name.
    """


class ZnodeWriter:
    """Writes the znodes of node ``node`` under ``layout``, remembering what it wrote.

    What it remembers (which ephemerals this session owns, which jobs are
    written) is dropped by :meth:`begin_session` when the session changes, so
    after an expired session everything is checked and re-created. Used by one
    thread at a time.
    """

    def __init__(self, client: KazooClient, layout: Layout, node: str, timeout: float) -> None:
        self.client = client
        self.layout = layout
        self.node = node
        self.timeout = timeout
        self._session: int | None = None
        self._ephemerals: dict[str, bytes | None] = {}  # owned in this session -> data
        self._jobs: dict[str, bytes] = {}
        self._paths: set[str] = set()

    def begin_session(self) -> bool:
        """Forget what was written if the session changed since last time; True if it did."""
        current = session_id(self.client)
        if current == self._session:
            return False
        self._session = current
        self._ephemerals.clear()
        self._jobs.clear()
        self._paths.clear()
        return True

    def put_ephemeral(self, path: str, data: bytes) -> None:
        """Create this session's ephemeral ``path`` or set its data."""
        if path in self._ephemerals:
            if self._ephemerals[path] == data:
                return
            try:
                self._call(self.client.set_async(path, data))
                self._ephemerals[path] = data
                return
            except NoNodeError:
                del self._ephemerals[path]
        try:
            self._call(self.client.create_async(path, data, ephemeral=True))
        except NodeExistsError:
            self._claim(path)
            try:
                self._call(self.client.set_async(path, data))
            except NoNodeError:
                raise ForceRetryError() from None
        self._ephemerals[path] = data

    def put_job(self, job: str, data: bytes) -> None:
        """Create or update the job znode and its ``epochs`` and ``replicas`` parents."""
        if self._jobs.get(job) == data:
            return
        self.ensure_path(self.layout.jobs)
        job_path = self.layout.job(job)
        transaction = self.client.transaction()
        transaction.create(job_path, data)
        transaction.create(self.layout.epochs(job))
        transaction.create(self.layout.replicas(job))
        results = self._commit(transaction)
        failure = _failure(results)
        if failure is not None:
            if not isinstance(results[0], NodeExistsError):
                raise failure
            current, stat = self._call(self.client.get_async(job_path))
            if current != data:
                try:
                    self._call(self.client.set_async(job_path, data, stat.version))
                except BadVersionError:
                    raise ForceRetryError() from None
            self.ensure_path(self.layout.epochs(job))
            self.ensure_path(self.layout.replicas(job))
        self._jobs[job] = data

    def put_epoch(self, job: str, epoch: int, data: bytes, replica: bytes) -> None:
        """Register ``epoch`` and set this node's replica of ``job``, in one transaction.

        Raises:
            EpochConflict: the epoch exists with a different record (the replica is
                left unchanged).
        """
        epoch_path = self.layout.epoch(job, epoch)
        replica_path = self.layout.replica(job, self.node)
        transaction = self.client.transaction()
        transaction.create(epoch_path, data)
        self._replica_op(transaction, replica_path, replica)
        results = self._commit(transaction)
        failure = _failure(results)
        if failure is None:
            self._ephemerals[replica_path] = replica
            return
        if isinstance(results[0], NodeExistsError):
            existing, _ = self._call(self.client.get_async(epoch_path))
            if not same_record(existing, data):
                raise EpochConflict(
                    f"epoch {epoch} of job {job!r} is registered with another record: "
                    f"{existing!r}, not {data!r}"
                )
            self.put_ephemeral(replica_path, replica)  # write-once: identical is success
            return
        if isinstance(results[0], NoNodeError):
            self._jobs.pop(job, None)  # the job znode went away: re-create it next time
        self._replica_failed(replica_path, results[1])
        raise failure

    def delete_epochs_before(self, job: str, oldest_epoch: int, replica: bytes | None) -> int:
        """Delete the epoch znodes of ``job`` older than ``oldest_epoch``; how many.

        This node's replica is set to ``replica`` (unless None) in the first
        transaction; deletions go in transactions of at most
        MAX_OPS_PER_TRANSACTION operations.
        """
        replica_path = self.layout.replica(job, self.node)
        try:
            names = self._call(self.client.get_children_async(self.layout.epochs(job)))
        except NoNodeError:
            names = []
        old = sorted(
            epoch for name in names if (epoch := parse_epoch_name(name)) is not None and epoch < oldest_epoch
        )
        old_paths = [self.layout.epoch(job, epoch) for epoch in old]
        if not old_paths:
            if replica is not None:
                self.put_ephemeral(replica_path, replica)
            return 0
        unwritten = replica
        for batch in _batches(old_paths, MAX_OPS_PER_TRANSACTION, reserve=replica is not None):
            transaction = self.client.transaction()
            if unwritten is not None:
                self._replica_op(transaction, replica_path, unwritten)
            for path in batch:
                transaction.delete(path)
            results = self._commit(transaction)
            failure = _failure(results)
            if failure is not None:
                if unwritten is not None:
                    self._replica_failed(replica_path, results[0])
                if isinstance(failure, NoNodeError):
                    raise ForceRetryError()  # deleted meanwhile (another node's retention)
                raise failure
            if unwritten is not None:
                self._ephemerals[replica_path] = unwritten
                unwritten = None
        return len(old_paths)

    def delete_ephemerals(self) -> None:
        """Delete the ephemerals this session created (leaving the registry cleanly)."""
        requests = [self.client.delete_async(path) for path in self._ephemerals]
        for request in requests:
            with suppress(NoNodeError):
                self._call(request)
        self._ephemerals.clear()

    def ensure_path(self, path: str) -> None:
        if path not in self._paths:
            self._call(self.client.ensure_path_async(path))
            self._paths.add(path)

    def _replica_op(self, transaction: TransactionRequest, path: str, data: bytes) -> None:
        if path in self._ephemerals:
            transaction.set_data(path, data)
        else:
            transaction.create(path, data, ephemeral=True)

    def _replica_failed(self, path: str, result: Any) -> None:
        """Raise ForceRetryError or StaleEphemeral if the replica operation failed."""
        if isinstance(result, NoNodeError):
            self._ephemerals.pop(path, None)
            raise ForceRetryError()
        if isinstance(result, NodeExistsError):
            self._claim(path)
            raise ForceRetryError()

    def _claim(self, path: str) -> None:
        """Remember an existing ``path`` as ours if this session owns it, else raise."""
        try:
            _, stat = self._call(self.client.get_async(path))
        except NoNodeError:
            raise ForceRetryError() from None
        if stat.ephemeralOwner != self._session:
            raise StaleEphemeral(
                f"{path} is held by session 0x{stat.ephemeralOwner:x}, "
                f"not this node's session 0x{self._session or 0:x}"
            )
        self._ephemerals[path] = None

    def _commit(self, transaction: TransactionRequest) -> list[Any]:
        results: list[Any] = self._call(transaction.commit_async())
        return results

    def _call(self, result: Any) -> Any:
        return wait(result, self.timeout)


def _failure(results: Sequence[Any]) -> Exception | None:
    """The exception that made a transaction fail, or None if it succeeded."""
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency)):
            return result
    return None


def _batches(items: list[str], size: int, reserve: bool) -> Iterator[list[str]]:
    """``items`` in lists of ``size``; with ``reserve``, the first leaves one place free."""
    start = 0
    end = size - 1 if reserve else size
    while start < len(items):
        yield items[start:end]
        start, end = end, end + size
