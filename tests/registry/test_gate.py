"""The replica gate of group mode, against a real ZooKeeper: a held replica registers its
epochs but no replica znode until released; a forgotten job's replica znode is deleted."""

from __future__ import annotations

from kazoo.client import KazooClient

from epochstate.daemon.registry import Registry
from tests.registry.test_registry import JOB, record, registry, znode_json

__all__ = ["registry"]

EPOCHS = f"/epochstate/jobs/{JOB}/epochs"
REPLICA = f"/epochstate/jobs/{JOB}/replicas/node-a"


def test_a_held_replica_is_announced_only_once_released(registry: Registry, zk_client: KazooClient) -> None:
    registry.hold_replica(JOB)
    registry.register_job(JOB, "/cp", "q-1", [])
    assert registry.publish_epoch(JOB, 0, record(0), newest_epoch=0, oldest_epoch=0)
    assert registry.publish_replica(JOB, 0, 0)
    assert registry.publish_retention(JOB, 0)
    assert registry.flush(10)
    # The epoch (a fact every replica shares) is registered; the replica is not.
    assert zk_client.get_children(EPOCHS) == ["0000000000000000000"]
    assert zk_client.exists(REPLICA) is None

    assert registry.release_replica(JOB)
    assert registry.flush(10)
    assert znode_json(zk_client, REPLICA)["newest_epoch"] == 0

    # Held again (a restart): the replica znode is withdrawn, epochs still registered.
    registry.hold_replica(JOB)
    assert registry.publish_epoch(JOB, 1, record(1), newest_epoch=1, oldest_epoch=0)
    assert registry.flush(10)
    assert zk_client.exists(REPLICA) is None
    assert len(zk_client.get_children(EPOCHS)) == 2
    assert registry.release_replica(JOB)
    assert registry.flush(10)
    assert znode_json(zk_client, REPLICA)["newest_epoch"] == 1


def test_a_forgotten_job_loses_its_replica_znode_and_may_come_back(
    registry: Registry, zk_client: KazooClient
) -> None:
    registry.register_job(JOB, "/cp", "q-1", [])
    assert registry.publish_epoch(JOB, 0, record(0), newest_epoch=0, oldest_epoch=0)
    assert registry.flush(10) and zk_client.exists(REPLICA) is not None

    registry.forget_job(JOB)
    assert registry.flush(10)
    assert zk_client.exists(REPLICA) is None
    assert zk_client.get_children(EPOCHS) == ["0000000000000000000"]  # the job's epochs stay

    # Followed again later (re-assigned): registered and announced as any job.
    registry.register_job(JOB, "/cp", "q-1", [])
    assert registry.publish_replica(JOB, 0, 0)
    assert registry.flush(10)
    assert znode_json(zk_client, REPLICA)["newest_epoch"] == 0
