"""``epochstate health``, the plaintext probe listener and JSON log lines, against the real
daemon process: what a container health check, a kubelet probe and a log collector meet."""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.certs import Certificates, certificates
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.metrics import free_port

__all__ = ["certificates"]

ABSL_LINE = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")


def health(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHSTATE_TLS")}
    return subprocess.run(
        [sys.executable, "-m", "epochstate.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def scrape(port: int, ca: Path) -> dict[str, float]:
    """``/metrics`` over HTTPS (TLS is on: the daemon's certificate), sample name -> value
    (labels left out: the first sample of each name)."""
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=5, context=context) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, sample.value)
    return found


def test_health_answers_over_tls_the_unix_socket_and_the_plaintext_probe_port(
    certificates: Certificates, tmp_path: Path
) -> None:
    certs = certificates
    config = tmp_path / "daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tls": {
                    "cert": str(certs.server.cert),
                    "key": str(certs.server.key),
                    "client_ca": str(certs.ca.pem_path),
                },
                "auth": {"enabled": True, "roles": {"dashboards": ["read"]}},
            }
        )
    )
    probes, metrics = free_port(), free_port()
    probe_target = f"127.0.0.1:{probes}"
    daemon = DaemonProcess(
        tmp_path / "daemon",
        {},
        extra_args=["--config", str(config), "--log-format", "json", "--health-listen", probe_target],
        env={"EPOCHSTATE_METRICS_PORT": str(metrics)},
    ).start()
    try:
        mtls = ["--tls-ca", str(certs.ca.pem_path), "--tls-cert", str(certs.reader.cert)]
        mtls += ["--tls-key", str(certs.reader.key)]
        for args in (
            [*mtls, "health", "--target", daemon.target],
            ["health", "--target", daemon.unix_target],
            ["health", "--target", f"127.0.0.1:{probes}"],
            ["health", "--target", f"127.0.0.1:{probes}", "--service", "liveness"],
            ["health", "--target", f"127.0.0.1:{probes}", "--service", "epochstate.v1.EpochState"],
        ):
            done = health(*args)
            assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), args

        # The TLS port without a client certificate: the handshake fails, unreachable (6).
        done = health("--tls-ca", str(certs.ca.pem_path), "health", "-t", daemon.target, "--timeout", "2")
        assert done.returncode == 6 and done.stderr.count("\n") == 1, done.stderr
        # A plaintext caller on the TLS port cannot reach it either.
        done = health("health", "--target", daemon.target, "--timeout", "2")
        assert done.returncode == 6 and done.stderr.startswith("error: "), done.stderr
        done = health("health", "--target", f"127.0.0.1:{probes}", "--service", "nope")
        assert done.returncode == 3 and "no health service 'nope'" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1

        # The probe port serves health Check only: no state crosses it without TLS, and no
        # stream (a Watch would hold one of its few threads).
        with grpc.insecure_channel(probe_target) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=5)
            with pytest.raises(grpc.RpcError) as refused:
                next(iter(watch))
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        done = health("jobs", "--target", f"127.0.0.1:{probes}", "--timeout", "2")
        assert done.returncode != 0 and "UNIMPLEMENTED" in done.stderr, done.stderr

        # What an operator watches, with the standard collectors beside the daemon's own.
        scraped = scrape(metrics, certs.ca.pem_path)
        assert scraped["process_resident_memory_bytes"] > 0
        assert scraped["python_info"] == 1
        assert "python_gc_collections_total" in scraped
        assert scraped["epochstate_store_bytes"] > 0
        assert scraped["epochstate_cache_bytes"] == 0
    finally:
        assert daemon.stop() == 0
    # Every line of Python's logging is one JSON object; gRPC's C core writes its own lines
    # (absl's "I1127 10:22:46.134391 ..." format), which GRPC_VERBOSITY=ERROR keeps to errors.
    lines = daemon.log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip() and not ABSL_LINE.match(line)]
    assert {"time", "level", "logger", "message", "thread"} <= records[0].keys()
    messages = [r["message"] for r in records]
    assert any(m.startswith("health probes (plaintext, grpc.health.v1 only) on 127.0.0.1:") for m in messages)
    assert "shutting down" in messages


def test_an_unknown_log_format_is_bad_usage(tmp_path: Path) -> None:
    done = health("daemon", "--data-dir", str(tmp_path), "--log-format", "xml")
    assert done.returncode == 2
    assert done.stderr == "error: --log-format: 'xml' is not one of text, json\n"
