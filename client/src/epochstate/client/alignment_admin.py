"""Client side of ``epochstate.v1.AlignmentAdmin``: ``EpochStateClient.alignment``.

Errors as the rest of the client (``epochstate.client.errors``), picked by the
daemon's reason: NotFound for an unknown subject or source (SUBJECT_NOT_FOUND,
SOURCE_NOT_FOUND), CommandRefused for a command the source's state does not allow
or that it refused (COMMAND_REFUSED), NoZooKeeper when the daemon runs without
ZooKeeper (NO_ZOOKEEPER), InvalidArgument for bad arguments (BAD_REQUEST),
DeadlineExceeded when the source did not carry a command out within ``wait``
(COMMAND_NOT_ANSWERED), Unavailable when the daemon cannot reach ZooKeeper
(REGISTRY_UNAVAILABLE). The hot-swap's calls: NotFound without a swap
(SWAP_NOT_FOUND), SwapRefused for its refusals (JOBS_NOT_ALIGNED,
SWAP_EPOCH_PASSED, NEW_TOO_FAR_BEHIND, SWAP_IN_FLIGHT, SWAP_COMMITTED).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc

Call = Callable[[Any, Any, float | None], Any]
# The command's own wait needs this much more time for the call around it.
_WAIT_MARGIN = 5.0


class AlignmentAdmin:
    """Drives the sources of Kafka subjects through one daemon; made by ``EpochStateClient``."""

    def __init__(self, channel: grpc.Channel, call: Call) -> None:
        self._stub = pb_grpc.AlignmentAdminStub(channel)
        self._call = call

    def status(
        self, subject: str = "", *, keep: int = 0, timeout: float | None = None
    ) -> list[pb.SubjectAlignment]:
        """Each source of ``subject`` (empty: every subject), with the holds of retention at ``keep``."""
        request = pb.AlignmentStatusRequest(subject=subject, keep=keep)
        return list(self._call(self._stub.Status, request, timeout).subjects)

    def catch_up(self, subject: str, job: str, *, wait: float = 0.0) -> pb.AlignmentCommandResponse:
        """CatchUp; with ``wait`` > 0 answers once the source reported ready."""
        request = pb.AlignmentCommandRequest(subject=subject, job=job, wait_seconds=wait)
        response: pb.AlignmentCommandResponse = self._command(self._stub.CatchUp, request, wait)
        return response

    def align(
        self, subject: str, job: str, epoch: int | None = None, *, wait: float = 0.0
    ) -> pb.AlignmentCommandResponse:
        """Align at subject epoch ``epoch`` (None: the first one the source has not passed)."""
        request = pb.AlignRequest(subject=subject, job=job, wait_seconds=wait)
        if epoch is None:
            request.next = True
        else:
            request.epoch = epoch
        response: pb.AlignmentCommandResponse = self._command(self._stub.Align, request, wait)
        return response

    def abort(self, subject: str, job: str, *, wait: float = 0.0) -> pb.AlignmentCommandResponse:
        request = pb.AlignmentCommandRequest(subject=subject, job=job, wait_seconds=wait)
        response: pb.AlignmentCommandResponse = self._command(self._stub.Abort, request, wait)
        return response

    def prune(
        self, subject: str, *, keep: int = 0, dry_run: bool = False, timeout: float | None = None
    ) -> pb.PruneSubjectResponse:
        request = pb.PruneSubjectRequest(subject=subject, keep=keep, dry_run=dry_run)
        response: pb.PruneSubjectResponse = self._call(self._stub.Prune, request, timeout)
        return response

    def plan_swap(
        self,
        subject: str,
        from_job: str,
        to_job: str,
        epoch: int | None = None,
        *,
        input: str = "",
        deadline: float = 0.0,
        wait: float = 0.0,
    ) -> pb.Swap:
        """Plan the hot-swap of output ``subject`` from ``from_job`` to ``to_job`` at input epoch ``epoch``
        (None: the earliest both can agree on); with ``wait`` > 0 answers once it is committed."""
        request = pb.PlanSwapRequest(
            subject=subject,
            from_job=from_job,
            to_job=to_job,
            epoch=epoch,
            input=input,
            deadline_seconds=deadline,
            wait_seconds=wait,
        )
        response: pb.SwapResponse = self._command(self._stub.PlanSwap, request, wait)
        return response.swap

    def swap_status(self, subject: str, *, timeout: float | None = None) -> pb.Swap:
        response: pb.SwapResponse = self._call(
            self._stub.SwapStatus, pb.SwapStatusRequest(subject=subject), timeout
        )
        return response.swap

    def abort_swap(self, subject: str, *, timeout: float | None = None) -> pb.Swap:
        response: pb.SwapResponse = self._call(
            self._stub.AbortSwap, pb.SwapStatusRequest(subject=subject), timeout
        )
        return response.swap

    def _command(self, method: Any, request: Any, wait: float) -> Any:
        response = self._call(method, request, wait + _WAIT_MARGIN if wait > 0 else None)
        return response
