"""The client's hand-written grpc.health.v1 messages against protobuf's own classes."""

from __future__ import annotations

import pytest
from grpc_health.v1 import health_pb2

from epochstate.client.errors import InvalidArgument
from epochstate.client.health import STATUSES, _request, _status


@pytest.mark.parametrize("service", ["", "liveness", "epochstate.v1.EpochState", "é" * 100, "x" * 20000])
def test_requests_are_what_protobuf_writes(service: str) -> None:
    assert _request(service) == health_pb2.HealthCheckRequest(service=service).SerializeToString()
    assert health_pb2.HealthCheckRequest.FromString(_request(service)).service == service


@pytest.mark.parametrize("status", sorted(STATUSES))
def test_every_status_is_read(status: int) -> None:
    answer = health_pb2.HealthCheckResponse(status=status).SerializeToString()
    assert _status(answer) == STATUSES[status]


def test_unknown_fields_are_skipped_and_a_cut_answer_refused() -> None:
    serving = health_pb2.HealthCheckResponse(
        status=health_pb2.HealthCheckResponse.SERVING
    ).SerializeToString()
    unknown_fields = b"\x12\x03abc" + b"\x18\x96\x01"  # field 2 bytes, field 3 varint 150
    assert _status(unknown_fields + serving) == "SERVING"
    assert _status(b"\x08\x07") == "status 7"
    with pytest.raises(InvalidArgument):
        _status(b"\x08\x80")
    with pytest.raises(InvalidArgument):
        _status(b"\x0d\x00\x00\x00\x00")  # a fixed32: the message has none
