"""Who is calling, and may it call this method: the check every handler runs first.

gRPC's Python server interceptors cannot see a call's TLS peer, but its handler's
context can (``auth_context``), so the check wraps each handler once, where the
method table is built (:mod:`epochstate.daemon.server.handlers`). Health and
reflection are not wrapped: Kubernetes probes and ``grpcurl`` need no identity.

A caller's identity, in this order:

1. a bearer token (``authorization: Bearer <token>`` metadata), accepted over TLS
   and the Unix socket only; an unknown token is NOT_AUTHENTICATED, never a
   fall-through to weaker evidence;
2. the client certificate of a TLS connection: its common name and subject
   alternative names, each looked up in ``auth.roles`` (the roles of every name
   that matches count);
3. a caller on the Unix socket: ``auth.unix_roles`` (when empty, it must send a token).

No identity: NOT_AUTHENTICATED (UNAUTHENTICATED). An identity without the
method's role: ROLE_MISSING (PERMISSION_DENIED), the identity and the role in the
error's metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc

from epochstate.daemon.security_config import AuthSettings, Role
from epochstate.daemon.server.security.tokens import TokenBook
from epochstate.daemon.server.status import NotAuthenticated, RoleMissing, abort

Behavior = Callable[[Any, grpc.ServicerContext], Any]

_READ = (
    "Get",
    "MultiGet",
    "Scan",
    "ListJobs",
    "DescribeJob",
    "ListEpochs",
    "WatchEpochs",
    "History",
    "Changes",
)
ROLES_OF: dict[str, tuple[Role, ...]] = {
    **{f"epochstate.v1.EpochState.{name}": (Role.READ,) for name in _READ},
    "epochstate.v1.EpochState.ReportEpoch": (Role.REPORT,),
    "epochstate.v1.EpochState.FollowJob": (Role.ADMIN,),
    # The listener locates its job's replicas to report to each (docs/groups.md): where a
    # job is served is no state, and the report role reads nothing else.
    "epochstate.v1.Routing.Locate": (Role.READ, Role.REPORT),
    **{
        f"epochstate.v1.AlignmentAdmin.{name}": (Role.ADMIN,)
        for name in ("Status", "CatchUp", "Align", "Abort", "Prune", "PlanSwap", "SwapStatus", "AbortSwap")
    },
    **{
        f"epochstate.v1.JobsAdmin.{name}": (Role.ADMIN,)
        for name in ("AddJob", "RemoveJob", "PauseJob", "ResumeJob", "RestartJob", "JobsStatus")
    },
}
"""The roles that may call each method (any one of them), by its full name, the first
named in a refusal; a method missing here fails at start-up."""

_CERT_NAMES = (
    "x509_common_name",
    "x509_subject_alternative_name",
    "peer_dns",
    "peer_uri",
    "peer_email",
    "peer_ip",
)
_BEARER = "bearer "


def _names(auth: dict[str, list[bytes]]) -> set[str]:
    return {value.decode(errors="replace") for key in _CERT_NAMES for value in auth.get(key, ())}


class Gate:
    """Checks each call against ``auth`` (enabled); ``tokens`` are the identities' bearer tokens."""

    def __init__(self, auth: AuthSettings, tokens: TokenBook) -> None:
        self._roles = {identity: frozenset(roles) for identity, roles in auth.roles.items()}
        self._unix_roles = frozenset(auth.unix_roles)
        self._tokens = tokens

    def guard(self, method: str, behavior: Behavior) -> Behavior:
        """``behavior`` that first checks its caller has the role of ``method`` (a full name)."""
        allowed = frozenset(ROLES_OF[method])
        needed = " or ".join(repr(r.value) for r in ROLES_OF[method])
        role = ROLES_OF[method][0]

        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            identity, roles = self.caller(context)
            if not allowed & roles:
                abort(
                    context,
                    RoleMissing(
                        f"{identity!r} may not call {method.rsplit('.', 1)[1]}: it needs the {needed} role",
                        metadata={"identity": identity, "role": role.value},
                    ),
                )
            return behavior(request, context)

        return guarded

    def caller(self, context: grpc.ServicerContext) -> tuple[str, frozenset[Role]]:
        """The caller's identity (a token's identity; a certificate's names, comma-separated;
        ``unix socket``) and its roles; aborts NOT_AUTHENTICATED without one."""
        auth: dict[str, list[bytes]] = context.auth_context()  # type: ignore[assignment]
        tls = auth.get("transport_security_type") == [b"ssl"]
        unix = not tls and context.peer().startswith("unix:")
        token = _bearer(context.invocation_metadata())
        if token is not None:
            if not (tls or unix):
                abort(
                    context, NotAuthenticated("bearer tokens are accepted over TLS or the Unix socket only")
                )
            identity = self._tokens.identity(token)
            if identity is None:
                abort(context, NotAuthenticated("the bearer token is not one the daemon knows"))
            return identity, self._roles.get(identity, frozenset())
        if tls:
            names = _names(auth)
            if names:
                roles = frozenset(r for n in names for r in self._roles.get(n, ()))
                return ", ".join(sorted(names)), roles
        if unix and self._unix_roles:  # none: the socket's callers must send a token
            return "unix socket", self._unix_roles
        abort(
            context,
            NotAuthenticated(
                "the daemon requires a client certificate or a bearer token (see docs/security.md)"
            ),
        )


def _bearer(metadata: Iterable[Any] | None) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value[:7].lower() == _BEARER:
            return value[7:].strip()
    return None
