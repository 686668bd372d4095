"""The one table from domain errors to gRPC status codes.

Handlers raise domain errors; :func:`status_for` picks the code. The client maps
the codes back to typed exceptions (``epochstate.client.errors``).
"""

from __future__ import annotations

import grpc

from epochstate.daemon.errors import EpochStateError
from epochstate.daemon.ingest.catalog import JobNotFound, ShuttingDown, StoreNotFound
from epochstate.daemon.registry.errors import InvalidRecord, RegistryUnavailable
from epochstate.daemon.server.epochs import (
    BadSelector,
    EpochNotReady,
    EpochRetired,
    EpochUnavailable,
    EpochWaitTimedOut,
    NoSuchEpoch,
)
from epochstate.daemon.server.values import BadKey


class BadRequest(EpochStateError):
    """A request that is malformed apart from its key (limits, tokens, names)."""


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
)


def status_for(error: EpochStateError) -> grpc.StatusCode:
    for kind, code in STATUS_OF:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL
