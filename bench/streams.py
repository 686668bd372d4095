"""Concurrent client processes calling one unary method, for throughput figures.

Each stream is its own process (its own GIL, its own channel), as independent
callers of the daemon are. Streams start together and call back to back for a
fixed time; the figure is the sum of their rates over that same window.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from typing import Any

import grpc
from google.protobuf import symbol_database


@dataclass(frozen=True)
class StreamResult:
    latencies: list[float]
    calls_per_second: float


def _stream(
    target: str, method: str, requests: list[bytes], response: str, seconds: float, go: Event, out: Any
) -> None:
    parse = symbol_database.Default().GetSymbol(response).FromString
    call = grpc.insecure_channel(target).unary_unary(method, None, response_deserializer=parse)
    for request in requests[:20]:  # warm the channel
        call(request)
    out.put(None)
    go.wait()
    latencies: list[float] = []
    started = time.perf_counter()
    end = started + seconds
    i = 0
    while True:
        before = time.perf_counter()
        if before >= end:
            break
        call(requests[i % len(requests)])
        latencies.append(time.perf_counter() - before)
        i += 1
    out.put((latencies, len(latencies) / (time.perf_counter() - started)))


def run_streams(
    target: str, method: str, requests: list[bytes], response: str, streams: int, seconds: float
) -> StreamResult:
    """``streams`` processes calling ``method`` (responses parsed as ``response``) for ``seconds``."""
    ctx = mp.get_context("spawn")  # no gRPC state inherited through fork
    go = ctx.Event()
    out = ctx.Queue()
    workers = [
        ctx.Process(target=_stream, args=(target, method, requests, response, seconds, go, out))
        for _ in range(streams)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        out.get()  # each stream is connected and warm
    go.set()
    results = [out.get() for _ in workers]
    for worker in workers:
        worker.join()
    latencies = [x for lat, _ in results for x in lat]
    return StreamResult(latencies, sum(rate for _, rate in results))
