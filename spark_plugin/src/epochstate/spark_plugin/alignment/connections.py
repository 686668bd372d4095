"""ZooKeeper sessions of a Python worker, shared by every source and sink in it.

Spark runs the source's offset planning and the sink's commits in long-lived
Python workers on the driver and builds a new reader or writer object for many
calls; one session per connect string, identity and process keeps those calls
from paying for a new session each time.
"""

from __future__ import annotations

import threading

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from epochstate.core.alignment.subjects import SubjectRegistry
from epochstate.core.zookeeper.auth import ZooKeeperAuth, load_auth
from epochstate.core.zookeeper.client import new_client
from epochstate.spark_plugin.alignment.errors import RegistryUnavailable
from epochstate.spark_plugin.alignment.options import RegistryOptions

_clients: dict[tuple[str, ZooKeeperAuth | None], KazooClient] = {}
_registries: dict[tuple[str, str, str | None], SubjectRegistry] = {}
_lock = threading.Lock()


def shared_client(hosts: str, auth: ZooKeeperAuth | None = None, *, timeout: float = 10.0) -> KazooClient:
    """This process's started client for ``hosts`` (``host:port,...[/chroot]``) as ``auth``.

    Raises RegistryUnavailable when no session is established within ``timeout``.
    """
    with _lock:
        client = _clients.get((hosts, auth))
        if client is not None:  # kazoo reconnects, with a new session if the old one expired
            return client
        client = new_client(hosts, auth=auth)
        try:
            client.start(timeout=timeout)
        except KazooTimeoutError:
            _close(client)
            raise RegistryUnavailable(f"no ZooKeeper session with {hosts} within {timeout} s") from None
        _clients[(hosts, auth)] = client
        return client


def shared_registry(options: RegistryOptions) -> SubjectRegistry:
    """This process's subject registry at ``options`` (on the shared client).

    Raises:
        AuthConfigError: the credentials file (``zookeeperAuthFile`` or
            ``$EPOCHSTATE_ZOOKEEPER_AUTH_FILE``) cannot be used.
        RegistryUnavailable: ZooKeeper did not answer.
    """
    key = (options.zookeeper, options.root, options.auth_file)
    with _lock:
        registry = _registries.get(key)
    if registry is None:
        auth = load_auth(options.auth_file)
        registry = SubjectRegistry(shared_client(options.zookeeper, auth), options.root)
        with _lock:
            registry = _registries.setdefault(key, registry)
    return registry


def close_shared_clients() -> None:
    """Close every shared client (tests; a worker otherwise keeps them until it exits)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
        _registries.clear()
    for client in clients:
        _close(client)


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()
