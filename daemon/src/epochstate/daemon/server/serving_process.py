"""One serving process of a daemon (``python -m epochstate.daemon.server.serving_process``).

Started by the main process (:mod:`epochstate.daemon.server.processes`), which writes
its :class:`ServingPlan` on standard input. It serves the daemon's TCP port alongside
the other processes (``SO_REUSEPORT``), with the daemon's TLS, roles and call limits
(counted with the other processes', :mod:`shared_limits`):

* the reads (Get, MultiGet, Scan, ListJobs, DescribeJob, ListEpochs, WatchEpochs)
  from its own secondary of the store, through the daemon's servicer, so a pinned
  answer is the main process's byte for byte and no epoch is answered before this
  process has caught up to it (:mod:`epochstate.daemon.store.secondary_catalog`);
* health checks from its copy of the main process's statuses (:mod:`health_mirror`);
* every other call by forwarding it to the main process (:mod:`forwarding`).

It also answers the reads, and its metrics, on a private Unix socket of its own.
It prints :data:`READY` once it serves and stops (draining its calls) on SIGTERM, or
when its standard input closes: the main process has stopped or died.
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import generate_latest

from epochstate.core.zookeeper.auth import load_auth
from epochstate.core.zookeeper.client import new_client
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server.aligned import SubjectAlignment
from epochstate.daemon.server.forwarding import ToMainProcess
from epochstate.daemon.server.handlers import SERVICE, method_handlers
from epochstate.daemon.server.health import SERVICES
from epochstate.daemon.server.health_mirror import HealthMirror
from epochstate.daemon.server.limits import CallKind, CallLimits, limited_server
from epochstate.daemon.server.metrics import DaemonMetrics
from epochstate.daemon.server.process_metrics import METRICS_METHOD
from epochstate.daemon.server.processes import READY, ServingPlan, calls_file, read_plan
from epochstate.daemon.server.secondary_service import SecondaryService
from epochstate.daemon.server.security import ServerSecurity
from epochstate.daemon.server.shared_limits import SharedCalls
from epochstate.daemon.store.catalog import JobEntry
from epochstate.daemon.store.secondary import SecondaryStore
from epochstate.daemon.store.secondary_catalog import SecondaryCatalog

log = logging.getLogger(__name__)

READS = frozenset({"Get", "MultiGet", "Scan", "ListJobs", "DescribeJob", "ListEpochs", "WatchEpochs"})
"""The EpochState methods a serving process answers itself; the others go to the main process."""


HEALTH_TOLD_SECONDS = 10.0
"""How long a starting serving process waits for the main process's health statuses."""

_HEALTH_METHODS = frozenset(
    f"/{service.full_name}/{method.name}"
    for service in health_pb2.DESCRIPTOR.services_by_name.values()
    for method in service.methods
)


def _served_here(reads: dict[str, Any]) -> frozenset[str]:
    """The method paths a serving process answers itself: ``reads``, and health."""
    return frozenset(f"/{SERVICE.full_name}/{name}" for name in reads) | _HEALTH_METHODS


class _NoIngest:
    """Reports and follows never reach a serving process's servicer: they are forwarded."""

    def follow(self, job: str, checkpoint: str) -> JobEntry:
        raise AssertionError("FollowJob is forwarded to the main process")

    def poke(self, job: str, epoch: int | None = None, run_id: str = "", query_id: str = "") -> None:
        raise AssertionError("ReportEpoch is forwarded to the main process")


def _reads(service: SecondaryService, metrics: DaemonMetrics, guard: Any = None) -> dict[str, Any]:
    """The handlers of :data:`READS` (checked by ``guard`` when given)."""
    handlers = (
        method_handlers(service, metrics) if guard is None else method_handlers(service, metrics, guard=guard)
    )
    return {name: handler for name, handler in handlers.items() if name in READS}


def _alignment(
    plan: ServingPlan, secondary: SecondaryCatalog
) -> tuple[SubjectAlignment | None, Callable[[], None]]:
    settings = plan.settings
    if not settings.zookeeper:
        return None, lambda: None
    client = new_client(
        settings.zookeeper,
        auth=load_auth(settings.zookeeper_auth_file),
        session_timeout=settings.zookeeper_session_timeout,
    )
    client.start_async()
    view = SubjectView(client, settings.zookeeper_root, max_cached=settings.subject_watch_limit)

    def close() -> None:
        view.close()
        client.stop()
        client.close()

    return SubjectAlignment(view, secondary.catalog), close


def serve(plan: ServingPlan) -> None:
    settings = plan.settings
    workdir = plan.directory / f"{plan.index}.secondary"
    shutil.rmtree(workdir, ignore_errors=True)
    secondary = SecondaryCatalog(SecondaryStore(settings.data_dir / "store", workdir))
    secondary.start()
    alignment, close_alignment = _alignment(plan, secondary)
    security = ServerSecurity(settings)
    metrics = DaemonMetrics()
    limits = CallLimits(
        **settings.call_limits,
        reserve=settings.grpc_workers,
        max_response_bytes=settings.max_response_bytes,
        quick_threads=settings.quick_threads,
    )
    service = SecondaryService(secondary, ingest=_NoIngest(), alignment=alignment, max_wait=settings.max_wait)
    main = grpc.insecure_channel(plan.internal)
    health = HealthMirror(main, SERVICES)
    health.start()
    shared = SharedCalls(calls_file(plan.directory), plan.index, len(CallKind))
    public = limited_server(limits, settings.max_request_bytes, metrics, share_port=True, shared=shared)
    local = _reads(service, metrics, guard=security.guard)
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, public)
    public.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(SERVICE.full_name, local),
            ToMainProcess(main, security.guard, keep=_served_here(local)),
        )
    )
    host = settings.listen.rsplit(":", 1)[0]
    if security.add_tcp_port(public, f"{host}:{plan.port}") != plan.port:
        raise OSError(f"cannot share port {plan.port}")

    private = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="private"))
    scrape = grpc.unary_unary_rpc_method_handler(lambda request, context: generate_latest(metrics.registry))
    metrics_service, metrics_method = METRICS_METHOD.strip("/").split("/")
    private.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(SERVICE.full_name, _reads(service, metrics)),
            grpc.method_handlers_generic_handler(metrics_service, {metrics_method: scrape}),
        )
    )
    plan.private.unlink(missing_ok=True)
    private.add_insecure_port(f"unix://{plan.private}")

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())

    def orphaned() -> None:
        sys.stdin.buffer.read()  # returns when the main process closes the pipe, or dies
        stopped.set()

    threading.Thread(target=orphaned, name="main-process-watch", daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when its children stop
    if not health.wait_told(HEALTH_TOLD_SECONDS):
        log.warning("no health from the main process in %g s: NOT_SERVING till told", HEALTH_TOLD_SECONDS)
    public.start()
    private.start()
    print(READY, flush=True)
    stopped.wait()
    health.stop()  # NOT_SERVING while the calls drain, as the main process says
    secondary.catalog.close()  # waiting reads end now: SHUTTING_DOWN
    public.stop(settings.shutdown_grace).wait()
    private.stop(0).wait()
    main.close()
    close_alignment()
    service.close()
    secondary.close()
    shared.close()
    shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    plan = read_plan(sys.stdin.buffer)
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s %(levelname)s serving-{plan.index} %(name)s: %(message)s"
    )
    try:
        serve(plan)
    except Exception as error:
        print(f"failed: {error}", flush=True)
        log.exception("serving process %d failed", plan.index)
        sys.exit(1)


if __name__ == "__main__":
    main()
