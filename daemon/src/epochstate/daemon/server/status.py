"""From domain errors to gRPC status codes, and the rich status a failed call ends with.

Handlers raise domain errors, and every domain error declares its stable reason
(:mod:`epochstate.core.reasons`). The reason's table says which status code the
reason travels with, so :func:`status_for` reads the code from there: there is
no second table to keep in step. One code stands for several errors
(FAILED_PRECONDITION: an epoch not ready yet, an epoch that can never exist, a
refused alignment command), so the call also carries the reason: the status
details (``grpc-status-details-bin``) hold a ``google.rpc.Status`` with one
``google.rpc.ErrorInfo`` (reason, domain ``epochstate.dev``, metadata), the
standard any gRPC client can read. The Python client maps reasons back to typed
exceptions (``epochstate.client.errors``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from epochstate.core import reasons
from epochstate.core.errors import BadRequest as BadRequest  # re-exported: the servicers raise it
from epochstate.core.errors import EpochStateError


class NoZooKeeper(EpochStateError):
    """The daemon runs without ZooKeeper (no ``--zookeeper``): it cannot reach the alignment registry."""

    reason = reasons.NO_ZOOKEEPER


class NoGroup(EpochStateError):
    """The daemon is not a member of a group (no ``--group``): JobsAdmin has nothing to manage."""

    reason = reasons.NO_GROUP


class TooManyCalls(EpochStateError):
    """As many calls of the kind as allowed are being served (:mod:`limits`)."""

    reason = reasons.TOO_MANY_CALLS


class ResponseTooLarge(EpochStateError):
    """The answer is larger than the response size limit (:mod:`limits`)."""

    reason = reasons.RESPONSE_TOO_LARGE


class NotAuthenticated(EpochStateError):
    """The call carried no credentials the daemon accepts (auth is enabled)."""

    reason = reasons.NOT_AUTHENTICATED


class RoleMissing(EpochStateError):
    """The caller's identity lacks the role the method needs."""

    reason = reasons.ROLE_MISSING


class CheckpointNotAllowed(EpochStateError):
    """A checkpoint to follow that lies outside ``auth.checkpoint_roots``."""

    reason = reasons.CHECKPOINT_NOT_ALLOWED


NO_DEADLINE = 1e9
"""Seconds left beyond which a call counts as having no deadline (gRPC reports a call
without one as ending in the far future)."""


def has_deadline(context: grpc.ServicerContext) -> bool:
    """Whether the caller set a deadline on the call."""
    remaining = context.time_remaining()
    return remaining is not None and remaining < NO_DEADLINE


def wait_budget(context: grpc.ServicerContext, max_wait: float | None = None) -> float | None:
    """How long a handler may wait for an epoch or a command, so that its own answer
    (with its reason) reaches the caller before the caller's deadline ends the call
    with a bare DEADLINE_EXCEEDED. A call without a deadline may wait ``max_wait``
    seconds (None: for ever).

    The margin grows with the deadline (a fifth of it, between 50 ms and 1 s): on a
    loaded machine sending the answer alone can take longer than a fixed 50 ms, and
    a caller that gave a long deadline can spare a longer margin.
    """
    if not has_deadline(context):
        return max_wait
    remaining: float = context.time_remaining()
    return max(0.0, remaining - min(1.0, max(0.05, remaining / 5)))


def status_for(error: EpochStateError) -> grpc.StatusCode:
    """The status code of ``error``: the code its reason travels with (INTERNAL for an
    error that declares no documented reason)."""
    reason = reasons.REASONS.get(error.reason)
    return grpc.StatusCode.INTERNAL if reason is None else grpc.StatusCode[reason.code]


Req = TypeVar("Req")
Resp = TypeVar("Resp")


def domain_errors(
    handler: Callable[[Any, Req, grpc.ServicerContext], Resp],
) -> Callable[[Any, Req, grpc.ServicerContext], Resp]:
    """Wrap a servicer method: a domain error it raises ends the call with its :func:`rich_status`."""

    @functools.wraps(handler)
    def wrapper(self: Any, request: Req, context: grpc.ServicerContext) -> Resp:
        try:
            return handler(self, request, context)
        except EpochStateError as error:
            abort(context, error)

    return wrapper


MAX_MESSAGE = 2048
"""Longest message sent, in characters. The trailers carry it twice (``grpc-message`` and
inside the status details), and a client drops trailers beyond 8 KiB by default."""
MAX_METADATA_VALUE = 256
"""Longest ``ErrorInfo.metadata`` value sent (a name taken from the request may be long)."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rich_status(error: EpochStateError) -> grpc.Status:
    """The status a call that failed with ``error`` ends with: its code, its message, and
    in the details one ``ErrorInfo`` with its reason, the domain and its metadata (the
    message and each metadata value cut to :data:`MAX_MESSAGE` and
    :data:`MAX_METADATA_VALUE` characters)."""
    code = status_for(error)
    message = _cut(str(error), MAX_MESSAGE)
    metadata = {key: _cut(value, MAX_METADATA_VALUE) for key, value in error.metadata.items()}
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=reasons.DOMAIN, metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return rpc_status.to_status(status)


def abort(context: grpc.ServicerContext, error: EpochStateError) -> NoReturn:
    """End the call with ``error``'s :func:`rich_status`."""
    context.abort_with_status(rich_status(error))
    raise AssertionError("unreachable: ServicerContext.abort_with_status raises")
