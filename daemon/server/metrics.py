"""Prometheus metrics of the daemon (one registry per daemon, so tests can run several)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from epochstate.core.storage.stats import StorageStats

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0)


class DaemonMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
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
        self.calls_in_flight = Gauge(
            "epochstate_calls_in_flight",
            "gRPC calls being served, by kind (limited per kind)",
            ["kind"],
            registry=self.registry,
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

    def watch_storage(self, stats: StorageStats) -> None:
        """Export the checkpoint storage's request counters (remote checkpoints only:
        local reads are not counted)."""
        self.registry.register(_StorageCollector(stats))

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
