"""Job definitions in ZooKeeper: add, change, remove, CAS conflicts, the watch. Real ZooKeeper."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from epochstate.core.zookeeper.errors import (
    DefinitionChanged,
    InvalidDefinition,
    InvalidName,
    InvalidRecord,
    JobDefined,
    JobNotDefined,
)
from epochstate.core.zookeeper.group_records import LAST_PARTITION, JobDefinition
from epochstate.daemon.group.definitions import JobDefinitions
from tests.fixtures.zookeeper import eventually
from tests.group.conftest import GROUP, LAYOUT


def test_add_change_remove(zk_client: KazooClient) -> None:
    jobs = JobDefinitions(zk_client, LAYOUT, GROUP)
    added, version = jobs.add("orders", "s3a://bucket/orders", replicas=2)
    assert (added.replicas, added.state, added.restart_generation, version) == (2, "running", 0, 0)
    assert added.ranges == ((0, LAST_PARTITION),)
    assert jobs.get("orders") == (added, 0)
    with pytest.raises(JobDefined):
        jobs.add("orders", "s3a://bucket/other")
    assert jobs.get("orders")[0].checkpoint == "s3a://bucket/orders"  # untouched

    paused, version = jobs.pause("orders")
    assert (paused.state, version) == ("paused", 1)
    assert jobs.pause("orders") == (paused, 1)  # already paused: nothing written
    resumed, version = jobs.resume("orders")
    assert (resumed.state, version) == ("running", 2)
    restarted, version = jobs.restart("orders")
    assert (restarted.restart_generation, version) == (1, 3)
    assert restarted.created_at_ms == added.created_at_ms <= restarted.updated_at_ms
    sharded, _ = jobs.update("orders", shards=3, partitions=8, replicas=3)
    assert sharded.ranges == ((0, 2), (3, 5), (6, LAST_PARTITION))

    jobs.add("clicks", "gs://bucket/clicks")
    assert sorted(jobs.list()) == ["clicks", "orders"]
    jobs.remove("orders")
    assert list(jobs.list()) == ["clicks"]
    for change in (jobs.remove, jobs.pause, jobs.restart, jobs.get):
        with pytest.raises(JobNotDefined):
            change("orders")


def test_impossible_definitions_are_refused(zk_client: KazooClient) -> None:
    jobs = JobDefinitions(zk_client, LAYOUT, GROUP)
    for kwargs in ({"replicas": 0}, {"shards": 2}, {"shards": 4, "partitions": 3}, {"partitions": 0}):
        with pytest.raises(InvalidDefinition):
            jobs.add("orders", "file:///c", **kwargs)
    with pytest.raises(InvalidDefinition):
        jobs.add("orders", "")
    with pytest.raises(InvalidName):
        jobs.add("a/b", "file:///c")
    assert jobs.list() == {}
    jobs.add("orders", "file:///c")
    with pytest.raises(InvalidDefinition):
        jobs.update("orders", state="stopped")
    with pytest.raises(TypeError):
        jobs.update("orders", restart_generation=7)
    # A znode that does not hold a definition is refused when read, left out of the list.
    zk_client.create(LAYOUT.group_job(GROUP, "broken"), b'{"checkpoint": "x", "replicas": -1}')
    with pytest.raises(InvalidRecord):
        jobs.get("broken")
    assert list(jobs.list()) == ["orders"]


def test_a_change_decided_on_an_old_version_is_refused(zk_client: KazooClient) -> None:
    jobs = JobDefinitions(zk_client, LAYOUT, GROUP)
    _, version = jobs.add("orders", "file:///c")
    jobs.pause("orders", expected_version=version)
    with pytest.raises(DefinitionChanged):
        jobs.resume("orders", expected_version=version)  # another admin paused it meanwhile
    with pytest.raises(DefinitionChanged):
        jobs.remove("orders", expected_version=version)
    assert jobs.get("orders")[0].state == "paused"
    jobs.remove("orders", expected_version=version + 1)


def test_concurrent_writers_lose_no_change(make_zk_client: Callable[..., KazooClient]) -> None:
    admins = [JobDefinitions(make_zk_client(), LAYOUT, GROUP, max_conflicts=200) for _ in range(2)]
    admins[0].add("orders", "file:///c")
    restarts_each = 10
    errors: list[BaseException] = []

    def restart(admin: JobDefinitions) -> None:
        try:
            for _ in range(restarts_each):
                admin.restart("orders")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=restart, args=(admin,)) for admin in admins for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    definition, version = admins[1].get("orders")
    assert definition.restart_generation == version == len(threads) * restarts_each


def test_the_watch_sees_every_change(make_zk_client: Callable[..., KazooClient]) -> None:
    admin = JobDefinitions(make_zk_client(), LAYOUT, GROUP)
    seen: list[dict[str, JobDefinition]] = []
    watch = JobDefinitions(make_zk_client(), LAYOUT, GROUP).watch(seen.append)
    assert eventually(lambda: seen == [{}], 30)
    admin.add("orders", "file:///c")
    assert eventually(lambda: list(seen[-1]) == ["orders"], 30)
    admin.pause("orders")
    assert eventually(lambda: seen[-1]["orders"].state == "paused", 30)
    admin.add("clicks", "file:///d")
    admin.remove("orders")
    assert eventually(lambda: list(seen[-1]) == ["clicks"], 30)
    admin.add("orders", "file:///e")  # the same name again gets a watch of its own
    assert eventually(lambda: seen[-1].get("orders", None) is not None, 30)
    assert seen[-1]["orders"].checkpoint == "file:///e"
    admin.restart("orders")
    assert eventually(lambda: seen[-1]["orders"].restart_generation == 1, 30)
    assert watch.definitions == seen[-1]
    watch.stop()
