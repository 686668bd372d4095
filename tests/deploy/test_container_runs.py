"""The rendered daemon container of each layout, run as a local process exactly as declared
(command, args, environment, mounted config and secrets; see :mod:`tests.deploy.kubelet`):
its startup, readiness and liveness probes answer, the Prometheus Operator's monitor scrapes
it, the address it advertises in ZooKeeper is the one the manifest computes, the Spark driver
reaches it where the pod template says, and SIGTERM ends it with exit code 0 within the pod's
grace period. The manifests and the program cannot drift apart."""

from __future__ import annotations

import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kazoo.client import KazooClient

from epochstate.client import EpochStateClient
from epochstate.client.tls import TlsOptions
from epochstate.spark_plugin import attach
from tests.deploy.kubelet import LocalPod, expand
from tests.deploy.manifests import DaemonContainer, Resource, daemon_containers, image
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.certs import Authority, Issued, ServerAuth
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import eventually

CONTAINERS = list(daemon_containers())
MONITORING = "monitoring.coreos.com/v1"


def probe_passes(pod: LocalPod, probe: dict[str, Any]) -> bool:
    """One try of a Kubernetes probe, as the kubelet makes it against the pod's IP."""
    timeout = float(probe.get("timeoutSeconds", 1))
    if "grpc" in probe:
        port = pod.probe_port(probe["grpc"]["port"])
        request = health_pb2.HealthCheckRequest(service=probe["grpc"].get("service", ""))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                answer = health_pb2_grpc.HealthStub(channel).Check(request, timeout=timeout)
            except grpc.RpcError:
                return False
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)
    if "exec" in probe:
        env = pod.environment()
        command = [pod.local(expand(part, env)) for part in probe["exec"]["command"]]
        done = subprocess.run(command, env=pod.process_env(), capture_output=True, timeout=timeout + 10)
        return done.returncode == 0
    if "tcpSocket" in probe:
        try:
            socket.create_connection(
                ("127.0.0.1", pod.probe_port(probe["tcpSocket"]["port"])), timeout
            ).close()
        except OSError:
            return False
        return True
    raise AssertionError(f"a probe this test does not make: {probe}")


def wait_for_startup(pod: LocalPod, probe: dict[str, Any], log: Path) -> float:
    """Seconds until the startup probe passed, tried every ``periodSeconds`` as the kubelet does."""
    started = time.monotonic()
    period = float(probe.get("periodSeconds", 10))
    budget = min(60.0, period * int(probe.get("failureThreshold", 3)))
    time.sleep(float(probe.get("initialDelaySeconds", 0)))
    while time.monotonic() - started < budget:
        assert pod.process is not None
        if pod.process.poll() is not None:
            pytest.fail(f"the daemon exited with {pod.process.returncode}:\n{log.read_text()[-3000:]}")
        if probe_passes(pod, probe):
            return time.monotonic() - started
        time.sleep(min(period, 0.5))
    pytest.fail(f"startup probe did not pass within {budget:.0f} s:\n{log.read_text()[-3000:]}")


def scrape(pod: LocalPod, port: int, endpoint: dict[str, Any], tls_secret: dict[str, bytes]) -> str:
    """GET the endpoint's path as Prometheus would, with its scheme and TLS config."""
    path = endpoint.get("path", "/metrics")
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    stream: socket.socket = raw
    if endpoint.get("scheme") == "https":
        tls = endpoint["tlsConfig"]
        context = ssl.create_default_context(cadata=tls_secret[tls["ca"]["secret"]["key"]].decode())
        stream = context.wrap_socket(raw, server_hostname=tls["serverName"])
    with stream:
        stream.sendall(f"GET {path} HTTP/1.0\r\nHost: {tls['serverName']}\r\n\r\n".encode())
        answer = b""
        while chunk := stream.recv(65536):
            answer += chunk
    head, _, body = answer.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.0 200"), head
    return body


def monitors_of(daemon: DaemonContainer) -> tuple[list[Resource], list[Resource]]:
    """The monitors of the daemon's layout, and the layout's Services."""
    resources = daemon.layout()
    return (
        [r for r in resources if r["apiVersion"] == MONITORING],
        [r for r in resources if r["kind"] == "Service"],
    )


