"""A real in-process gRPC server under the limiter, for the limits' and call pool's tests."""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from epochstate.daemon.server.limits import CallLimits, limited_server
from epochstate.daemon.server.metrics import DaemonMetrics

OURS = "epochstate.v1.EpochState"


def start_limited(
    limits: CallLimits, metrics: DaemonMetrics, methods: dict[str, Any]
) -> tuple[grpc.Server, int]:
    """A started server with ``limits`` serving ``methods`` of our service and the health
    service on a loopback port; the server and its port."""
    server = limited_server(limits, 1 << 20, metrics)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(OURS, methods),))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port
