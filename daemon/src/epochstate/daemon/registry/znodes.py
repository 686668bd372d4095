"""Writing one node's part of the registry: idempotent, write-once where required.

Every method can be repeated after any failure (a lost connection, a timeout
whose request ran anyway) and ends in the same ZooKeeper state. Methods raise
``ForceRetryError`` when a retry is expected to succeed; callers wrap them in a
``KazooRetry``. The parts: :mod:`~epochstate.daemon.registry.ephemerals` (the
node and replica znodes), :mod:`~epochstate.daemon.registry.job_znodes` (the job
znode and its query); epochs and their retention here.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from epochstate.core.zookeeper.errors import EpochConflict
from epochstate.core.zookeeper.layout import Layout, parse_epoch_name
from epochstate.core.zookeeper.records import decode, same_record
from epochstate.core.zookeeper.session import session_id
from epochstate.daemon.registry import transactions
from epochstate.daemon.registry.ephemerals import Ephemerals, EphemeralWrite, StaleEphemeral
from epochstate.daemon.registry.incarnation import query_of
from epochstate.daemon.registry.job_znodes import JobZnodes
from epochstate.daemon.registry.transactions import Requests, batches, failure_of

__all__ = ["StaleEphemeral", "ZnodeWriter"]


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
        self._requests = Requests(client, timeout)
        self._ephemerals = Ephemerals(self._requests)
        self._jobs = JobZnodes(self._requests, layout, node, self._ephemerals)
        self._session: int | None = None

    def begin_session(self) -> bool:
        """Forget what was written if the session changed since last time; True if it did."""
        current = session_id(self.client)
        if current == self._session:
            return False
        self._session = current
        self._ephemerals.begin_session(current)
        self._jobs.forget()
        self._requests.forget()
        return True

    def put_ephemeral(self, path: str, data: bytes) -> None:
        """Create this session's ephemeral ``path`` or set its data."""
        self._ephemerals.put(path, data)

    def put_job(self, job: str, data: bytes) -> None:
        """Create or update the job znode and its ``epochs`` and ``replicas`` parents
        (:meth:`JobZnodes.put`).

        Raises:
            IncarnationRetired: ``data``'s query was replaced by a newer one.
        """
        self._jobs.put(job, data)

    def put_epoch(self, job: str, epoch: int, data: bytes, replica: bytes | None) -> None:
        """Register ``epoch`` and set this node's replica of ``job`` (unless ``replica`` is
        None: a replica not announced yet), in one transaction that checks the job znode
        is as :meth:`put_job` left it (same query).

        An epoch znode of another query (left by a replaced query) is replaced in the
        same way; one of the same query is write-once.

        Raises:
            EpochConflict: the epoch exists with a different record of the same query
                (the replica is left unchanged).
            JobZnodeChanged: the job znode changed since :meth:`put_job` (call it again).
        """
        epoch_path = self.layout.epoch(job, epoch)
        replica_path = self.layout.replica(job, self.node)
        transaction = self._jobs.checked(job)
        transaction.create(epoch_path, data)
        write = None if replica is None else self._ephemerals.add_to(transaction, replica_path, replica)
        failed = self._commit_checked(job, transaction, write)
        if failed is None:
            return
        results, failure = failed
        if not isinstance(results[1], NodeExistsError):
            if write is not None:
                self._ephemerals.failed(write, results)
            raise failure
        existing, stat = self._requests.call(self.client.get_async(epoch_path))
        if same_record(existing, data):
            if replica is not None:
                self.put_ephemeral(replica_path, replica)  # write-once: identical is success
            return
        if query_of(decode(existing)) == query_of(decode(data)):
            raise EpochConflict(
                f"epoch {epoch} of job {job!r} is registered with another record: {existing!r}, not {data!r}"
            )
        transaction = self._jobs.checked(job)  # a replaced query's leftover
        transaction.delete(epoch_path, stat.version)
        transaction.create(epoch_path, data)
        write = None if replica is None else self._ephemerals.add_to(transaction, replica_path, replica)
        failed = self._commit_checked(job, transaction, write)
        if failed is None:
            return
        if write is not None:
            self._ephemerals.failed(write, failed[0])
        raise ForceRetryError()

    def delete_epochs_before(self, job: str, oldest_epoch: int, replica: bytes | None) -> int:
        """Delete the epoch znodes of ``job`` older than ``oldest_epoch``; how many.

        This node's replica is set to ``replica`` (unless None) in the first
        transaction; deletions go in transactions of at most
        MAX_OPS_PER_TRANSACTION operations.
        """
        replica_path = self.layout.replica(job, self.node)
        try:
            names = self._requests.call(self.client.get_children_async(self.layout.epochs(job)))
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
        size = transactions.MAX_OPS_PER_TRANSACTION - 1
        for batch in batches(old_paths, size, reserve=replica is not None):
            # Checked against the job znode: retention of a replaced query deletes nothing.
            transaction = self._jobs.checked(job)
            write = (
                None if unwritten is None else self._ephemerals.add_to(transaction, replica_path, unwritten)
            )
            for path in batch:
                transaction.delete(path)
            failed = self._commit_checked(job, transaction, write)
            if failed is not None:
                results, failure = failed
                if write is not None:
                    self._ephemerals.failed(write, results)
                if isinstance(failure, NoNodeError):
                    raise ForceRetryError()  # deleted meanwhile (another node's retention)
                raise failure
            unwritten = None
        return len(old_paths)

    def delete_ephemeral(self, path: str) -> None:
        """Delete ``path`` if this session created it (a replica withdrawn)."""
        self._ephemerals.delete(path)

    def delete_ephemerals(self) -> None:
        """Delete the ephemerals this session created (leaving the registry cleanly)."""
        self._ephemerals.delete_all()

    def ensure_path(self, path: str) -> None:
        self._requests.ensure_path(path)

    def _commit_checked(
        self, job: str, transaction: TransactionRequest, write: EphemeralWrite | None
    ) -> tuple[list[Any], Exception] | None:
        """Commit ``transaction`` (from :meth:`JobZnodes.checked`); None once committed (with
        ``write``, this node's replica, noted as written), else the results and the failure.

        Raises:
            JobZnodeChanged: the transaction failed on its check of the job znode.
        """
        results = self._requests.commit(transaction)
        failure = failure_of(results)
        if failure is None:
            if write is not None:
                self._ephemerals.written(write)
            return None
        self._jobs.check_failed(job, results[0])
        return results, failure