@dataclass
class Pki:
    """What the pod's secrets hold, made for a test: a CA, the daemon's certificate (names
    ``epochstate``, ``localhost``, 127.0.0.1), callers ``ops`` and ``reader``, a ZooKeeper digest."""

    authority: Authority
    ops: Issued
    reader: Issued
    tls_secret: dict[str, bytes]
    digest: str

    @classmethod
    def make(cls, directory: Path) -> Pki:
        authority = Authority.create(directory / "pki", "epochstate-ca")
        server = authority.issue(
            "server", "epochstate", dns=("epochstate", "localhost"), ips=("127.0.0.1",), usage=ServerAuth
        )
        tls_secret = {
            "tls.crt": server.cert.read_bytes(),
            "tls.key": server.key.read_bytes(),
            "ca.crt": authority.pem_path.read_bytes(),
        }
        return cls(
            authority,
            authority.issue("ops", "ops"),
            authority.issue("reader", "reader"),
            tls_secret,
            f"epochstate:{secrets.token_hex(16)}",
        )

    def pod(self, daemon: DaemonContainer, zk_connect: str) -> LocalPod:
        """``daemon`` laid out with these secrets, its ZooKeeper the test's."""

        def this_zookeeper(key: str, text: str) -> str:
            """The cluster's ZooKeeper address in the daemon's config becomes the test's."""
            settings = yaml.safe_load(text)
            assert key == "daemon.yaml" and "zookeeper" in settings
            return yaml.safe_dump({**settings, "zookeeper": zk_connect})

        def this_zookeeper_variable(name: str, value: str) -> str:
            """... and so does an overlay's EPOCHSTATE_ZOOKEEPER."""
            return zk_connect if name == "EPOCHSTATE_ZOOKEEPER" else value

        given = {"epochstate-tls": self.tls_secret, "epochstate-zookeeper": {"digest": self.digest.encode()}}
        return LocalPod(daemon, image(), given, this_zookeeper, this_zookeeper_variable)

    def client(self, who: Issued) -> TlsOptions:
        """A caller's TLS options: ``who``'s certificate, the daemon checked for "epochstate"."""
        return TlsOptions(ca=self.authority.pem_path, cert=who.cert, key=who.key, server_name="epochstate")


