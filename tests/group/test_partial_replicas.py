"""Replicas that hold only their shards' partitions: real ZooKeeper, real daemon processes,
a real Spark checkpoint of four partitions, split into two shards of two replicas on three
daemons (added through JobsAdmin, which learns the four partitions from the checkpoint).

- each daemon ingests and serves only the keys of its shards' partitions (a Scan on
  each one directly), and the shards' keys together are Spark's own reader's;
- the routed client's Get, MultiGet and Scan equal Spark's reader at every epoch, and
  so do its History and its Changes, merged over the shards or shard by shard;
- a Get or MultiGet sent directly to a daemon for a key it does not hold is refused
  with PARTITION_NOT_HELD, never answered "absent";
- a fourth daemon joins: the leader moves one replica of the daemon holding both
  shards to it; that one is ingested anew where it went, and the daemon it left
  re-ingests its remaining shard alone (the other's keys are gone from it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.client import EpochStateClientError, PartitionNotHeld
from epochstate.client.routed import RoutedClient
from epochstate.core.partition_ranges import LAST_PARTITION, PartitionRanges
from epochstate.core.zookeeper.group_records import Assignment
from epochstate.core.zookeeper.layout import Layout
from tests.cli.invoke import epochstate
from tests.e2e.test_reads import SCHEMA, counts
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import StoreOracle, canon, plain, spark_store
from tests.fixtures.over_time import assert_history_and_changes_equal_oracle, served_changes
from tests.fixtures.streams import FileStream
from tests.fixtures.zookeeper import eventually
from tests.group.test_routing import orders

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

GROUP = "ranges"
JOB = "orders"
LAYOUT = Layout()
WAIT = 120.0  # generous: a busy 2-core machine
EPOCHS = (0, 1, 2)
PARTITIONS = 4


@dataclass
class Partial:
    daemons: dict[str, DaemonProcess]
    zk: KazooClient
    oracle: StoreOracle

    def assignment(self) -> Assignment:
        return Assignment.decode(self.zk.get(LAYOUT.group_assignment(GROUP))[0])

    def held(self, node: str) -> PartitionRanges | None:
        return self.assignment().jobs[JOB].held_by(node)

    def announced(self) -> set[str]:
        path = LAYOUT.replicas(JOB)
        return set(self.zk.get_children(path)) if self.zk.exists(path) else set()

    def expected(self, epoch: int, partitions: set[int]) -> dict[str, Any]:
        """Spark's reader at ``epoch``: the keys of ``partitions`` and their values."""
        return {k: plain(value) for k, (_, value, p) in self.oracle.states[epoch].items() if p in partitions}

    def scanned(self, node: str, epoch: int) -> dict[str, Any]:
        """What ``node`` itself holds at ``epoch`` (a Scan sent to it alone)."""
        with self.daemons[node].client(timeout=30) as client:
            return {canon(r.key): plain(r.value) for r in client.scan(JOB, epoch=epoch, page_size=9)}


def _start_daemon(factory: Callable[..., DaemonProcess], zk_connect: str, node: str) -> DaemonProcess:
    return factory(
        {},
        name=node,
        zookeeper=zk_connect,
        extra_args=["--group", GROUP, "--node", node, "--poll-interval", "0.1"],
        env={"EPOCHSTATE_ZOOKEEPER_SESSION_TIMEOUT": "4"},
    )


def _held_set(held: PartitionRanges | None) -> set[int]:
    return set(range(PARTITIONS)) if held is None else set(held.partitions(PARTITIONS))


def _check_each_daemon_holds_its_shards(group: Partial, nodes: tuple[str, ...]) -> None:
    for epoch in EPOCHS:
        union: dict[str, Any] = {}
        for node in nodes:
            held = _held_set(group.held(node))
            assert group.scanned(node, epoch) == group.expected(epoch, held), (node, epoch)
            union.update(group.scanned(node, epoch))
            # DescribeJob says which partitions the daemon holds (empty: every one).
            with group.daemons[node].client(timeout=30) as client:
                ranges = client.describe(JOB, refresh=True).held_partitions
            described = {p for first, last in ranges for p in range(first, min(last, PARTITIONS - 1) + 1)}
            assert (described or set(range(PARTITIONS))) == held, (node, ranges)
        assert union == group.expected(epoch, set(range(PARTITIONS)))


def _holds_its_shards(group: Partial, nodes: tuple[str, ...]) -> bool:
    try:
        _check_each_daemon_holds_its_shards(group, nodes)
    except (AssertionError, EpochStateClientError):
        return False  # still re-ingesting
    return True


def _check_refused_elsewhere(group: Partial, node: str) -> int:
    """A key of every partition ``node`` does not hold is refused there; how many were tried."""
    held = _held_set(group.held(node))
    state = group.oracle.states[EPOCHS[-1]]
    others = {p: key for key, _, p in state.values() if p not in held}
    with group.daemons[node].client(timeout=30) as client:
        for partition, key in sorted(others.items()):
            with pytest.raises(PartitionNotHeld) as refused:
                client.get(JOB, key, epoch=EPOCHS[-1])
            assert refused.value.reason == "PARTITION_NOT_HELD"
            assert refused.value.metadata["partition"] == str(partition)
            assert refused.value.metadata["heldPartitions"] == str(group.held(node))
            # One held key among them does not make the others "absent".
            mine = next(k for k, _, p in state.values() if p in held)
            with pytest.raises(PartitionNotHeld):
                client.multi_get(JOB, [mine, key], epoch=EPOCHS[-1])
        if held:
            mine = next(k for k, _, p in state.values() if p in held)
            assert client.get(JOB, mine, epoch=EPOCHS[-1]).found
    return len(others)


