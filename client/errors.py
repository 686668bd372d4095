"""Typed client errors, mapped back from the daemon's status codes (one table)."""

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


class EpochNotReady(EpochStateClientError):
    """The epoch has not committed (or not been ingested) yet."""

    code = grpc.StatusCode.FAILED_PRECONDITION


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
        EpochNotReady,
        EpochRetired,
        DeadlineExceeded,
        Unavailable,
        EpochDamaged,
    )
}


def from_rpc_error(error: grpc.RpcError) -> EpochStateClientError:
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    cls = _BY_CODE.get(code, EpochStateClientError)
    return cls(f"{code.name}: {details}", code)
