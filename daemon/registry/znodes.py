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
from epochstate.core.zookeeper.records import decode, same_record
from epochstate.core.zookeeper.session import session_id, wait
from epochstate.daemon.registry.incarnation import JobZnodeChanged, next_job_record, query_of

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
        # The job znode's version as this node last wrote or read it: every epoch write
        # and retention checks it (docs/zookeeper.md#incarnations).
        self._job_versions: dict[str, int] = {}
        self._paths: set[str] = set()

    def begin_session(self) -> bool:
        """Forget what was written if the session changed since last time; True if it did."""
        current = session_id(self.client)
        if current == self._session:
            return False
        self._session = current
        self._ephemerals.clear()
        self._jobs.clear()
        self._job_versions.clear()
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
        """Create or update the job znode and its ``epochs`` and ``replicas`` parents.

        When the znode names another query, ``data``'s query replaces it together with
        that query's epoch znodes (:mod:`incarnation`).

        Raises:
            IncarnationRetired: ``data``'s query was replaced by a newer one.
        """
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
        version = 0
        if failure is not None:
            if not isinstance(results[0], NodeExistsError):
                raise failure
            current, stat = self._call(self.client.get_async(job_path))
            written, replaced = next_job_record(current, data, job)
            version = stat.version
            if replaced is not None:
                version = self._replace_query(job, version, written)
            elif current != written:
                try:
                    self._call(self.client.set_async(job_path, written, version))
                except BadVersionError:
                    raise ForceRetryError() from None
                version += 1
            self.ensure_path(self.layout.epochs(job))
            self.ensure_path(self.layout.replicas(job))
        self._jobs[job] = data
        self._job_versions[job] = version

    def _replace_query(self, job: str, version: int, data: bytes) -> int:
        """Set the job znode (at ``version``) to ``data``, a new query, deleting every epoch
        znode (the old query's) and this node's replica in the same transaction; the
        oldest epochs go first in transactions of their own when there are too many.
        Returns the job znode's new version."""
        job_path = self.layout.job(job)
        try:
            names = self._call(self.client.get_children_async(self.layout.epochs(job)))
        except NoNodeError:
            names = []
        epochs = sorted(epoch for name in names if (epoch := parse_epoch_name(name)) is not None)
        paths = [self.layout.epoch(job, epoch) for epoch in epochs]
        replica_path = self.layout.replica(job, self.node)
        while True:
            last = len(paths) <= MAX_OPS_PER_TRANSACTION - 2
            batch, paths = (
                (paths, [])
                if last
                else (paths[: MAX_OPS_PER_TRANSACTION - 1], paths[MAX_OPS_PER_TRANSACTION - 1 :])
            )
            transaction = self.client.transaction()
            if last:
                transaction.set_data(job_path, data, version)
                if replica_path in self._ephemerals:
                    transaction.delete(replica_path)
            else:
                transaction.check(job_path, version)
            for path in batch:
                transaction.delete(path)
            failure = _failure(self._commit(transaction))
            if failure is not None:
                # Changed meanwhile (another node registered, or deleted epochs): start over.
                self._ephemerals.pop(replica_path, None)
                raise ForceRetryError()
            if last:
                self._ephemerals.pop(replica_path, None)
                return version + 1

    def put_epoch(self, job: str, epoch: int, data: bytes, replica: bytes) -> None:
        """Register ``epoch`` and set this node's replica of ``job``, in one transaction
        that checks the job znode is as :meth:`put_job` left it (same query).

        An epoch znode of another query (left by a replaced query) is replaced in the
        same way; one of the same query is write-once.

        Raises:
            EpochConflict: the epoch exists with a different record of the same query
                (the replica is left unchanged).
            JobZnodeChanged: the job znode changed since :meth:`put_job` (call it again).
        """
        epoch_path = self.layout.epoch(job, epoch)
        replica_path = self.layout.replica(job, self.node)
        transaction = self._job_checked(job)
        transaction.create(epoch_path, data)
        self._replica_op(transaction, replica_path, replica)
        results = self._commit(transaction)
        failure = _failure(results)
        if failure is None:
            self._ephemerals[replica_path] = replica
            return
        self._job_check_failed(job, results[0])
        if isinstance(results[1], NodeExistsError):
            existing, stat = self._call(self.client.get_async(epoch_path))
            if same_record(existing, data):
                self.put_ephemeral(replica_path, replica)  # write-once: identical is success
                return
            if query_of(decode(existing)) == query_of(decode(data)):
                raise EpochConflict(
                    f"epoch {epoch} of job {job!r} is registered with another record: "
                    f"{existing!r}, not {data!r}"
                )
            transaction = self._job_checked(job)  # a replaced query's leftover
            transaction.delete(epoch_path, stat.version)
            transaction.create(epoch_path, data)
            self._replica_op(transaction, replica_path, replica)
            results = self._commit(transaction)
            failure = _failure(results)
            if failure is None:
                self._ephemerals[replica_path] = replica
                return
            self._job_check_failed(job, results[0])
            self._replica_failed(replica_path, results[3])
            raise ForceRetryError()
        self._replica_failed(replica_path, results[2])
        raise failure

    def _job_checked(self, job: str) -> TransactionRequest:
        """A transaction that starts by checking the job znode's version (as last written)."""
        version = self._job_versions.get(job)
        if version is None:
            raise JobZnodeChanged(f"job {job!r} is not registered by this node in this session")
        transaction = self.client.transaction()
        transaction.check(self.layout.job(job), version)
        return transaction

    def _job_check_failed(self, job: str, result: Any) -> None:
        """Raise JobZnodeChanged if the job znode check of a transaction failed."""
        if isinstance(result, (BadVersionError, NoNodeError)):
            self._jobs.pop(job, None)  # changed or gone: register it again
            self._job_versions.pop(job, None)
            raise JobZnodeChanged(f"the znode of job {job!r} changed since this node registered it")

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
        for batch in _batches(old_paths, MAX_OPS_PER_TRANSACTION - 1, reserve=replica is not None):
            # Checked against the job znode: retention of a replaced query deletes nothing.
            transaction = self._job_checked(job)
            if unwritten is not None:
                self._replica_op(transaction, replica_path, unwritten)
            for path in batch:
                transaction.delete(path)
            results = self._commit(transaction)
            failure = _failure(results)
            if failure is not None:
                self._job_check_failed(job, results[0])
                if unwritten is not None:
                    self._replica_failed(replica_path, results[1])
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
