"""The KazooClient settings every epochstate component uses."""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.protocol.serialization import Auth
from kazoo.retry import KazooRetry

from epochstate.core.zookeeper.auth import ZooKeeperAuth, acl_for

# kazoo logs every request it sends at DEBUG, the authentication packet (with the
# password) included; this filter on kazoo's logger blanks that packet.
KAZOO_LOGGER = "kazoo.client"


class _HideAuthPackets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(arg, Auth) for arg in record.args):
            record.args = tuple("Auth(<hidden>)" if isinstance(arg, Auth) else arg for arg in record.args)
        return True


def hide_auth_packets(logger: logging.Logger) -> None:
    """Make ``logger`` (kazoo's) never show an authentication packet; idempotent."""
    if not any(isinstance(f, _HideAuthPackets) for f in logger.filters):
        logger.addFilter(_HideAuthPackets())


def new_client(
    hosts: str,
    *,
    auth: ZooKeeperAuth | None = None,
    session_timeout: float = 30.0,
    max_reconnect_delay: float = 2.0,
) -> KazooClient:
    """A KazooClient for ``hosts`` (``host:port,...[/chroot]``), not yet started.

    With ``auth``, the session authenticates as that identity on every
    (re)connection, and every znode the client creates (``create``,
    ``ensure_path``'s parents, creations in a transaction) gets
    :func:`~epochstate.core.zookeeper.auth.acl_for` ``(auth)``: the one place
    the project's ACL is chosen. Without it, znodes are open to anyone.

    kazoo's default reconnect backoff grows towards an hour; capped at
    ``max_reconnect_delay`` seconds, a daemon reconnects (and flushes what it
    queued) within that long after ZooKeeper is back. Start it with
    ``start_async()`` so that a daemon can come up while ZooKeeper is down.
    """
    logger = logging.getLogger(KAZOO_LOGGER)
    hide_auth_packets(logger)
    return KazooClient(
        hosts=hosts,
        timeout=session_timeout,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=max_reconnect_delay),
        command_retry=KazooRetry(max_tries=3, delay=0.1, backoff=2, max_delay=1.0),
        auth_data=None if auth is None else auth.auth_data,
        default_acl=acl_for(auth),
        logger=logger,
    )
