"""Secure defaults: no exposed daemon without TLS and auth unless --insecure; the Unix
socket's mode; where a bearer token is accepted."""

from __future__ import annotations

import http.client
import os
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from epochstate.client import (
    EpochStateClient,
    InvalidArgument,
    RoleMissing,
    Unauthenticated,
    Unavailable,
)
from epochstate.client.tls import TlsOptions, open_channel
from epochstate.daemon.security_config import (
    AuthSettings,
    Role,
    TlsSettings,
    exposure_problem,
    is_loopback,
)
from epochstate.daemon.server.security import UNIX_SOCKET_MODE
from tests.fixtures.certs import Certificates
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.metrics import free_port
from tests.server.security.calls import call, every_rpc
from tests.server.security.conftest import ROLES, TOKENS, token_files


def _daemon_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epochstate.cli", "daemon", "--data-dir", str(tmp_path / "d"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_exposed_daemon_without_tls_and_auth_refuses_to_start(tmp_path: Path) -> None:
    done = _daemon_command(tmp_path, "--listen", "0.0.0.0:0")
    print(done.stderr)
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0:0 (beyond loopback) without TLS" in done.stderr
    assert "--insecure" in done.stderr and "auth" in done.stderr
    assert not (tmp_path / "d").exists()  # refused before touching the data directory


def test_insecure_lets_it_start_beyond_loopback(
    tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    daemon = daemon_factory({}, listen="0.0.0.0:0", extra_args=["--insecure"])
    port = daemon.target.rsplit(":", 1)[1]
    with EpochStateClient(f"127.0.0.1:{port}", tls=TlsOptions()) as client:
        assert client.jobs() == []


def test_tls_and_auth_let_it_start_beyond_loopback(
    certificates: Certificates, secure_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    files = token_files(tmp_path / "tokens")
    settings = {
        "tls": {"cert": str(certificates.server.cert), "key": str(certificates.server.key)},
        "auth": {"enabled": True, "roles": ROLES, "tokens": {k: str(v) for k, v in files.items()}},
    }
    metrics_port = free_port()
    settings["metrics_port"] = metrics_port
    reader = TlsOptions(ca=certificates.ca.pem_path, token_file=files["dashboards"])
    daemon = secure_daemon(settings, extra_args=["--listen", "0.0.0.0:0"], tls=reader)
    port = daemon.target.rsplit(":", 1)[1]
    with EpochStateClient(f"127.0.0.1:{port}", tls=reader) as client:
        assert client.jobs() == []

    # The metrics port is a TCP listener too: HTTPS with the daemon's certificate.
    trusting = ssl.create_default_context(cafile=str(certificates.ca.pem_path))
    url = f"https://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, context=trusting, timeout=30) as answer:
        assert answer.status == 200
        assert b"epochstate_" in answer.read()
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=30)
    with pytest.raises((ConnectionError, urllib.error.URLError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30)


def test_what_counts_as_exposed() -> None:
    tls = TlsSettings(cert=Path("c"), key=Path("k"))
    auth = AuthSettings(enabled=True, roles={"a": [Role.READ]})
    for loopback in ("127.0.0.1:7070", "127.3.2.1:1", "[::1]:7070", "localhost:7070"):
        assert is_loopback(loopback), loopback
        assert exposure_problem(loopback, TlsSettings(), AuthSettings(), insecure=False) is None
    for exposed in ("0.0.0.0:7070", "[::]:7070", "10.0.0.4:7070", "node-1.example:7070", ":7070"):
        assert not is_loopback(exposed), exposed
        assert exposure_problem(exposed, TlsSettings(), AuthSettings(), insecure=False) is not None
        assert exposure_problem(exposed, tls, AuthSettings(), insecure=False) is not None  # TLS alone
        assert exposure_problem(exposed, TlsSettings(), auth, insecure=False) is not None  # auth alone
        assert exposure_problem(exposed, tls, auth, insecure=False) is None
        assert exposure_problem(exposed, TlsSettings(), AuthSettings(), insecure=True) is None


def test_the_unix_socket_is_owner_and_group_only_and_takes_tokens(
    secure_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    files = token_files(tmp_path / "tokens")
    settings = {
        "auth": {
            "enabled": True,
            "roles": ROLES,
            "tokens": {k: str(v) for k, v in files.items()},
            "unix_roles": [],  # a caller on the socket must send a token
        }
    }
    daemon = secure_daemon(settings)
    socket_file = Path(daemon.unix_target.removeprefix("unix://"))
    assert stat.S_IMODE(socket_file.stat().st_mode) == UNIX_SOCKET_MODE == 0o660

    with pytest.raises(Unauthenticated) as refused:
        EpochStateClient(daemon.unix_target, tls=TlsOptions()).jobs()
    assert refused.value.reason == "NOT_AUTHENTICATED"
    with EpochStateClient(daemon.unix_target, tls=TlsOptions(token_file=files["dashboards"])) as reader:
        assert reader.jobs() == []
        with pytest.raises(RoleMissing) as missing:
            reader.follow("x", str(tmp_path / "cp"))
        assert missing.value.metadata == {"identity": "dashboards", "role": "admin"}
    # Over plaintext TCP the client will not send a token, and the daemon would not take one.
    with pytest.raises(InvalidArgument, match="not plaintext TCP"):
        EpochStateClient(daemon.target, tls=TlsOptions(token_file=files["ops"]))
    with grpc.insecure_channel(daemon.target) as channel:
        token = (("authorization", f"Bearer {TOKENS['dashboards']}"),)
        outcome = call(channel, every_rpc("/x")[3], token)  # ListJobs
    assert (outcome.code, outcome.reason) == (grpc.StatusCode.UNAUTHENTICATED, "NOT_AUTHENTICATED")


def test_open_unix_socket_callers_get_the_unix_roles(
    secure_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    daemon = secure_daemon({"auth": {"enabled": True, "roles": ROLES, "unix_roles": ["read"]}})
    with open_channel(daemon.unix_target, TlsOptions()) as channel:
        outcomes = {rpc.name: call(channel, rpc) for rpc in every_rpc(str(tmp_path / "cp"))}
    assert outcomes["ListJobs"].code == grpc.StatusCode.OK
    assert outcomes["ReportEpoch"].reason == outcomes["FollowJob"].reason == "ROLE_MISSING"


def test_the_unix_socket_takes_only_the_allowed_user_ids(
    secure_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    """SO_PEERCRED: this test's own user id let in, or, when not listed, shut out at connect."""
    me = os.getuid()
    allowed = secure_daemon({"auth": {"unix_peer_uids": [me]}}, name="allowed")
    socket_file = Path(allowed.unix_target.removeprefix("unix://"))
    assert stat.S_IMODE(socket_file.stat().st_mode) == 0o660
    with EpochStateClient(allowed.unix_target, tls=TlsOptions(), timeout=20) as client:
        for _ in range(3):  # several calls over the one relayed connection
            assert client.jobs() == []
        with pytest.raises(InvalidArgument, match="does not exist"):  # an error's trailers pass too
            client.follow("orders", str(tmp_path / "cp"))
        assert client.jobs() == []

    other = secure_daemon({"auth": {"unix_peer_uids": [me + 1]}}, name="other")
    with (
        pytest.raises(Unavailable),
        EpochStateClient(other.unix_target, tls=TlsOptions(), timeout=2) as client,
    ):
        client.jobs()
    assert f"refused a connection of user id {me}" in other.log_tail(100)
    # TCP on loopback is not the Unix socket: the check does not apply there.
    with EpochStateClient(other.target, tls=TlsOptions()) as client:
        assert client.jobs() == []
