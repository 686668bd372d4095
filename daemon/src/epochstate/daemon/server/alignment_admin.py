"""``epochstate.v1.AlignmentAdmin``: the alignment coordinator over gRPC, as ``epochstate align`` offers it.

The daemon issues commands through its own ZooKeeper session (the coordinator
keeps no state, so any daemon, or the CLI, may issue them in turn). With
``wait_seconds`` a command answers once the source carried it out; a refusal
is FAILED_PRECONDITION, no answer in time DEADLINE_EXCEEDED. The waits block
one server thread each and never outlast the call's deadline; neither do the
ZooKeeper requests: each call's requests end within its deadline (less the margin
of :func:`~epochstate.daemon.server.status.wait_budget`), so a ZooKeeper that stops
answering mid-request fails the call UNAVAILABLE (REGISTRY_UNAVAILABLE) in time.

PlanSwap, SwapStatus and AbortSwap are ``epochstate swap`` (``epochstate.core.swap``)
on the same session: the daemon writes or reads the plan, the jobs' sinks carry it out.
"""

from __future__ import annotations

import grpc
from kazoo.client import KazooClient

from epochstate.core.alignment.commands import Command
from epochstate.core.alignment.coordinator import AlignmentCoordinator, SourceStatus
from epochstate.core.alignment.errors import InvalidTransition, RegistryUnavailable
from epochstate.core.alignment.retention import DEFAULT_KEEP, Hold, SubjectRetention
from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.swap.coordinator import DEFAULT_DEADLINE, SwapCoordinator
from epochstate.core.swap.records import SwapRecord
from epochstate.core.swap.registry import SwapRegistry
from epochstate.daemon.server.handlers import Guard, add_to_server
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.status import BadRequest, NoZooKeeper, domain_errors, wait_budget
from epochstate.v1 import epochstate_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["AlignmentAdmin"]
SERVICE_NAME = SERVICE.full_name


def command_message(command: Command) -> pb.AlignmentCommand:
    message = pb.AlignmentCommand(name=command.name, id=command.id, issued_at_ms=command.issued_at_ms)
    if command.epoch is not None:
        message.epoch = command.epoch
    return message


def source_message(status: SourceStatus) -> pb.AlignmentSource:
    record, report = status.record, status.record.report
    message = pb.AlignmentSource(
        job=status.job,
        mode=record.mode,
        state=status.state,
        answered=status.answered,
        updated_at_ms=record.updated_at_ms,
    )
    if record.command is not None:
        message.command.CopyFrom(command_message(record.command))
    if report is not None:
        if report.subject_epoch is not None:
            message.subject_epoch = report.subject_epoch
        if report.batch is not None:
            message.batch = report.batch
        message.position.update(report.position)
        message.refused = report.refused or ""
    return message


def swap_message(record: SwapRecord) -> pb.Swap:
    message = pb.Swap(
        id=record.id,
        subject=record.subject,
        input=record.input,
        from_job=record.old,
        to_job=record.new,
        epoch=record.epoch,
        prepare_epoch=record.prepare_epoch,
        state=record.state,
        prepared=dict(record.prepared),
        committed_by=record.committed_by or "",
        planned_at_ms=record.planned_at_ms,
        deadline_ms=record.deadline_ms,
        updated_at_ms=record.updated_at_ms,
    )
    if record.committed_epoch is not None:
        message.committed_epoch = record.committed_epoch
    if record.handover is not None:
        message.handover = record.handover
    if record.aborted is not None:
        message.aborted_reason, message.aborted_detail = record.aborted.reason, record.aborted.detail
    return message


def _holds(holds: tuple[Hold, ...]) -> list[pb.RetentionHold]:
    return [pb.RetentionHold(epoch=h.epoch, reason=h.reason) for h in sorted(holds, key=lambda h: h.epoch)]


def _check_wait(wait: float) -> None:
    if not wait >= 0:  # NaN too
        raise BadRequest(f"wait_seconds must be a number of seconds >= 0, not {wait:g}")


