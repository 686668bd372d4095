"""The server's TLS credentials, read again whenever their files change.

gRPC asks :meth:`ServerCertificates.fetch` before each new TLS handshake
(``grpc.dynamic_ssl_server_credentials``); it answers None while the files are
unchanged, else the new certificate, key and client CA. A Kubernetes secret
rotates by swapping a symlink, so "changed" compares the resolved path and its
inode, size and modification time, one ``stat`` per file and handshake.
Connections already established keep the certificate they were made with.

A half-written or mismatched pair (the files are not swapped atomically)
is not fatal: the last good configuration stays, with a warning, and the next
handshake tries again.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc

from epochstate.core.errors import EpochStateError

log = logging.getLogger(__name__)


class CertificateUnreadable(EpochStateError):
    """The TLS certificate, key or client CA file cannot be read at start-up; check tls.* paths."""


@dataclass(frozen=True)
class _Seen:
    path: str
    inode: int
    size: int
    mtime_ns: int


def _seen(path: Path) -> _Seen | None:
    try:
        resolved = os.path.realpath(path)
        st = os.stat(resolved)
    except OSError:
        return None
    return _Seen(resolved, st.st_ino, st.st_size, st.st_mtime_ns)


class ServerCertificates:
    """The certificate chain ``cert``, its ``key`` and the optional ``client_ca`` bundle.

    Raises CertificateUnreadable when the files cannot be read at construction.
    ``reloads`` counts the configurations handed to gRPC after the first.
    """

    def __init__(self, cert: Path, key: Path, client_ca: Path | None) -> None:
        self._files = tuple(p for p in (cert, key, client_ca) if p is not None)
        self._cert, self._key, self._client_ca = cert, key, client_ca
        self._lock = threading.Lock()
        self.reloads = 0
        self._state = self._stat()
        try:
            self._initial = self._configuration()
        except OSError as error:
            raise CertificateUnreadable(f"cannot read TLS file {error.filename}: {error.strerror}") from error

    @property
    def mutual(self) -> bool:
        """Whether clients must present a certificate the client CA signed."""
        return self._client_ca is not None

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials that ask :meth:`fetch` before each handshake."""
        # grpc's stubs say the fetcher never answers None; gRPC itself reads None as "unchanged".
        fetch = cast(Callable[[], grpc.ServerCertificateConfiguration], self.fetch)
        return grpc.dynamic_ssl_server_credentials(
            self._initial, fetch, require_client_authentication=self.mutual
        )

    def _stat(self) -> tuple[_Seen | None, ...]:
        return tuple(_seen(p) for p in self._files)

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        chain = self._cert.read_bytes()
        key = self._key.read_bytes()
        roots = None if self._client_ca is None else self._client_ca.read_bytes()
        if b"-----BEGIN" not in chain or b"-----BEGIN" not in key:
            raise OSError(0, "not PEM", str(self._cert))
        return grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=roots)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """The new configuration when a file changed since the last call, else None."""
        state = self._stat()
        if state == self._state:
            return None
        with self._lock:
            if state == self._state:
                return None
            try:
                configuration = self._configuration()
            except OSError as error:
                log.warning("TLS files changed but cannot be read yet (%s); keeping the current ones", error)
                return None
            self._state = state
            self.reloads += 1
        log.info("TLS certificate files changed: new connections use the new certificate")
        return configuration
