"""One daemon in a group: its membership, its contention for the leadership, and what it is assigned.

The daemon makes one GroupMember on its ZooKeeper client, starts it, and from
then on learns what to follow from :meth:`GroupMember.assigned` and the
``on_change`` callback. It calls :meth:`GroupMember.ready` once a newly
assigned replica has caught up (see docs/zookeeper.md, "Groups": only then
does the daemon announce the replica in ``<root>/jobs/<job>/replicas/<node>``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from epochstate.core.zookeeper.errors import InvalidRecord, JobNotAssigned
from epochstate.core.zookeeper.group_records import Assignment, MemberRecord, ShardAssignment
from epochstate.core.zookeeper.layout import Layout, check_name
from epochstate.daemon.group.definitions import now_ms
from epochstate.daemon.group.leader import GroupLeader
from epochstate.daemon.group.membership import Membership

log = logging.getLogger(__name__)

Shards = dict[str, list[ShardAssignment]]  # job -> the shards a node follows


class GroupMember:
    """Node ``node`` of group ``group``: a member while the session lives, a contender
    for the leadership, and a watcher of the assignment.

    ``on_change(assignment, shards)`` is called with the new assignment and this
    node's part of it whenever its part changes (jobs or shards added or taken
    away, a job's state, checkpoint or restart generation changed); also once
    when the first assignment is seen. It runs on kazoo's event thread, one call
    at a time, and must not block. ``on_ready(job)`` is called by :meth:`ready`.
    """

    def __init__(
        self,
        client: KazooClient,
        layout: Layout,
        group: str,
        node: str,
        *,
        address: str,
        version: str,
        on_change: Callable[[Assignment, Shards], None] | None = None,
        on_ready: Callable[[str], None] | None = None,
        debounce: float = 0.2,
        timeout: float = 5.0,
    ) -> None:
        self.client = client
        self.layout = layout
        self.group = check_name("group", group)
        self.node = check_name("node", node)
        self._on_change = on_change
        self._on_ready = on_ready
        self._lock = threading.Lock()
        self._assignment: Assignment | None = None
        self._mine: Shards = {}
        self._ready: dict[str, int] = {}  # job -> restart generation it caught up in
        self._stopped = False
        record = MemberRecord(address, version, now_ms())
        self.membership = Membership(client, layout, group, node, record, timeout)
        self.leader = GroupLeader(client, layout, group, node, debounce=debounce, timeout=timeout)

    def start(self, timeout: float | None = None) -> bool:
        """Join, contend for the leadership, watch the assignment; True once joined (within ``timeout``)."""
        self.client.ensure_path(self.layout.group(self.group))
        DataWatch(self.client, self.layout.group_assignment(self.group), self._on_assignment)
        self.leader.start()
        return self.membership.join(timeout)

    def stop(self, timeout: float | None = None) -> None:
        """Stop leading (if it did) and leave the group; the client stays open."""
        with self._lock:
            self._stopped = True
        self.leader.stop(timeout)
        self.membership.leave(timeout)

    @property
    def assignment(self) -> Assignment | None:
        """The group's assignment as last seen (None before the first)."""
        with self._lock:
            return self._assignment

    def assigned(self, node: str | None = None) -> Shards:
        """The shards ``node`` (this node by default) follows, by job, in the assignment last seen."""
        with self._lock:
            if self._assignment is None:
                return {}
            return self._assignment.assigned(self.node if node is None else node)

    def ready(self, job: str) -> None:
        """Note that this node's replica of ``job`` caught up, in the job's current restart
        generation, and call ``on_ready(job)``. A restart or a re-assignment of the job
        makes it not ready again.

        Raises:
            JobNotAssigned: ``job`` is not assigned to this node.
        """
        with self._lock:
            assignment = self._assignment.jobs.get(job) if self._assignment else None
            if job not in self._mine or assignment is None:
                raise JobNotAssigned(
                    f"job {job!r} is not assigned to node {self.node!r} in group {self.group!r}"
                )
            self._ready[job] = assignment.restart_generation
        if self._on_ready is not None:
            self._on_ready(job)

    def is_ready(self, job: str) -> bool:
        """Whether :meth:`ready` was called for ``job`` since it was (re)assigned or restarted."""
        with self._lock:
            return job in self._ready

    def _on_assignment(self, data: bytes | None, stat: ZnodeStat | None) -> bool:
        if stat is None:
            return not self._stopped  # not written yet
        try:
            assignment = Assignment.decode(data)
        except InvalidRecord as error:
            log.error("group %r: ignoring an assignment that does not decode: %s", self.group, error)
            return not self._stopped
        with self._lock:
            if self._stopped:
                return False
            first = self._assignment is None
            old = {job: self._view(self._assignment, job) for job in self._mine}
            self._assignment = assignment
            self._mine = assignment.assigned(self.node)
            new = {job: self._view(assignment, job) for job in self._mine}
            for job in list(self._ready):
                before, after = old.get(job), new.get(job)
                if before is None or after is None or _restarted(before, after):
                    del self._ready[job]
            mine = dict(self._mine)
        if (first or old != new) and self._on_change is not None:
            try:
                self._on_change(assignment, mine)
            except Exception:
                log.exception("group %r: the assignment callback failed", self.group)
        return True

    def _view(self, assignment: Assignment | None, job: str) -> tuple[object, ...] | None:
        """What of ``job`` matters to this node: the job's settings and its shards of it."""
        if assignment is None or job not in assignment.jobs:
            return None
        found = assignment.jobs[job]
        shards = tuple((s.first, s.last) for s in found.shards if self.node in s.replicas)
        return (found.checkpoint, found.state, found.restart_generation, shards) if shards else None


def _restarted(old: tuple[object, ...], new: tuple[object, ...]) -> bool:
    """Whether the job was restarted, re-pointed or given other shards between two views."""
    return old[0] != new[0] or old[2] != new[2] or old[3] != new[3]
