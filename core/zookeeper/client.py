"""The KazooClient settings the registry expects."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry


def new_client(
    hosts: str,
    *,
    session_timeout: float = 30.0,
    max_reconnect_delay: float = 2.0,
) -> KazooClient:
    """A KazooClient for ``hosts`` (``host:port,...[/chroot]``), not yet started.

    kazoo's default reconnect backoff grows towards an hour; capped at
    ``max_reconnect_delay`` seconds, a daemon reconnects (and flushes what it
    queued) within that long after ZooKeeper is back. Start it with
    ``start_async()`` so that a daemon can come up while ZooKeeper is down.
    """
    return KazooClient(
        hosts=hosts,
        timeout=session_timeout,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=max_reconnect_delay),
        command_retry=KazooRetry(max_tries=3, delay=0.1, backoff=2, max_delay=1.0),
    )
