"""The standard ``grpc.health.v1`` Check, for probes and scripts (``epochstate health``).

The client carries no generated health stubs (they come with the daemon's extra):
the two messages are one field each, so they are written and read here directly
in protobuf's wire format.
"""

from __future__ import annotations

import grpc

from epochstate.client.errors import EpochStateClientError, InvalidArgument, NotFound, from_rpc_error
from epochstate.client.tls import TlsOptions, open_channel

CHECK = "/grpc.health.v1.Health/Check"

# grpc.health.v1.HealthCheckResponse.ServingStatus, by number.
STATUSES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _request(service: str) -> bytes:
    """``HealthCheckRequest{service}``: field 1, length-delimited (empty: no field at all)."""
    data = service.encode()
    if not data:
        return b""
    return b"\x0a" + _varint(len(data)) + data


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _status(data: bytes) -> str:
    """The status of a ``HealthCheckResponse`` (field 1, a varint; absent: 0)."""
    status, at = 0, 0
    while at < len(data):
        key, at = _read_varint(data, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _read_varint(data, at)
            if field == 1:
                status = value
        elif wire == 2:
            length, at = _read_varint(data, at)
            at += length
        else:  # a field type the message does not have
            raise InvalidArgument(f"health: cannot read the answer (wire type {wire})")
    return STATUSES.get(status, f"status {status}")


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise InvalidArgument("health: the answer ends inside a number")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


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
        check = channel.unary_unary(CHECK, request_serializer=None, response_deserializer=None)
        answer = check(_request(service), timeout=timeout)
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:  # the health service's answer, without details
            raise NotFound(f"{target} has no health service {service!r}", error.code()) from None
        raise from_rpc_error(error) from None
    finally:
        channel.close()
    if not isinstance(answer, bytes):
        raise EpochStateClientError(f"health: unexpected answer {type(answer).__name__}")
    return _status(answer)
