"""The routed client against real daemons outside a group: a standalone daemon locates itself,
two daemons that follow one checkpoint (one of them behind) are both located through
ZooKeeper, and ``latest`` (a read's, a history's) never goes backwards within one client."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client.errors import DeadlineExceeded, JobNotFound
from epochstate.client.routed import RoutedClient
from epochstate.client.routing import Location
from epochstate.core.zookeeper.group_records import LAST_PARTITION
from epochstate.v1 import epochstate_pb2 as pb
from tests.e2e.test_reads import SCHEMA, counts, orders
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import plain, spark_store
from tests.fixtures.streams import FileStream

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

JOB = "orders"
WAIT = 120.0


def _stream(spark: Any, tmp_path: Path, batches: int) -> FileStream:
    stream = FileStream(spark, tmp_path / "in", tmp_path / "cp" / JOB, counts, SCHEMA, name=JOB)
    stream.start()
    try:
        for batch in range(batches):
            stream.feed(orders(batch))
    finally:
        stream.stop()
    return stream


def test_a_standalone_daemon_locates_itself(
    spark: Any, tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    stream = _stream(spark, tmp_path, 2)
    daemon = daemon_factory({JOB: str(stream.checkpoint)}, extra_args=["--node", "alone"])
    daemon.wait_for_epoch(JOB, 1, WAIT)
    oracle = spark_store(spark, stream.checkpoint, [1]).states[1]
    with RoutedClient([daemon.target]) as client:
        location = client.locate(JOB)
        assert location.layouts == {(0, "default"): ((0, 2),)}
        ((shard,),) = [location.shards]
        assert (shard.first, shard.last) == (0, LAST_PARTITION)
        ((replica,),) = [shard.replicas]
        assert (replica.node, replica.address, replica.serving) == ("alone", daemon.target, True)
        assert (replica.oldest_epoch, replica.newest_epoch) == (0, 1)
        for key, value, partition in oracle.values():
            found = client.get(JOB, key, epoch=1)
            assert (plain(found.value), found.partition) == (value, partition)
        with pytest.raises(JobNotFound):
            client.locate("nobody")


def test_latest_never_goes_back_within_a_client(
    spark: Any, tmp_path: Path, zk_connect: str, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    stream = _stream(spark, tmp_path, 2)
    checkpoint = str(stream.checkpoint)
    ahead = daemon_factory(
        {JOB: checkpoint},
        name="ahead",
        zookeeper=zk_connect,
        extra_args=["--node", "ahead", "--poll-interval", "0.1"],
    )
    # Polls its checkpoint once at start, then not for ten minutes: it stays at epoch 1.
    behind = daemon_factory(
        {JOB: checkpoint},
        name="behind",
        zookeeper=zk_connect,
        extra_args=["--node", "behind", "--poll-interval", "600"],
        env={"EPOCHSTATE_POLL_MAX_INTERVAL": "600"},
    )
    for daemon in (ahead, behind):
        daemon.wait_for_epoch(JOB, 1, WAIT)
    stream.start(fresh=False)
    try:
        stream.feed(orders(2))
    finally:
        stream.stop()
    ahead.wait_for_epoch(JOB, 2, WAIT)
    key = ["u0"]
    with behind.client() as direct:
        assert direct.get(JOB, key).epoch == 1

    with RoutedClient([behind.target], timeout=20) as client:
        nodes = {r.node: r for s in client.locate(JOB).shards for r in s.replicas}
        assert set(nodes) == {"ahead", "behind"}
        assert (nodes["ahead"].newest_epoch, nodes["behind"].newest_epoch) == (2, 1)
        seen = [client.get(JOB, key).epoch for _ in range(30)]
        assert seen == sorted(seen) and seen[-1] == 2, seen
        assert client.newest_seen(JOB) == 2
        # A key's history up to the newest epoch does not end before it either.
        ends = [client.history(JOB, key).to_epoch for _ in range(10)]
        assert ends == [2] * 10, ends

        # With the daemon that is ahead gone, latest would be epoch 1 at the other one: the
        # client does not go back to it. It asks for at least epoch 2, which does not come.
        ahead.kill()
        with pytest.raises(DeadlineExceeded):
            client.get(JOB, key, timeout=3)
        with pytest.raises(DeadlineExceeded):  # the one left answers up to epoch 1 only
            client.history(JOB, key, timeout=2)
        assert client.get(JOB, key, epoch=1).epoch == 1  # exact reads still go to the one left

    with RoutedClient([behind.target]) as fresh:  # a new client has seen nothing yet
        assert fresh.get(JOB, key).epoch == 1


def test_one_shard_of_some_partitions_is_not_the_whole_job() -> None:
    def location(first: int, last: int) -> Location:
        shard = pb.LocatedShard(first_partition=first, last_partition=last)
        return Location.of(pb.LocateResponse(job="orders", shards=[shard]), "a:1")

    assert location(0, LAST_PARTITION).single
    # A daemon holding partitions 2 and 3 only, answering about itself: keys are routed by partition.
    partial = location(2, 3)
    assert not partial.single and partial.shard_of(2) is not None and partial.shard_of(1) is None
