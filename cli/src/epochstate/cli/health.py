"""``epochstate health``: is a daemon serving? For container health checks and exec probes.

Exit code 0 when the daemon answers SERVING for the service asked about;
otherwise one line on stderr and a non-zero code: 1 for NOT_SERVING (or any
other status), 3 for a service the daemon does not know, 6 when the daemon
cannot be reached, as every command's errors map (:mod:`epochstate.cli.console`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from epochstate.cli.arguments import TargetOpt
from epochstate.cli.connection import given_tls
from epochstate.cli.console import fail, run_client
from epochstate.client.health import check_health

NOT_SERVING_EXIT = 1


def health(
    target: TargetOpt = "127.0.0.1:7070",
    service: Annotated[
        str, typer.Option(help="the health service to ask about ('': the daemon as a whole; 'liveness')")
    ] = "",
    timeout: Annotated[float, typer.Option("--timeout", help="deadline in seconds")] = 5.0,
) -> None:
    """Exit 0 if the daemon's grpc.health.v1 says SERVING (TLS options as for every command)."""
    status = run_client(lambda: check_health(target, service, tls=given_tls(), timeout=timeout))
    if status != "SERVING":
        what = f"service {service!r}" if service else "the daemon"
        raise fail(f"{target}: {what} is {status}", NOT_SERVING_EXIT)
