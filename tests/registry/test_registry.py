"""The registry against a real ZooKeeper: layout, write-once epochs, atomicity, retention."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.daemon.registry import (
    EpochConflict,
    InvalidName,
    InvalidRecord,
    JobNotRegistered,
    Registry,
    transactions,
)
from tests.fixtures.zookeeper import eventually
from tests.registry.conftest import OPERATORS

JOB = "orders"


def record(epoch: int, end: int | None = None) -> dict[str, Any]:
    return {
        "committed_at_ms": 1_700_000_000_000 + epoch,
        "sources": [
            {
                "source": "kafka[orders]",
                "start": {"0": epoch * 10},
                "end": {"0": end or epoch * 10 + 10},
            }
        ],
        "watermark_ms": 0,
    }


def znode_json(client: KazooClient, path: str) -> Any:
    data, _ = client.get(path)
    return json.loads(data)


@pytest.fixture
def registry(make_registry: Callable[..., Registry]) -> Registry:
    registry = make_registry("node-a")
    assert registry.register_job(JOB, "/checkpoints/orders", "q-1", OPERATORS)
    return registry


def test_node_registration_is_ephemeral(
    make_registry: Callable[..., Registry], zk_client: KazooClient
) -> None:
    registry = make_registry("node-a", clock=lambda: 1234)
    assert registry.register_node("10.0.0.7:7070", "0.1.0")

    assert zk_client.get_children("/epochstate/nodes") == ["node-a"]
    assert registry.nodes() == {
        "node-a": {"address": "10.0.0.7:7070", "version": "0.1.0", "started_at_ms": 1234}
    }
    _, stat = zk_client.get("/epochstate/nodes/node-a")
    assert stat.ephemeralOwner == registry.client.client_id[0]

    registry.close()
    assert zk_client.get_children("/epochstate/nodes") == []


def test_node_disappears_when_the_session_ends(
    make_registry: Callable[..., Registry], zk_client: KazooClient
) -> None:
    registry = make_registry("node-a")
    registry.register_node("a:1", "v")
    registry.client.stop()  # no clean close: ZooKeeper drops the session's ephemerals
    assert eventually(lambda: zk_client.get_children("/epochstate/nodes") == [], 5)


def test_register_job_creates_then_updates(registry: Registry, zk_client: KazooClient) -> None:
    assert registry.get_job(JOB) == {
        "checkpoint": "/checkpoints/orders",
        "query_id": "q-1",
        "operators": OPERATORS,
    }
    assert sorted(zk_client.get_children(f"/epochstate/jobs/{JOB}")) == ["epochs", "replicas"]

    assert registry.register_job(JOB, "/checkpoints/orders", "q-1", [])
    assert registry.get_job(JOB) == {"checkpoint": "/checkpoints/orders", "query_id": "q-1", "operators": []}
    # Another query (a recreated checkpoint) replaces it, and the job remembers the old one.
    assert registry.register_job(JOB, "/checkpoints/orders", "q-2", [])
    assert registry.get_job(JOB) == {
        "checkpoint": "/checkpoints/orders",
        "query_id": "q-2",
        "operators": [],
        "retired_query_ids": ["q-1"],
    }
    assert registry.jobs() == [JOB]


def test_publish_epoch_writes_epoch_and_replica(registry: Registry, zk_client: KazooClient) -> None:
    for epoch in (9, 10, 100):
        assert registry.publish_epoch(JOB, epoch, record(epoch), newest_epoch=epoch, oldest_epoch=9)

    assert sorted(zk_client.get_children(f"/epochstate/jobs/{JOB}/epochs")) == [
        "0000000000000000009",
        "0000000000000000010",
        "0000000000000000100",
    ]
    assert registry.list_epochs(JOB) == [9, 10, 100]
    # The registry stamps each epoch record with the query registered for the job.
    assert registry.get_epoch(JOB, 10) == {**record(10), "query_id": "q-1"}
    assert registry.get_epoch(JOB, 10, query_id="q-1") == registry.get_epoch(JOB, 10)
    assert registry.get_epoch(JOB, 10, query_id="q-0") is None
    assert registry.get_epoch(JOB, 11) is None

    replica = znode_json(zk_client, f"/epochstate/jobs/{JOB}/replicas/node-a")
    assert replica["newest_epoch"] == 100 and replica["oldest_epoch"] == 9
    assert registry.replicas(JOB) == {"node-a": replica}
    _, stat = zk_client.get(f"/epochstate/jobs/{JOB}/replicas/node-a")
    assert stat.ephemeralOwner == registry.client.client_id[0]
    _, stat = zk_client.get(f"/epochstate/jobs/{JOB}/epochs/0000000000000000100")
    assert stat.ephemeralOwner == 0


def test_epochs_are_written_once(registry: Registry, zk_client: KazooClient) -> None:
    assert registry.publish_epoch(JOB, 5, record(5), 5, 0)
    _, before = zk_client.get(f"/epochstate/jobs/{JOB}/epochs/0000000000000000005")

    # The same record again (keys in another order) is a success and writes nothing.
    same = dict(reversed(list(record(5).items())))
    assert registry.publish_epoch(JOB, 5, same, 5, 0)
    with pytest.raises(EpochConflict):
        registry.publish_epoch(JOB, 5, record(5, end=999), 5, 0)

    data, after = zk_client.get(f"/epochstate/jobs/{JOB}/epochs/0000000000000000005")
    assert json.loads(data) == {**record(5), "query_id": "q-1"}
    assert after.version == before.version == 0 and after.mzxid == before.mzxid
    # The registry goes on after a conflict.
    assert registry.publish_epoch(JOB, 6, record(6), 6, 0)
    assert registry.list_epochs(JOB) == [5, 6]


def test_nodes_agree_on_epochs(make_registry: Callable[..., Registry]) -> None:
    node_a = make_registry("node-a")
    node_b = make_registry("node-b")
    for registry in (node_a, node_b):
        registry.register_job(JOB, "/checkpoints/orders", "q-1", OPERATORS)
    assert node_a.publish_epoch(JOB, 3, record(3), 3, 0)
    assert node_b.publish_epoch(JOB, 3, record(3), 3, 1)
    assert node_b.publish_epoch(JOB, 4, record(4), 4, 1)
    with pytest.raises(EpochConflict):
        node_a.publish_epoch(JOB, 4, record(4, end=7), 4, 0)
    assert node_a.get_epoch(JOB, 4) == {**record(4), "query_id": "q-1"}
    # A replica says which epochs a node holds; the first record of an epoch stays.
    assert node_a.flush(timeout=5)
    replicas = node_a.replicas(JOB)
    assert {node: (r["newest_epoch"], r["oldest_epoch"]) for node, r in replicas.items()} == {
        "node-a": (4, 0),
        "node-b": (4, 1),
    }


def test_epoch_and_replica_are_written_atomically(registry: Registry, zk_client: KazooClient) -> None:
    # Another session squats on this node's replica znode: the replica cannot be
    # written, so the epoch must not be written either.
    replica_path = f"/epochstate/jobs/{JOB}/replicas/node-a"
    zk_client.create(replica_path, b"{}", ephemeral=True)

    assert registry.publish_epoch(JOB, 1, record(1), 1, 1) is False
    assert registry.pending_epochs == 1
    assert zk_client.exists(f"/epochstate/jobs/{JOB}/epochs/0000000000000000001") is None
    assert registry.list_epochs(JOB) == []

    zk_client.delete(replica_path)
    assert registry.flush(timeout=10)
    assert registry.list_epochs(JOB) == [1]
    assert znode_json(zk_client, replica_path)["newest_epoch"] == 1
    assert registry.pending_epochs == 0


def test_retention_deletes_old_epochs_in_bounded_transactions(
    registry: Registry, zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Older epochs registered by another node (written directly, to save time).
    transaction = zk_client.transaction()
    for epoch in range(40):
        transaction.create(f"/epochstate/jobs/{JOB}/epochs/{epoch:019d}", json.dumps(record(epoch)).encode())
    transaction.commit()
    for epoch in (40, 41):
        assert registry.publish_epoch(JOB, epoch, record(epoch), epoch, 0)

    monkeypatch.setattr(transactions, "MAX_OPS_PER_TRANSACTION", 10)
    commits = 0
    transaction_factory = registry.client.transaction

    def counting_transaction() -> Any:
        nonlocal commits
        commits += 1
        return transaction_factory()

    monkeypatch.setattr(registry.client, "transaction", counting_transaction)
    assert registry.publish_retention(JOB, 37)

    assert registry.list_epochs(JOB) == [37, 38, 39, 40, 41]
    # 37 deletions, the replica update, and in each the check of the job znode: 10 operations at most.
    assert commits == 5
    replica = znode_json(zk_client, f"/epochstate/jobs/{JOB}/replicas/node-a")
    assert (replica["newest_epoch"], replica["oldest_epoch"]) == (41, 37)

    # Nothing older is left: retention again is a no-op.
    assert registry.publish_retention(JOB, 37)
    assert registry.list_epochs(JOB) == [37, 38, 39, 40, 41]


def test_close_leaves_the_registry(registry: Registry, zk_client: KazooClient) -> None:
    registry.register_node("a:1", "v")
    registry.publish_epoch(JOB, 0, record(0), 0, 0)
    registry.close()
    assert zk_client.get_children("/epochstate/nodes") == []
    assert zk_client.get_children(f"/epochstate/jobs/{JOB}/replicas") == []
    assert sorted(zk_client.get_children(f"/epochstate/jobs/{JOB}/epochs")) == ["0000000000000000000"]
    assert zk_client.exists(f"/epochstate/jobs/{JOB}") is not None


def test_bad_input_is_rejected(registry: Registry) -> None:
    with pytest.raises(JobNotRegistered):
        registry.publish_epoch("unknown", 0, record(0), 0, 0)
    with pytest.raises(JobNotRegistered):
        registry.publish_retention("unknown", 0)
    with pytest.raises(InvalidName):
        registry.publish_epoch(JOB, -1, record(0), 0, 0)
    with pytest.raises(InvalidName):
        registry.register_job("a/b", "/c", "q", [])
    with pytest.raises(InvalidRecord):
        registry.publish_epoch(JOB, 0, {"at": object()}, 0, 0)
    with pytest.raises(InvalidRecord):
        registry.publish_epoch(JOB, 0, {"watermark": float("nan")}, 0, 0)
    assert registry.pending_epochs == 0


def test_reads_of_unknown_things_are_empty(registry: Registry) -> None:
    assert registry.list_epochs("unknown") == []
    assert registry.get_epoch("unknown", 0) is None
    assert registry.get_job("unknown") is None
    assert registry.replicas("unknown") == {}
    assert registry.nodes() == {}


def test_root_is_configurable(make_registry: Callable[..., Registry], zk_client: KazooClient) -> None:
    registry = make_registry("node-a", root="/tenants/blue")
    registry.register_node("a:1", "v")
    registry.register_job(JOB, "/c", "q", [])
    assert registry.publish_epoch(JOB, 1, record(1), 1, 1)
    assert zk_client.get_children("/tenants/blue/nodes") == ["node-a"]
    assert zk_client.get_children(f"/tenants/blue/jobs/{JOB}/epochs") == ["0000000000000000001"]
    assert zk_client.exists("/epochstate") is None
