"""The ``tls`` and ``auth`` sections of the daemon's settings, and the rule of secure defaults.

The rule: a daemon whose TCP listener is reachable beyond loopback serves only
with TLS *and* authorization on, unless the operator says ``insecure``
(``--insecure``); a loopback daemon (the demo, a sidecar reached through its
Unix socket) may run open. :func:`exposure_problem` says why a configuration is
refused, or None.
"""

from __future__ import annotations

import ipaddress
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, Field, model_validator


class Role(str, Enum):
    """What an identity may do. Roles do not include each other: list every one an identity needs."""

    READ = "read"  # Get, MultiGet, Scan, ListJobs, DescribeJob, ListEpochs, WatchEpochs
    REPORT = "report"  # ReportEpoch (the Spark listener)
    ADMIN = "admin"  # FollowJob and the AlignmentAdmin service


class TlsSettings(BaseModel):
    """TLS on the gRPC TCP listener. ``cert`` and ``key`` (and ``client_ca``) are read again
    when their files change (a Kubernetes secret rotates by swapping a symlink): new
    connections get the new certificate, established ones keep theirs."""

    model_config = {"extra": "forbid"}

    cert: Path | None = Field(default=None, description="server certificate chain (PEM); None: no TLS")
    key: Path | None = Field(default=None, description="the certificate's private key (PEM)")
    client_ca: Path | None = Field(
        default=None,
        description="CA bundle (PEM) that signs client certificates; with it, clients must present "
        "a certificate it signs (mTLS); without it, clients authenticate with bearer tokens",
    )

    @property
    def enabled(self) -> bool:
        return self.cert is not None

    @model_validator(mode="after")
    def _pairs(self) -> TlsSettings:
        if (self.cert is None) != (self.key is None):
            raise ValueError("tls.cert and tls.key go together")
        if self.client_ca is not None and self.cert is None:
            raise ValueError("tls.client_ca needs tls.cert and tls.key")
        return self


class AuthSettings(BaseModel):
    """Who may call what. With ``enabled``, every call but health and reflection needs an
    identity (a client certificate's common name or one of its subject alternative
    names, or the identity of a bearer token) that ``roles`` gives the method's role."""

    model_config = {"extra": "forbid"}

    enabled: bool = False
    roles: dict[str, list[Role]] = Field(
        default_factory=dict,
        description="identity -> its roles; an identity is a certificate's CN or SAN (DNS name, "
        "URI, e-mail, IP) or the name a token file is listed under",
    )
    tokens: dict[str, Path] = Field(
        default_factory=dict,
        description="identity -> file holding its bearer token (a secret of at least 16 characters); "
        "tokens are accepted over TLS and the Unix socket only",
    )
    unix_roles: list[Role] = Field(
        default_factory=lambda: [Role.READ, Role.REPORT, Role.ADMIN],
        description="roles of a caller on the Unix socket that sends no token (the socket is 0660: "
        "only its owner and group can connect)",
    )
    unix_peer_uids: list[int] = Field(
        default_factory=list,
        description="if not empty, only processes of these user ids may connect to the Unix socket "
        "(checked with SO_PEERCRED; the daemon then relays the socket's connections itself)",
    )
    checkpoint_roots: list[str] = Field(
        default_factory=list,
        description="FollowJob and ReportEpoch may start following only checkpoints under these "
        "locations (URIs or absolute paths); empty with auth enabled: none",
    )

    @model_validator(mode="after")
    def _known(self) -> AuthSettings:
        unknown = sorted(set(self.tokens) - set(self.roles))
        if unknown:
            raise ValueError(f"auth.tokens names identities without roles: {', '.join(unknown)}")
        if self.enabled and not self.roles and not self.unix_roles:
            raise ValueError("auth.enabled needs auth.roles (identity -> roles)")
        return self


def is_loopback(listen: str) -> bool:
    """Whether ``host:port`` binds loopback only (127.0.0.0/8, ::1, localhost)."""
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name, or no host (every interface)
        return False


def exposure_problem(listen: str, tls: TlsSettings, auth: AuthSettings, insecure: bool) -> str | None:
    """Why serving on ``listen`` with these settings is refused, or None when it is allowed."""
    if insecure or is_loopback(listen):
        return None
    needed = (("TLS (tls.cert, tls.key)", tls.enabled), ("auth (auth.enabled)", auth.enabled))
    missing = [what for what, on in needed if not on]
    if not missing:
        return None
    return (
        f"refusing to listen on {listen} (beyond loopback) without {' and '.join(missing)}: "
        "anyone on the network could read state, move alignment and make the daemon follow any path. "
        "Configure them (docs/security.md), listen on 127.0.0.1, or start with --insecure"
    )
