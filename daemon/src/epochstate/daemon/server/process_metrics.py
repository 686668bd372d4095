"""The serving processes' metrics, on the main process's metrics endpoint.

Each serving process keeps its own registry (calls, latencies, limits, its own CPU
and memory). At each scrape the main process asks every serving process for it over
the process's private socket and shows each family under ``epochstate_serving_``
plus its own name (``epochstate_requests`` -> ``epochstate_serving_requests``,
``process_cpu_seconds_total`` -> ``epochstate_serving_process_cpu_seconds_total``),
each series labelled ``process`` with the process's index (1, 2, ...). The main
process's own families keep their names: its calls are the ones it served itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from epochstate.daemon.server.processes import ServingProcesses, private_socket

log = logging.getLogger(__name__)

METRICS_METHOD = "/epochstate.internal.ServingProcess/Metrics"
PREFIX = "epochstate_serving_"


def scrape(directory: Path, index: int, timeout: float = 2.0) -> str:
    """Serving process ``index``'s metrics (its sockets in ``directory``), in Prometheus' text format."""
    with grpc.insecure_channel(f"unix://{private_socket(directory, index)}") as channel:
        raw: bytes = channel.unary_unary(METRICS_METHOD, None, None)(b"", timeout=timeout)
    return raw.decode()


class ServingMetrics(Collector):
    """A collector of every serving process's families (see the module's docstring)."""

    def __init__(self, processes: ServingProcesses) -> None:
        self._processes = processes

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for index in sorted(self._processes.pids()):
            try:
                text = scrape(self._processes.directory, index)
            except grpc.RpcError as error:  # restarting: its series are missing from this scrape
                log.warning("no metrics from serving process %d: %s", index, error)
                continue
            for family in text_string_to_metric_families(text):
                name = PREFIX + family.name.removeprefix("epochstate_")
                into = merged.get(name)
                if into is None:
                    into = merged[name] = Metric(name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    sample_name = PREFIX + sample.name.removeprefix("epochstate_")
                    labels = {**sample.labels, "process": str(index)}
                    into.add_sample(sample_name, labels, sample.value, sample.timestamp, sample.exemplar)
        yield from merged.values()
