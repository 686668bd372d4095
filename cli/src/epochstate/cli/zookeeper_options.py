"""Options of the commands that talk to ZooKeeper directly (``align``, ``secure-zookeeper``)."""

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
