"""Options of the commands that talk to ZooKeeper directly (``align``, ``swap``, ``alias``,
``secure-zookeeper``), or to a daemon in its place."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ZooKeeperOpt = Annotated[
    str,
    typer.Option(
        "--zookeeper",
        "-z",
        envvar="EPOCHSTATE_ZOOKEEPER",
        help="ZooKeeper connect string: host:port,... and an optional /chroot",
    ),
]
RootOpt = Annotated[str, typer.Option("--root", help="the epochstate root znode")]
# A path only: the password never is a command-line value (it would show in `ps`).
# Without the option, $EPOCHSTATE_ZOOKEEPER_AUTH_FILE names the file (core.zookeeper.auth).
AuthFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--zookeeper-auth-file",
        help="file with one line user:password, the ZooKeeper digest identity "
        "(default: $EPOCHSTATE_ZOOKEEPER_AUTH_FILE; neither: no authentication)",
    ),
]
# Of the commands that can go through a daemon instead (``align``, ``swap``).
TargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target", "-t", help="go through this daemon (host:port or unix:///path) instead of ZooKeeper"
    ),
]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="seconds to wait for ZooKeeper or the daemon")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document instead of text")]
