"""The call limiter on a real gRPC server: each kind refused past its limit, with its reason.

Unary reads, reports and admin calls end at once in the daemon, so they cannot be
held open there: here handlers of the same method names block until released, on
the server :func:`limited_server` builds. The real daemon's streams and waiting
reads are held in ``tests/e2e/test_limits.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from epochstate.client.errors import TooManyCalls, from_rpc_error
from epochstate.core import reasons
from epochstate.daemon.server.limits import CallKind, CallLimits, kind_of
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.v1 import epochstate_pb2 as pb
from tests.server.limited import OURS, start_limited

LIMITS = CallLimits(unary_reads=2, waiting_reads=1, streams=1, reports=1, admin=1, reserve=2)


class Blocking:
    """Handlers that hold their call until :meth:`release`; ``entered`` counts admitted calls."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)

    def unary(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.entered.release()
        self.gate.wait(30)
        return b""

    def stream(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        self.entered.release()
        self.gate.wait(30)
        yield b""

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def served() -> Iterator[tuple[str, Blocking]]:
    blocking = Blocking()
    unary = grpc.unary_unary_rpc_method_handler(blocking.unary)
    handlers = {name: unary for name in ("ListJobs", "ReportEpoch", "FollowJob")} | {
        # The limiter reads a read's selector from the decoded request.
        "Get": grpc.unary_unary_rpc_method_handler(
            blocking.unary, request_deserializer=pb.GetRequest.FromString
        ),
        "WatchEpochs": grpc.unary_stream_rpc_method_handler(blocking.stream),
    }
    server, port = start_limited(LIMITS, DaemonMetrics(), handlers)
    yield f"127.0.0.1:{port}", blocking
    blocking.release()
    server.stop(None)


def _held(channel: grpc.Channel, method: str, request: bytes, streams: bool) -> Any:
    """A call started and left running: its handler runs whether or not its answer is read."""
    if streams:
        return channel.unary_stream(f"/{OURS}/{method}", None, None)(request, timeout=30)
    return channel.unary_unary(f"/{OURS}/{method}", None, None).future(request, timeout=30)


def _answer(call: Any, streams: bool) -> Any:
    """What a held call answered, once it ended (its deadline bounds the wait)."""
    return list(call) if streams else call.result(timeout=30)


CASES = [
    ("ListJobs", b"", False, CallKind.UNARY_READ),
    (
        "Get",
        pb.GetRequest(epoch=pb.EpochSelector(at_least=3)).SerializeToString(),
        False,
        CallKind.WAITING_READ,
    ),
    ("WatchEpochs", b"", True, CallKind.STREAM),
    ("ReportEpoch", b"", False, CallKind.REPORT),
    ("FollowJob", b"", False, CallKind.ADMIN),
]


@pytest.mark.parametrize(
    ("method", "request_bytes", "streams", "kind"), CASES, ids=[c[3].value for c in CASES]
)
def test_each_kind_is_refused_past_its_limit_while_health_answers(
    served: tuple[str, Blocking], method: str, request_bytes: bytes, streams: bool, kind: CallKind
) -> None:
    target, blocking = served
    limit = LIMITS.of(kind)
    with grpc.insecure_channel(target) as channel:
        held = []
        for _ in range(limit):
            held.append(_held(channel, method, request_bytes, streams))
            assert blocking.entered.acquire(timeout=30), "the held call never reached its handler"
        if streams:
            with pytest.raises(grpc.RpcError) as refused:
                list(channel.unary_stream(f"/{OURS}/{method}", None, None)(request_bytes, timeout=30))
        else:
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary(f"/{OURS}/{method}", None, None)(request_bytes, timeout=30)
        error = from_rpc_error(refused.value)
        assert isinstance(error, TooManyCalls) and error.reason == reasons.TOO_MANY_CALLS
        assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.metadata == {"kind": kind.value, "limit": str(limit)}
        assert f"already serves {limit}" in str(error)

        # Other kinds and health are not affected by this kind being full.
        other = "FollowJob" if method != "FollowJob" else "ReportEpoch"
        probe = channel.unary_unary(f"/{OURS}/{other}", None, None).future(b"", timeout=30)
        assert blocking.entered.acquire(timeout=30)
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert status.status == health_pb2.HealthCheckResponse.SERVING

        blocking.release()
        probe.result(timeout=30)
        # A call gives its slot back before its end is sent (a unary call before its answer, a
        # stream before its status): once its caller has seen it end, the slot is free. Seeing
        # a stream's last message is not enough: its handler may not have finished yet.
        assert [_answer(call, streams) for call in held] == [[b""] if streams else b""] * limit
        if streams:
            assert list(channel.unary_stream(f"/{OURS}/{method}", None, None)(request_bytes, timeout=30)) == [
                b""
            ]
        else:
            assert channel.unary_unary(f"/{OURS}/{method}", None, None)(request_bytes, timeout=30) == b""


def test_reads_are_waiting_reads_when_their_selector_may_wait() -> None:
    get = f"/{OURS}/Get"

    def kind(**selector: Any) -> CallKind | None:
        return kind_of(get, False, pb.GetRequest(epoch=pb.EpochSelector(**selector)))

    assert kind() == CallKind.UNARY_READ  # latest
    assert kind(exact=3) == CallKind.UNARY_READ
    assert kind(exact=3, wait=True) == CallKind.WAITING_READ
    assert kind(at_least=3) == CallKind.WAITING_READ
    assert kind(covers=pb.Position()) == CallKind.WAITING_READ
    assert kind(aligned_with=pb.AlignedWith(job="a", epoch=1)) == CallKind.WAITING_READ
    assert kind(as_of_time=1_700_000_000_000) == CallKind.WAITING_READ
    history = f"/{OURS}/History"
    assert kind_of(history, False, pb.HistoryRequest(to_epoch=3)) == CallKind.UNARY_READ
    assert kind_of(history, False, pb.HistoryRequest(wait=True)) == CallKind.UNARY_READ  # the newest
    assert kind_of(history, False, pb.HistoryRequest(to_epoch=3, wait=True)) == CallKind.WAITING_READ
    assert kind_of(history, False) == CallKind.UNARY_READ  # not known yet
    assert kind_of(f"/{OURS}/Changes", True, pb.ChangesRequest(follow=True)) == CallKind.STREAM
    assert kind_of("/grpc.health.v1.Health/Check", False) is None
    assert kind_of("/grpc.health.v1.Health/Watch", True) == CallKind.STREAM
    assert kind_of(f"/{OURS}/ListEpochs", False) == CallKind.UNARY_READ
    assert kind_of("/epochstate.v1.Routing/Locate", False, pb.LocateRequest(job="a")) == CallKind.UNARY_READ
    assert kind_of("/epochstate.v1.AlignmentAdmin/Align", False) == CallKind.ADMIN
    assert LIMITS.threads == 2 + 1 + 1 + 1 + 1 + 2
