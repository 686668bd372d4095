"""Prometheus metrics of the daemon (one registry per daemon, so tests can run several)."""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left
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
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

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
        self._calls = _RequestsCollector()
        self.registry.register(self._calls)
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
        """``behavior`` (a unary handler), timed and counted by status code as ``method``
        (``epochstate_requests{method,code}``, ``epochstate_request_seconds{method}``)."""
        tally = self._calls.of(method)
        local, mine = tally.local, tally.mine
        clock = time.perf_counter

        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            started = clock()
            try:
                response = behavior(request, context)
            except Exception:
                status = getattr(context, "code", lambda: None)()
                tally.failed(status.name if status is not None else "UNKNOWN", clock() - started)
                raise
            seconds = clock() - started
            try:
                counts: list[float] = local.counts
            except AttributeError:
                counts = mine()
            counts[bisect_left(_LATENCY_BUCKETS, seconds)] += 1
            counts[_SUM] += seconds
            counts[_OK] += 1
            return response

        return timed


# A thread's tally of one method: a count per latency bucket (+Inf last), the seconds, the OK calls.
_SUM = len(_LATENCY_BUCKETS) + 1
_OK = _SUM + 1
_BUCKET_NAMES = [*map(floatToGoString, _LATENCY_BUCKETS), "+Inf"]


class _MethodTally:
    """One unary method's calls, without a lock per call: each thread counts its own in a list
    only it writes (:meth:`mine`, found again through :attr:`local`), which a scrape sums with
    every other thread's. A list item is read and replaced whole (CPython's list item access
    is atomic), so a scrape sees each thread's counts from before or after its latest call,
    never a torn or falling count. The rare failures are counted by code under a lock."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.created = time.time()
        self._lock = threading.Lock()
        self._threads: list[list[float]] = []  # kept when their threads end: their calls count
        self._failed: dict[str, tuple[int, float]] = {}  # code -> calls, when the first was counted

    def mine(self) -> list[float]:
        """The calling thread's tally, new (its first call of the method)."""
        counts = [0.0] * (_OK + 1)
        self.local.counts = counts
        with self._lock:
            self._threads.append(counts)
        return counts

    def failed(self, code: str, seconds: float) -> None:
        """Count a call that ended with status ``code`` after ``seconds``."""
        with self._lock:
            calls, created = self._failed.get(code, (0, time.time()))
            self._failed[code] = (calls + 1, created)
        try:
            counts: list[float] = self.local.counts
        except AttributeError:
            counts = self.mine()
        counts[bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        counts[_SUM] += seconds

    def totals(self) -> tuple[list[float], dict[str, tuple[int, float]]]:
        """Every thread's tallies summed, and the failures by code."""
        with self._lock:
            threads, failed = list(self._threads), dict(self._failed)
        summed = [0.0] * (_OK + 1)
        for counts in threads:
            for index, value in enumerate(counts[:]):  # a copy: one moment of the thread's
                summed[index] += value
        return summed, failed


class _RequestsCollector(Collector):
    """``epochstate_requests`` and ``epochstate_request_seconds`` from each method's
    :class:`_MethodTally`, summed at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[str, _MethodTally] = {}

    def of(self, method: str) -> _MethodTally:
        """``method``'s tally (new, and shown from now on with zero calls, if it had none)."""
        with self._lock:
            tally = self._tallies.get(method)
            if tally is None:
                tally = self._tallies[method] = _MethodTally()
            return tally

    def describe(self) -> list[Metric]:
        return self._families({})

    def collect(self) -> list[Metric]:
        with self._lock:
            tallies = dict(self._tallies)
        return self._families(tallies)

    def _families(self, tallies: Mapping[str, _MethodTally]) -> list[Metric]:
        requests = CounterMetricFamily("epochstate_requests", "gRPC calls handled", labels=["method", "code"])
        latency = HistogramMetricFamily("epochstate_request_seconds", "gRPC call latency", labels=["method"])
        for method, tally in tallies.items():
            counts, failed = tally.totals()
            requests.add_metric([method, "OK"], counts[_OK], created=tally.created)
            for code, (calls, created) in failed.items():
                requests.add_metric([method, code], calls, created=created)
            cumulative, buckets = 0.0, []
            for name, count in zip(_BUCKET_NAMES, counts[:_SUM], strict=True):
                cumulative += count
                buckets.append((name, cumulative))
            latency.add_metric([method], buckets, counts[_SUM])
            latency.add_sample("epochstate_request_seconds_created", {"method": method}, tally.created)
        return [requests, latency]


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
