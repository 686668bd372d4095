"""Typed client errors, mapped back from the daemon's stable reasons (one table).

A failed call carries a ``google.rpc.ErrorInfo`` in its status details; its
``reason`` (:mod:`epochstate.core.reasons`, domain ``epochstate.dev``) picks the
exception class through :data:`BY_REASON`. A reason this client does not know (a
newer daemon), or a call that failed without one (a transport failure, a proxy),
falls back to the class of its status code. Class names never cross the wire, so
neither side depends on the other's.

Every exception is an :class:`epochstate.core.errors.EpochStateError` (one
hierarchy for daemon, client and plugin) and has ``code`` (the gRPC status code),
``reason`` (the daemon's reason; empty when the daemon sent none or the client
raised the error itself) and ``metadata`` (``ErrorInfo.metadata``).
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from epochstate.core import reasons
from epochstate.core.errors import EpochStateError


class EpochStateClientError(EpochStateError):
    """Root of the client's errors; ``code`` is the gRPC status code, ``reason`` the daemon's reason."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    reason: str = ""

    def __init__(
        self,
        message: str,
        code: grpc.StatusCode | None = None,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        if code is not None:
            self.code = code
        if reason is not None:
            self.reason = reason


class NotFound(EpochStateClientError):
    """Unknown job, operator, store, subject or source."""

    code = grpc.StatusCode.NOT_FOUND


class JobNotFound(NotFound):
    """The daemon follows no job of that name."""


class StoreNotFound(NotFound):
    """The job has no store with that operator id and name."""


class InvalidArgument(EpochStateClientError):
    """The key does not match the key schema, or the request is malformed."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(EpochStateClientError):
    """The request cannot be answered in the current state of the job, subject or daemon."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class EpochNotReady(FailedPrecondition):
    """The epoch has not committed (or not been ingested) yet: asking again later can succeed."""


class NoSuchEpoch(FailedPrecondition):
    """No epoch of the job can ever satisfy the selector (e.g. the jobs share no subject)."""


class PartitionNotHeld(FailedPrecondition):
    """The daemon asked holds other Spark partitions of the job than the key's (a group
    replica of other shards): the routed client asks a replica of the key's shard."""


class IncarnationChanged(FailedPrecondition):
    """The read is pinned to a query the job's checkpoint no longer holds (it was deleted and
    recreated). ``requested_query_id`` and ``current_query_id`` name both ("" current: the new
    query is not followed yet)."""

    @property
    def requested_query_id(self) -> str:
        return self.metadata.get("requestedQueryId", "")

    @property
    def current_query_id(self) -> str:
        return self.metadata.get("currentQueryId", "")


class CommandRefused(FailedPrecondition):
    """An alignment command that the source's current state does not allow (e.g. Align when unaligned)."""


class SwapRefused(FailedPrecondition):
    """A hot-swap refused or aborted: the jobs are not aligned, its epoch passed, the new job is too
    far behind, another swap is in flight, or it is committed already (the reason says which)."""


class AmbiguousName(FailedPrecondition):
    """The name is both a job and an alias (a logical job name): delete or rename the alias."""


class NoZooKeeper(FailedPrecondition):
    """The daemon runs without ZooKeeper, so it has no subjects to align or prune."""


class EpochRetired(EpochStateClientError):
    """The epoch is older than the daemon's retention."""

    code = grpc.StatusCode.OUT_OF_RANGE


class DeadlineExceeded(EpochStateClientError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unavailable(EpochStateClientError):
    """No daemon answered (after retries), or the daemon could not reach ZooKeeper."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(EpochStateClientError):
    """What the answer needs exists but cannot be read (checkpoint files, registry records,
    the daemon's own store)."""

    code = grpc.StatusCode.DATA_LOSS


class EpochDamaged(DataLoss):
    """The epoch exists but its state files could not be read."""


class ResourceExhausted(EpochStateClientError):
    """A limit of the daemon: too many calls of a kind at once, or a message too large
    (a request larger than the daemon accepts is refused by gRPC itself, without a reason)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class TooManyCalls(ResourceExhausted):
    """The daemon serves as many calls of this kind as it may (``metadata``: ``kind``, ``limit``):
    retry with back-off or on another replica."""


class ResponseTooLarge(ResourceExhausted):
    """The answer would exceed the daemon's response size limit: ask for fewer keys or a smaller page."""


class Unauthenticated(EpochStateClientError):
    """The daemon requires credentials and the call carried none it accepts (see TlsOptions)."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(EpochStateClientError):
    """The caller's identity may not do this."""

    code = grpc.StatusCode.PERMISSION_DENIED


class RoleMissing(PermissionDenied):
    """The identity lacks the role (read, report, admin) the method needs."""


class CheckpointNotAllowed(PermissionDenied):
    """The checkpoint to follow is outside the daemon's configured checkpoint roots."""


class AlreadyExists(EpochStateClientError):
    """What the call would create exists already."""

    code = grpc.StatusCode.ALREADY_EXISTS


class JobDefined(AlreadyExists):
    """The group already has a job of that name."""


class Aborted(EpochStateClientError):
    """A concurrent change came first; read again and decide again."""

    code = grpc.StatusCode.ABORTED


class DefinitionChanged(Aborted):
    """The job's definition changed since the version the caller read."""


class JobNotDefined(NotFound):
    """The group has no job of that name."""


class NoGroup(FailedPrecondition):
    """The daemon is not a member of a group (started without --group)."""


class Cancelled(EpochStateClientError):
    """The call was cancelled (by this client, or its connection ended) before an answer."""

    code = grpc.StatusCode.CANCELLED


_BY_CODE: dict[grpc.StatusCode, type[EpochStateClientError]] = {
    cls.code: cls
    for cls in (
        NotFound,
        InvalidArgument,
        FailedPrecondition,
        EpochRetired,
        DeadlineExceeded,
        Unavailable,
        DataLoss,
        ResourceExhausted,
        Unauthenticated,
        PermissionDenied,
        AlreadyExists,
        Aborted,
        Cancelled,
    )
}

BY_REASON: Mapping[str, type[EpochStateClientError]] = {
    reasons.JOB_NOT_FOUND: JobNotFound,
    reasons.STORE_NOT_FOUND: StoreNotFound,
    reasons.SUBJECT_NOT_FOUND: NotFound,
    reasons.SOURCE_NOT_FOUND: NotFound,
    reasons.BAD_KEY: InvalidArgument,
    reasons.BAD_SELECTOR: InvalidArgument,
    reasons.BAD_REQUEST: InvalidArgument,
    reasons.EPOCH_NOT_READY: EpochNotReady,
    reasons.NO_SUCH_EPOCH: NoSuchEpoch,
    reasons.INCARNATION_CHANGED: IncarnationChanged,
    reasons.COMMAND_REFUSED: CommandRefused,
    reasons.NO_ZOOKEEPER: NoZooKeeper,
    reasons.EPOCH_WAIT_TIMED_OUT: DeadlineExceeded,
    reasons.COMMAND_NOT_ANSWERED: DeadlineExceeded,
    reasons.EPOCH_RETIRED: EpochRetired,
    reasons.EPOCH_UNAVAILABLE: EpochDamaged,
    reasons.CORRUPT_REGISTRY_RECORD: DataLoss,
    reasons.STORE_DAMAGED: DataLoss,
    reasons.SHUTTING_DOWN: Unavailable,
    reasons.REGISTRY_UNAVAILABLE: Unavailable,
    reasons.INTERNAL: EpochStateClientError,
    reasons.TOO_MANY_CALLS: TooManyCalls,
    reasons.RESPONSE_TOO_LARGE: ResponseTooLarge,
    reasons.NOT_AUTHENTICATED: Unauthenticated,
    reasons.ROLE_MISSING: RoleMissing,
    reasons.CHECKPOINT_NOT_ALLOWED: CheckpointNotAllowed,
    reasons.CALL_CANCELLED: Cancelled,
    reasons.JOB_DEFINED: JobDefined,
    reasons.JOB_NOT_DEFINED: JobNotDefined,
    reasons.DEFINITION_CHANGED: DefinitionChanged,
    reasons.NO_GROUP: NoGroup,
    reasons.PARTITION_NOT_HELD: PartitionNotHeld,
    reasons.BAD_RANGE: InvalidArgument,
    reasons.SWAP_NOT_FOUND: NotFound,
    reasons.JOBS_NOT_ALIGNED: SwapRefused,
    reasons.SWAP_EPOCH_PASSED: SwapRefused,
    reasons.NEW_TOO_FAR_BEHIND: SwapRefused,
    reasons.SWAP_IN_FLIGHT: SwapRefused,
    reasons.SWAP_COMMITTED: SwapRefused,
    reasons.ALIAS_NOT_FOUND: NotFound,
    reasons.AMBIGUOUS_NAME: AmbiguousName,
}
"""The one table from the daemon's reasons to exception classes; it covers every reason."""


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ``ErrorInfo`` of domain ``epochstate.dev`` in ``error``'s status details, if any."""
    if not isinstance(error, grpc.Call):
        return None
    try:
        status: status_pb2.Status | None = rpc_status.from_call(error)
    except ValueError:  # details that contradict the call's own code or message: not ours
        return None
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == reasons.DOMAIN:
            return info
    return None


def from_rpc_error(error: grpc.RpcError) -> EpochStateClientError:
    """The typed exception for a failed call: by the daemon's reason, else by status code."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    info = error_info(error)
    cls = _BY_CODE.get(code, EpochStateClientError)
    if info is not None:
        by_reason = BY_REASON.get(info.reason, cls)
        # A reason always travels with its own code; should a proxy have changed the
        # code, the code wins, so `except NotFound` still sees every NOT_FOUND.
        if issubclass(by_reason, cls):
            cls = by_reason
        return cls(f"{code.name}: {details}", code, reason=info.reason, metadata=info.metadata)
    return cls(f"{code.name}: {details}", code)