def test_replicas_hold_only_their_partitions_and_a_moved_shard_is_ingested_anew(
    spark: Any,
    tmp_path: Path,
    zk_connect: str,
    make_zk_client: Callable[..., KazooClient],
    daemon_factory: Callable[..., DaemonProcess],
) -> None:
    session = spark.newSession()
    session.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    stream = FileStream(session, tmp_path / "in", tmp_path / "cp" / JOB, counts, SCHEMA, name=JOB)
    stream.start()
    try:
        for batch in EPOCHS:
            stream.feed(orders(batch))
    finally:
        stream.stop()
    oracle = spark_store(spark, stream.checkpoint, EPOCHS)
    assert oracle.partitions() == set(range(PARTITIONS))

    nodes = ("n1", "n2", "n3")
    daemons = {node: _start_daemon(daemon_factory, zk_connect, node) for node in nodes}
    zk = make_zk_client()
    members = LAYOUT.group_members(GROUP)
    assert eventually(lambda: zk.exists(members) is not None and len(zk.get_children(members)) == 3, WAIT)
    group = Partial(daemons, zk, oracle)
    # Through JobsAdmin, partitions left to the daemon: learned from the checkpoint.
    with daemons["n1"].client() as admin:
        added = admin.group_jobs.add(JOB, str(stream.checkpoint), replicas=2, shards=2)
    assert (added.shards, added.partitions) == (2, PARTITIONS)
    assert eventually(lambda: group.announced() == set(nodes), WAIT)
    for daemon in daemons.values():
        daemon.wait_for_epoch(JOB, EPOCHS[-1], WAIT)
    shards = [(s.first, s.last) for s in group.assignment().jobs[JOB].shards]
    assert shards == [(0, 1), (2, LAST_PARTITION)]  # the last shard takes any partition after
    everything = set(range(PARTITIONS))
    partial = [node for node in nodes if _held_set(group.held(node)) != everything]
    assert len(partial) == 2  # two hold one shard each, the third holds both (the whole job)

    _check_each_daemon_holds_its_shards(group, nodes)
    assert sum(_check_refused_elsewhere(group, node) for node in partial) > 0
    # The CLI says so too.
    listed = epochstate(daemons[partial[0]].target, "jobs", "--json")
    assert listed.returncode == 0, listed.stderr
    held = group.held(partial[0])
    assert held is not None
    assert [j["held_partitions"] for j in json.loads(listed.stdout)] == [[list(r) for r in held.ranges]]
    shown = epochstate(daemons[partial[0]].target, "describe", JOB)
    assert shown.returncode == 0 and f"holds Spark partitions {held} only" in shown.stdout, shown

    # The routed client, knowing one daemon, answers as Spark's reader at every epoch.
    keys = oracle.keys()
    with RoutedClient([daemons["n3"].target], timeout=30) as client:
        for epoch in EPOCHS:
            expected = {canon(k): (canon(k) in oracle.states[epoch]) for k in keys}
            values = group.expected(epoch, set(range(PARTITIONS)))
            for key in keys:
                found = client.get(JOB, key, epoch=epoch)
                assert (found.found, plain(found.value)) == (expected[canon(key)], values.get(canon(key)))
            many = client.multi_get(JOB, keys, epoch=epoch)
            assert {canon(r.key): plain(r.value) for r in many if r.found} == values
            assert {
                canon(r.key): plain(r.value) for r in client.scan(JOB, epoch=epoch, page_size=7)
            } == values
        # History, and the changes merged over the shards, as Spark's reader has them; each
        # shard's own feed has its partitions' changes, and together they are the merged.
        merged = assert_history_and_changes_equal_oracle(client, JOB, oracle)
        location = client.locate(JOB)
        feeds = [
            served_changes(list(client.changes(JOB, from_epoch=EPOCHS[0], to_epoch=EPOCHS[-1], shard=index)))
            for index in range(len(location.shards))
        ]
        for epoch in EPOCHS:
            for shard, feed in zip(location.shards, feeds, strict=True):
                assert all(p is not None and shard.covers(p) for _, _, p in feed[epoch].values())
            assert {k: c for feed in feeds for k, c in feed[epoch].items()} == merged[epoch]

    # A fourth daemon: the one holding both shards gives one up to it (balance).
    whole = next(node for node in nodes if node not in partial)
    daemons["n4"] = _start_daemon(daemon_factory, zk_connect, "n4")
    assert eventually(
        lambda: "n4" in {n for s in group.assignment().jobs[JOB].shards for n in s.replicas}, WAIT
    )
    assert _held_set(group.held(whole)) != everything  # it kept one shard only
    assert eventually(lambda: group.announced() == {*nodes, "n4"}, WAIT)
    assert eventually(lambda: _holds_its_shards(group, (*nodes, "n4")), WAIT)
    _check_each_daemon_holds_its_shards(group, (*nodes, "n4"))
    assert _check_refused_elsewhere(group, whole) > 0
    assert _check_refused_elsewhere(group, "n4") > 0