@pytest.mark.parametrize("daemon", CONTAINERS, ids=lambda c: c.name)
def test_the_rendered_container_runs_and_answers_what_the_manifests_ask(
    daemon: DaemonContainer, tmp_path: Path, zk_connect: str
) -> None:
    pki = Pki.make(tmp_path)
    authority, ops, tls_secret, digest = pki.authority, pki.ops, pki.tls_secret, pki.digest
    pod = pki.pod(daemon, zk_connect)
    log = tmp_path / "daemon.log"
    container = daemon.container
    try:
        pod.start(log)
        wait_for_startup(pod, container["startupProbe"], log)
        for probe in ("readinessProbe", "livenessProbe"):
            assert probe_passes(pod, container[probe]), f"{probe}:\n{log.read_text()[-2000:]}"

        # The TLS port, as a reader with a certificate reaches it (the pod's IP: server name "epochstate").
        tls_flags = [
            "--tls-ca",
            str(authority.pem_path),
            "--tls-cert",
            str(ops.cert),
            "--tls-key",
            str(ops.key),
        ]
        tls_flags += ["--tls-server-name", "epochstate"]
        target = f"127.0.0.1:{pod.probe_port('grpc')}"
        done = subprocess.run(
            [sys.executable, "-m", "epochstate.cli", *tls_flags, "health", "--target", target],
            capture_output=True,
            text=True,
            timeout=60,
            env=pod.process_env(),
        )
        assert done.returncode == 0, done.stderr

        # The monitors scrape it, over the scheme and TLS they declare.
        monitors, services = monitors_of(daemon)
        assert monitors
        for monitor in monitors:
            if monitor["kind"] == "PodMonitor":
                endpoints = [(e, pod.probe_port(e["port"])) for e in monitor["spec"]["podMetricsEndpoints"]]
            else:
                ports = {p["name"]: p["targetPort"] for s in services for p in s["spec"]["ports"]}
                endpoints = [(e, pod.probe_port(ports[e["port"]])) for e in monitor["spec"]["endpoints"]]
            for endpoint, port in endpoints:
                body = scrape(pod, port, endpoint, tls_secret)
                assert 'epochstate_zookeeper_state{state="connected"} 1.0' in body
                assert "process_cpu_seconds_total" in body and "epochstate_lag_epochs" in body

        # ZooKeeper has the address the manifest computes from the downward API.
        env = pod.environment()
        zookeeper = KazooClient(hosts=zk_connect, auth_data=[("digest", digest)])
        zookeeper.start(30)
        try:
            data, _ = zookeeper.get(f"/epochstate/nodes/{env['EPOCHSTATE_NODE']}")
        finally:
            zookeeper.stop()
            zookeeper.close()
        advertised = json.loads(data)
        assert env["EPOCHSTATE_ADVERTISE"] in json.dumps(advertised), advertised
        assert env["EPOCHSTATE_NODE"] == "pod-0"

        # Other containers of the pod that name the daemon reach it through what they share.
        for other in [*daemon.pod_spec.get("containers", []), *daemon.pod_spec.get("initContainers", [])]:
            targets = [e["value"] for e in other.get("env", []) if e["name"] == "EPOCHSTATE_TARGET"]
            if other is container or not targets:
                continue
            shared = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            for mount in other.get("volumeMounts", []):
                if mount["name"] in shared:
                    assert mount["mountPath"] == shared[mount["name"]], mount
            done = subprocess.run(
                [sys.executable, "-m", "epochstate.cli", "health", "--target", pod.local(targets[0])],
                capture_output=True,
                text=True,
                timeout=60,
                env={k: v for k, v in os.environ.items() if not k.startswith("EPOCHSTATE_")},
            )
            assert done.returncode == 0, (other["name"], done.stderr)

        # The image's own HEALTHCHECK (docker, compose) where the socket is in the data directory.
        socket_file = pod.local(image().healthcheck[-1])
        if Path(socket_file.removeprefix("unix://")).is_socket():
            healthcheck = [pod.local(part) for part in image().healthcheck]
            entry = str(Path(sys.executable).parent / healthcheck[0])
            done = subprocess.run([entry, *healthcheck[1:]], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr

        # SIGTERM, as the kubelet sends it: exit code 0 within the grace period.
        grace = float(daemon.pod_spec.get("terminationGracePeriodSeconds", 30))
        assert pod.process is not None
        started = time.monotonic()
        pod.process.terminate()
        assert pod.process.wait(grace) == 0, log.read_text()[-3000:]
        assert time.monotonic() - started < grace
        assert pod.written_outside_mounts() == []  # the root filesystem can be read-only
    finally:
        pod.close()
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    assert lines and all(json.loads(line)["level"] for line in lines)  # --log-format json


def test_the_sidecar_serves_a_pinned_lookup_of_the_job_its_driver_reports(
    spark: Any, tmp_path: Path, zk_connect: str
) -> None:
    """The sidecar layout end to end: the driver's listener reports through the socket the pod
    template shares (role report), the daemon follows the checkpoint under /checkpoints (its
    root), and a reader with a certificate gets a pinned answer over TLS, twice the same."""
    (daemon,) = [c for c in CONTAINERS if c.workload["kind"] == "Pod"]
    (driver,) = daemon.pod_spec["containers"]
    pki = Pki.make(tmp_path)
    pod = pki.pod(daemon, zk_connect)
    log = tmp_path / "daemon.log"
    try:
        pod.start(log)
        wait_for_startup(pod, daemon.container["startupProbe"], log)
        driver_env = {e["name"]: e["value"] for e in driver["env"]}
        mounts = {m["name"]: m["mountPath"] for m in driver["volumeMounts"]}
        checkpoint = pod.path(mounts["checkpoints"]) / "orders"  # the driver's /checkpoints/orders
        reporter = attach(
            spark, pod.local(driver_env["EPOCHSTATE_TARGET"]), checkpoints={"orders": str(checkpoint)}
        )
        stream = FileStream(spark, tmp_path / "in", checkpoint, counts, SCHEMA, name="orders").start()
        target = f"127.0.0.1:{pod.probe_port('grpc')}"
        try:
            stream.feed(orders(0))
            stream.feed(orders(1))
            with EpochStateClient(target, tls=pki.client(pki.reader), timeout=30) as client:
                newest = client.wait_for("orders", 1, timeout=60)
                latest = client.get("orders", ["u1"])
                assert latest.found and latest.epoch == newest
                assert client.get("orders", ["u1"], epoch=latest.epoch) == latest
            # The driver's listener reported both epochs through the socket (progress events
            # reach the listener asynchronously).
            assert eventually(lambda: reporter.sent >= 2, 30), (reporter.sent, reporter.dropped)
            assert reporter.dropped == 0
        finally:
            stream.stop()
            spark.streams.removeListener(reporter)
            reporter.close()
    finally:
        pod.close()
