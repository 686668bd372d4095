"""A daemon with two serving processes, mTLS and roles: every connection, whichever process
the kernel gives it, gets the same TLS, the same role checks and the same health; the
metrics endpoint shows the serving process's calls, labelled by process."""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from epochstate.client import PermissionDenied
from epochstate.client.errors import from_rpc_error
from epochstate.client.tls import open_channel
from epochstate.v1 import epochstate_pb2 as pb
from epochstate.v1 import epochstate_pb2_grpc as pb_grpc
from tests.fixtures.certs import Certificates
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.metrics import free_port
from tests.server.security.conftest import client_tls

CONNECTIONS = 12  # the kernel spreads connections by hash: all on one process has odds of 1 in 2048


def test_every_process_serves_with_the_daemons_tls_roles_and_health(
    certificates: Certificates, secure_daemon: Callable[..., DaemonProcess]
) -> None:
    certs = certificates
    metrics_port = free_port()
    settings = {
        "tls": {
            "cert": str(certs.server.cert),
            "key": str(certs.server.key),
            "client_ca": str(certs.ca.pem_path),
        },
        "auth": {"enabled": True, "roles": {"dashboards": ["read"]}},
        "metrics_port": metrics_port,
    }
    reader = client_tls(certs, certs.reader)
    daemon = secure_daemon(settings, tls=reader, extra_args=["--serve-processes", "2"])
    options = (("grpc.use_local_subchannel_pool", 1),)  # a connection of its own each
    for _ in range(CONNECTIONS):
        with open_channel(daemon.target, reader, options) as channel:
            stub = pb_grpc.EpochStateStub(channel)
            assert list(stub.ListJobs(pb.ListJobsRequest()).jobs) == []  # answered by the process itself
            with pytest.raises(grpc.RpcError) as refused:  # forwarded only once allowed: not here
                stub.FollowJob(pb.FollowJobRequest(job="orders", checkpoint="/nowhere"))
            error = from_rpc_error(refused.value)
            assert isinstance(error, PermissionDenied) and error.reason == "ROLE_MISSING"
            health = health_pb2_grpc.HealthStub(channel)
            assert (
                health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
            )
    with (
        open_channel(daemon.target, client_tls(certs, None), options) as channel,
        pytest.raises(grpc.RpcError),  # without a client certificate, no process lets it in
    ):
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)

    trusting = ssl.create_default_context(cafile=str(certs.ca.pem_path))
    with urllib.request.urlopen(
        f"https://127.0.0.1:{metrics_port}/metrics", context=trusting, timeout=30
    ) as page:
        text = page.read().decode()
    served = [
        line
        for line in text.splitlines()
        if line.startswith('epochstate_serving_requests_total{code="OK",method="ListJobs",process="1"}')
    ]
    assert served and float(served[0].split()[-1]) > 0, "the serving process answered no connection"
