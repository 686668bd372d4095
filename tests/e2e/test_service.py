"""Standard gRPC services, client retries across a restart, and daemon configuration."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from epochstate.client import EpochStateClient
from epochstate.v1 import epochstate_pb2 as pb
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_health_reflection_and_metrics(daemon_factory: Callable[..., DaemonProcess]) -> None:
    metrics_port = free_port()
    daemon = daemon_factory({}, env={"EPOCHSTATE_METRICS_PORT": str(metrics_port)})
    with EpochStateClient(daemon.target, timeout=5) as client:
        assert client.jobs() == []
        with pytest.raises(grpc.RpcError) as failed:
            client.stub.Get(pb.GetRequest(store=pb.StoreRef(job="nope")), timeout=5)
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    assert 'epochstate_requests_total{code="OK",method="ListJobs"} 1.0' in scraped
    assert 'epochstate_requests_total{code="NOT_FOUND",method="Get"} 1.0' in scraped
    assert 'epochstate_request_seconds_count{method="Get"} 1.0' in scraped
    with grpc.insecure_channel(daemon.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "epochstate.v1.EpochState"):
            status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (response,) = list(stub.ServerReflectionInfo(iter([request]), timeout=5))
        names = {s.name for s in response.list_services_response.service}
        assert {"epochstate.v1.EpochState", "grpc.health.v1.Health"} <= names


def test_client_retries_unavailable_until_the_daemon_is_back(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="retry").start()
    try:
        stream.feed(orders(0))
        port = free_port()
        daemon = daemon_factory({"retry": str(tmp_path / "cp")}, listen=f"127.0.0.1:{port}")
        daemon.wait_for_epoch("retry", 0)
        with EpochStateClient(daemon.target, timeout=30) as client:
            before = client.get("retry", ["u1"], epoch=0)
            daemon.kill()
            restarter = threading.Timer(1.0, daemon.start)
            restarter.start()
            after = client.get("retry", ["u1"], epoch=0)  # fails UNAVAILABLE until the restart
            restarter.join()
        assert after == before
    finally:
        stream.stop()


def test_config_file_env_and_options(tmp_path: Path) -> None:
    from epochstate.daemon.config import ConfigError, load_settings

    config = tmp_path / "daemon.yaml"
    config.write_text(
        "node: from-file\nlisten: 127.0.0.1:7001\nretention_epochs: 7\n"
        "jobs:\n  - {name: a, checkpoint: /cp/a}\n"
    )
    import os

    os.environ["EPOCHSTATE_RETENTION_EPOCHS"] = "9"
    try:
        settings = load_settings(config, listen="127.0.0.1:7002")
    finally:
        del os.environ["EPOCHSTATE_RETENTION_EPOCHS"]
    assert (settings.node, settings.listen, settings.retention_epochs) == ("from-file", "127.0.0.1:7002", 9)
    assert [j.name for j in settings.jobs] == ["a"]

    bad = tmp_path / "bad.yaml"
    bad.write_text("retention_epochs: -1\n")
    try:
        load_settings(bad)
    except ConfigError as error:
        assert "retention_epochs" in str(error)
    else:
        raise AssertionError("a negative retention must be refused")

    result = subprocess.run(
        [sys.executable, "-m", "epochstate.cli.app", "daemon", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "retention_epochs" in result.stderr
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "epochstate.cli.app",
            "daemon",
            "--job",
            "x=/does/not/exist",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "/does/not/exist" in missing.stderr
