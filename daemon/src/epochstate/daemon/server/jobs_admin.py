"""``epochstate.v1.JobsAdmin``: the group's job definitions and each replica's state, over gRPC.

Any member of a group answers, through its own ZooKeeper session: a change is
a compare-and-set on the job's definition znode (:class:`JobDefinitions`),
which the group's leader turns into an assignment; the status joins the
definitions, the assignment, the live members, their status znodes and the
replica znodes (docs/groups.md). Each call's ZooKeeper requests end within its
deadline (less :func:`wait_budget`'s margin); one ZooKeeper cannot answer in
is UNAVAILABLE (REGISTRY_UNAVAILABLE). A daemon without a group answers
FAILED_PRECONDITION (NO_GROUP).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from epochstate.core.zookeeper.errors import InvalidRecord, JobNotDefined, RegistryUnavailable
from epochstate.core.zookeeper.group_records import Assignment, JobDefinition
from epochstate.core.zookeeper.group_status import MemberStatus
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.session import CONNECTION_ERRORS, wait
from epochstate.daemon.group.assignments import read_assignment
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.daemon.group.membership import read_members
from epochstate.daemon.server.handlers import Guard, add_to_server
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.new_jobs import CheckpointRoots, allowed_checkpoint, job_name, placement
from epochstate.daemon.server.status import NoGroup, domain_errors, wait_budget
from epochstate.v1 import epochstate_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["JobsAdmin"]
SERVICE_NAME = SERVICE.full_name

T = TypeVar("T")


def _zookeeper(method: Callable[..., T]) -> Callable[..., T]:
    """ZooKeeper not answering (in time) is UNAVAILABLE (REGISTRY_UNAVAILABLE)."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return method(*args, **kwargs)
        except CONNECTION_ERRORS as error:
            raise RegistryUnavailable(f"ZooKeeper did not answer: {error!r}") from error

    return call


def definition_message(name: str, definition: JobDefinition, version: int) -> pb.JobDefinition:
    return pb.JobDefinition(
        name=name,
        checkpoint=definition.checkpoint,
        replicas=definition.replicas,
        state=definition.state,
        restart_generation=definition.restart_generation,
        version=version,
        created_at_ms=definition.created_at_ms,
        updated_at_ms=definition.updated_at_ms,
        shards=definition.shards,
        partitions=definition.partitions or 0,
    )


