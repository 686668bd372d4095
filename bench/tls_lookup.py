"""The TLS rows of bench/lookup.py: Get over mTLS with authorization against an mTLS echo floor.

A second daemon follows the same checkpoint as the plaintext one, serving TCP
with TLS, requiring client certificates (mTLS) and checking the caller's role on
every call, as a production daemon does; the echo server serves the same TLS
(the daemon's dynamic credentials, mTLS). Certificates are made for the run with
``cryptography`` (the test suite's own CA helper).
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from epochstate.client import EpochStateClient
from epochstate.client.client import CHANNEL_OPTIONS
from epochstate.client.tls import TlsOptions, open_channel
from epochstate.devtools.local_daemon import LocalDaemon
from tests.fixtures.certs import Authority


@dataclass
class TlsSetup:
    """The mTLS daemon and echo server of one run; :meth:`close` stops both."""

    daemon: LocalDaemon
    echo: subprocess.Popen[str]
    echo_target: str
    tls: TlsOptions
    channels: list[grpc.Channel] = field(default_factory=list)

    def echo_call(self) -> Callable[[], Any]:
        channel = open_channel(self.echo_target, self.tls, CHANNEL_OPTIONS)
        self.channels.append(channel)
        return functools.partial(channel.unary_unary("/bench.Echo/Echo", None, None), b"x" * 40)

    def client(self) -> EpochStateClient:
        return EpochStateClient(self.daemon.target, timeout=120, tls=self.tls)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        if self.echo.stdin is not None:
            self.echo.stdin.close()
        self.echo.wait(10)
        self.daemon.stop()


def start(workdir: Path, checkpoint: Path, retention: int, epoch: int) -> TlsSetup:
    """Certificates, the mTLS echo server and an mTLS daemon following ``checkpoint`` up to ``epoch``."""
    ca = Authority.create(workdir / "pki", "bench-ca")
    server = ca.server()
    reader = ca.issue("reader", "bench-reader")
    tls = TlsOptions(ca=ca.pem_path, cert=reader.cert, key=reader.key)
    config = workdir / "tls-daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tls": {"cert": str(server.cert), "key": str(server.key), "client_ca": str(ca.pem_path)},
                "auth": {"enabled": True, "roles": {"bench-reader": ["read"]}},
                "retention_epochs": retention,
                "listen_unix": "",
            }
        )
    )
    daemon = LocalDaemon(
        workdir / "tls-daemon", {"bench": str(checkpoint)}, extra_args=["--config", str(config)], tls=tls
    ).start()
    echo = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("echo_server.py")),
            "--tls-cert",
            str(server.cert),
            "--tls-key",
            str(server.key),
            "--tls-client-ca",
            str(ca.pem_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert echo.stdout is not None
    setup = TlsSetup(daemon, echo, f"127.0.0.1:{echo.stdout.readline().strip()}", tls)
    with setup.client() as client:
        client.get("bench", [0], at_least=epoch)
    return setup
