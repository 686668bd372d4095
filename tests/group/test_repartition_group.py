"""A repartitioned checkpoint through a group: real ZooKeeper, three real daemons, routed reads.

The job (the session's repartitioned workload: 3 partitions, then 5 from epoch 3,
then 2 from epoch 6) is defined as three shards of its first layout's three
partitions, once before its first epoch (the group follows it live and meets each
repartition batch) and once when it is done. Replicas caught up with an epoch of
another partition count ask for the job to be split anew: the definition follows
the count, the leader assigns new ranges, and each replica whose partitions changed
ingests anew. Then a routed client answers every key at every epoch as Spark's
reader does, each epoch routed by its own layout (a key of partition 4 at epoch 4
goes to the last shard, which takes every partition after its first).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from epochstate.client.routed import RoutedClient
from epochstate.core.partition_ranges import LAST_PARTITION
from epochstate.core.zookeeper.layout import Layout
from epochstate.daemon.group.definitions import JobDefinitions
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.oracle import StoreOracle, canon, plain
from tests.fixtures.repartition import (
    GROUP,
    GROUP_NODES,
    JOB,
    LAYOUT,
    ROCKSDB_PROVIDERS,
    Repartitioned,
    member_args,
)
from tests.fixtures.zookeeper import eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

NODES = GROUP_NODES
WAIT = 120.0  # generous: a busy 2-core machine
ZK_LAYOUT = Layout()


def _served(client: RoutedClient) -> bool:
    location = client.locate(JOB, refresh=True)
    return [(s.first, s.last) for s in location.shards] == [(0, 0), (1, LAST_PARTITION)] and all(
        r.serving and r.newest_epoch == max(LAYOUT) for s in location.shards for r in s.replicas
    )


def _assert_routed_as_spark(targets: list[str], definitions: JobDefinitions, oracle: StoreOracle) -> int:
    """The group split the job for the newest layout (two shards of two partitions), and
    a routed client answers every key at every epoch as Spark's reader; the number of
    (epoch, key) answers compared."""
    assert eventually(lambda: definitions.get(JOB)[0].partitions == LAYOUT[max(LAYOUT)], WAIT)
    assert definitions.get(JOB)[0].shards == 2
    compared = 0
    with RoutedClient(targets, timeout=30.0) as client:
        assert eventually(lambda: _served(client), WAIT), client.locate(JOB, refresh=True)
        assert client.locate(JOB).layouts == {(0, "default"): ((0, 3), (3, 5), (6, 2))}
        keys = oracle.keys()
        for epoch, expected in sorted(oracle.states.items()):
            lookups = client.multi_get(JOB, keys, epoch=epoch)
            got = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition) for lk in lookups if lk.found
            }
            assert got == expected, f"MultiGet at epoch {epoch}"
            for key in keys:
                lookup = client.get(JOB, key, epoch=epoch)
                found = (plain(lookup.key), plain(lookup.value), lookup.partition) if lookup.found else None
                assert found == expected.get(canon(key)), f"Get {key} at epoch {epoch}"
            scanned = {
                canon(lk.key): (plain(lk.key), plain(lk.value), lk.partition)
                for lk in client.scan(JOB, epoch=epoch)
            }
            assert scanned == expected, f"Scan at epoch {epoch}"
            compared += 2 * len(keys)
        # latest: the newest epoch, routed by its layout
        assert {lk.epoch for lk in client.multi_get(JOB, keys)} == {max(LAYOUT)}
    return compared


@pytest.mark.parametrize("repartitioned", ROCKSDB_PROVIDERS[:1], indirect=True, ids=str)
def test_a_group_that_followed_the_job_live_split_it_anew_at_each_repartition(
    repartitioned: Repartitioned,
) -> None:
    group = repartitioned.group
    compared = _assert_routed_as_spark(group.targets(), group.definitions, repartitioned.oracle)
    assert compared == 2 * len(LAYOUT) * len(repartitioned.oracle.keys())


@pytest.mark.parametrize("repartitioned", ROCKSDB_PROVIDERS[:1], indirect=True, ids=str)
def test_a_group_started_afterwards_splits_the_job_for_its_newest_layout(
    repartitioned: Repartitioned,
    zk_connect: str,
    make_zk_client: Callable[..., KazooClient],
    daemon_factory: Callable[..., DaemonProcess],
) -> None:
    zk = make_zk_client()
    daemons = {
        node: daemon_factory({}, name=node, zookeeper=zk_connect, extra_args=member_args(node))
        for node in NODES
    }
    members = ZK_LAYOUT.group_members(GROUP)
    assert eventually(lambda: zk.exists(members) is not None and len(zk.get_children(members)) == 3, WAIT)
    definitions = JobDefinitions(zk, ZK_LAYOUT, GROUP)
    # Three shards of the first layout's partitions: caught up with epoch 8 (two
    # partitions), a replica asks for two shards of two.
    definitions.add(JOB, str(repartitioned.checkpoint), replicas=1, shards=3, partitions=LAYOUT[0])
    targets = [daemons["n1"].target]
    assert _assert_routed_as_spark(targets, definitions, repartitioned.oracle) > 0
