"""The job znodes this node writes: created with their parents, moved to a new query
(:mod:`~epochstate.daemon.registry.incarnation`), and the version every later write checks."""

from __future__ import annotations

from typing import Any

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from epochstate.core.zookeeper.layout import Layout, parse_epoch_name
from epochstate.daemon.registry import transactions
from epochstate.daemon.registry.ephemerals import Ephemerals
from epochstate.daemon.registry.incarnation import JobZnodeChanged, next_job_record
from epochstate.daemon.registry.transactions import Requests, failure_of


class JobZnodes:
    """The job znodes node ``node`` registered in the current session, and their versions.

    Methods raise ``ForceRetryError`` when a retry is expected to succeed (callers
    wrap them in a ``KazooRetry``). Used by one thread at a time.
    """

    def __init__(self, requests: Requests, layout: Layout, node: str, ephemerals: Ephemerals) -> None:
        self._requests = requests
        self.layout = layout
        self.node = node
        self._ephemerals = ephemerals
        self._written: dict[str, bytes] = {}
        # The job znode's version as this node last wrote or read it: every epoch write
        # and retention checks it (docs/zookeeper.md#incarnations).
        self._versions: dict[str, int] = {}

    def forget(self) -> None:
        """Forget every job written (a new session: check and write them again)."""
        self._written.clear()
        self._versions.clear()

    def put(self, job: str, data: bytes) -> None:
        """Create or update the job znode and its ``epochs`` and ``replicas`` parents.

        When the znode names another query, ``data``'s query replaces it together with
        that query's epoch znodes (:mod:`~epochstate.daemon.registry.incarnation`).

        Raises:
            IncarnationRetired: ``data``'s query was replaced by a newer one.
        """
        if self._written.get(job) == data:
            return
        requests, client = self._requests, self._requests.client
        requests.ensure_path(self.layout.jobs)
        job_path = self.layout.job(job)
        transaction = client.transaction()
        transaction.create(job_path, data)
        transaction.create(self.layout.epochs(job))
        transaction.create(self.layout.replicas(job))
        results = requests.commit(transaction)
        failure = failure_of(results)
        version = 0
        if failure is not None:
            if not isinstance(results[0], NodeExistsError):
                raise failure
            current, stat = requests.call(client.get_async(job_path))
            written, replaced = next_job_record(current, data, job)
            version = stat.version
            if replaced is not None:
                version = self._replace_query(job, version, written)
            elif current != written:
                try:
                    requests.call(client.set_async(job_path, written, version))
                except BadVersionError:
                    raise ForceRetryError() from None
                version += 1
            requests.ensure_path(self.layout.epochs(job))
            requests.ensure_path(self.layout.replicas(job))
        self._written[job] = data
        self._versions[job] = version

    def checked(self, job: str) -> TransactionRequest:
        """A transaction that starts by checking the job znode's version (as last written).

        Raises:
            JobZnodeChanged: ``job`` is not registered by this node in this session.
        """
        version = self._versions.get(job)
        if version is None:
            raise JobZnodeChanged(f"job {job!r} is not registered by this node in this session")
        transaction = self._requests.client.transaction()
        transaction.check(self.layout.job(job), version)
        return transaction

    def check_failed(self, job: str, result: Any) -> None:
        """Raise JobZnodeChanged if ``result``, of the check :meth:`checked` added, failed."""
        if isinstance(result, (BadVersionError, NoNodeError)):
            self._written.pop(job, None)  # changed or gone: register it again
            self._versions.pop(job, None)
            raise JobZnodeChanged(f"the znode of job {job!r} changed since this node registered it")

    def _replace_query(self, job: str, version: int, data: bytes) -> int:
        """Set the job znode (at ``version``) to ``data``, a new query, deleting every epoch
        znode (the old query's) and this node's replica in the same transaction; the
        oldest epochs go first in transactions of their own when there are too many.
        Returns the job znode's new version."""
        requests = self._requests
        job_path = self.layout.job(job)
        try:
            names = requests.call(requests.client.get_children_async(self.layout.epochs(job)))
        except NoNodeError:
            names = []
        epochs = sorted(epoch for name in names if (epoch := parse_epoch_name(name)) is not None)
        paths = [self.layout.epoch(job, epoch) for epoch in epochs]
        replica_path = self.layout.replica(job, self.node)
        most = transactions.MAX_OPS_PER_TRANSACTION
        while True:
            last = len(paths) <= most - 2
            batch, paths = (paths, []) if last else (paths[: most - 1], paths[most - 1 :])
            transaction = requests.client.transaction()
            if last:
                transaction.set_data(job_path, data, version)
                if self._ephemerals.owns(replica_path):
                    transaction.delete(replica_path)
            else:
                transaction.check(job_path, version)
            for path in batch:
                transaction.delete(path)
            failure = failure_of(requests.commit(transaction))
            if failure is not None:
                # Changed meanwhile (another node registered, or deleted epochs): start over.
                self._ephemerals.forget(replica_path)
                raise ForceRetryError()
            if last:
                self._ephemerals.forget(replica_path)
                return version + 1
