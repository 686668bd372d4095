"""Daemons in a group, end to end: real ZooKeeper, three real daemon processes, a real Spark checkpoint.

A job added with two replicas is followed by exactly two daemons, which announce
their replica znodes once caught up and answer a pinned Get byte for byte the
same, and the same as Spark's own reader. Then pause (nothing new ingested, held
epochs still served), resume (catches up), restart (a new follower, the store
kept), a replica's daemon stopping (the idle daemon takes the replica and announces
itself once caught up) and remove (nobody follows it; its replica znodes are gone).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.client.values import to_row
from epochstate.core.zookeeper.group_records import Assignment
from epochstate.core.zookeeper.group_status import MemberStatus, ReplicaStatus
from epochstate.core.zookeeper.layout import Layout
from epochstate.daemon.group.definitions import JobDefinitions
from epochstate.v1 import epochstate_pb2 as pb
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import canon, plain, spark_store
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

GROUP = "g1"
JOB = "orders"
LAYOUT = Layout()
WAIT = 120.0  # generous: a busy 2-core machine


@dataclass
class Group:
    daemons: dict[str, DaemonProcess]
    zk: KazooClient
    stream: FileStream

    def assignment(self) -> Assignment | None:
        path = LAYOUT.group_assignment(GROUP)
        found = self.zk.exists(path)
        return None if found is None else Assignment.decode(self.zk.get(path)[0])

    def replicas_of(self, job: str) -> set[str]:
        """The nodes the assignment gives ``job``."""
        assignment = self.assignment()
        if assignment is None or job not in assignment.jobs:
            return set()
        return {node for shard in assignment.jobs[job].shards for node in shard.replicas}

    def announced(self, job: str) -> set[str]:
        """The nodes with a replica znode of ``job``."""
        path = LAYOUT.replicas(job)
        return set(self.zk.get_children(path)) if self.zk.exists(path) else set()

    def status(self, node: str) -> MemberStatus | None:
        path = LAYOUT.group_status(GROUP, node)
        return MemberStatus.decode(self.zk.get(path)[0]) if self.zk.exists(path) else None

    def status_of(self, node: str) -> dict[str, ReplicaStatus]:
        """What ``node`` reports of its replicas (none before its first report)."""
        status = self.status(node)
        return {} if status is None else status.replicas

    def newest(self, node: str, job: str) -> int:
        with self.daemons[node].client() as client:
            return {j.job: j.latest_epoch for j in client.jobs()}.get(job, -1)

    def follows(self, node: str, job: str) -> bool:
        with self.daemons[node].client() as client:
            return job in {j.job for j in client.jobs()}

    def feed(self, batch: int) -> None:
        """One more committed epoch in the job's checkpoint."""
        self.stream.start(fresh=False)
        try:
            self.stream.feed(orders(batch))
        finally:
            self.stream.stop()


@pytest.fixture
def group(
    spark: Any,
    tmp_path: Path,
    zk_connect: str,
    make_zk_client: Callable[..., KazooClient],
    daemon_factory: Callable[..., DaemonProcess],
) -> Iterator[Group]:
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp" / JOB, counts, SCHEMA, name=JOB)
    stream.start()
    try:
        stream.feed(orders(0))
        stream.feed(orders(1))
    finally:
        stream.stop()
    daemons = {
        node: daemon_factory(
            {},
            name=node,
            zookeeper=zk_connect,
            extra_args=["--group", GROUP, "--node", node, "--poll-interval", "0.1"],
        )
        for node in ("n1", "n2", "n3")
    }
    zk = make_zk_client()
    # Every member joined before a job is added: no member joining later moves a replica mid-test.
    members = LAYOUT.group_members(GROUP)
    assert eventually(lambda: zk.exists(members) is not None and len(zk.get_children(members)) == 3, WAIT)
    yield Group(daemons, zk, stream)


