"""Bounded concurrent calls per kind of method, and the response size limit.

The daemon serves every call on one thread pool (one concurrency model per
process: the store, the catalog's waits and kazoo are all thread-based). A call
holds its thread while it runs, so a call that can last (a stream, a read that
waits for its epoch) must never be able to take the threads the quick calls
need. :class:`CallLimiter` admits each call against the limit of its kind and
refuses it past the limit (RESOURCE_EXHAUSTED, reason TOO_MANY_CALLS). The pool
(:class:`~epochstate.daemon.server.call_pool.CallPool`) runs at most
:attr:`CallLimits.quick_threads` calls not known to be held, and gives each call the
limiter admits as held (every kind but unary reads) a thread of its own, at once: so
no call waits behind a held one, and reflection and refusals wait only for quick
calls; health checks, answered from memory, wait for none (the pool runs them
first). The threads are at most :attr:`CallLimits.threads`, the sum of all limits
plus a reserve. Unary reads count against their limit the calls waiting
for a quick thread that may be unary reads (their kind is not known until a thread
reads their request); a health check, a stream or an admin call waiting there does not
count.

Kinds (see :func:`kind_of`):

* unary reads: Get, MultiGet and Scan whose selector never waits (an exact epoch
  without ``wait``, the latest), History without ``wait``, ListJobs, DescribeJob,
  ListEpochs, Routing's Locate;
* waiting reads: Get, MultiGet and Scan whose selector may wait (``at_least``,
  ``exact`` with ``wait``, ``covers``, ``aligned_with``, ``as_of_time``), History
  with ``wait`` and a ``to_epoch``, classified by the request so the limit holds
  before any wait begins;
* streams: WatchEpochs, Changes, and the streams of other services (health Watch,
  reflection);
* reports: ReportEpoch;
* admin: FollowJob, AlignmentAdmin and any other method of ours.

``grpc.health.v1.Health/Check`` is never limited: it answers from memory at once.

The limits are the daemon's: with several serving processes, their calls count
together (:mod:`epochstate.daemon.server.shared_limits`).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from epochstate.daemon.server import call_pool
from epochstate.daemon.server.call_pool import CallPool
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.shared_limits import SharedCalls
from epochstate.daemon.server.status import ResponseTooLarge, TooManyCalls, abort

OURS = "/epochstate.v1.EpochState/"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_SELECTED_READS = frozenset(f"{OURS}{name}" for name in ("Get", "MultiGet", "Scan"))
_UNARY_READS = frozenset(f"{OURS}{name}" for name in ("ListJobs", "DescribeJob", "ListEpochs")) | {
    "/epochstate.v1.Routing/Locate"
}
# Methods whose calls are unary or waiting reads by their request (kind_of).
_KIND_BY_REQUEST = _SELECTED_READS | {f"{OURS}History"}
_WAITING_SELECTORS = frozenset({"at_least", "covers", "aligned_with", "as_of_time"})
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class CallKind(enum.Enum):
    """A kind of call, limited on its own; the value names it in messages and metrics."""

    UNARY_READ = "unary_reads"
    WAITING_READ = "waiting_reads"
    STREAM = "streams"
    REPORT = "reports"
    ADMIN = "admin"


@dataclass(frozen=True)
class CallLimits:
    """How many calls of each kind may run at once; ``reserve`` threads are kept beyond them,
    and at most ``quick_threads`` of all the threads run calls not known to be held."""

    unary_reads: int = 64
    waiting_reads: int = 128
    streams: int = 128
    reports: int = 32
    admin: int = 16
    reserve: int = 16
    max_response_bytes: int = 16 << 20
    quick_threads: int = 16
    """Threads that run the calls not known to be held (:mod:`call_pool`); 0: no such bound,
    a thread for every call admitted at once (:attr:`threads`)."""

    def of(self, kind: CallKind) -> int:
        """The limit of ``kind``."""
        limit: int = getattr(self, kind.value)
        return limit

    @property
    def threads(self) -> int:
        """Threads the server's pool needs: every admitted call at once, plus the reserve."""
        return sum(self.of(kind) for kind in CallKind) + self.reserve


def may_wait(selector: Any) -> bool:
    """Whether a read with this ``EpochSelector`` may wait for its epoch."""
    kind = selector.WhichOneof("kind")
    return kind in _WAITING_SELECTORS or (kind == "exact" and bool(selector.wait))


def kind_of(method: str, streams: bool, request: Any = None) -> CallKind | None:
    """The kind of a call to ``method`` (full name ``/package.Service/Method``) whose
    responses are a stream if ``streams``; None: not limited (health Check).
    ``request`` decides between unary and waiting reads (None: not known yet)."""
    if method == HEALTH_CHECK:
        return None
    if streams:
        return CallKind.STREAM
    if method in _SELECTED_READS:
        selector = getattr(request, "epoch", None)
        waits = selector is not None and hasattr(selector, "WhichOneof") and may_wait(selector)
        return CallKind.WAITING_READ if waits else CallKind.UNARY_READ
    if method == f"{OURS}History":
        # Waits only for a to_epoch not queryable yet, and only when asked to.
        waits = bool(getattr(request, "wait", False)) and request.HasField("to_epoch")
        return CallKind.WAITING_READ if waits else CallKind.UNARY_READ
    if method in _UNARY_READS:
        return CallKind.UNARY_READ
    if method == f"{OURS}ReportEpoch":
        return CallKind.REPORT
    return CallKind.ADMIN


