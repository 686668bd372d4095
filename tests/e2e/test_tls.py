"""The Spark listener, AlignedLookup and the CLI against a real daemon that requires mTLS
and roles: each with its own identity, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from epochstate.client import EpochStateClient
from epochstate.client.tls import TlsOptions
from epochstate.spark_plugin import attach
from epochstate.spark_plugin.lookup import AlignedLookup
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.certs import Certificates, Issued, certificates
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream

__all__ = ["certificates"]


def _tls(certs: Certificates, issued: Issued) -> TlsOptions:
    return TlsOptions(ca=certs.ca.pem_path, cert=issued.cert, key=issued.key)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epochstate.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_listener_reports_over_mtls_and_readers_read_over_it(
    spark: Any, certificates: Certificates, tmp_path: Path
) -> None:
    certs = certificates
    checkpoints = tmp_path / "checkpoints"
    config = tmp_path / "daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tls": {
                    "cert": str(certs.server.cert),
                    "key": str(certs.server.key),
                    "client_ca": str(certs.ca.pem_path),
                },
                "auth": {
                    "enabled": True,
                    # The listener is known by a SAN of its certificate, the readers by their CN.
                    "roles": {"listener.jobs.internal": ["report"], "dashboards": ["read"]},
                    "checkpoint_roots": [str(checkpoints)],
                },
            }
        )
    )
    reader = _tls(certs, certs.reader)
    # A long poll interval: the job becomes known, and fresh, only through the listener's reports.
    daemon = DaemonProcess(
        tmp_path / "daemon", {}, extra_args=["--config", str(config), "--poll-interval", "60"], tls=reader
    ).start()
    checkpoint = str(checkpoints / "orders")
    reporter = attach(
        spark, daemon.target, checkpoints={"orders": checkpoint}, tls=_tls(certs, certs.reporter)
    )
    stream = FileStream(spark, tmp_path / "in", checkpoints / "orders", counts, SCHEMA, name="orders").start()
    try:
        stream.feed(orders(0))
        stream.feed(orders(1))
        daemon.wait_for_epoch("orders", 1, timeout=60)
        # The daemon may find epoch 1 in the checkpoint before the listener's thread has
        # finished sending its report: wait for the count, not for the epoch alone.
        deadline = time.monotonic() + 30
        while reporter.sent < 2 and reporter.dropped == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reporter.sent >= 2 and reporter.dropped == 0

        with EpochStateClient(daemon.target, tls=reader) as client:
            expected = client.get("orders", ["u1"], epoch=1)
        assert expected.found

        lookup = AlignedLookup(daemon.target, job="orders", reader="enrich", tls=reader)
        (looked_up,) = lookup.get_at(1, [["u1"]])
        assert looked_up == expected

        # The CLI: options before the command, or the EPOCHSTATE_TLS_* variables.
        flags = ["--tls-ca", str(certs.ca.pem_path), "--tls-cert", str(certs.reader.cert)]
        flags += ["--tls-key", str(certs.reader.key)]
        done = _cli(*flags, "get", "orders", "u1", "--epoch", "1", "--json", "--target", daemon.target)
        assert done.returncode == 0, done.stderr
        assert '"found":true' in done.stdout
        env = {
            "EPOCHSTATE_TLS_CA": str(certs.ca.pem_path),
            "EPOCHSTATE_TLS_CERT": str(certs.reader.cert),
            "EPOCHSTATE_TLS_KEY": str(certs.reader.key),
        }
        done = _cli("jobs", "--json", "--target", daemon.target, env=env)
        assert done.returncode == 0 and '"orders"' in done.stdout, done.stderr
        # The listener's identity may report, not read: exit code 7, the reason on the line.
        env["EPOCHSTATE_TLS_CERT"], env["EPOCHSTATE_TLS_KEY"] = (
            str(certs.reporter.cert),
            str(certs.reporter.key),
        )
        done = _cli("jobs", "--target", daemon.target, env=env)
        assert done.returncode == 7 and "[ROLE_MISSING]" in done.stderr, done.stderr
        # No client certificate: the handshake fails, the daemon is unreachable for this client.
        done = _cli("--tls-ca", str(certs.ca.pem_path), "jobs", "--timeout", "1", "--target", daemon.target)
        assert done.returncode == 6, done.stderr
    finally:
        stream.stop()
        spark.streams.removeListener(reporter)
        reporter.close()
        daemon.stop()
