"""A plaintext listener that serves ``grpc.health.v1`` ``Check`` and nothing else, for probes.

The kubelet's built-in gRPC probe speaks plaintext only, while the daemon's TCP
listener beyond loopback serves TLS. This second listener answers health
``Check`` from the same servicer the main server uses, so both report the same
statuses; it serves no state, takes no identity and runs on a small pool of its
own, so probes never wait behind (or take threads from) calls. ``Watch`` is not
served here (UNIMPLEMENTED): a stream holds a thread for as long as it lasts, and
a few of them would starve the probes.

Besides the statuses of :mod:`epochstate.daemon.server.health`, the service
:data:`LIVENESS` is SERVING from start-up until shutdown begins, whatever
ZooKeeper or ingest do: a liveness probe must not restart a daemon that a
restart would not help (readiness takes it out of its Service instead).
"""

from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2

# The health service name a liveness probe asks for.
LIVENESS = "liveness"

_WORKERS = 2
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# Checks are answered at once; beyond this many at a time they are refused RESOURCE_EXHAUSTED.
_MAX_CALLS = 8


class ProbeListenerUnusable(OSError):
    """The probe listener's address cannot be bound."""


class ProbeListener:
    """``grpc.health.v1`` of ``servicer`` on a plaintext ``address`` (``host:port``, port 0: any)."""

    def __init__(self, servicer: health.HealthServicer, address: str) -> None:
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="probes"),
            maximum_concurrent_rpcs=_MAX_CALLS,
        )
        check = grpc.unary_unary_rpc_method_handler(
            servicer.Check,
            request_deserializer=health_pb2.HealthCheckRequest.FromString,
            response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
        )
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(HEALTH_SERVICE, {"Check": check}),)
        )
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError as error:  # gRPC says only "failed to bind"
            raise ProbeListenerUnusable(f"cannot serve health probes on {address}: {error}") from error
        if self.port == 0:
            raise ProbeListenerUnusable(f"cannot serve health probes on {address}")
        self.address = f"{address.rsplit(':', 1)[0]}:{self.port}"

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float = 1.0) -> None:
        self._server.stop(grace).wait()
