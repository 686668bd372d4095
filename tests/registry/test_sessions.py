"""The registry through expired sessions and a ZooKeeper that is down."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.connection import _SESSION_EXPIRED

from epochstate.core.zookeeper.session import join_while_connected
from epochstate.daemon.registry import Registry, RegistryUnavailable
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from tests.fixtures.zookeeper import (
    EXPIRING_SESSION_TIMEOUT,
    eventually,
    expire_session,
    new_test_client,
)
from tests.registry.conftest import OPERATORS

JOB = "orders"
NODE_PATH = "/epochstate/nodes/node-a"
REPLICA_PATH = f"/epochstate/jobs/{JOB}/replicas/node-a"


def record(epoch: int) -> dict[str, Any]:
    return {"committed_at_ms": epoch, "sources": [], "watermark_ms": 0}


def owner(client: KazooClient, path: str) -> int | None:
    stat = client.exists(path)
    return None if stat is None else int(stat.ephemeralOwner)


def registered(registry: Registry) -> Registry:
    assert registry.register_node("10.0.0.7:7070", "0.1.0")
    assert registry.register_job(JOB, "/checkpoints/orders", "q-1", OPERATORS)
    assert registry.publish_epoch(JOB, 0, record(0), 0, 0)
    return registry


def test_ephemerals_come_back_after_session_expiry(
    make_registry: Callable[..., Registry],
    zk_client: KazooClient,
    zookeeper_server: EmbeddedZooKeeper,
) -> None:
    registry = registered(make_registry("node-a"))
    old_session = registry.client.client_id[0]

    expire_session(zookeeper_server, registry.client)

    assert eventually(lambda: registry.sessions_lost == 1 and registry.client.connected, 10)
    new_session = registry.client.client_id[0]
    assert new_session != old_session
    assert eventually(lambda: owner(zk_client, NODE_PATH) == new_session, 5)
    assert eventually(lambda: owner(zk_client, REPLICA_PATH) == new_session, 5)
    assert json.loads(zk_client.get(REPLICA_PATH)[0])["newest_epoch"] == 0
    # And it goes on publishing on the new session.
    assert registry.publish_epoch(JOB, 1, record(1), 1, 0)
    assert registry.list_epochs(JOB) == [0, 1]


def test_ephemerals_of_a_session_given_up_early_are_taken_over(
    make_registry: Callable[..., Registry],
    make_zk_client: Callable[..., KazooClient],
    zk_client: KazooClient,
) -> None:
    # The client declares its session lost while ZooKeeper still holds it (kazoo's
    # own test trick): the old session's ephemerals stay until it times out, and
    # only then can the registry create its own.
    registry = registered(make_registry("node-a", make_zk_client(EXPIRING_SESSION_TIMEOUT)))
    old_session = registry.client.client_id[0]

    registry.client._call(_SESSION_EXPIRED, None)

    assert eventually(lambda: registry.sessions_lost == 1 and registry.client.connected, 10)
    assert owner(zk_client, NODE_PATH) == old_session
    new_session = registry.client.client_id[0]
    assert eventually(lambda: owner(zk_client, NODE_PATH) == new_session, EXPIRING_SESSION_TIMEOUT + 8)
    assert eventually(lambda: owner(zk_client, REPLICA_PATH) == new_session, 3)
    assert registry.flush(timeout=5)


def test_publishing_goes_on_while_zookeeper_is_down(
    private_zookeeper_server: EmbeddedZooKeeper,
) -> None:
    server = private_zookeeper_server
    client = new_test_client(server.connect_string)
    client.start()
    observer = new_test_client(server.connect_string)
    registry = registered(Registry(client, node="node-a"))
    try:
        server.kill()
        assert eventually(lambda: not client.connected, 5)

        # Never blocks the ingest loop: returns at once, the records wait in memory.
        for epoch in range(1, 6):
            started = time.monotonic()
            assert registry.publish_epoch(JOB, epoch, record(epoch), epoch, 0) is False
            assert time.monotonic() - started < 0.5
        started = time.monotonic()
        assert registry.publish_retention(JOB, 2) is False  # drops queued epoch 1
        assert time.monotonic() - started < 0.5
        assert registry.pending_epochs == 4
        started = time.monotonic()
        with pytest.raises(RegistryUnavailable):
            registry.list_epochs(JOB)
        assert time.monotonic() - started < 0.5

        server.start()  # same port, same data directory

        assert registry.flush(timeout=15)
        assert registry.pending_epochs == 0
        observer.start()
        assert sorted(observer.get_children(f"/epochstate/jobs/{JOB}/epochs")) == [
            f"{epoch:019d}" for epoch in range(2, 6)
        ]
        replica = json.loads(observer.get(REPLICA_PATH)[0])
        assert (replica["newest_epoch"], replica["oldest_epoch"]) == (5, 2)
        assert observer.exists(NODE_PATH) is not None
        assert registry.sessions_lost == 0  # the session outlived the outage
    finally:
        registry.close(timeout=0)
        observer.stop()
        observer.close()


def test_publishing_before_zookeeper_is_reachable(tmp_path: Any) -> None:
    # A daemon may start while ZooKeeper is down; its registrations wait.
    server = EmbeddedZooKeeper(tmp_path / "zookeeper")
    client = new_test_client(server.connect_string)
    client.start_async()
    registry = Registry(client, node="node-a")
    try:
        assert registry.register_node("a:1", "v") is False
        assert registry.register_job(JOB, "/c", "q", []) is False
        assert registry.publish_epoch(JOB, 7, record(7), 7, 7) is False
        server.start()
        assert registry.flush(timeout=15)
        assert registry.list_epochs(JOB) == [7]
        assert set(registry.nodes()) == {"node-a"}
        assert registry.replicas(JOB)["node-a"]["newest_epoch"] == 7
    finally:
        registry.close(timeout=0)
        server.stop()


def test_a_thread_is_waited_for_only_while_the_client_is_connected(zk_client: KazooClient) -> None:
    # As a thread inside a kazoo retry: it ends only when told to.
    release = threading.Event()
    thread = threading.Thread(target=release.wait, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        join_while_connected(thread, zk_client, 0.3)
        assert time.monotonic() - started >= 0.3 and thread.is_alive()
        zk_client.stop()
        started = time.monotonic()
        join_while_connected(thread, zk_client, 60)
        assert time.monotonic() - started < 30 and thread.is_alive()
    finally:
        release.set()
        thread.join(10)
    join_while_connected(thread, zk_client, 60)  # an ended thread: nothing to wait for