class JobsAdminService:
    """The rpcs of ``JobsAdmin`` for group ``group`` (None: the daemon has none) under ``root``."""

    def __init__(
        self,
        client: KazooClient | None,
        root: str,
        group: str | None,
        roots: CheckpointRoots | None,
        timeout: float = 10.0,
    ) -> None:
        self._client = client
        self._layout = Layout(root)
        self._group = group
        self._roots = roots
        self._timeout = timeout

    def _budget(self, context: grpc.ServicerContext) -> float:
        budget = wait_budget(context)
        return self._timeout if budget is None else max(0.001, min(self._timeout, budget))

    def _definitions(self, context: grpc.ServicerContext) -> JobDefinitions:
        if self._client is None or self._group is None:
            raise NoGroup("the daemon is not a member of a group (start it with --group and --zookeeper)")
        if not self._client.connected:
            raise RegistryUnavailable("the daemon is not connected to ZooKeeper")
        return JobDefinitions(self._client, self._layout, self._group, timeout=self._budget(context))

    def _change(
        self, request: pb.JobChangeRequest, context: grpc.ServicerContext, how: str
    ) -> pb.JobChangeResponse:
        definitions = self._definitions(context)
        name = job_name(request.name)
        expected = request.expected_version if request.HasField("expected_version") else None
        definition, version = getattr(definitions, how)(name, expected_version=expected)
        return pb.JobChangeResponse(job=definition_message(name, definition, version))

    @domain_errors
    @_zookeeper
    def AddJob(self, request: pb.AddJobRequest, context: grpc.ServicerContext) -> pb.JobChangeResponse:
        """Define a job; with shards > 1 and no partitions, its partitions are learned from
        the checkpoint (INVALID_ARGUMENT when it has no state metadata to learn them from)."""
        definitions = self._definitions(context)
        name = job_name(request.name)
        checkpoint = allowed_checkpoint(request.checkpoint, self._roots)
        placed = placement(checkpoint, request.replicas, request.shards, request.partitions)
        definition, version = definitions.add(
            name, checkpoint, replicas=placed.replicas, shards=placed.shards, partitions=placed.partitions
        )
        return pb.JobChangeResponse(job=definition_message(name, definition, version))

    @domain_errors
    @_zookeeper
    def RemoveJob(self, request: pb.JobChangeRequest, context: grpc.ServicerContext) -> pb.JobChangeResponse:
        definitions = self._definitions(context)
        name = job_name(request.name)
        definition, version = definitions.get(name)
        expected = request.expected_version if request.HasField("expected_version") else None
        definitions.remove(name, expected_version=version if expected is None else expected)
        return pb.JobChangeResponse(job=definition_message(name, definition, version))

    @domain_errors
    @_zookeeper
    def PauseJob(self, request: pb.JobChangeRequest, context: grpc.ServicerContext) -> pb.JobChangeResponse:
        return self._change(request, context, "pause")

    @domain_errors
    @_zookeeper
    def ResumeJob(self, request: pb.JobChangeRequest, context: grpc.ServicerContext) -> pb.JobChangeResponse:
        return self._change(request, context, "resume")

    @domain_errors
    @_zookeeper
    def RestartJob(self, request: pb.JobChangeRequest, context: grpc.ServicerContext) -> pb.JobChangeResponse:
        return self._change(request, context, "restart")

    @domain_errors
    @_zookeeper
    def JobsStatus(
        self, request: pb.JobsStatusRequest, context: grpc.ServicerContext
    ) -> pb.JobsStatusResponse:
        definitions = self._definitions(context)
        client, group, timeout = definitions.client, definitions.group, definitions.timeout
        names = [job_name(request.job)] if request.job else sorted(definitions.list())
        assignment, _ = read_assignment(client, self._layout, group, timeout)
        members = read_members(client, self._layout, group, timeout)
        statuses = self._statuses(client, group, timeout)
        response = pb.JobsStatusResponse(group=group)
        if assignment is not None:
            response.leader = assignment.leader
            response.assignment_generation = assignment.generation
        for name in names:
            try:
                definition, version = definitions.get(name)
            except JobNotDefined:
                if request.job:
                    raise
                continue  # removed meanwhile
            job = pb.JobStatus(definition=definition_message(name, definition, version))
            self._replicas(job, name, assignment, members, statuses, client, timeout)
            response.jobs.append(job)
        return response

    def _statuses(self, client: KazooClient, group: str, timeout: float) -> dict[str, MemberStatus]:
        parent = self._layout.group_statuses(group)
        try:
            nodes = wait(client.get_children_async(parent), timeout)
        except NoNodeError:
            return {}
        requests = {node: client.get_async(f"{parent}/{node}") for node in nodes}
        found = {}
        for node, pending in requests.items():
            try:
                found[node] = MemberStatus.decode(wait(pending, timeout)[0])
            except (NoNodeError, InvalidRecord):
                continue  # gone meanwhile, or unreadable: shown as "unknown"
        return found

    def _replicas(
        self,
        job: pb.JobStatus,
        name: str,
        assignment: Assignment | None,
        members: dict[str, Any],
        statuses: dict[str, MemberStatus],
        client: KazooClient,
        timeout: float,
    ) -> None:
        assigned = None if assignment is None else assignment.jobs.get(name)
        if assigned is None:
            return
        job.missing_replicas = assigned.shortfall
        try:
            announced = set(wait(client.get_children_async(self._layout.replicas(name)), timeout))
        except NoNodeError:
            announced = set()
        nodes = sorted({node for shard in assigned.shards for node in shard.replicas})
        for node in nodes:
            member = members.get(node)
            replica = pb.ReplicaStatus(
                node=node, address="" if member is None else member.address, announced=node in announced
            )
            status = statuses.get(node)
            reported = None if status is None else status.replicas.get(name)
            if member is None:
                replica.state = "down"
            elif reported is None:
                replica.state = "unknown"
            else:
                replica.state = reported.state
                replica.reason = reported.reason
                replica.newest_epoch = reported.newest_epoch
                replica.committed_epoch = reported.committed_epoch
                replica.lag_epochs = reported.lag_epochs
                replica.lag_seconds = reported.lag_seconds
                replica.restart_generation = reported.restart_generation
            job.replicas.append(replica)


def add_jobs_admin(
    server: grpc.Server,
    service: JobsAdminService,
    metrics: DaemonMetrics,
    guard: Guard | None = None,
) -> str:
    """Serve ``JobsAdmin`` on ``server``, each call checked by ``guard``; its full name."""
    if guard is None:
        add_to_server(service, server, metrics, SERVICE)
    else:
        add_to_server(service, server, metrics, SERVICE, guard)
    return SERVICE_NAME
