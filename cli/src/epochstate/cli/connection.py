"""How the commands reach the daemon: the global TLS options (``epochstate --tls-ca ... get``).

The options of :func:`tls_options` (the ``EPOCHSTATE_TLS_*`` variables, or these
options before the command's name) are kept for the one command a process runs;
:func:`connect` opens the client every command that talks to a daemon uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from epochstate.client.client import EpochStateClient
from epochstate.client.routed import RoutedClient
from epochstate.client.tls import TlsOptions

_given = TlsOptions()


def tls_options(
    tls: Annotated[
        bool, typer.Option("--tls", envvar="EPOCHSTATE_TLS_ENABLED", help="TLS with the system's CA roots")
    ] = False,
    tls_ca: Annotated[
        Path | None, typer.Option(envvar="EPOCHSTATE_TLS_CA", help="CA bundle (PEM) to verify the daemon")
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(envvar="EPOCHSTATE_TLS_CERT", help="client certificate (PEM), for mTLS")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(envvar="EPOCHSTATE_TLS_KEY", help="the client certificate's key (PEM)")
    ] = None,
    tls_server_name: Annotated[
        str | None,
        typer.Option(envvar="EPOCHSTATE_TLS_SERVER_NAME", help="name the daemon's certificate is for"),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(envvar="EPOCHSTATE_TLS_TOKEN_FILE", help="file holding a bearer token"),
    ] = None,
) -> None:
    """Epoch-pinned, repeatable lookups into the state of Spark streaming jobs."""
    global _given
    _given = TlsOptions(
        ca=tls_ca,
        cert=tls_cert,
        key=tls_key,
        server_name=tls_server_name,
        token_file=token_file,
        enabled=tls,
    )


def given_tls() -> TlsOptions:
    """The TLS options the command line was given."""
    return _given


def connect(target: str, timeout: float = 10.0) -> EpochStateClient:
    """A client of the daemon at ``target`` with the command line's TLS options; of several
    daemons (``a:7070,b:7070``), a routed client: reads go to the replicas that serve them."""
    if "," in target:
        return RoutedClient(target.split(","), timeout=timeout, tls=_given)
    return EpochStateClient(target, timeout=timeout, tls=_given)
