"""One daemon's part of the ZooKeeper registry: its node, its jobs, their epochs.

The registry keeps what this node must have in ZooKeeper in memory (the desired
state) and a background thread (:class:`SyncThread`) writes it. Callers never
block on ZooKeeper for long:

- A write call records the change, then, only while connected, in sync and
  without a backlog, waits up to ``wait_timeout`` seconds for it to reach
  ZooKeeper. It returns True if it did and False if it is still pending; pending
  work is kept until it is written or the registry is closed.
- Epoch records wait in a FIFO of *pending epochs* (:class:`PendingEpochs`). On
  (re)connection they are written oldest first, each in one transaction with
  this node's replica znode set to the state published with it, so a replica
  never claims an epoch whose znode is missing. Then retention runs and the
  replica znodes are set to the latest state. Queued epochs older than a
  published retention are dropped.
- After an expired session (LOST) the ephemeral node and replica znodes are
  re-created from memory on the new session.

Epoch znodes are written once. Publishing an identical record again is a
success; a different record raises :class:`EpochConflict` if found while the
caller waits, and is logged and dropped if found later.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.retry import KazooRetry

from epochstate.core.zookeeper.errors import EpochConflict, JobNotRegistered, RegistryError
from epochstate.core.zookeeper.layout import DEFAULT_ROOT, check_epoch, check_name
from epochstate.core.zookeeper.records import (
    JsonObject,
    ReplicaState,
    encode,
    job_record,
    node_record,
)
from epochstate.core.zookeeper.session import CONNECTION_ERRORS
from epochstate.daemon.registry.gate import ReplicaGate
from epochstate.daemon.registry.incarnation import IncarnationRetired, JobZnodeChanged
from epochstate.daemon.registry.pending import PendingEpoch, PendingEpochs
from epochstate.daemon.registry.sync import SyncThread
from epochstate.daemon.registry.view import RegistryView
from epochstate.daemon.registry.znodes import ZnodeWriter

log = logging.getLogger(__name__)

MAX_BACKLOG_TO_WAIT = 16


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Registry(RegistryView):
    """This node's registrations under ``root``, kept in ZooKeeper across reconnects.

    ``client`` may be started before or after; :meth:`close` stops it. The reads
    (:class:`RegistryView`) go to ZooKeeper directly and raise RegistryUnavailable
    when it cannot answer within ``op_timeout``.
    """

    def __init__(
        self,
        client: KazooClient,
        root: str = DEFAULT_ROOT,
        node: str | None = None,
        *,
        wait_timeout: float = 2.0,
        op_timeout: float = 5.0,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        super().__init__(client, root, timeout=op_timeout)
        self.node = check_name("node", node or socket.gethostname())
        self.wait_timeout = wait_timeout
        self._clock = clock
        self._started_at_ms = clock()
        self._writer = ZnodeWriter(client, self.layout, self.node, op_timeout)
        self._sync_thread = SyncThread(client, self._sync, name=f"registry-sync-{self.node}")
        # Retries inside one sync; the thread itself retries a failed sync.
        self._retry = KazooRetry(
            max_tries=3,
            delay=0.05,
            max_delay=0.5,
            ignore_expire=False,
            interrupt=self._sync_thread.closing.is_set,
        )
        self._state = threading.Condition()
        self._requested = 0  # generation of the newest change to the desired state
        self._synced = 0  # newest generation known to be in ZooKeeper
        self._failures = 0  # failed syncs: a waiting caller gives up at the next one
        self._closed = False
        self._node_record: bytes | None = None
        self._jobs: dict[str, bytes] = {}
        self._queries: dict[str, str] = {}  # job -> the query registered for it
        self._retired: set[str] = set()  # jobs whose registered query was replaced in ZooKeeper
        self._replicas: dict[str, ReplicaState] = {}
        self._retention: dict[str, int] = {}
        self._pending = PendingEpochs()
        self.gate = ReplicaGate()
        self._sync_thread.start()

    # -- writes ------------------------------------------------------------------

    def register_node(self, address: str, version: str) -> bool:
        """Announce this node (ephemeral ``nodes/<node>``: gRPC address and version)."""
        data = node_record(address, version, self._started_at_ms)
        with self._state:
            self._node_record = data
            generation = self._change()
        return self._await(generation)

    def register_job(self, job: str, checkpoint: str, query_id: str, operators: list[JsonObject]) -> bool:
        """Create or update the job znode (and its ``epochs`` and ``replicas`` parents).

        Another ``query_id`` than registered before is a new incarnation of the job (its
        checkpoint was recreated): the old query's epochs still queued here are dropped,
        and in ZooKeeper the new query replaces the old one's epoch znodes in one
        transaction (:mod:`epochstate.daemon.registry.incarnation`). A query that
        ZooKeeper says was replaced already is logged and not written.
        """
        self.layout.job(job)
        data = job_record(checkpoint, query_id, operators)
        with self._state:
            if self._queries.get(job, query_id) != query_id:
                dropped = self._pending.drop_job(job)
                self._replicas.pop(job, None)
                self._retention.pop(job, None)
                self._retired.discard(job)
                log.info(
                    "job %r: query %s replaces %s (%d queued epoch(s) dropped)",
                    job,
                    query_id,
                    self._queries[job],
                    dropped,
                )
            self._queries[job] = query_id
            self._jobs[job] = data
            generation = self._change()
        return self._await(generation)

    def publish_epoch(
        self, job: str, epoch: int, record: JsonObject, newest_epoch: int, oldest_epoch: int
    ) -> bool:
        """Register committed ``epoch`` of ``job`` and that this node holds
        ``oldest_epoch..newest_epoch``, atomically; True once both are in ZooKeeper.
        The epoch record (and the replica) name the query registered for the job
        (``query_id``).

        Raises:
            JobNotRegistered: :meth:`register_job` was not called for ``job``.
            EpochConflict: the epoch is registered or queued with a different record.
            InvalidRecord, InvalidName: ``record`` is not JSON; a bad epoch number.
        """
        self.layout.epoch(job, epoch)
        check_epoch(newest_epoch)
        check_epoch(oldest_epoch)
        with self._state:
            self._require_job(job)
            # Stamped with the job's registered query: an epoch record names its incarnation.
            query_id = self._queries[job]
            data = encode({**record, "query_id": query_id})
            replica = ReplicaState(newest_epoch, oldest_epoch, self._clock(), query_id)
            entry = self._pending.add(PendingEpoch(job, epoch, data, replica))
            self._replicas[job] = replica
            generation = self._change()
            # Behind a backlog (after an outage) waiting would only slow the caller down.
            backlog = len(self._pending) > MAX_BACKLOG_TO_WAIT
        if backlog or not self._await(generation):
            return False
        if entry.conflict is not None:
            raise EpochConflict(*entry.conflict.args)
        return True

    def publish_replica(self, job: str, newest_epoch: int, oldest_epoch: int) -> bool:
        """Announce that this node holds ``oldest_epoch..newest_epoch`` of ``job``'s registered
        query (a restarted node, before its next epoch); True once in ZooKeeper.

        Raises:
            JobNotRegistered: :meth:`register_job` was not called for ``job``.
        """
        check_epoch(newest_epoch)
        check_epoch(oldest_epoch)
        with self._state:
            self._require_job(job)
            self._replicas[job] = ReplicaState(newest_epoch, oldest_epoch, self._clock(), self._queries[job])
            generation = self._change()
        return self._await(generation)

    def publish_retention(self, job: str, oldest_epoch: int) -> bool:
        """Delete the epoch znodes of ``job`` older than ``oldest_epoch`` and set this
        node's replica to start there; True once done in ZooKeeper.

        Raises:
            JobNotRegistered: :meth:`register_job` was not called for ``job``.
        """
        check_epoch(oldest_epoch)
        with self._state:
            self._require_job(job)
            self._retention[job] = oldest_epoch
            self._pending.drop_before(job, oldest_epoch)
            replica = self._replicas.get(job)
            if replica is not None:
                self._replicas[job] = ReplicaState(
                    replica.newest_epoch, oldest_epoch, self._clock(), replica.query_id
                )
            generation = self._change()
        return self._await(generation)

    def hold_replica(self, job: str) -> None:
        """Keep ``job``'s replica znode out of ZooKeeper (deleting it if written) until
        :meth:`release_replica`; its epochs are still registered (group mode: a replica
        catching up)."""
        self.gate.hold(job)
        with self._state:
            self._change()

    def release_replica(self, job: str) -> bool:
        """Announce ``job``'s replica znode (it caught up); True once in ZooKeeper."""
        self.gate.release(job)
        with self._state:
            generation = self._change()
        return self._await(generation)

    def forget_job(self, job: str) -> bool:
        """This node no longer follows ``job``: drop what is queued of it and delete its
        replica znode (the job and epoch znodes stay: other replicas may serve it)."""
        self.gate.forget(job)
        with self._state:
            self._pending.drop_job(job)
            self._jobs.pop(job, None)
            self._queries.pop(job, None)
            self._replicas.pop(job, None)
            self._retention.pop(job, None)
            self._retired.discard(job)
            generation = self._change()
        return self._await(generation)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything registered so far is in ZooKeeper; False on timeout."""
        with self._state:
            generation = self._requested
            self._state.wait_for(lambda: self._synced >= generation or self._closed, timeout)
            return self._synced >= generation

    @property
    def pending_epochs(self) -> int:
        """Epoch records not yet written to ZooKeeper."""
        with self._state:
            return len(self._pending)

    @property
    def sessions_lost(self) -> int:
        """How many times the ZooKeeper session expired since this registry started."""
        return self._sync_thread.sessions_lost

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``, default ``wait_timeout``), delete this node's
        ephemeral znodes and stop the client. Pending records that did not make it
        are logged and lost."""
        if self._closed:
            return
        with self._state:
            generation = self._requested
        self._await(generation, self.wait_timeout if timeout is None else timeout)
        self._sync_thread.stop(self._writer.timeout + 1.0)
        with self._state:
            self._closed = True
            left = len(self._pending)
            self._state.notify_all()
        if left:
            log.warning("closing with %d epoch record(s) not registered in ZooKeeper", left)
        if self.client.connected:
            try:
                self._writer.delete_ephemerals()
            except (*CONNECTION_ERRORS, NoAuthError) as error:
                log.info("could not delete ephemeral znodes (the session ends anyway): %r", error)
        self.client.stop()
        self.client.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------

    def _change(self) -> int:
        """Note a change of the desired state (caller holds ``_state``); its generation."""
        if self._closed:
            raise RegistryError(f"the registry of node {self.node!r} is closed")
        self._requested += 1
        self._sync_thread.wake()
        return self._requested

    def _require_job(self, job: str) -> None:
        if job not in self._jobs:
            raise JobNotRegistered(f"job {job!r} is not registered on node {self.node!r}")

    def _await(self, generation: int, timeout: float | None = None) -> bool:
        """Wait for ``generation`` to reach ZooKeeper, but only while that can happen soon."""
        with self._state:
            if self.client.connected and self._sync_thread.healthy:
                failures = self._failures
                self._state.wait_for(
                    lambda: self._synced >= generation or self._failures != failures or self._closed,
                    self.wait_timeout if timeout is None else timeout,
                )
            return self._synced >= generation

    def _sync(self) -> None:
        """Make ZooKeeper match the desired state (on the sync thread only)."""
        try:
            self._sync_once()
        except BaseException:
            with self._state:
                self._failures += 1
                self._state.notify_all()
            raise

    def _sync_once(self) -> None:
        with self._state:
            generation = self._requested
            node = self._node_record
            jobs = dict(self._jobs)
        if self._writer.begin_session() and node is not None:
            log.info("new ZooKeeper session: registering node %r", self.node)
        if node is not None:
            self._call(self._writer.ensure_path, self.layout.nodes)
            self._call(self._writer.put_ephemeral, self.layout.node(self.node), node)
        for job, data in jobs.items():
            self._put_job(job, data)
        for job in self.gate.withdrawn():
            self._call(self._writer.delete_ephemeral, self.layout.replica(job, self.node))
            self.gate.deleted(job)
        self._flush_pending()
        self._apply_retention()
        with self._state:
            replicas = {
                job: state.encode()
                for job, state in self._replicas.items()
                if job not in self._retired and self.gate.announced(job)
            }
        for job, data in replicas.items():
            self._call(self._writer.put_ephemeral, self.layout.replica(job, self.node), data)
        with self._state:
            self._synced = max(self._synced, generation)
            self._state.notify_all()

    def _put_job(self, job: str, data: bytes) -> bool:
        """Write the job znode; False if its query was replaced in ZooKeeper by a newer one
        (then nothing of it is written until :meth:`register_job` names another query)."""
        try:
            self._call(self._writer.put_job, job, data)
        except IncarnationRetired as error:
            with self._state:
                if self._jobs.get(job) == data and job not in self._retired:
                    self._retired.add(job)
                    dropped = self._pending.drop_job(job)
                    log.error("%s; %d queued epoch(s) dropped", error, dropped)
            return False
        with self._state:
            self._retired.discard(job)
        return True

    def _flush_pending(self) -> None:
        while True:
            with self._state:
                entry = self._pending.head()
                data = None if entry is None else self._jobs.get(entry.job)
            if entry is None:
                return
            try:
                if data is None or not self._put_job(entry.job, data):
                    entry.conflict = EpochConflict(
                        f"epoch {entry.epoch} of job {entry.job!r} was not registered: its query "
                        "was replaced in ZooKeeper by a newer one"
                    )
                else:
                    self._call(
                        self._writer.put_epoch,
                        entry.job,
                        entry.epoch,
                        entry.data,
                        entry.replica.encode() if self.gate.announced(entry.job) else None,
                    )
            except EpochConflict as conflict:
                entry.conflict = conflict
                log.error("dropping epoch record: %s", conflict)
            except JobZnodeChanged:
                continue  # registered again on the next round, then written
            with self._state:
                self._pending.remove(entry)

    def _apply_retention(self) -> None:
        with self._state:
            targets = dict(self._retention)
        for job, oldest in targets.items():
            with self._state:
                replica = self._replicas.get(job)
                data = self._jobs.get(job)
            if data is None or not self._put_job(job, data):
                deleted = 0  # a replaced query: its retention must not touch the new one's epochs
            else:
                try:
                    deleted = self._call(
                        self._writer.delete_epochs_before,
                        job,
                        oldest,
                        replica.encode() if replica and self.gate.announced(job) else None,
                    )
                except JobZnodeChanged:
                    continue  # registered again, and retention done, on the next round
            log.debug("retention of job %r: deleted %d epoch znode(s) < %d", job, deleted, oldest)
            with self._state:
                if self._retention.get(job) == oldest:
                    del self._retention[job]

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        return self._retry(function, *args)
