"""Transport security and authorization of the daemon's listeners, put together from its settings.

- TCP: TLS with certificates read again when their files change
  (:mod:`.certificates`), mTLS when a client CA is configured; plaintext only on
  loopback, or with ``insecure``.
- Unix socket: plaintext, mode 0660 (owner and group), with ``auth.unix_peer_uids``
  only for processes of those user ids (:mod:`.peer_check`).
- Each call of EpochState and AlignmentAdmin: the caller's role (:mod:`.gate`),
  when ``auth.enabled``; health and reflection stay open.
- FollowJob and ReportEpoch follow only checkpoints under ``auth.checkpoint_roots``
  (:mod:`.checkpoints`) when auth is enabled or roots are configured.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import grpc

from epochstate.core.errors import EpochStateError
from epochstate.daemon.config import DaemonSettings
from epochstate.daemon.security_config import exposure_problem
from epochstate.daemon.server import unix_socket
from epochstate.daemon.server.security.certificates import ServerCertificates
from epochstate.daemon.server.security.checkpoints import CheckpointRoots, FollowGuard, PartitionedIngest
from epochstate.daemon.server.security.gate import Behavior, Gate
from epochstate.daemon.server.security.peer_check import PeerCheckedSocket, private_path
from epochstate.daemon.server.security.tokens import TokenBook

UNIX_SOCKET_MODE = 0o660


class InsecureListener(EpochStateError):
    """The settings would serve beyond loopback without TLS and auth (see --insecure)."""


class ServerSecurity:
    """What the daemon's start-up needs: TCP credentials, the per-call guard, the follow guard.

    Raises InsecureListener for settings that expose the daemon, CertificateUnreadable
    and TokenFileUnusable for files that cannot be used.
    """

    def __init__(self, settings: DaemonSettings) -> None:
        problem = exposure_problem(settings.listen, settings.tls, settings.auth, settings.insecure)
        if problem is not None:
            raise InsecureListener(problem)
        tls = self.settings_tls = settings.tls
        self.certificates = (
            None
            if tls.cert is None or tls.key is None
            else ServerCertificates(tls.cert, tls.key, tls.client_ca)
        )
        auth = settings.auth
        self.gate = Gate(auth, TokenBook(auth.tokens)) if auth.enabled else None
        restrict = auth.enabled or bool(auth.checkpoint_roots)
        self.roots = CheckpointRoots(auth.checkpoint_roots) if restrict else None
        self.peer_uids = frozenset(auth.unix_peer_uids)
        self._relay: PeerCheckedSocket | None = None
        self._private: Path | None = None

    def guard(self, method: str, behavior: Behavior) -> Behavior:
        """``behavior`` of ``method`` (a full name), checking its caller's role when auth is on."""
        return behavior if self.gate is None else self.gate.guard(method, behavior)

    def ingest(self, ingest: PartitionedIngest) -> PartitionedIngest:
        """``ingest`` as the servicer should see it: following only allowed checkpoints."""
        return ingest if self.roots is None else FollowGuard(ingest, self.roots)

    def add_tcp_port(self, server: grpc.Server, address: str) -> int:
        """Bind ``address`` with TLS when configured (plaintext otherwise); the port, 0 on failure."""
        if self.certificates is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, self.certificates.credentials())

    def metrics_tls(self) -> tuple[str | None, str | None]:
        """``start_http_server``'s ``certfile`` and ``keyfile``: the metrics port serves HTTPS
        with the daemon's certificate when TLS is on (read once: a rotation needs a restart there)."""
        tls = self.settings_tls
        if tls.cert is None or tls.key is None:
            return None, None
        return str(tls.cert), str(tls.key)

    def unix_bind_address(self, public: Path, address: str) -> str:
        """Where gRPC binds for the Unix socket at ``public`` (``address``): there, or, with a
        check of the peer's user id, a private socket the check relays to."""
        if not self.peer_uids:
            return address
        private = self._private = private_path()
        return unix_socket.target(private)

    def expose_unix_socket(self, public: Path) -> None:
        """Open the bound Unix socket to owner and group (mode 0660), through the peer check if any."""
        if not self.peer_uids:
            os.chmod(public, UNIX_SOCKET_MODE)
            return
        assert self._private is not None, "unix_bind_address comes first"
        self._relay = PeerCheckedSocket(public, self._private, self.peer_uids, UNIX_SOCKET_MODE)

    def close(self) -> None:
        """Stop the Unix socket's peer check, if it runs (after the server stopped)."""
        if self._relay is not None:
            self._relay.close()
        if self._private is not None:
            unix_socket.remove(self._private)
            with contextlib.suppress(OSError):
                self._private.parent.rmdir()
