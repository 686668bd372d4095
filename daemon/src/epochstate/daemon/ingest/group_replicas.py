"""The daemon's side of a group: follow exactly the jobs the assignment gives this node.

The member's ``on_change`` runs on kazoo's event thread and only hands the new
assignment to the ingest thread (:meth:`IngestLoop.call_soon`), where every
change to what this node follows is made, between two ingest steps:

- assigned: the replica is held back in the registry (no replica znode), the
  job followed for the Spark partitions of this node's shards (all of them when a
  shard covers every partition); once ingest finds nothing committed beyond what it holds
  (``on_caught_up``), the member is told (:meth:`GroupMember.ready`) and the
  replica znode written;
- unassigned (or re-pointed at another checkpoint): no longer followed, its
  local data dropped, its replica znode deleted;
- its shards here cover other partitions than before (the leader moved a shard):
  dropped as above, then followed again as a new replica, held back until caught
  up; what this node serves of a job is never a mix of two sets of partitions;
- paused / running: ingest of it stops / goes on; what it holds is still served;
- restarted (a new restart generation): held back again, its follower made
  anew (which clears a failed state), its store kept.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient

from epochstate.core.errors import EpochStateError
from epochstate.core.partition_ranges import PartitionRanges, shown
from epochstate.core.zookeeper.errors import JobNotAssigned
from epochstate.core.zookeeper.group_records import Assignment, JobAssignment
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.session import CONNECTION_ERRORS
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.daemon.group.member import GroupMember, Shards
from epochstate.daemon.ingest.group_status import StatusWriter
from epochstate.daemon.ingest.loop import IngestLoop
from epochstate.daemon.ingest.registry_publisher import RegistryPublisher
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.daemon.store.versioned import VersionedStore

log = logging.getLogger(__name__)

# Why asking for new shards may fail: it is asked again at the next caught-up check.
_REPLAN_ERRORS: tuple[type[BaseException], ...] = (EpochStateError, *CONNECTION_ERRORS)

# (job, checkpoint, partitions): the checked follow of the ingest loop
Follow = Callable[[str, str, PartitionRanges | None], JobEntry]


class GroupReplicas:
    """Node ``node``'s replicas of group ``group``'s jobs; :meth:`start` once the daemon serves.

    ``standalone`` names the jobs of the daemon's own config: a group job of the
    same name is not followed here (its replica reports "failed").
    """

    def __init__(
        self,
        client: KazooClient,
        layout: Layout,
        group: str,
        node: str,
        *,
        ingest: IngestLoop,
        follow: Follow,
        store: VersionedStore,
        catalog: Catalog,
        publisher: RegistryPublisher,
        standalone: frozenset[str],
        version: str,
        status_interval: float = 1.0,
    ) -> None:
        self.client = client
        self.layout = layout
        self.group = group
        self.node = node
        self.version = version
        self.ingest = ingest
        self._follow_checked = follow
        self._store = store
        self._catalog = catalog
        self._publisher = publisher
        self._standalone = standalone
        self._lock = threading.Lock()
        self._jobs: dict[str, JobAssignment] = {}  # what this node follows, as last applied
        self._failed: dict[str, str] = {}  # job -> why it cannot be followed
        self._announced: set[str] = set()  # jobs whose replica caught up (znode written)
        self._ours: set[str] = set()  # jobs followed for the group (ingest thread only)
        # job -> the newest partition count checked against its definition (ingest thread only)
        self._checked: dict[str, int] = {}
        self.member: GroupMember | None = None
        self.status = StatusWriter(client, layout, group, node, self, status_interval)

    def start(self, address: str, timeout: float) -> None:
        """Join the group as serving at ``address``; returns after ``timeout`` at most
        (ZooKeeper may be down: joining goes on in the background)."""
        self.member = GroupMember(
            self.client,
            self.layout,
            self.group,
            self.node,
            address=address,
            version=self.version,
            on_change=self._on_change,
        )
        if not self.member.start(timeout):
            log.warning(
                "group %r: not joined yet (ZooKeeper unreachable?); joining in the background", self.group
            )
        self.status.start()

    def stop(self, timeout: float) -> None:
        """Leave the group (the leader moves this node's replicas elsewhere)."""
        self.status.stop(timeout)
        if self.member is not None:
            self.member.stop(timeout)

    # -- what the status shows (any thread) --------------------------------------------

    def replicas(self) -> tuple[dict[str, JobAssignment], dict[str, str], set[str]]:
        """What is followed (by job), what failed (why), what is announced: copies."""
        with self._lock:
            return dict(self._jobs), dict(self._failed), set(self._announced)

    def retry_failed(self) -> None:
        """Try again to follow the jobs whose follow failed (on the ingest thread)."""
        with self._lock:
            failed = [job for job in self._failed if job in self._jobs]
        if failed:
            self.ingest.call_soon(lambda: self._retry(failed))

    def _retry(self, jobs: list[str]) -> None:
        for job in jobs:
            want = self._jobs.get(job)
            if want is not None and job not in self._ours:
                self._follow(job, want)

    # -- the assignment (kazoo's thread, then the ingest thread) -------------------------

    def _on_change(self, assignment: Assignment, mine: Shards) -> None:
        jobs = {job: assignment.jobs[job] for job in mine}
        self.ingest.call_soon(lambda: self._apply(jobs))

    def _apply(self, jobs: Mapping[str, JobAssignment]) -> None:
        for job in [job for job in self._jobs if job not in jobs]:
            self._drop(job)
        for job, want in sorted(jobs.items()):
            have = self._jobs.get(job)
            if have is not None and have.checkpoint != want.checkpoint:
                self._drop(job)
                have = None
            elif have is not None and self._held(have) != self._held(want):
                log.info(
                    "group %r: this node's partitions of job %s are now %s (were %s): ingesting anew",
                    self.group,
                    job,
                    shown(self._held(want)),
                    shown(self._held(have)),
                )
                self._drop(job)
                have = None
            with self._lock:
                self._jobs[job] = want
            if have is None:
                self._follow(job, want)
            elif have.restart_generation != want.restart_generation:
                log.info(
                    "group %r: restarting job %s (generation %d)", self.group, job, want.restart_generation
                )
                self._unfollow(job)
                self._follow(job, want)
            if job in self._ours:  # never a job followed outside the group
                self.ingest.pause(job, want.state == "paused")

    def _follow(self, job: str, want: JobAssignment) -> None:
        if job in self._ours:
            return
        if job in self._standalone or self.ingest.followed(job) is not None:
            self._fail(job, f"node {self.node!r} follows a job {job!r} outside the group (config, FollowJob)")
            return
        self._publisher.hold(job)
        try:
            self._follow_checked(job, want.checkpoint, self._held(want))
        except EpochStateError as error:
            self._fail(job, str(error))
            return
        except Exception as error:  # an unexpected failure is shown as such, and retried
            reason = f"{type(error).__name__}: {error}"
            if self._failed.get(job) != reason:
                log.exception("group %r: following job %s failed", self.group, job)
            self._fail(job, reason)
            return
        with self._lock:
            self._failed.pop(job, None)
        self._ours.add(job)
        self.ingest.pause(job, want.state == "paused")
        log.info("group %r: following job %s", self.group, job)

    def _replan_if_relaid(self, job: str, have: JobAssignment) -> None:
        """Ask the leader to split the job anew when its newest epoch's partition count is
        not the one its shards split (the checkpoint was repartitioned offline): the job
        definition's ``partitions`` becomes that count (and its shards at most as many),
        the leader assigns the new ranges, and each replica whose partitions change
        ingests anew and serves again once caught up. Until then a key of a partition no
        shard covers is refused, never answered. Only a replica caught up with the
        newest committed epoch asks, so one re-reading old epochs never asks for an old
        count. A definition changed meanwhile is left to the next caught-up check."""
        if len(have.shards) < 2:
            return  # one shard holds every partition, whatever their number
        try:
            entry = self._catalog.get(job)
        except EpochStateError:
            return
        counts = {handle.latest.num_partitions for handle in entry.stores.values()}
        if len(counts) != 1:
            return
        count = counts.pop()
        if self._checked.get(job) == count:
            return  # the definition was seen to split this count, or was asked to
        definitions = JobDefinitions(self.client, self.layout, self.group)
        try:
            definition, version = definitions.get(job)
            planned = definition.partitions
            if planned != count:
                definitions.update(
                    job, expected_version=version, partitions=count, shards=min(definition.shards, count)
                )
        except _REPLAN_ERRORS as error:
            log.warning(
                "group %r: cannot ask to split job %s for %d partitions: %s", self.group, job, count, error
            )
            return
        self._checked[job] = count
        if planned == count:
            return
        log.info(
            "group %r: job %s now has %d Spark partitions (its shards split %d): asked for new shards",
            self.group,
            job,
            count,
            planned,
        )

    def _held(self, assignment: JobAssignment) -> PartitionRanges | None:
        """The Spark partitions of the job that this node's shards cover (None: all)."""
        try:
            return assignment.held_by(self.node)
        except ValueError:  # no shard here: never applied (jobs without one are not ours)
            return None

    def _fail(self, job: str, reason: str) -> None:
        with self._lock:
            first = self._failed.get(job) != reason
            self._failed[job] = reason
        if first:
            log.error("group %r: cannot follow job %s: %s", self.group, job, reason)

    def _unfollow(self, job: str) -> JobEntry | None:
        with self._lock:
            self._announced.discard(job)
            self._failed.pop(job, None)
        if job not in self._ours:
            return None
        self._ours.discard(job)
        self._publisher.hold(job)
        return self.ingest.unfollow(job)

    def _drop(self, job: str) -> None:
        with self._lock:
            self._jobs.pop(job, None)
        if job not in self._ours:  # never followed for the group: nothing of it is ours
            with self._lock:
                self._failed.pop(job, None)
            return
        entry = self._unfollow(job)
        self._catalog.remove(job)
        if entry is not None:
            self._store.drop_job(entry.descriptor)
        self._publisher.job_dropped(job)
        log.info("group %r: job %s is no longer followed here; its local data is dropped", self.group, job)

    def caught_up(self, job: str) -> None:
        """Ingest found nothing committed beyond what it holds of ``job`` (ingest thread)."""
        with self._lock:
            have = self._jobs.get(job)
        if have is not None and job in self._ours:
            self._replan_if_relaid(job, have)
        with self._lock:
            if have is None or job in self._announced or job not in self._ours:
                return
        member = self.member
        current = None if member is None or member.assignment is None else member.assignment.jobs.get(job)
        if (
            current is None
            or current.restart_generation != have.restart_generation
            or self._held(current) != self._held(have)
        ):
            return  # a change not applied yet
        try:
            member.ready(job)  # type: ignore[union-attr]
        except JobNotAssigned:
            return
        with self._lock:
            self._announced.add(job)
        self._publisher.release(job)
        log.info("group %r: replica of job %s caught up: announced", self.group, job)
