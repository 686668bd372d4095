"""A group member in a process of its own, for tests that kill it (kill -9).

``python -m tests.group.member_process CONNECT GROUP NODE SESSION_TIMEOUT``: joins GROUP
as NODE with a session of SESSION_TIMEOUT seconds (authenticated as
``$EPOCHSTATE_ZOOKEEPER_AUTH_FILE`` if set), prints ``joined`` and stays until its
standard input closes or it is killed.
"""

from __future__ import annotations

import logging
import sys

from epochstate.core.zookeeper.auth import load_auth
from epochstate.core.zookeeper.client import new_client
from epochstate.core.zookeeper.layout import Layout
from epochstate.daemon.group.member import GroupMember


def main(connect: str, group: str, node: str, session_timeout: str) -> None:
    logging.basicConfig(level=logging.INFO, format=f"{node} %(levelname)s %(name)s: %(message)s")
    client = new_client(
        connect, auth=load_auth(), session_timeout=float(session_timeout), max_reconnect_delay=0.5
    )
    client.start(timeout=15)
    member = GroupMember(
        client, Layout(), group, node, address=f"{node}.test:7070", version="test", debounce=0.1
    )
    if not member.start(timeout=30):
        raise SystemExit(f"{node} could not join {group}")
    print("joined", flush=True)
    sys.stdin.read()
    member.stop(5)
    client.stop()
    client.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
