"""The standard ``grpc.health.v1`` Check, for probes and scripts (``epochstate health``).

The messages come from ``grpcio-health-checking`` (a dependency of the client: it
needs only grpcio and protobuf, which the client has anyway).
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2

from epochstate.client.errors import NotFound, from_rpc_error
from epochstate.client.tls import TlsOptions, open_channel

CHECK = "/grpc.health.v1.Health/Check"

# grpc.health.v1.HealthCheckResponse.ServingStatus, by number.
STATUSES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def check_health(
    target: str, service: str = "", *, tls: TlsOptions | None = None, timeout: float = 5.0
) -> str:
    """The serving status ``target`` reports for ``service`` (``""``: the daemon as a whole):
    ``SERVING``, ``NOT_SERVING``, ``UNKNOWN`` or ``SERVICE_UNKNOWN``. One call, no retry.

    Raises :class:`~epochstate.client.errors.NotFound` for a service the daemon does not
    know, :class:`~epochstate.client.errors.Unavailable` when it cannot be reached, and the
    other client errors as any call does."""
    channel = open_channel(target, tls)
    try:
        check = channel.unary_unary(
            CHECK,
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        answer = check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:  # the health service's answer, without details
            raise NotFound(f"{target} has no health service {service!r}", error.code()) from None
        raise from_rpc_error(error) from None
    finally:
        channel.close()
    return STATUSES.get(answer.status, f"status {answer.status}")
