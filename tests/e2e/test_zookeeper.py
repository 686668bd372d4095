"""The daemon's ZooKeeper registration, and ZooKeeper outages, on real servers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import EXPIRING_SESSION_TIMEOUT, eventually, new_test_client


def epochs_in(zk: KazooClient, job: str) -> list[int]:
    path = f"/epochstate/jobs/{job}/epochs"
    return sorted(int(name) for name in zk.get_children(path)) if zk.exists(path) else []


def replica(zk: KazooClient, job: str, node: str) -> dict[str, Any] | None:
    path = f"/epochstate/jobs/{job}/replicas/{node}"
    if not zk.exists(path):
        return None
    data: dict[str, Any] = json.loads(zk.get(path)[0])
    return data


def test_daemon_registers_node_job_epochs_and_survives_zookeeper_loss(
    spark: Any,
    tmp_path: Path,
    private_zookeeper_server: EmbeddedZooKeeper,
    daemon_factory: Callable[..., DaemonProcess],
) -> None:
    zookeeper = private_zookeeper_server
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp", counts, SCHEMA, name="zkjob").start()
    daemon = daemon_factory(
        {"zkjob": str(tmp_path / "cp")},
        zookeeper=zookeeper.connect_string,
        extra_args=["--node", "node-a"],
        # Short: the test waits out its expiry once the daemon is killed.
        env={"EPOCHSTATE_ZOOKEEPER_SESSION_TIMEOUT": str(EXPIRING_SESSION_TIMEOUT)},
    )
    zk = new_test_client(zookeeper.connect_string)
    zk.start()
    try:
        for batch in range(3):
            stream.feed(orders(batch))
        newest = stream.committed()[-1]
        daemon.wait_for_epoch("zkjob", newest)
        assert eventually(lambda: epochs_in(zk, "zkjob") == list(range(newest + 1)), timeout=15)
        node = json.loads(zk.get("/epochstate/nodes/node-a")[0])
        assert node["address"] == daemon.target
        assert json.loads(zk.get("/epochstate/jobs/zkjob")[0])["checkpoint"] == str(tmp_path / "cp")
        assert eventually(
            lambda: (replica(zk, "zkjob", "node-a") or {}).get("newest_epoch") == newest, timeout=15
        )
        zk.stop()

        # ZooKeeper goes away: ingest and reads go on.
        zookeeper.kill()
        for batch in range(3, 6):
            stream.feed(orders(batch))
        newest = stream.committed()[-1]
        daemon.wait_for_epoch("zkjob", newest, timeout=30)
        with daemon.client() as client:
            assert client.get("zkjob", ["u1"], epoch=newest).epoch == newest

        # ... and comes back (same port, same data): the missed epochs arrive, in order.
        zookeeper.restart()
        zk = new_test_client(zookeeper.connect_string)
        zk.start()
        assert eventually(lambda: epochs_in(zk, "zkjob") == list(range(newest + 1)), timeout=30)
        assert eventually(
            lambda: (replica(zk, "zkjob", "node-a") or {}).get("newest_epoch") == newest, timeout=30
        )
        assert zk.exists("/epochstate/nodes/node-a")

        # A daemon that dies leaves ZooKeeper once its session expires.
        daemon.kill()
        assert eventually(lambda: zk.exists("/epochstate/nodes/node-a") is None, timeout=30)
        assert replica(zk, "zkjob", "node-a") is None
        assert epochs_in(zk, "zkjob") == list(range(newest + 1))  # epochs outlive the node
    finally:
        stream.stop()
        zk.stop()
        zk.close()
