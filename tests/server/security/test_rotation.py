"""Certificate rotation without a restart, the way Kubernetes rotates a mounted secret."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from cryptography import x509

from epochstate.client import EpochStateClient
from epochstate.client.tls import TlsOptions
from epochstate.daemon.server.security.certificates import ServerCertificates
from tests.fixtures.certs import Certificates, Issued
from tests.fixtures.daemon import DaemonProcess


def _publish(secret: Path, version: str, issued: Issued) -> None:
    """Put ``issued`` in ``secret/<version>/`` and point ``secret/..data`` at it in one rename
    (kubelet's atomic writer); ``secret/tls.crt`` and ``tls.key`` link through ``..data``."""
    directory = secret / version
    directory.mkdir(parents=True)
    shutil.copy(issued.cert, directory / "tls.crt")
    shutil.copy(issued.key, directory / "tls.key")
    os.symlink(version, secret / "..data_tmp")
    os.replace(secret / "..data_tmp", secret / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (secret / name).is_symlink():
            os.symlink(f"..data/{name}", secret / name)


def _served_serial(target: str, ca: Path) -> int:
    """The serial of the certificate a new TLS connection to ``target`` is shown."""
    host, port = target.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])  # gRPC refuses a handshake without it
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_new_connections_get_the_new_certificate_old_ones_keep_working(
    certificates: Certificates, secure_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    certs = certificates
    secret = tmp_path / "secret"
    _publish(secret, "v1", certs.server)
    tls = TlsOptions(ca=certs.ca.pem_path)
    daemon = secure_daemon(
        {"tls": {"cert": str(secret / "tls.crt"), "key": str(secret / "tls.key")}}, tls=tls
    )
    assert _served_serial(daemon.target, certs.ca.pem_path) == certs.server.serial

    with EpochStateClient(daemon.target, tls=tls, timeout=20) as before:
        assert before.jobs() == []
        rotated = certs.ca.server("server-rotated")  # a new key and a new serial
        _publish(secret, "v2", rotated)
        assert _served_serial(daemon.target, certs.ca.pem_path) == rotated.serial
        assert before.jobs() == []  # the connection made before the rotation goes on
        with EpochStateClient(daemon.target, tls=tls, timeout=20) as after:
            assert after.jobs() == []
    assert "TLS certificate files changed" in daemon.log_tail(200)


def test_a_half_written_rotation_keeps_the_current_certificate(
    certificates: Certificates, tmp_path: Path
) -> None:
    certs = certificates
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(certs.server.cert, cert)
    shutil.copy(certs.server.key, key)
    served = ServerCertificates(cert, key, None)
    assert served.fetch() is None  # unchanged: nothing to hand to gRPC
    cert.write_text("")  # the new certificate is not there yet
    assert served.fetch() is None and served.reloads == 0
    following = certs.ca.server("next")
    shutil.copy(following.cert, cert)
    shutil.copy(following.key, key)
    assert served.fetch() is not None and served.reloads == 1
    assert served.fetch() is None
