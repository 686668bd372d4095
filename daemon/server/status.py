"""The one table from domain errors to gRPC status codes.

Handlers raise domain errors; :func:`status_for` picks the code. One code can
stand for several errors (FAILED_PRECONDITION: an epoch not ready yet, an epoch
that can never exist, a refused alignment command), so the error's kind also
travels in the trailing metadata under :data:`ERROR_KIND_KEY` (the domain error's
class name). The client maps code and kind back to typed exceptions
(``epochstate.client.errors``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import grpc

from epochstate.core.alignment import errors as alignment
from epochstate.core.errors import EpochStateError
from epochstate.core.zookeeper.errors import InvalidRecord, RegistryUnavailable
from epochstate.daemon.server.epochs import (
    BadSelector,
    EpochNotReady,
    EpochRetired,
    EpochUnavailable,
    EpochWaitTimedOut,
    NoSuchEpoch,
)
from epochstate.daemon.server.values import BadKey
from epochstate.daemon.store.catalog import JobNotFound, ShuttingDown, StoreNotFound


class BadRequest(EpochStateError):
    """A request that is malformed apart from its key (limits, tokens, names)."""


class NoZooKeeper(EpochStateError):
    """The daemon runs without ZooKeeper (no ``--zookeeper``): it cannot reach the alignment registry."""


STATUS_OF: tuple[tuple[type[EpochStateError], grpc.StatusCode], ...] = (
    (JobNotFound, grpc.StatusCode.NOT_FOUND),
    (StoreNotFound, grpc.StatusCode.NOT_FOUND),
    (BadKey, grpc.StatusCode.INVALID_ARGUMENT),
    (BadSelector, grpc.StatusCode.INVALID_ARGUMENT),
    (BadRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (EpochNotReady, grpc.StatusCode.FAILED_PRECONDITION),
    (NoSuchEpoch, grpc.StatusCode.FAILED_PRECONDITION),
    (EpochWaitTimedOut, grpc.StatusCode.DEADLINE_EXCEEDED),
    (EpochRetired, grpc.StatusCode.OUT_OF_RANGE),
    (EpochUnavailable, grpc.StatusCode.DATA_LOSS),
    (ShuttingDown, grpc.StatusCode.UNAVAILABLE),
    # Reads that consult ZooKeeper (aligned_with): the client retries UNAVAILABLE.
    (RegistryUnavailable, grpc.StatusCode.UNAVAILABLE),
    (InvalidRecord, grpc.StatusCode.DATA_LOSS),
    # AlignmentAdmin.
    (alignment.SubjectNotFound, grpc.StatusCode.NOT_FOUND),
    (alignment.SourceNotFound, grpc.StatusCode.NOT_FOUND),
    (alignment.InvalidTransition, grpc.StatusCode.FAILED_PRECONDITION),
    (alignment.InvalidOption, grpc.StatusCode.INVALID_ARGUMENT),
    (alignment.NotAnswered, grpc.StatusCode.DEADLINE_EXCEEDED),
    (alignment.RegistryUnavailable, grpc.StatusCode.UNAVAILABLE),
    (alignment.CorruptSubjectRecord, grpc.StatusCode.DATA_LOSS),
    (NoZooKeeper, grpc.StatusCode.FAILED_PRECONDITION),
)


def wait_budget(context: grpc.ServicerContext) -> float | None:
    """How long a handler may wait for an epoch or a command, so that its own answer
    (with its reason) reaches the caller before the caller's deadline ends the call
    with a bare DEADLINE_EXCEEDED. None: the call has no deadline.

    The margin grows with the deadline (a fifth of it, between 50 ms and 0.5 s): on
    a loaded machine sending the answer alone took longer than a fixed 50 ms.
    """
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return max(0.0, remaining - min(0.5, max(0.05, remaining / 5)))


ERROR_KIND_KEY = "epochstate-error"
"""Trailing-metadata key naming the domain error that ended a call (its class name)."""


def status_for(error: EpochStateError) -> grpc.StatusCode:
    for kind, code in STATUS_OF:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL


Req = TypeVar("Req")
Resp = TypeVar("Resp")


def domain_errors(
    handler: Callable[[Any, Req, grpc.ServicerContext], Resp],
) -> Callable[[Any, Req, grpc.ServicerContext], Resp]:
    """Wrap a servicer method: a domain error it raises ends the call with its status code."""

    @functools.wraps(handler)
    def wrapper(self: Any, request: Req, context: grpc.ServicerContext) -> Resp:
        try:
            return handler(self, request, context)
        except EpochStateError as error:
            abort(context, error)

    return wrapper


def abort(context: grpc.ServicerContext, error: EpochStateError) -> NoReturn:
    """End the call with ``error``'s status code, its message, and its kind in the trailing metadata."""
    context.set_trailing_metadata(((ERROR_KIND_KEY, type(error).__name__),))
    context.abort(status_for(error), str(error))
    raise AssertionError("unreachable: ServicerContext.abort raises")