class AlignmentAdminService:
    """The rpcs of ``AlignmentAdmin`` on the subjects under ``root``; ``client`` None: no ZooKeeper."""

    def __init__(self, client: KazooClient | None, root: str, timeout: float = 10.0) -> None:
        self._coordinator = (
            None if client is None else AlignmentCoordinator(SubjectRegistry(client, root, timeout=timeout))
        )

    def coordinator(self, context: grpc.ServicerContext) -> AlignmentCoordinator:
        """The coordinator for one call: its ZooKeeper requests end within the call's deadline."""
        if self._coordinator is None:
            raise NoZooKeeper("the daemon runs without ZooKeeper (--zookeeper): there are no subjects")
        # Without a session every request would only retry until its timeout: answer at once.
        if not self._coordinator.registry.client.connected:
            raise RegistryUnavailable("the daemon is not connected to ZooKeeper")
        return AlignmentCoordinator(self._coordinator.registry.within(wait_budget(context)))

    @domain_errors
    def Status(
        self, request: pb.AlignmentStatusRequest, context: grpc.ServicerContext
    ) -> pb.AlignmentStatusResponse:
        coordinator = self.coordinator(context)
        retention = SubjectRetention(coordinator.registry, request.keep or DEFAULT_KEEP)
        topics = [request.subject] if request.subject else coordinator.registry.subjects()
        response = pb.AlignmentStatusResponse()
        for topic in topics:
            sources = coordinator.status(topic)
            plan = retention.plan(topic)
            response.subjects.append(
                pb.SubjectAlignment(
                    subject=topic,
                    sources=[source_message(s) for s in sources],
                    retention_horizon=plan.horizon,
                    holds=_holds(plan.holds),
                )
            )
        return response

    @domain_errors
    def CatchUp(
        self, request: pb.AlignmentCommandRequest, context: grpc.ServicerContext
    ) -> pb.AlignmentCommandResponse:
        _check_wait(request.wait_seconds)
        coordinator = self.coordinator(context)
        command = coordinator.catch_up(request.subject, request.job)
        return self._answer(coordinator, request, command, context)

    @domain_errors
    def Align(self, request: pb.AlignRequest, context: grpc.ServicerContext) -> pb.AlignmentCommandResponse:
        at = request.WhichOneof("at")
        if at is None or (at == "next" and not request.next):
            raise BadRequest("Align needs a subject epoch (epoch) or next=true")
        if at == "epoch" and request.epoch < 0:
            raise BadRequest(f"a subject epoch is at least 0, not {request.epoch}")
        _check_wait(request.wait_seconds)
        epoch = request.epoch if at == "epoch" else None
        coordinator = self.coordinator(context)
        command = coordinator.align(request.subject, request.job, epoch)
        return self._answer(coordinator, request, command, context)

    @domain_errors
    def Abort(
        self, request: pb.AlignmentCommandRequest, context: grpc.ServicerContext
    ) -> pb.AlignmentCommandResponse:
        _check_wait(request.wait_seconds)
        coordinator = self.coordinator(context)
        command = coordinator.abort(request.subject, request.job)
        return self._answer(coordinator, request, command, context)

    @domain_errors
    def Prune(
        self, request: pb.PruneSubjectRequest, context: grpc.ServicerContext
    ) -> pb.PruneSubjectResponse:
        coordinator = self.coordinator(context)
        coordinator.require_subject(request.subject)
        retention = SubjectRetention(coordinator.registry, request.keep or DEFAULT_KEEP)
        if request.dry_run:
            plan = retention.plan(request.subject)
            return pb.PruneSubjectResponse(horizon=plan.horizon, holds=_holds(plan.holds))
        pruned = retention.prune(request.subject)
        return pb.PruneSubjectResponse(
            horizon=pruned.plan.horizon,
            holds=_holds(pruned.plan.holds),
            deleted_epochs=pruned.epochs,
            mapping_entries=dict(pruned.mapping_entries),
        )

    def swaps(self, context: grpc.ServicerContext) -> SwapCoordinator:
        """The swap coordinator for one call, on the same session and deadline as :meth:`coordinator`."""
        registry = self.coordinator(context).registry
        swaps = SwapRegistry(registry.client, registry.layout.root, timeout=registry.timeout)
        return SwapCoordinator(registry, swaps.within(registry.remaining()))

    @domain_errors
    def PlanSwap(self, request: pb.PlanSwapRequest, context: grpc.ServicerContext) -> pb.SwapResponse:
        if request.HasField("epoch") and request.epoch < 0:
            raise BadRequest(f"a swap epoch is at least 0, not {request.epoch}")
        if not request.deadline_seconds >= 0:
            raise BadRequest(f"deadline_seconds must be >= 0, not {request.deadline_seconds:g}")
        _check_wait(request.wait_seconds)
        swaps = self.swaps(context)
        record = swaps.plan(
            request.subject,
            request.from_job,
            request.to_job,
            request.epoch if request.HasField("epoch") else None,
            input=request.input or None,
            deadline=request.deadline_seconds or DEFAULT_DEADLINE,
        )
        if request.wait_seconds > 0:
            remaining = swaps.swaps.remaining()
            wait = request.wait_seconds if remaining is None else min(request.wait_seconds, remaining * 0.8)
            record = swaps.wait(record.subject, record.id, wait)
        return pb.SwapResponse(swap=swap_message(record))

    @domain_errors
    def SwapStatus(self, request: pb.SwapStatusRequest, context: grpc.ServicerContext) -> pb.SwapResponse:
        return pb.SwapResponse(swap=swap_message(self.swaps(context).status(request.subject)))

    @domain_errors
    def AbortSwap(self, request: pb.SwapStatusRequest, context: grpc.ServicerContext) -> pb.SwapResponse:
        return pb.SwapResponse(swap=swap_message(self.swaps(context).abort(request.subject)))

    def _answer(
        self,
        coordinator: AlignmentCoordinator,
        request: pb.AlignmentCommandRequest | pb.AlignRequest,
        command: Command,
        context: grpc.ServicerContext,
    ) -> pb.AlignmentCommandResponse:
        topic, job, wait = request.subject, request.job, request.wait_seconds
        if wait > 0:
            remaining = coordinator.registry.remaining()
            if remaining is not None:
                # Time left after the wait for the source's record, read below.
                wait = min(wait, remaining - min(1.0, remaining / 5))
            report = coordinator.wait(topic, job, command, wait)
            if report.refused is not None:
                raise InvalidTransition(f"source {job!r} refused {command}: {report.refused}")
        status = coordinator.source(topic, job)
        return pb.AlignmentCommandResponse(command=command_message(command), source=source_message(status))


def add_alignment_admin(
    server: grpc.Server,
    client: KazooClient | None,
    root: str,
    metrics: DaemonMetrics,
    guard: Guard | None = None,
) -> str:
    """Serve ``AlignmentAdmin`` on ``server``, each call checked by ``guard``; its full name."""
    service = AlignmentAdminService(client, root)
    if guard is None:
        add_to_server(service, server, metrics, SERVICE)
    else:
        add_to_server(service, server, metrics, SERVICE, guard)
    return SERVICE_NAME
