"""How a client reaches a daemon securely: one options type for the library, the CLI, the
Spark listener and AlignedLookup.

:class:`TlsOptions` names files, not their contents, so it pickles (AlignedLookup
ships it to executors, which must see the same paths) and a rotated certificate
is read by the next channel. Every field can come from the environment
(:meth:`TlsOptions.from_env`): ``EPOCHSTATE_TLS_ENABLED`` (``1``: TLS with the system's
roots), ``EPOCHSTATE_TLS_CA``, ``EPOCHSTATE_TLS_CERT``, ``EPOCHSTATE_TLS_KEY``,
``EPOCHSTATE_TLS_SERVER_NAME``, ``EPOCHSTATE_TLS_TOKEN_FILE``.

A bearer token travels as ``authorization: Bearer <token>`` metadata, over TLS or
a Unix socket only: :func:`open_channel` refuses to send it over plaintext TCP.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from epochstate.client.channels import LOCAL_SUBCHANNEL_POOL, ChannelPool
from epochstate.client.errors import InvalidArgument

_ENV = {
    "ca": "EPOCHSTATE_TLS_CA",
    "cert": "EPOCHSTATE_TLS_CERT",
    "key": "EPOCHSTATE_TLS_KEY",
    "server_name": "EPOCHSTATE_TLS_SERVER_NAME",
    "token_file": "EPOCHSTATE_TLS_TOKEN_FILE",
}
_ON = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class TlsOptions:
    """TLS and credentials for a connection to a daemon.

    ``ca``: PEM bundle to verify the daemon with (None: the system's roots);
    ``cert``/``key``: this client's certificate and key (mTLS);
    ``server_name``: the name to verify the daemon's certificate for, when it
    differs from the target's host; ``token_file``: a file holding this client's
    bearer token; ``enabled``: TLS even when no file is named (system roots).
    TLS is on when ``enabled`` or any of ``ca``, ``cert``, ``server_name`` is set.
    """

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None
    token_file: Path | None = None
    enabled: bool = False

    @property
    def secure(self) -> bool:
        return self.enabled or any(v is not None for v in (self.ca, self.cert, self.server_name))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TlsOptions:
        """The options the ``EPOCHSTATE_TLS*`` variables give (none set: plaintext, no token)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field, name in _ENV.items():
            value = env.get(name, "")
            if value:
                values[field] = value if field == "server_name" else Path(value)
        return cls(enabled=env.get("EPOCHSTATE_TLS_ENABLED", "").lower() in _ON, **values)

    def merged(self, **given: Any) -> TlsOptions:
        """These options with the fields in ``given`` that are not None replaced."""
        return replace(self, **{k: v for k, v in given.items() if v is not None})

    def token(self) -> str | None:
        """The bearer token from ``token_file`` (read now), or None."""
        if self.token_file is None:
            return None
        try:
            token = self.token_file.read_text().strip()
        except OSError as error:
            raise InvalidArgument(f"cannot read token file {self.token_file}: {error.strerror}") from None
        if not token:
            raise InvalidArgument(f"token file {self.token_file} is empty")
        return token

    def credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials for TLS (reads the files now)."""
        if (self.cert is None) != (self.key is None):
            raise InvalidArgument("a client certificate and its key go together (cert and key)")
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca),
            private_key=_read(self.key),
            certificate_chain=_read(self.cert),
        )


def _read(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise InvalidArgument(f"cannot read TLS file {path}: {error.strerror}") from None


if TYPE_CHECKING:  # generic in grpc's stubs only
    _UnaryUnary = grpc.UnaryUnaryClientInterceptor[Any, Any]
    _UnaryStream = grpc.UnaryStreamClientInterceptor[Any, Any]
else:
    _UnaryUnary = grpc.UnaryUnaryClientInterceptor
    _UnaryStream = grpc.UnaryStreamClientInterceptor


class _BearerToken(_UnaryUnary, _UnaryStream):
    """Adds the ``authorization`` metadata to every call."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), self._header]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)


def open_channel(
    target: str,
    tls: TlsOptions | None = None,
    options: tuple[tuple[str, Any], ...] = (),
    connections: int = 1,
) -> grpc.Channel:
    """A channel to ``target`` (``host:port`` or ``unix:///path``) with ``tls``
    (None: :meth:`TlsOptions.from_env`); with ``connections`` > 1, that many
    connections whose calls take turns (:class:`~epochstate.client.channels.ChannelPool`).

    Raises InvalidArgument for files that cannot be read and for a token over plaintext TCP.
    """
    tls = TlsOptions.from_env() if tls is None else tls
    if connections > 1:
        own = (*options, LOCAL_SUBCHANNEL_POOL)
        return ChannelPool([_open_one(target, tls, own) for _ in range(connections)])
    return _open_one(target, tls, options)


def _open_one(target: str, tls: TlsOptions, options: tuple[tuple[str, Any], ...]) -> grpc.Channel:
    unix = target.startswith("unix:")
    token = tls.token()
    if unix:
        channel = grpc.insecure_channel(target, options=options)
    elif tls.secure:
        extra = options
        if tls.server_name:
            extra = (*options, ("grpc.ssl_target_name_override", tls.server_name))
        channel = grpc.secure_channel(target, tls.credentials(), options=extra)
    else:
        if token is not None:
            raise InvalidArgument(
                f"a bearer token is sent over TLS or a Unix socket only, not plaintext TCP to {target}: "
                "give a CA (EPOCHSTATE_TLS_CA) or set EPOCHSTATE_TLS_ENABLED=1"
            )
        channel = grpc.insecure_channel(target, options=options)
    if token is not None:
        channel = grpc.intercept_channel(channel, _BearerToken(token))
    return channel