def cli(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``epochstate ARGS --target TARGET``."""
    return subprocess.run(
        [sys.executable, "-m", "epochstate.cli", *args, "--target", target],
        capture_output=True,
        text=True,
        timeout=60,
    )


def pinned_records(daemon: DaemonProcess, keys: list[Any], epoch: int) -> dict[str, bytes]:
    """Each key's Get at ``epoch``, as the bytes of the record the daemon sent."""
    found = {}
    with daemon.client() as client:
        schema = client.describe(JOB).store().key
        for key in keys:
            request = pb.GetRequest(
                store=pb.StoreRef(job=JOB, operator_id=0, store="default"),
                key=to_row(key, schema),
                epoch=pb.EpochSelector(exact=epoch),
            )
            response = client.stub.Get(request, timeout=30)
            assert response.epoch == epoch
            found[canon(key)] = response.record.SerializeToString(deterministic=True)
    return found


def test_group_follows_pauses_resumes_restarts_and_removes_a_job(spark: Any, group: Group) -> None:
    admin = JobDefinitions(group.zk, LAYOUT, GROUP)
    any_member = group.daemons["n3"].target
    added = cli(any_member, "jobs", "add", JOB, str(group.stream.checkpoint), "--replicas", "2", "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout) == {
        "job": JOB,
        "checkpoint": str(group.stream.checkpoint),
        "replicas": 2,
        "state": "running",
        "restart_generation": 0,
        "version": 0,
        "shards": 1,
        "partitions": None,
        "shard_ranges": [[0, 2147483646]],
    }

    # Exactly two daemons follow it; both announce themselves once caught up (epoch 1).
    assert eventually(lambda: len(group.announced(JOB)) == 2, WAIT), group.assignment()
    replicas = group.replicas_of(JOB)
    assert group.announced(JOB) == replicas and len(replicas) == 2
    (idle,) = set(group.daemons) - replicas
    assert not group.follows(idle, JOB)
    for node in replicas:
        assert group.newest(node, JOB) == 1
    # Each member reports its replica (within group_status_interval of the change).
    assert eventually(
        lambda: all((r := group.status_of(n).get(JOB)) and r.state == "following" for n in replicas), WAIT
    )
    assert all(group.status_of(n)[JOB].lag_epochs == 0 for n in replicas)

    # Status, as JSON, from any member: both replicas following, no lag.
    shown = json.loads(cli(any_member, "jobs", "status", "--json").stdout)
    assert (shown["group"], shown["leader"] in group.daemons) == (GROUP, True)
    ((job,),) = [shown["jobs"]]
    assert (job["job"], job["state"], job["replicas"], job["missing_replicas"]) == (JOB, "running", 2, 0)
    assert {
        r["node"]: (r["state"], r["announced"], r["newest_epoch"], r["lag_epochs"], r["lag_seconds"])
        for r in job["replica_states"]
    } == {node: ("following", True, 1, 0, 0.0) for node in replicas}
    assert {r["address"] for r in job["replica_states"]} == {group.daemons[n].target for n in replicas}

    # Pinned reads: byte-identical from both replicas, equal to Spark's reader.
    oracle = spark_store(spark, group.stream.checkpoint, [1]).states[1]
    keys = [key for key, _, _ in oracle.values()]
    first, second = (pinned_records(group.daemons[node], keys, 1) for node in sorted(replicas))
    assert first == second
    with group.daemons[min(replicas)].client() as client:
        for key, value, _ in oracle.values():
            assert plain(client.get(JOB, key, epoch=1).value) == value

    # Pause: a new epoch is committed but not ingested; held epochs are still served.
    assert cli(any_member, "jobs", "pause", JOB).returncode == 0
    assert eventually(
        lambda: all((r := group.status_of(n).get(JOB)) and r.state == "paused" for n in replicas), WAIT
    )
    group.feed(2)
    assert eventually(
        lambda: all((r := group.status_of(n).get(JOB)) and r.lag_epochs == 1 for n in replicas), WAIT
    )
    for node in replicas:
        assert group.newest(node, JOB) == 1
        assert pinned_records(group.daemons[node], keys, 1) == first
    paused = json.loads(cli(any_member, "jobs", "status", JOB, "--json").stdout)["jobs"][0]
    assert paused["state"] == "paused"
    for replica in paused["replica_states"]:
        assert (replica["state"], replica["newest_epoch"], replica["committed_epoch"]) == ("paused", 1, 2)
        assert replica["lag_epochs"] == 1 and replica["lag_seconds"] > 0

    # Resume: both catch up with epoch 2.
    assert cli(any_member, "jobs", "resume", JOB).returncode == 0
    assert eventually(lambda: all(group.newest(n, JOB) == 2 for n in replicas), WAIT)
    assert eventually(
        lambda: all((r := group.status_of(n).get(JOB)) and r.state == "following" for n in replicas), WAIT
    )

    # Restart: a new generation; each replica re-opens the job, keeps its store, announces again.
    assert cli(any_member, "jobs", "restart", JOB).returncode == 0
    assert eventually(
        lambda: all(
            (r := group.status_of(n).get(JOB)) and r.restart_generation == 1 and r.state == "following"
            for n in replicas
        ),
        WAIT,
    )
    assert eventually(lambda: group.announced(JOB) == replicas, WAIT)
    for node in replicas:
        assert group.newest(node, JOB) == 2
        assert pinned_records(group.daemons[node], keys, 1) == first

    # A replica's daemon stops: it leaves the group, the idle daemon takes its replica,
    # catches up and only then announces itself, answering as the others did.
    gone = min(replicas - {"n3"})  # n3 answers the commands
    assert group.daemons.pop(gone).stop() == 0
    moved = (replicas - {gone}) | {idle}
    assert eventually(lambda: group.announced(JOB) == moved, WAIT), group.assignment()
    assert group.replicas_of(JOB) == moved
    assert group.newest(idle, JOB) == 2
    assert pinned_records(group.daemons[idle], keys, 1) == first

    # Remove: nobody follows it, its replica znodes are gone.
    assert cli(any_member, "jobs", "remove", JOB).returncode == 0
    assert admin.list() == {}
    assert eventually(lambda: not group.announced(JOB), WAIT)
    assert eventually(lambda: not any(group.follows(n, JOB) for n in group.daemons), WAIT)
    assert eventually(lambda: not any(JOB in group.status_of(n) for n in group.daemons), WAIT)
