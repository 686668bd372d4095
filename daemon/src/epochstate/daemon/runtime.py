"""The daemon process: wires the layers together and owns start-up and shutdown.

Shutdown order: health NOT_SERVING, stop accepting calls and drain them (grace
period), stop the ingest loop, wake every waiting read, close the store, leave
ZooKeeper.
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from kazoo.client import KazooClient
from prometheus_client import start_http_server

from epochstate.core.alias.registry import AliasRegistry
from epochstate.core.errors import EpochStateError
from epochstate.core.storage.location import StorageFactory, redact
from epochstate.core.storage.location import configure as configure_storage
from epochstate.core.storage.objectstore import s3_options
from epochstate.core.storage.retry import RetryPolicy
from epochstate.core.version import VERSION
from epochstate.daemon.config import DaemonSettings
from epochstate.daemon.gc_tuning import freeze_startup_objects, tune_for_ingest
from epochstate.daemon.ingest.follower import EpochPublisher, IngestStats
from epochstate.daemon.ingest.group_replicas import GroupReplicas
from epochstate.daemon.ingest.group_status import seconds_behind
from epochstate.daemon.ingest.loop import IngestLoop
from epochstate.daemon.ingest.registry_publisher import RegistryPublisher
from epochstate.daemon.registry.subject_view import SubjectView
from epochstate.daemon.server import unix_socket
from epochstate.daemon.server.aliases import Aliases
from epochstate.daemon.server.aligned import SubjectAlignment
from epochstate.daemon.server.alignment_admin import add_alignment_admin
from epochstate.daemon.server.handlers import Guard, add_to_server
from epochstate.daemon.server.health import SERVICES, ConnectionWatch, HealthMonitor, IngestWatch
from epochstate.daemon.server.jobs_admin import JobsAdminService, add_jobs_admin
from epochstate.daemon.server.limits import CallKind, CallLimits, limited_server, unlimited_server
from epochstate.daemon.server.metrics import DaemonMetrics, JobLag
from epochstate.daemon.server.probes import ProbeListener
from epochstate.daemon.server.process_metrics import ServingMetrics
from epochstate.daemon.server.processes import (
    ServingProcesses,
    calls_file,
    internal_socket,
    serving_dir,
    serving_processes,
)
from epochstate.daemon.server.reported_jobs import ReportedJobs
from epochstate.daemon.server.routing import RoutingService, add_routing
from epochstate.daemon.server.security import ServerSecurity
from epochstate.daemon.server.security.checkpoints import PartitionedIngest
from epochstate.daemon.server.service import EpochStateService
from epochstate.daemon.server.shared_limits import SharedCalls
from epochstate.daemon.store.catalog import Catalog, JobEntry
from epochstate.daemon.store.descriptors import EpochRecord
from epochstate.daemon.store.errors import StoreDamaged
from epochstate.daemon.store.versioned import StoreOptions, VersionedStore
from epochstate.v1 import epochstate_pb2 as pb

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["EpochState"].full_name


class NoRegistry:
    """Publisher used when no ZooKeeper is configured (single-node, local use)."""

    def node_serving(self, address: str) -> None:
        pass

    def job_followed(self, entry: JobEntry) -> None:
        pass

    def epoch_ingested(self, entry: JobEntry, record: EpochRecord) -> None:
        pass

    def retention_moved(self, entry: JobEntry) -> None:
        pass

    def close(self) -> None:
        pass


class Daemon:
    """One epochstate node. ``start`` returns once it serves; ``stop`` is idempotent."""

    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        # First: settings that would expose the daemon, or unusable TLS files, stop it here.
        self.security = ServerSecurity(settings)
        self.metrics = DaemonMetrics()
        self.catalog = Catalog()
        self.store = VersionedStore(
            settings.data_dir / "store",
            StoreOptions(newest_keys_per_store=settings.ingest_known_keys, sync_writes=settings.sync_writes),
        )
        # Where RocksDB snapshots of checkpoints are opened; leftovers of a crash go.
        scratch = settings.data_dir / "scratch"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        # Remote checkpoints (s3://, gs://, abfs://) are read through one storage
        # factory, its whole-file cache in the data directory.
        storage = StorageFactory(
            cache_dir=settings.data_dir / "cache",
            cache_bytes=settings.checkpoint_cache_bytes,
            retry=RetryPolicy().covering(settings.s3_request_timeout),
            options={"s3": s3_options(settings.s3_request_timeout)},
        )
        configure_storage(storage)
        self.metrics.watch_storage(storage.stats)
        self.subjects: SubjectView | None = None  # set with a registry: aligned_with reads need it
        self.publisher: EpochPublisher = self._publisher()
        self.ingest = IngestLoop(
            self.store,
            self.catalog,
            self.publisher,
            retention=settings.retention_epochs,
            poll_interval=settings.poll_interval,
            poll_max_interval=settings.poll_max_interval,
            retry_interval=settings.ingest_retry_interval,
            on_ingested=self._ingested,
            on_problem=self._problem,
            on_caught_up=self._caught_up,
            scratch_dir=scratch,
        )
        self.group: GroupReplicas | None = None  # set in start() with settings.group
        self.metrics.watch_jobs(self._lags)
        self.metrics.watch_disk(settings.data_dir / "store", settings.data_dir / "cache")
        if self.subjects is not None:
            zookeeper = self.subjects.client
            self.metrics.watch_zookeeper(lambda: str(zookeeper.state))
        self.health = health.HealthServicer()
        self.health_monitor = self._health_monitor()
        self.limits = CallLimits(
            **settings.call_limits,
            reserve=settings.grpc_workers,
            max_response_bytes=settings.max_response_bytes,
            quick_threads=settings.quick_threads,
        )
        self.processes = serving_processes(settings)
        share = self.processes > 1
        # With serving processes: their sockets, and the calls in flight of each (the limits
        # are the daemon's, not each process's).
        self.serving_dir: Path | None = serving_dir(settings) if share else None
        self.shared_calls: SharedCalls | None = None
        if self.serving_dir is not None:
            calls = calls_file(self.serving_dir)
            self.shared_calls = SharedCalls.create(calls, self.processes, len(CallKind))
        self.server = limited_server(
            self.limits, settings.max_request_bytes, self.metrics, share_port=share, shared=self.shared_calls
        )
        # With serving processes: where they forward what they do not serve themselves.
        self.internal: grpc.Server | None = None
        self.serving: ServingProcesses | None = None
        self.port = 0
        self.address = ""
        self.unix_target = ""  # "unix:///path" while the Unix socket listener serves
        self.service: EpochStateService | None = None
        self.probes: ProbeListener | None = None  # set in start() with settings.health_listen
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    def _publisher(self) -> EpochPublisher:
        if not self.settings.zookeeper:
            return NoRegistry()
        publisher = RegistryPublisher.connect(self.settings, version=VERSION)
        # Aligned reads use the publisher's session: one ZooKeeper connection per daemon.
        self.subjects = SubjectView(
            publisher.registry.client,
            self.settings.zookeeper_root,
            max_cached=self.settings.subject_watch_limit,
        )
        return publisher

    def _health_monitor(self) -> HealthMonitor:
        s = self.settings
        zookeeper = None if self.subjects is None else ConnectionWatch(self.subjects.client)
        # The loop may rightly sleep up to poll_max_interval between passes.
        ingest = IngestWatch(self.catalog, self.ingest, s.ingest_stuck_after, s.poll_max_interval)
        timeout = s.zookeeper_session_timeout
        return HealthMonitor(self.health, SERVICES, ingest, zookeeper, timeout, self.metrics)

    def _ingested(self, job: str, stats: IngestStats) -> None:
        m = self.metrics
        m.epochs_ingested.labels(job).inc()
        m.versions_written.labels(job).inc(stats.versions_written)
        m.ingest_seconds.labels(job).observe(stats.seconds)
        m.newest_epoch.labels(job).set(stats.epoch)
        entry = self.catalog.get(job)
        try:
            record = self.store.epoch_record(entry.descriptor.job_id, stats.epoch)
        except StoreDamaged as error:  # reads of it fail with DATA_LOSS; ingest must go on
            log.error("job %s: %s", job, error)
            record = None
        if record is not None:
            m.freshness.labels(job).observe(max(0.0, (record.ingested_at_ms - record.committed_at_ms) / 1000))
        m.epoch_problems.labels(job).set(len(entry.problems))

    def _lags(self) -> list[JobLag]:
        """Each followed job's lag behind its checkpoint's newest commit (at scrape time)."""
        now_ms = int(time.time() * 1000)
        lags = []
        for entry in self.catalog.jobs():
            name, newest, committed = entry.descriptor.name, entry.progress.newest, entry.committed
            seconds = 0.0
            follower = self.ingest.followed(name)
            if committed > newest and follower is not None:
                seconds = seconds_behind(follower.checkpoint, newest, committed, now_ms)
            lags.append(JobLag(name, max(0, committed - newest), seconds))
        return lags

    def _caught_up(self, job: str) -> None:
        if self.group is not None:
            self.group.caught_up(job)

    def _problem(self, job: str, epoch: int, reason: str) -> None:
        self.metrics.epoch_problems.labels(job).set(len(self.catalog.get(job).problems))

    def start(self) -> None:
        alignment = None if self.subjects is None else SubjectAlignment(self.subjects, self.catalog)
        ingest = self.security.ingest(self.ingest)  # follows only checkpoints under the allowed roots
        zk = None if self.subjects is None else self.subjects.client
        reported = None
        if zk is not None and self.settings.group is not None:
            reported = ReportedJobs(
                zk, self.settings.zookeeper_root, self.settings.group, self.security.roots
            )
        aliases = None
        if self.subjects is not None:
            registry = AliasRegistry(self.subjects.client, self.settings.zookeeper_root)
            aliases = Aliases(registry, self.subjects, self.catalog)
        self.service = EpochStateService(
            self.store,
            self.catalog,
            ingest,
            alignment,
            max_wait=self.settings.max_wait,
            reported=reported,
            aliases=aliases,
        )
        self.group = self._group(ingest)
        guarded: tuple[grpc.Server, Guard | None] = (self.server, self.security.guard)
        servers = [guarded]
        if self.processes > 1:
            # The serving processes checked each caller, and admitted each call against the
            # daemon's limits, already: the internal socket does neither again. Each also
            # holds a health Watch per service there (its health mirror), beyond the limits.
            mirrors = len(SERVICES) * (self.processes - 1)
            self.internal = unlimited_server(self.limits, self.settings.max_request_bytes, held=mirrors)
            servers.append((self.internal, None))
        for server, guard in servers:
            self._add_services(server, guard, zk)
        self.port = self.security.add_tcp_port(self.server, self.settings.listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {self.settings.listen}")
        self._listen_unix()
        log.debug("settings: %s", self.settings.model_dump(mode="json", exclude={"jobs"}))
        for job in self.settings.jobs:
            log.debug("following job %s at %s", job.name, redact(job.checkpoint))
            self.ingest.follow(job.name, job.checkpoint)
        if self.settings.health_listen:
            self.probes = ProbeListener(self.health, self.settings.health_listen)
        self.ingest.start()
        self.server.start()
        self.health_monitor.start()  # before the serving processes: they mirror its statuses
        self._start_serving_processes()
        if self.probes is not None:
            self.probes.start()
        if self.settings.metrics_port is not None:
            certfile, keyfile = self.security.metrics_tls()
            start_http_server(
                self.settings.metrics_port,
                addr=self.settings.metrics_address,
                registry=self.metrics.registry,
                certfile=certfile,
                keyfile=keyfile,
            )
        host = self.settings.listen.rsplit(":", 1)[0]
        self.address = f"{host}:{self.port}"
        advertised = self.settings.advertise or self.address
        self.publisher.node_serving(advertised)
        if self.group is not None:
            self.group.start(advertised, self.settings.zookeeper_session_timeout)
        targets = " and ".join(self.targets)
        log.info("epochstate %s serving on %s (node %s)", VERSION, targets, self.settings.node)
        if self.probes is not None:
            log.info("health probes (plaintext, grpc.health.v1 only) on %s", self.probes.address)

    def _add_services(self, server: grpc.Server, guard: Guard | None, zk: KazooClient | None) -> None:
        """Every service of the daemon on ``server``, each call checked by ``guard`` (None: not checked)."""
        assert self.service is not None
        if guard is None:
            add_to_server(self.service, server, self.metrics)
        else:
            add_to_server(self.service, server, self.metrics, guard=guard)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        admin = add_alignment_admin(server, zk, self.settings.zookeeper_root, self.metrics, guard)
        jobs = JobsAdminService(zk, self.settings.zookeeper_root, self.settings.group, self.security.roots)
        jobs_admin = add_jobs_admin(server, jobs, self.metrics, guard)
        routing = RoutingService(
            zk,
            self.settings.zookeeper_root,
            self.catalog,
            node=self.settings.node,
            group=self.settings.group,
            address=lambda: self.settings.advertise or self.address,
        )
        located = add_routing(server, routing, self.metrics, guard)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                admin,
                jobs_admin,
                located,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )

    def _start_serving_processes(self) -> None:
        """The serving processes beyond this one, on the TCP port this one bound."""
        if self.internal is None or self.serving_dir is None or self.shared_calls is None:
            return
        directory = self.serving_dir
        socket = internal_socket(directory)
        socket.unlink(missing_ok=True)
        self.internal.add_insecure_port(f"unix://{socket}")
        self.internal.start()
        # A process that died took its calls with it: their slots are free again.
        self.serving = ServingProcesses(
            self.settings, self.processes - 1, self.port, directory, exited=self.shared_calls.clear
        )
        self.serving.start()
        self.metrics.registry.register(ServingMetrics(self.serving))

    def _group(self, ingest: PartitionedIngest) -> GroupReplicas | None:
        """This daemon's part in ``settings.group`` (None: no group)."""
        s = self.settings
        if s.group is None or not isinstance(self.publisher, RegistryPublisher):
            return None
        registry = self.publisher.registry
        return GroupReplicas(
            registry.client,
            registry.layout,
            s.group,
            s.node,
            ingest=self.ingest,
            follow=ingest.follow,  # the checkpoint-roots check applies to group jobs too
            store=self.store,
            catalog=self.catalog,
            publisher=self.publisher,
            standalone=frozenset(job.name for job in s.jobs),
            version=VERSION,
            status_interval=s.group_status_interval,
        )

    def _listen_unix(self) -> None:
        path = self.settings.unix_socket
        if path is None:
            return
        address = unix_socket.prepare(path)
        try:
            self.server.add_insecure_port(self.security.unix_bind_address(path, address))
        except RuntimeError as error:  # gRPC says only "failed to bind"
            raise unix_socket.UnixSocketUnusable(f"cannot serve on Unix socket {path}: {error}") from error
        self.security.expose_unix_socket(path)
        self.unix_target = address

    @property
    def targets(self) -> list[str]:
        """The addresses clients can use: TCP ``host:port``, then the Unix socket if any."""
        return [t for t in (self.address, self.unix_target) if t]

    def stop(self) -> None:
        with self._stop_lock:
            if self._stopped.is_set():
                return
            log.info("shutting down")
            self.health_monitor.stop()
            self.health.enter_graceful_shutdown()
            if self.group is not None:
                self.group.stop(self.settings.shutdown_grace)  # the leader moves its replicas now
            self.catalog.close()  # wakes waiting reads; they fail UNAVAILABLE
            if self.subjects is not None:
                self.subjects.close()  # so do reads waiting for an aligned epoch
            if self.serving is not None:
                self.serving.stop(self.settings.shutdown_grace)
            if self.internal is not None:
                self.internal.stop(0).wait()
            self.server.stop(self.settings.shutdown_grace).wait()
            if self.probes is not None:  # answered NOT_SERVING while the calls drained
                self.probes.stop()
            self.security.close()
            if self.unix_target and self.settings.unix_socket is not None:
                unix_socket.remove(self.settings.unix_socket)
            self.ingest.stop()
            if self.service is not None:
                self.service.close()
            self.store.close()
            close = getattr(self.publisher, "close", None)
            if close is not None:
                close()
            self._stopped.set()

    def wait(self) -> None:
        self._stopped.wait()


class DaemonStartFailed(EpochStateError):
    """The daemon could not start (port taken, checkpoint unreadable, ...)."""


def run(settings: DaemonSettings, on_serving: Callable[[Sequence[str]], None] | None = None) -> None:
    """Run a daemon until SIGTERM or SIGINT; ``on_serving`` gets its targets once it serves
    (TCP ``host:port``, then ``unix:///path`` when the Unix socket listener is on)."""
    tune_for_ingest()
    try:
        daemon = Daemon(settings)
    except Exception as error:  # a store of another layout, a data dir another daemon holds, ...
        raise DaemonStartFailed(f"daemon failed to start: {error}") from error

    def on_signal(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=daemon.stop, name="shutdown").start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        daemon.start()
    except Exception as error:
        daemon.stop()
        raise DaemonStartFailed(f"daemon failed to start: {error}") from error
    freeze_startup_objects()
    if on_serving is not None:
        on_serving(daemon.targets)
    daemon.wait()
