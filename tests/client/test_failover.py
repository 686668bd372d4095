"""The failover loop against real gRPC servers on loopback: which error a read ends with."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from epochstate.client.client import CHANNEL_OPTIONS
from epochstate.client.errors import DeadlineExceeded, Unavailable
from epochstate.client.failover import first_answer
from epochstate.client.routing import Replicas
from epochstate.core import reasons

METHOD = "/test.Waiting/Get"


def _waited_in_vain(request: bytes, context: grpc.ServicerContext) -> bytes:
    """A replica that waited for an epoch that did not come, and says so before the deadline."""
    time.sleep(0.2)
    info = error_details_pb2.ErrorInfo(reason=reasons.EPOCH_WAIT_TIMED_OUT, domain=reasons.DOMAIN)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(
        code=grpc.StatusCode.DEADLINE_EXCEEDED.value[0], message="epoch 2 did not come", details=[detail]
    )
    context.abort_with_status(rpc_status.to_status(status))
    raise AssertionError("abort_with_status raises")


@pytest.fixture
def waiting_replica() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.unary_unary_rpc_method_handler(_waited_in_vain)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Waiting", {"Get": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def test_a_read_that_waited_in_vain_ends_deadline_exceeded_even_without_time_for_a_last_round(
    waiting_replica: str,
) -> None:
    """Round 0: one replica unreachable, the other answers EPOCH_WAIT_TIMED_OUT before the
    deadline; asking where the job is served again then takes most of the rest and the
    later rounds reach only the unreachable one. The read ends with the replica's own
    answer of round 0, not with the later silence or "no daemon answered"."""
    replicas = Replicas(None, CHANNEL_OPTIONS)
    dead = _closed_port()
    asked: list[tuple[int, float]] = []

    def candidates(round_: int, left: float) -> list[str]:
        asked.append((round_, left))
        if round_ > 0:  # a slow Locate spends most of what is left; only the dead one is listed
            time.sleep(max(0.0, left - 0.1))
            return [dead]
        return [dead, waiting_replica]

    def attempt(address: str, seconds: float) -> bytes:
        with grpc.insecure_channel(address) as channel:
            answer: bytes = channel.unary_unary(METHOD, None, None)(b"", timeout=seconds)
            return answer

    try:
        with pytest.raises(DeadlineExceeded, match="epoch 2 did not come"):
            first_answer(candidates, attempt, 1.5, replicas, waits=True)
    finally:
        replicas.close()
    assert asked[0][0] == 0 and asked[0][1] == pytest.approx(1.5, abs=0.1)
    assert len(asked) >= 2 and asked[1][1] < 1.5  # the next round is given only the time left


def test_no_answer_at_all_is_unavailable() -> None:
    replicas = Replicas(None, CHANNEL_OPTIONS)
    dead = _closed_port()

    def attempt(address: str, seconds: float) -> bytes:
        with grpc.insecure_channel(address) as channel:
            answer: bytes = channel.unary_unary(METHOD, None, None)(b"", timeout=seconds)
            return answer

    try:
        with pytest.raises(Unavailable):
            first_answer(lambda _, __: [dead], attempt, 1.0, replicas, waits=True)
    finally:
        replicas.close()