class _Gate:
    """Admits up to ``limit`` calls of one kind at once; never blocks. With ``shared``, the
    limit holds for every process of the daemon together (:mod:`shared_limits`).

    The calls in flight are counted here only (the gate's counter, or this process's row of
    ``shared``) and read by the metrics at scrape time: a gauge moved on every call would
    cost two more locked updates per call."""

    def __init__(
        self,
        kind: CallKind,
        limit: int,
        metrics: DaemonMetrics,
        shared: SharedCalls | None = None,
        waiting: Callable[[], int] | None = None,
    ) -> None:
        self.kind = kind
        self.limit = limit
        # Calls that may be of this kind and wait for a thread count against its limit.
        self._waiting = waiting or (lambda: 0)
        self._held = kind is not CallKind.UNARY_READ
        self._refused = metrics.calls_refused.labels(kind.value)
        self.in_flight: Callable[[], int]
        if shared is None:
            self._take: Callable[[], bool] = self._take_here
            self.leave: Callable[[], None] = self._give_here
            self._lock = threading.Lock()
            self._admitted = 0
            self.in_flight = lambda: self._admitted
        else:
            index = list(CallKind).index(kind)
            self._take = lambda: shared.enter(index, limit - self._waiting())
            self.leave = lambda: shared.leave(index)
            self.in_flight = lambda: shared.mine(index)

    # A counter under a lock: a third of the CPU of threading's semaphore (a Condition).
    def _take_here(self) -> bool:
        with self._lock:
            if self._admitted + self._waiting() >= self.limit:
                return False
            self._admitted += 1
            return True

    def _give_here(self) -> None:
        with self._lock:
            self._admitted -= 1

    def admit(self, context: grpc.ServicerContext) -> None:
        """Admit a call, which :meth:`leave` ends, exactly once. Aborts the call past the limit."""
        if self._take():
            if self._held:
                call_pool.held()
        else:
            self._refused.inc()
            abort(
                context,
                TooManyCalls(
                    f"the daemon already serves {self.limit} {self.kind.value.replace('_', ' ')} "
                    f"(its limit); retry with back-off or on another replica",
                    metadata={"kind": self.kind.value, "limit": str(self.limit)},
                ),
            )

    def enter(self, context: grpc.ServicerContext) -> Callable[[], None]:
        """Admit a call whose end may be seen twice (a stream's callback and its generator):
        returns what ends it, idempotent. Aborts the call past the limit."""
        self.admit(context)
        lock = threading.Lock()
        left = False
        give = self.leave

        def leave() -> None:
            nonlocal left
            with lock:
                if left:
                    return
                left = True
            give()

        return leave


if TYPE_CHECKING:
    _Interceptor: TypeAlias = grpc.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.ServerInterceptor


def unary_only(kind: CallKind, waiting: Callable[[], int] | None) -> Callable[[], int] | None:
    """What counts against ``kind``'s limit beyond its admitted calls: the calls of methods
    that may be unary reads waiting for a quick thread (of unknown kind until they run)
    against the unary reads' limit."""
    return waiting if kind is CallKind.UNARY_READ else None


