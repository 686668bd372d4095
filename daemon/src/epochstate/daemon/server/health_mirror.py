"""A serving process's copy of the daemon's health, so that its health checks answer from memory.

The main process decides the daemon's health (:mod:`epochstate.daemon.server.health`).
A serving process (:mod:`epochstate.daemon.server.serving_process`) used to forward
each ``grpc.health.v1`` call to it: a check then waited for a thread in both
processes, and for each one's interpreter, behind the reads both were serving; under
load, that was a tenth of a second. :class:`HealthMirror` instead holds one health
``Watch`` of the main process per service (the main process sends each status as it
changes) and sets the same status in a servicer of the serving process's own, which
answers ``Check`` and ``Watch`` there.

Guarantees:

* A status the main process sets reaches the mirror within the time its ``Watch``
  stream takes to send it (no polling).
* Until the main process has told a service's status, and whenever its stream to
  the main process breaks (the main process is stopping, hung past the stream's end,
  or gone), that service is NOT_SERVING here: the mirror never says SERVING for a
  daemon it cannot see. It watches again every ``retry`` seconds.
* Once stopped (the serving process is shutting down), every service is NOT_SERVING
  for good, as the main process's own servicer is once its shutdown began.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthMirror:
    """The statuses of ``services``, as the health servicer behind ``channel`` tells them,
    in :attr:`servicer` (see the module docstring)."""

    def __init__(self, channel: grpc.Channel, services: Iterable[str], retry: float = 0.5) -> None:
        self.servicer = health.HealthServicer()
        self._stub = health_pb2_grpc.HealthStub(channel)
        self._services = tuple(services)
        self._retry = retry
        self._stopping = threading.Event()
        self._told: dict[str, threading.Event] = {service: threading.Event() for service in self._services}
        self._streams: dict[str, Any] = {}  # each Watch: a grpc.Call, an iterator
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._watch, args=(s,), name=f"health-mirror-{s or 'all'}", daemon=True)
            for s in self._services
        ]
        for service in self._services:
            self.servicer.set(service, NOT_SERVING)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def wait_told(self, timeout: float) -> bool:
        """Wait until the main process told every service's status once; False after
        ``timeout`` seconds (the services not told yet stay NOT_SERVING)."""
        deadline = time.monotonic() + timeout
        return all(told.wait(max(0.0, deadline - time.monotonic())) for told in self._told.values())

    def stop(self) -> None:
        """Every service NOT_SERVING from now on; the watches end."""
        self._stopping.set()
        self.servicer.enter_graceful_shutdown()
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.cancel()
        for thread in self._threads:
            thread.join(5)

    def _watch(self, service: str) -> None:
        request = health_pb2.HealthCheckRequest(service=service)
        while not self._stopping.is_set():
            stream = self._stub.Watch(request)
            with self._lock:
                self._streams[service] = stream
            if self._stopping.is_set():  # stop() may have missed this stream
                stream.cancel()
            try:
                for response in stream:
                    if response.status == SERVICE_UNKNOWN:  # not set yet in the main process
                        self.servicer.set(service, NOT_SERVING)
                        continue
                    self.servicer.set(service, response.status)
                    self._told[service].set()
            except grpc.RpcError as error:
                if not self._stopping.is_set():
                    log.warning("health of %r: watch of the main process ended: %s", service, error.code())
            self.servicer.set(service, NOT_SERVING)
            self._stopping.wait(self._retry)
