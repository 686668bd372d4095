"""The per-call metrics (epochstate_requests, epochstate_request_seconds), in-process:
counted by each serving thread without a lock, summed at scrape time."""

from __future__ import annotations

import threading
from typing import Any, cast

import grpc
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epochstate.daemon.server.metrics import DaemonMetrics


class Failed:
    """The context of a call a handler ended with NOT_FOUND."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.NOT_FOUND


def not_found(request: Any, context: Any) -> bytes:
    raise RuntimeError("aborted")


def scraped(metrics: DaemonMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("epochstate_request")
    }


def test_calls_of_every_thread_are_counted_once_their_threads_ended() -> None:
    metrics = DaemonMetrics()
    get = metrics.observed("Get", lambda request, context: b"")
    failing = metrics.observed("Get", not_found)
    metrics.observed("ListJobs", lambda request, context: b"")

    def calls() -> None:
        for _ in range(50):
            get(None, cast(grpc.ServicerContext, None))

    threads = [threading.Thread(target=calls) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with pytest.raises(RuntimeError):
        failing(None, cast(grpc.ServicerContext, Failed()))

    samples = scraped(metrics)
    get_labels = (("method", "Get"),)
    assert samples[("epochstate_requests_total", (("code", "OK"), ("method", "Get")))] == 200
    assert samples[("epochstate_requests_total", (("code", "NOT_FOUND"), ("method", "Get")))] == 1
    assert samples[("epochstate_requests_total", (("code", "OK"), ("method", "ListJobs")))] == 0
    assert samples[("epochstate_request_seconds_count", get_labels)] == 201
    assert samples[("epochstate_request_seconds_sum", get_labels)] > 0
    buckets = [
        value
        for (name, labels), value in samples.items()
        if name == "epochstate_request_seconds_bucket" and ("method", "Get") in labels
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 201  # cumulative, +Inf last
    assert samples[("epochstate_request_seconds_count", (("method", "ListJobs"),))] == 0
