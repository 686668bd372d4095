"""This member's replica status in ZooKeeper: the ephemeral ``<root>/groups/<group>/status/<node>``.

A thread of its own looks every ``interval`` seconds at the replicas this node
holds (:class:`~epochstate.daemon.ingest.group_replicas.GroupReplicas`) and rewrites
the znode when anything but the time changed, or while a replica lags (its lag
in seconds grows). A ZooKeeper that does not answer only delays the next write;
in a new session the znode is written again. Record:
:mod:`epochstate.core.zookeeper.group_status`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from epochstate.core.zookeeper.group_records import JobAssignment
from epochstate.core.zookeeper.group_status import MemberStatus, ReplicaStatus
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.session import join_while_connected, session_id, wait
from epochstate.daemon.ingest.loop import IngestLoop
from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint

log = logging.getLogger(__name__)


class Replicas(Protocol):
    """What the status is made from (:class:`~epochstate.daemon.ingest.group_replicas.GroupReplicas`)."""

    ingest: IngestLoop

    def replicas(self) -> tuple[dict[str, JobAssignment], dict[str, str], set[str]]: ...

    def retry_failed(self) -> None: ...


def member_status(replicas: Replicas, now_ms: int) -> MemberStatus:
    """What ``replicas`` holds, as the status znode tells it."""
    jobs, failed, announced = replicas.replicas()
    found: dict[str, ReplicaStatus] = {}
    for job, want in jobs.items():
        follower = replicas.ingest.followed(job)
        reason = failed.get(job) or replicas.ingest.failing(job) or ""
        newest = committed = -1
        lag_seconds = 0.0
        if follower is not None:
            newest = follower.entry.progress.newest
            committed = -1 if follower.entry.committed is None else follower.entry.committed
            if committed > newest:
                lag_seconds = seconds_behind(follower.checkpoint, newest, committed, now_ms)
        if reason:
            state = "failed"
        elif want.state == "paused":
            state = "paused"
        elif job in announced:
            state = "following"
        else:
            state = "catching_up"
        found[job] = ReplicaStatus(
            state,  # type: ignore[arg-type]
            want.restart_generation,
            newest,
            committed,
            max(0, committed - newest),
            lag_seconds,
            reason,
        )
    return MemberStatus(now_ms, found)


def seconds_behind(checkpoint: Checkpoint, newest: int, committed: int, now_ms: int) -> float:
    """A job's lag in seconds, ``newest`` served and ``committed`` seen: seconds since the oldest
    committed epoch not served yet was committed (the newest committed one when retention took
    that commit file, or on any failure to read it)."""
    for epoch in (newest + 1, committed):
        try:
            return max(0.0, (now_ms - checkpoint.commit_time_ms(epoch)) / 1000)
        except Exception:  # a commit file gone meanwhile: the lag in epochs still tells
            continue
    return 0.0


class StatusWriter:
    """Keeps ``groups/<group>/status/<node>`` up to date while started."""

    def __init__(
        self,
        client: KazooClient,
        layout: Layout,
        group: str,
        node: str,
        replicas: Replicas,
        interval: float = 1.0,
        timeout: float = 5.0,
    ) -> None:
        self.client = client
        self.path = layout.group_status(group, node)
        self.parent = layout.group_statuses(group)
        self.replicas = replicas
        self.interval = interval
        self.timeout = timeout
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"group-status-{node}", daemon=True)
        self._last_error = ""
        self._written: tuple[int | None, bytes] | None = None  # (session, status without its time)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stopping.set()
        # A write in flight waits for ZooKeeper up to its own timeout: not worth waiting for
        # while the connection is away (the status goes with the session anyway).
        join_while_connected(self._thread, self.client, timeout)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                self.replicas.retry_failed()
                self.write_once()
            except Exception as error:  # ZooKeeper away, a session expiring: next round
                if repr(error) != self._last_error:
                    log.warning("group status not written (retrying): %r", error)
                self._last_error = repr(error)
            else:
                self._last_error = ""

    def write_once(self) -> None:
        """Write the status if it changed (or a replica lags, or the session is new)."""
        status = member_status(self.replicas, int(time.time() * 1000))
        timeless = MemberStatus(0, status.replicas).encode()
        session = session_id(self.client)
        lagging = any(r.lag_epochs for r in status.replicas.values())
        if self._written == (session, timeless) and not lagging:
            return
        data = status.encode()
        try:
            wait(self.client.set_async(self.path, data), self.timeout)
            stat = wait(self.client.exists_async(self.path), self.timeout)
            if stat is None or stat.ephemeralOwner != session:
                raise NoNodeError()  # another session's leftover (this node's previous process)
        except NoNodeError:
            self._create(data, session)
        self._written = (session, timeless)

    def _create(self, data: bytes, session: int | None) -> None:
        wait(self.client.ensure_path_async(self.parent), self.timeout)
        try:
            wait(self.client.create_async(self.path, data, ephemeral=True), self.timeout)
        except NodeExistsError:
            _, stat = wait(self.client.get_async(self.path), self.timeout)
            if stat.ephemeralOwner != session:
                wait(self.client.delete_async(self.path), self.timeout)  # the previous process's
            raise KazooException("status znode replaced; written next round") from None