class CallLimiter(_Interceptor):
    """Admits every call against the limit of its kind (see the module docstring), and
    refuses a raw (bytes) response larger than ``limits.max_response_bytes``. ``shared``:
    the counts of every process of the daemon, so that the limits hold for all of them
    together (None: this process alone serves).

    A call's slot is given back before its end is sent (a unary call's answer or error, a
    stream's status, both sent by gRPC after the handler returns), so a caller that saw its
    call end finds the slot free. A call that ends on the caller's side first (cancelled,
    past its deadline) gives its slot back once its handler returns, or for a stream when
    gRPC runs its termination callback: after the caller was told."""

    def __init__(
        self,
        limits: CallLimits,
        metrics: DaemonMetrics,
        shared: SharedCalls | None = None,
        pool: CallPool | None = None,
    ) -> None:
        self.limits = limits
        waiting = pool.waiting if pool is not None else None
        self._gates = {
            kind: _Gate(kind, limits.of(kind), metrics, shared, unary_only(kind, waiting))
            for kind in CallKind
        }
        gates = self._gates
        metrics.watch_calls(lambda: {kind.value: gate.in_flight() for kind, gate in gates.items()})
        # Method name -> (the handler given, its limited twin), built once per method.
        self._limited: dict[str, tuple[Handler, Handler]] = {}
        # The limited behaviors of the methods whose calls may be unary reads: only their
        # calls, while they wait for a quick thread, count against the unary reads' limit
        # (a health check or a stream waiting there is not a unary read).
        self._reads: set[Any] = set()
        # The behaviors of the methods never limited (health Check): the pool runs them first.
        self._first: set[Any] = set()
        reads, first = self._reads, self._first
        if pool is not None:
            pool.count_only(lambda args: any(arg in reads for arg in args if callable(arg)))
            pool.run_first(lambda args: any(arg in first for arg in args if callable(arg)))

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        known = self._limited.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        if known is not None:
            self._reads.discard(known[1].unary_unary)
            self._first.discard(known[1].unary_unary)
        limited = self._limit(method, handler)
        self._limited[method] = (handler, limited)
        return limited

    def _limit(self, method: str, handler: Handler) -> Handler:
        streams = bool(handler.response_streaming)
        if kind_of(method, streams) is None:
            if handler.unary_unary is not None:
                self._first.add(handler.unary_unary)
            return handler
        shape = dict(
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(method, handler.unary_unary), **shape)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(self._unary(method, handler.stream_unary), **shape)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(self._stream(method, handler.unary_stream), **shape)
        assert handler.stream_stream is not None
        return grpc.stream_stream_rpc_method_handler(self._stream(method, handler.stream_stream), **shape)

    def _gate(self, method: str, streams: bool, request: Any) -> _Gate:
        kind = kind_of(method, streams, request)
        assert kind is not None
        return self._gates[kind]

    def _unary(self, method: str, behavior: Callable[[Any, grpc.ServicerContext], Any]) -> Any:
        most = self.limits.max_response_bytes
        by_request = self._gate
        fixed = None if method in _KIND_BY_REQUEST else self._gate(method, False, None)

        def limited(request: Any, context: grpc.ServicerContext) -> Any:
            gate = fixed or by_request(method, False, request)
            gate.admit(context)
            try:
                response = behavior(request, context)
            finally:
                gate.leave()
            # The reads frame their own responses: refuse one too large here, with a reason
            # (gRPC's own limit, above this one, ends the call without one).
            if isinstance(response, bytes) and len(response) > most:
                abort(
                    context,
                    ResponseTooLarge(
                        f"the answer is {len(response)} bytes, over the daemon's response limit of "
                        f"{most} bytes: ask for fewer keys, or a smaller page",
                        metadata={"bytes": str(len(response)), "limit": str(most)},
                    ),
                )
            return response

        if fixed is None or fixed.kind is CallKind.UNARY_READ:
            self._reads.add(limited)
        return limited

    def _stream(self, method: str, behavior: Callable[[Any, grpc.ServicerContext], Iterator[Any]]) -> Any:
        gate = self._gate

        def limited(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            leave = gate(method, True, request).enter(context)
            # Released when the call ends however it ends (cancelled, deadline, closed).
            if not context.add_callback(leave):
                leave()
            try:
                yield from behavior(request, context)
            finally:
                leave()

        return limited


def limited_server(
    limits: CallLimits,
    max_request_bytes: int,
    metrics: DaemonMetrics,
    interceptors: Sequence[_Interceptor] = (),
    share_port: bool = False,
    shared: SharedCalls | None = None,
) -> grpc.Server:
    """A gRPC server whose calls pass :class:`CallLimiter` (after ``interceptors``), on a
    pool of :attr:`CallLimits.threads` threads. gRPC itself refuses a request over
    ``max_request_bytes`` (RESOURCE_EXHAUSTED, "larger than max"); responses are capped
    a little above ``limits.max_response_bytes``, whose own check answers first with a
    reason. ``share_port``: other processes of this daemon bind the same TCP port
    (SO_REUSEPORT; otherwise a port another process holds is refused), and ``shared``
    counts their calls with this one's."""
    pool: futures.ThreadPoolExecutor
    if limits.quick_threads == 0:
        pool = futures.ThreadPoolExecutor(max_workers=limits.threads, thread_name_prefix="grpc")
        limiter = CallLimiter(limits, metrics, shared)
    else:
        calls = CallPool(min(limits.quick_threads, limits.threads), limits.threads, "grpc")
        pool, limiter = calls, CallLimiter(limits, metrics, shared, calls)
    return grpc.server(
        pool,
        interceptors=[*interceptors, limiter],
        options=[
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", limits.max_response_bytes + (64 << 10)),
            ("grpc.so_reuseport", int(share_port)),
        ],
    )


def unlimited_server(limits: CallLimits, max_request_bytes: int, held: int = 0) -> grpc.Server:
    """A server of the calls another process of the daemon admitted already (against the
    daemon's limits, so they are not counted again), on as many threads as a
    :func:`limited_server` (the calls admitted at once never need more), plus ``held``
    for streams the daemon's own processes hold open outside the limits."""
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=limits.threads + held, thread_name_prefix="internal"),
        options=[
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", limits.max_response_bytes + (64 << 10)),
        ],
    )
