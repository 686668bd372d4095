"""Real daemons with TLS and auth from a YAML config, certificates from ``cryptography``,
and a job checkpoint written by real Spark to read from."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from epochstate.client.tls import TlsOptions
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.certs import Certificates, Issued, certificates
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream

__all__ = ["certificates"]

TOKENS = {
    "dashboards": "read-token-0123456789abcdef",
    "spark-listener": "report-token-0123456789abcdef",
    "ops": "admin-token-0123456789abcdef",
}
ROLES = {"dashboards": ["read"], "spark-listener": ["report"], "ops": ["admin"]}


def client_tls(certs: Certificates, issued: Issued | None, *, ca: Path | None = None) -> TlsOptions:
    """Options of a client that trusts ``ca`` (default: the test CA) and presents ``issued``."""
    return TlsOptions(
        ca=ca or certs.ca.pem_path,
        cert=None if issued is None else issued.cert,
        key=None if issued is None else issued.key,
    )


def token_files(directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for identity, token in TOKENS.items():
        path = directory / f"{identity}.token"
        path.write_text(token + "\n")
        files[identity] = path
    return files


@pytest.fixture(scope="module")
def orders_checkpoint(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the ``orders`` aggregation with epochs 0 and 1 committed."""
    root = tmp_path_factory.mktemp("orders")
    stream = FileStream(spark, root / "in", root / "checkpoints" / "orders", counts, SCHEMA, name="orders")
    stream.start()
    try:
        stream.feed(orders(0))
        stream.feed(orders(1))
    finally:
        stream.stop()
    return root / "checkpoints" / "orders"


@pytest.fixture
def secure_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """``make(settings, jobs=..., tls=..., name=...)``: a daemon process started with
    ``settings`` as its YAML config file; all are stopped after the test."""
    started: list[DaemonProcess] = []

    def make(
        settings: dict[str, Any],
        *,
        jobs: dict[str, str] | None = None,
        tls: TlsOptions | None = None,
        name: str = "daemon",
        extra_args: list[str] | None = None,
    ) -> DaemonProcess:
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(settings))
        daemon = DaemonProcess(
            tmp_path / name, jobs or {}, extra_args=["--config", str(config), *(extra_args or [])], tls=tls
        )
        started.append(daemon)
        return daemon.start()

    yield make
    for daemon in started:
        daemon.stop()
