"""The call pool under the limiter, on a real in-process gRPC server: few threads run
quick calls, and held calls (waiting reads, streams, admin calls) never stop them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from epochstate.daemon.server.call_pool import STALL_SECONDS, CallPool
from epochstate.daemon.server.limits import CallLimiter, CallLimits
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.v1 import epochstate_pb2 as pb
from tests.server.limited import OURS, start_limited

# Two quick threads, and more held slots than quick threads.
LIMITS = CallLimits(unary_reads=8, waiting_reads=3, streams=3, reports=1, admin=3, reserve=1, quick_threads=2)
WAITING = pb.GetRequest(epoch=pb.EpochSelector(at_least=3)).SerializeToString()


class Handlers:
    """Held methods block until their call is cancelled or :meth:`release`; ListJobs blocks
    only while ``fast`` is clear. ``entered`` and ``quick_entered`` count the calls that
    reached a handler."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ends: list[threading.Event] = []
        self._released = False
        self.fast = threading.Event()
        self.fast.set()
        self.entered = threading.Semaphore(0)
        self.quick_entered = threading.Semaphore(0)
        self.before: set[threading.Thread] = set()

    def _hold(self, context: grpc.ServicerContext) -> None:
        end = threading.Event()
        context.add_callback(end.set)
        with self._lock:
            self._ends.append(end)
            if self._released:
                end.set()
        self.entered.release()
        end.wait(30)

    def release(self) -> None:
        with self._lock:
            self._released = True
            for end in self._ends:
                end.set()

    def held(self, request: Any, context: grpc.ServicerContext) -> bytes:
        self._hold(context)
        return b"held"

    def stream(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        self._hold(context)
        yield b"held"

    def quick(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.quick_entered.release()
        self.fast.wait(30)
        return b"quick"


@pytest.fixture
def metrics() -> DaemonMetrics:
    return DaemonMetrics()


@pytest.fixture
def served(metrics: DaemonMetrics) -> Iterator[tuple[grpc.Channel, Handlers]]:
    handlers = Handlers()
    before = set(threading.enumerate())
    methods = {
        "ListJobs": grpc.unary_unary_rpc_method_handler(handlers.quick),
        "FollowJob": grpc.unary_unary_rpc_method_handler(handlers.held),
        "Get": grpc.unary_unary_rpc_method_handler(
            handlers.held, request_deserializer=pb.GetRequest.FromString
        ),
        "WatchEpochs": grpc.unary_stream_rpc_method_handler(handlers.stream),
    }
    server, port = start_limited(LIMITS, metrics, methods)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        handlers.before = before
        yield channel, handlers
        handlers.release()
        handlers.fast.set()
    server.stop(None).wait(30)


def _answers(calls: list[Any]) -> list[Any]:
    """What the calls of :func:`_hold_every_slot` answered (a stream: its list of responses)."""
    streams = range(LIMITS.waiting_reads, LIMITS.waiting_reads + LIMITS.streams)
    return [list(call) if i in streams else call.result(timeout=30) for i, call in enumerate(calls)]


def _hold_every_slot(channel: grpc.Channel, handlers: Handlers) -> list[Any]:
    """Every waiting read, stream and admin slot taken by a call left running."""
    calls: list[Any] = []
    for _ in range(LIMITS.waiting_reads):
        calls.append(channel.unary_unary(f"/{OURS}/Get", None, None).future(WAITING, timeout=30))
    for _ in range(LIMITS.streams):
        calls.append(channel.unary_stream(f"/{OURS}/WatchEpochs", None, None)(b"", timeout=30))
    for _ in range(LIMITS.admin):
        calls.append(channel.unary_unary(f"/{OURS}/FollowJob", None, None).future(b"", timeout=30))
    for _ in calls:
        assert handlers.entered.acquire(timeout=30), "a held call never reached its handler"
    return calls


def _pool_threads(handlers: Handlers) -> int:
    """Threads of this test's server's pool."""
    return sum(1 for t in threading.enumerate() if t.name.startswith("grpc_") and t not in handlers.before)


def _in_flight(metrics: DaemonMetrics) -> float:
    """Calls the limiter counts in flight, every kind."""
    return sum(
        sample.value
        for family in metrics.registry.collect()
        if family.name == "epochstate_calls_in_flight"
        for sample in family.samples
    )


def test_quick_calls_and_health_answer_while_every_held_slot_is_taken(
    served: tuple[grpc.Channel, Handlers],
) -> None:
    channel, handlers = served
    held = _hold_every_slot(channel, handlers)
    assert len(held) > LIMITS.quick_threads
    list_jobs = channel.unary_unary(f"/{OURS}/ListJobs", None, None)
    # More quick calls than quick threads, each answered while nine calls hold their threads.
    for _ in range(3 * LIMITS.quick_threads):
        assert list_jobs(b"", timeout=10) == b"quick"
    status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert status.status == health_pb2.HealthCheckResponse.SERVING
    # Threads: the held calls' and the quick ones (and any lent through a stall of the
    # loaded machine), never one per call served.
    assert _pool_threads(handlers) < len(held) + 3 * LIMITS.quick_threads + 1
    handlers.release()
    assert (
        _answers(held)
        == [b"held"] * LIMITS.waiting_reads + [[b"held"]] * LIMITS.streams + [b"held"] * LIMITS.admin
    )


def test_quick_calls_wait_behind_quick_calls_until_those_stall(
    served: tuple[grpc.Channel, Handlers],
) -> None:
    channel, handlers = served
    handlers.fast.clear()
    list_jobs = channel.unary_unary(f"/{OURS}/ListJobs", None, None)
    running = [list_jobs.future(b"", timeout=30) for _ in range(LIMITS.quick_threads)]
    for _ in running:
        assert handlers.quick_entered.acquire(timeout=30)
    queued = list_jobs.future(b"", timeout=30)
    # The quick threads are busy: the next quick call waits for one of them, until no call
    # was taken for a whole stall; then it gets a thread of its own (a client that never
    # sends its request holds a quick thread the same way).
    assert not handlers.quick_entered.acquire(timeout=STALL_SECONDS / 2)
    assert handlers.quick_entered.acquire(timeout=30)
    handlers.fast.set()
    assert [call.result(timeout=30) for call in [*running, queued]] == [b"quick"] * (LIMITS.quick_threads + 1)


def test_cancelled_calls_leave_no_thread_and_no_slot(
    served: tuple[grpc.Channel, Handlers], metrics: DaemonMetrics
) -> None:
    channel, handlers = served
    get = channel.unary_unary(f"/{OURS}/Get", None, None)
    list_jobs = channel.unary_unary(f"/{OURS}/ListJobs", None, None)
    for _ in range(20):
        # Held calls cancelled while they run, and quick calls cancelled before a thread ran them.
        held = [get.future(WAITING, timeout=30) for _ in range(LIMITS.waiting_reads)]
        for _ in held:
            assert handlers.entered.acquire(timeout=30)
        handlers.fast.clear()
        busy = [list_jobs.future(b"", timeout=30) for _ in range(LIMITS.quick_threads)]
        for _ in busy:
            assert handlers.quick_entered.acquire(timeout=30)
        queued = [list_jobs.future(b"", timeout=30) for _ in range(5)]
        for call in [*held, *queued]:
            call.cancel()  # type: ignore[no-untyped-call]  # untyped in grpc-stubs
        handlers.fast.set()
        assert [call.result(timeout=30) for call in busy] == [b"quick"] * LIMITS.quick_threads
        # A cancelled call's slot is given back once its handler returned, after its caller saw it end.
        deadline = time.monotonic() + 10
        while _in_flight(metrics) and time.monotonic() < deadline:
            handlers.fast.wait(0.01)
        assert _in_flight(metrics) == 0
    # Every slot is free again: the limits admit as many held calls as before.
    again = _hold_every_slot(channel, handlers)
    handlers.release()
    assert len(_answers(again)) == len(again)
    # 160 calls cancelled left no thread each: the pool is within its bound (its spares
    # included, lent through stalls while the quick threads were kept busy on purpose).
    assert _pool_threads(handlers) <= LIMITS.threads


@dataclass(frozen=True)
class _Details:
    """What gRPC tells a server interceptor of a call."""

    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


def test_only_calls_that_may_be_unary_reads_count_while_they_wait_for_a_quick_thread(
    metrics: DaemonMetrics,
) -> None:
    # gRPC submits each call with its handler among the arguments; a health check's handler is
    # not limited, a stream's and an admin call's are limited as held: none is a unary read.
    pool = CallPool(1, 8, "count")
    limiter = CallLimiter(LIMITS, metrics, pool=pool)

    def handler(method: str, streams: bool = False) -> Any:
        def behavior(request: Any, context: grpc.ServicerContext) -> Any:
            raise AssertionError("not called")

        if streams:
            given = grpc.unary_stream_rpc_method_handler(behavior)
        else:
            given = grpc.unary_unary_rpc_method_handler(behavior)
        details = cast(grpc.HandlerCallDetails, _Details(method))
        limited = limiter.intercept_service(lambda _: given, details)
        assert limited is not None
        return limited.unary_unary or limited.unary_stream

    reads = [handler(f"/{OURS}/{name}") for name in ("Get", "ListJobs", "History")]
    others = [
        handler("/grpc.health.v1.Health/Check"),
        handler(f"/{OURS}/WatchEpochs", streams=True),
        handler(f"/{OURS}/FollowJob"),
    ]
    running, release = threading.Event(), threading.Event()

    def call(behavior: Any) -> None:
        running.set()
        release.wait(30)

    try:
        first = pool.submit(call, others[2])
        assert running.wait(30)  # the only quick thread is busy: the rest wait in the queue
        queued = [pool.submit(call, behavior) for behavior in [*others, *reads, *others]]
        assert pool.waiting() == len(reads)
    finally:
        release.set()
    for future in [first, *queued]:
        future.result(timeout=30)
    assert pool.waiting() == 0
    pool.shutdown()


def test_health_checks_answer_at_once_while_quick_calls_wait_for_the_quick_threads(
    metrics: DaemonMetrics,
) -> None:
    # No stall in this test's time: nothing but running first lets a check past the queue.
    pool = CallPool(1, 8, "checks", stall_seconds=3600)
    limiter = CallLimiter(LIMITS, metrics, pool=pool)
    ran: list[str] = []

    def behavior_of(method: str, behavior: Any) -> Any:
        details = cast(grpc.HandlerCallDetails, _Details(method))
        limited = limiter.intercept_service(lambda _: grpc.unary_unary_rpc_method_handler(behavior), details)
        assert limited is not None
        return limited.unary_unary

    release = threading.Event()

    def reading(request: Any, context: Any) -> None:
        ran.append("read")
        release.wait(30)

    read = behavior_of(f"/{OURS}/Get", reading)
    check = behavior_of("/grpc.health.v1.Health/Check", lambda request, context: ran.append("check"))

    def call(behavior: Any) -> Any:  # as gRPC calls a behavior: with its request and context
        return behavior(None, None)

    try:
        reads = [pool.submit(call, read) for _ in range(6)]
        checks = [pool.submit(call, check) for _ in range(3)]
        for future in checks:
            future.result(timeout=30)
        # Every check answered; one read runs on the only quick thread, the others still wait.
        assert ran.count("check") == 3 and ran.count("read") == 1
        assert pool.waiting() == 5
    finally:
        release.set()
    for future in reads:
        future.result(timeout=30)
    assert ran.count("read") == 6
    pool.shutdown()
    # Shut down, the pool's threads ended, the one that ran the checks among them.
    assert {t.name for t in threading.enumerate()} & {"checks_first", "checks_1"} == set()


def test_a_thread_lent_through_a_stall_is_given_back_once_no_call_waits() -> None:
    stall = 0.5
    pool = CallPool(1, 4, "lend", stall_seconds=stall)
    started = threading.Semaphore(0)

    def call(release: threading.Event) -> None:
        started.release()
        release.wait(30)

    try:
        for _ in range(2):
            stuck, queued = threading.Event(), threading.Event()
            first = pool.submit(call, stuck)
            assert started.acquire(timeout=30)
            second = pool.submit(call, queued)
            # Behind the only quick thread until a whole stall passed with no call taken;
            # the second round shows the thread lent in the first was given back.
            assert not started.acquire(timeout=stall / 2)
            assert started.acquire(timeout=30)
            queued.set()
            second.result(timeout=30)
            stuck.set()
            first.result(timeout=30)
            assert pool.waiting() == 0
        assert pool.threads() <= 2
    finally:
        pool.shutdown()
