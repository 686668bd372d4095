"""A ZooKeeper session for one command, authenticated as ``--zookeeper-auth-file`` says."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from epochstate.cli.align_control import AlignFailure

if TYPE_CHECKING:
    from kazoo.client import KazooClient


def connect(zookeeper: str, auth_file: Path | None, timeout: float) -> KazooClient:
    """A started client; the caller stops and closes it.

    The identity comes from ``auth_file``, else ``$EPOCHSTATE_ZOOKEEPER_AUTH_FILE``
    (:func:`epochstate.core.zookeeper.auth.load_auth`).

    Raises:
        AlignFailure: exit code 2 for an unusable credentials file, 6 when
            ZooKeeper does not answer within ``timeout`` seconds.
    """
    from kazoo.handlers.threading import KazooTimeoutError

    from epochstate.core.zookeeper.auth import load_auth
    from epochstate.core.zookeeper.client import new_client
    from epochstate.core.zookeeper.errors import AuthConfigError

    try:
        auth = load_auth(auth_file)
    except AuthConfigError as error:
        raise AlignFailure(str(error), 2) from None
    client = new_client(zookeeper, auth=auth)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise AlignFailure(f"ZooKeeper {zookeeper} did not answer within {timeout:g} s", 6) from None
    return client
