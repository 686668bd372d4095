"""A job's checkpoint recreated (a new query whose epochs restart at 0), in a real ZooKeeper.

No reader may ever combine one query's epoch record with another query's state: the
new query replaces the old one's epoch znodes atomically, every epoch and replica
record names its query, and a node still on the old query can neither write nor
delete epochs of the new one, nor move the job back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.core.zookeeper.records import encode
from epochstate.daemon.registry import EpochConflict, Registry
from epochstate.daemon.registry.incarnation import IncarnationRetired, next_job_record
from tests.fixtures.zookeeper import eventually
from tests.registry.conftest import OPERATORS

JOB = "orders"
EPOCHS = f"/epochstate/jobs/{JOB}/epochs"


def record(epoch: int, end: int) -> dict[str, Any]:
    return {"committed_at_ms": 1_700_000_000_000 + epoch, "sources": [{"end": {"0": end}}], "watermark_ms": 0}


def epoch_records(client: KazooClient) -> dict[int, dict[str, Any]]:
    return {int(name): json.loads(client.get(f"{EPOCHS}/{name}")[0]) for name in client.get_children(EPOCHS)}


def test_a_new_query_replaces_the_old_ones_epochs_and_replica(
    make_registry: Callable[..., Registry], zk_client: KazooClient
) -> None:
    registry = make_registry("node-a")
    assert registry.register_job(JOB, "/cp", "q-1", OPERATORS)
    for epoch in range(5):
        assert registry.publish_epoch(JOB, epoch, record(epoch, 100 + epoch), epoch, 0)
    assert registry.replicas(JOB)["node-a"]["query_id"] == "q-1"

    assert registry.register_job(JOB, "/cp", "q-2", OPERATORS)
    assert registry.list_epochs(JOB) == []  # in the same transaction as the job znode
    assert registry.get_job(JOB)["query_id"] == "q-2"  # type: ignore[index]
    assert registry.replicas(JOB) == {}
    for epoch in range(3):  # the new query's epochs take the old names
        assert registry.publish_epoch(JOB, epoch, record(epoch, 900 + epoch), epoch, 0)
    found = epoch_records(zk_client)
    assert found == {e: {**record(e, 900 + e), "query_id": "q-2"} for e in range(3)}
    assert registry.get_epoch(JOB, 1, query_id="q-1") is None
    assert registry.replicas(JOB, query_id="q-2")["node-a"]["newest_epoch"] == 2
    assert registry.replicas(JOB, query_id="q-1") == {}


def test_many_old_epochs_go_oldest_first_then_with_the_switch(
    make_registry: Callable[..., Registry], zk_client: KazooClient
) -> None:
    registry = make_registry("node-a")
    assert registry.register_job(JOB, "/cp", "q-1", OPERATORS)
    zk_client.ensure_path(EPOCHS)
    for epoch in range(260):  # more than one transaction holds
        data = encode({**record(epoch, epoch), "query_id": "q-1"})
        zk_client.create(f"{EPOCHS}/{epoch:019d}", data)
    assert registry.register_job(JOB, "/cp", "q-2", OPERATORS)
    assert zk_client.get_children(EPOCHS) == []
    assert registry.publish_epoch(JOB, 0, record(0, 7), 0, 0)
    assert epoch_records(zk_client) == {0: {**record(0, 7), "query_id": "q-2"}}


def test_a_node_still_on_the_old_query_cannot_touch_the_new_one(
    make_registry: Callable[..., Registry], zk_client: KazooClient
) -> None:
    old = make_registry("node-old")
    new = make_registry("node-new")
    assert old.register_job(JOB, "/cp", "q-1", OPERATORS)
    for epoch in range(4):
        assert old.publish_epoch(JOB, epoch, record(epoch, epoch), epoch, 0)
    assert new.register_job(JOB, "/cp", "q-2", OPERATORS)
    assert new.publish_epoch(JOB, 0, record(0, 500), 0, 0)
    assert new.publish_epoch(JOB, 1, record(1, 501), 1, 0)

    # The old node has not seen the recreation: its next epoch, its retention and its
    # registration again (a new session) change nothing of the new query.
    with pytest.raises(EpochConflict):
        old.publish_epoch(JOB, 4, record(4, 4), 4, 2)
    old.publish_retention(JOB, 2)
    assert old.flush(timeout=10)
    old.client.restart()  # a new session: it registers its job again
    assert eventually(lambda: old.flush(timeout=1), 20)
    assert old.get_job(JOB)["query_id"] == "q-2"  # type: ignore[index]
    assert old.get_job(JOB)["retired_query_ids"] == ["q-1"]  # type: ignore[index]
    expected = {0: {**record(0, 500), "query_id": "q-2"}, 1: {**record(1, 501), "query_id": "q-2"}}
    assert epoch_records(zk_client) == expected
    assert set(new.replicas(JOB, query_id="q-2")) == {"node-new"}

    # Once it follows the new query too, it agrees with the other node.
    assert old.register_job(JOB, "/cp", "q-2", OPERATORS)
    assert old.publish_epoch(JOB, 1, record(1, 501), 1, 0)
    assert set(new.replicas(JOB, query_id="q-2")) == {"node-new", "node-old"}


def test_a_leftover_epoch_of_a_replaced_query_is_replaced(
    make_registry: Callable[..., Registry], zk_client: KazooClient
) -> None:
    registry = make_registry("node-a")
    assert registry.register_job(JOB, "/cp", "q-2", OPERATORS)
    # An epoch the old query's writer created between the switch's listing and its commit.
    zk_client.create(f"{EPOCHS}/{3:019d}", encode({**record(3, 3), "query_id": "q-1"}))
    for epoch in range(4):
        assert registry.publish_epoch(JOB, epoch, record(epoch, 40 + epoch), epoch, 0)
    assert epoch_records(zk_client)[3] == {**record(3, 43), "query_id": "q-2"}
    with pytest.raises(EpochConflict):  # within one query, epochs stay write-once
        registry.publish_epoch(JOB, 3, record(3, 99), 3, 0)


def test_job_records_only_move_forward() -> None:
    first = encode({"checkpoint": "/cp", "query_id": "q-1", "operators": []})
    second, replaced = next_job_record(
        first, encode({"checkpoint": "/cp", "query_id": "q-2", "operators": []}), JOB
    )
    assert replaced == "q-1" and json.loads(second)["retired_query_ids"] == ["q-1"]
    same, replaced = next_job_record(
        second, encode({"checkpoint": "/cp2", "query_id": "q-2", "operators": []}), JOB
    )
    assert replaced is None and json.loads(same) == {
        "checkpoint": "/cp2",
        "query_id": "q-2",
        "operators": [],
        "retired_query_ids": ["q-1"],
    }
    with pytest.raises(IncarnationRetired, match="q-1 was replaced by query q-2"):
        next_job_record(second, first, JOB)
