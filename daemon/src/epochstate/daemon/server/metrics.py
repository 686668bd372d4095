"""Prometheus metrics of the daemon (one registry per daemon, so tests can run several)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from epochstate.core.storage.stats import StorageStats

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0)


@dataclass(frozen=True)
class JobLag:
    """How far a job's newest queryable epoch is behind Spark's newest commit."""

    job: str
    epochs: int  # newest committed less newest queryable (0: caught up)
    seconds: float  # since the oldest committed epoch not queryable yet was committed (0: caught up)


ZOOKEEPER_STATES = ("CONNECTED", "SUSPENDED", "LOST")


class DaemonMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # The standard collectors (process_*, python_info, python_gc_*) on this daemon's registry.
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(standard)
        self.requests = Counter(
            "epochstate_requests", "gRPC calls handled", ["method", "code"], registry=self.registry
        )
        self.latency = Histogram(
            "epochstate_request_seconds",
            "gRPC call latency",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.epochs_ingested = Counter(
            "epochstate_epochs_ingested", "epochs ingested", ["job"], registry=self.registry
        )
        self.versions_written = Counter(
            "epochstate_versions_written", "state versions written", ["job"], registry=self.registry
        )
        self.ingest_seconds = Histogram(
            "epochstate_ingest_seconds", "time to ingest one epoch", ["job"], registry=self.registry
        )
        self.freshness = Histogram(
            "epochstate_freshness_seconds",
            "commit of an epoch to it being queryable",
            ["job"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.newest_epoch = Gauge(
            "epochstate_newest_epoch", "newest queryable epoch", ["job"], registry=self.registry
        )
        self.epoch_problems = Gauge(
            "epochstate_epoch_problems", "epochs that cannot be ingested", ["job"], registry=self.registry
        )
        self.calls_refused = Counter(
            "epochstate_calls_refused",
            "gRPC calls refused RESOURCE_EXHAUSTED because their kind was at its limit",
            ["kind"],
            registry=self.registry,
        )
        self.not_serving = Gauge(
            "epochstate_not_serving",
            "1 while health says NOT_SERVING for this cause (zookeeper_lost, ingest_stuck)",
            ["cause"],
            registry=self.registry,
        )

    def watch_calls(self, in_flight: Callable[[], Mapping[str, int]]) -> None:
        """Export ``epochstate_calls_in_flight{kind}``: the calls being served, by kind, as
        ``in_flight`` tells it at scrape time (the call limiter's own counts)."""
        self.registry.register(_CallsCollector(in_flight))

    def watch_storage(self, stats: StorageStats) -> None:
        """Export the checkpoint storage's request counters (remote checkpoints only:
        local reads are not counted)."""
        self.registry.register(_StorageCollector(stats))

    def watch_jobs(self, lags: Callable[[], Iterable[JobLag]]) -> None:
        """Export each job's lag (``epochstate_lag_epochs``, ``epochstate_lag_seconds``), as
        ``lags`` tells it at scrape time."""
        self.registry.register(_LagCollector(lags))

    def watch_zookeeper(self, state: Callable[[], str]) -> None:
        """Export ``epochstate_zookeeper_state{state}``: 1 for the connection's state now (kazoo's
        ``CONNECTED``, ``SUSPENDED`` or ``LOST``, lower-cased), 0 for the others."""
        self.registry.register(_ZooKeeperCollector(state))

    def watch_disk(self, store: Path, cache: Path) -> None:
        """Export the bytes on disk of the store (``epochstate_store_bytes``) and of the checkpoint
        cache (``epochstate_cache_bytes``), summed at scrape time."""
        self.registry.register(_DiskCollector(store, cache))

    def observed(
        self, method: str, behavior: Callable[[Any, grpc.ServicerContext], Any]
    ) -> Callable[[Any, grpc.ServicerContext], Any]:
        """``behavior`` (a unary handler), timed and counted by status code as ``method``."""
        latency = self.latency.labels(method)
        ok = self.requests.labels(method, "OK")
        requests = self.requests
        clock = time.perf_counter

        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            started = clock()
            try:
                response = behavior(request, context)
            except Exception:
                status = getattr(context, "code", lambda: None)()
                requests.labels(method, status.name if status is not None else "UNKNOWN").inc()
                raise
            finally:
                latency.observe(clock() - started)
            ok.inc()
            return response

        return timed


_STORAGE_OPS = ("list", "head", "get", "get_range")


class _StorageCollector(Collector):
    """Reads :class:`StorageStats` at scrape time."""

    def __init__(self, stats: StorageStats) -> None:
        self._stats = stats

    def collect(self) -> list[Metric]:
        counts = self._stats.snapshot()
        requests = CounterMetricFamily(
            "epochstate_storage_requests", "requests to remote checkpoint storage", labels=["op"]
        )
        for op in _STORAGE_OPS:
            requests.add_metric([op], counts.get(op, 0))
        outcomes = CounterMetricFamily(
            "epochstate_storage_outcomes",
            "storage requests retried, failed after retries, refused; whole-file cache hits and misses",
            labels=["outcome"],
        )
        for outcome in ("retries", "failed", "refused", "cache_hits", "cache_misses"):
            outcomes.add_metric([outcome], counts.get(outcome, 0))
        read = CounterMetricFamily("epochstate_storage_read_bytes", "bytes read from remote storage")
        read.add_metric([], counts.get("bytes", 0))
        return [requests, outcomes, read]


class _CallsCollector(Collector):
    def __init__(self, in_flight: Callable[[], Mapping[str, int]]) -> None:
        self._in_flight = in_flight

    def collect(self) -> list[Metric]:
        family = GaugeMetricFamily(
            "epochstate_calls_in_flight",
            "gRPC calls being served, by kind (limited per kind)",
            labels=["kind"],
        )
        for kind, calls in self._in_flight().items():
            family.add_metric([kind], calls)
        return [family]


class _LagCollector(Collector):
    def __init__(self, lags: Callable[[], Iterable[JobLag]]) -> None:
        self._lags = lags

    def collect(self) -> list[Metric]:
        epochs = GaugeMetricFamily(
            "epochstate_lag_epochs",
            "newest epoch Spark committed less the newest queryable epoch",
            labels=["job"],
        )
        seconds = GaugeMetricFamily(
            "epochstate_lag_seconds",
            "seconds since the oldest committed epoch that is not queryable yet was committed",
            labels=["job"],
        )
        for lag in self._lags():
            epochs.add_metric([lag.job], lag.epochs)
            seconds.add_metric([lag.job], lag.seconds)
        return [epochs, seconds]


class _ZooKeeperCollector(Collector):
    def __init__(self, state: Callable[[], str]) -> None:
        self._state = state

    def collect(self) -> list[Metric]:
        now = str(self._state()).upper()
        family = GaugeMetricFamily(
            "epochstate_zookeeper_state",
            "1 for the ZooKeeper connection's state now (connected, suspended, lost), 0 for the others",
            labels=["state"],
        )
        for state in ZOOKEEPER_STATES:
            family.add_metric([state.lower()], 1 if state == now else 0)
        return [family]


def _bytes_under(directory: Path) -> int:
    """Bytes of the regular files under ``directory`` (0 when it is missing); files that go
    while it is walked (RocksDB compactions) are skipped."""
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


class _DiskCollector(Collector):
    def __init__(self, store: Path, cache: Path) -> None:
        self._store = store
        self._cache = cache

    def collect(self) -> list[Metric]:
        store = GaugeMetricFamily("epochstate_store_bytes", "bytes on disk of the multi-version store")
        store.add_metric([], _bytes_under(self._store))
        cache = GaugeMetricFamily("epochstate_cache_bytes", "bytes on disk of cached remote checkpoint files")
        cache.add_metric([], _bytes_under(self._cache))
        return [store, cache]
