"""Typed client errors, mapped back from the daemon's status codes (one table).

A status code picks the class; where one code stands for several errors
(FAILED_PRECONDITION), the daemon names the error's kind in the trailing
metadata (``epochstate-error``) and that picks the subclass.
"""

from __future__ import annotations

import grpc


class EpochStateClientError(Exception):
    """Root of the client's errors; ``code`` is the gRPC status code."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotFound(EpochStateClientError):
    """Unknown job, operator or store."""

    code = grpc.StatusCode.NOT_FOUND


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


class CommandRefused(FailedPrecondition):
    """An alignment command that the source's current state does not allow (e.g. Align when unaligned)."""


class NoZooKeeper(FailedPrecondition):
    """The daemon runs without ZooKeeper, so it has no subjects to align or prune."""


class EpochRetired(EpochStateClientError):
    """The epoch is older than the daemon's retention."""

    code = grpc.StatusCode.OUT_OF_RANGE


class DeadlineExceeded(EpochStateClientError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unavailable(EpochStateClientError):
    """No daemon answered (after retries)."""

    code = grpc.StatusCode.UNAVAILABLE


class EpochDamaged(EpochStateClientError):
    """The epoch exists but its state files could not be read."""

    code = grpc.StatusCode.DATA_LOSS


_BY_CODE: dict[grpc.StatusCode, type[EpochStateClientError]] = {
    cls.code: cls
    for cls in (
        NotFound,
        InvalidArgument,
        FailedPrecondition,
        EpochRetired,
        DeadlineExceeded,
        Unavailable,
        EpochDamaged,
    )
}


# The daemon's domain error class names (``daemon/server/status.py``) that pick a subclass.
_BY_KIND: dict[str, type[EpochStateClientError]] = {
    "EpochNotReady": EpochNotReady,
    "NoSuchEpoch": NoSuchEpoch,
    "InvalidTransition": CommandRefused,
    "NoZooKeeper": NoZooKeeper,
}

ERROR_KIND_KEY = "epochstate-error"


def _kind(error: grpc.RpcError) -> str | None:
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for item in trailing or ():
        if item.key == ERROR_KIND_KEY:
            value: str | bytes = item.value  # str for ASCII keys at run time, whatever the stubs say
            return value if isinstance(value, str) else value.decode()
    return None


def from_rpc_error(error: grpc.RpcError) -> EpochStateClientError:
    """The typed exception for a failed call: by status code, refined by the daemon's error kind."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    cls = _BY_CODE.get(code, EpochStateClientError)
    refined = _BY_KIND.get(_kind(error) or "")
    if refined is not None and issubclass(refined, cls):
        cls = refined
    return cls(f"{code.name}: {details}", code)
