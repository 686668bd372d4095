"""The subject registry against a real ZooKeeper."""

from __future__ import annotations

import json
import threading

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.commands import Command
from epochstate.spark_plugin.alignment import EpochWrittenByAnotherQuery, SubjectEpoch, SubjectRegistry
from epochstate.spark_plugin.kafka import OffsetRange


def epoch(k: int, *ranges: tuple[int, int, int], query: str | None = "q", writer: str = "w") -> SubjectEpoch:
    return SubjectEpoch("t", k, tuple(OffsetRange("t", p, s, e) for p, s, e in ranges), writer, query, 1)


def test_an_epoch_is_written_once(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    first = epoch(0, (0, 0, 5))
    assert registry.register_epoch(first)
    path = registry.layout.epoch("t", 0)
    data, stat = zk_client.get(path)

    assert registry.register_epoch(first), "the same ranges again: registered as given"
    assert not registry.register_epoch(epoch(0, (0, 5, 9))), "a re-run's ranges are not registered"
    with pytest.raises(EpochWrittenByAnotherQuery):
        registry.register_epoch(epoch(0, (0, 5, 9), query="another"))
    with pytest.raises(EpochWrittenByAnotherQuery):
        registry.register_epoch(epoch(0, (0, 5, 9), query=None, writer="another"))
    assert zk_client.get(path) == (data, stat)
    assert registry.get_epoch("t", 0) == first


def test_epochs_are_listed_in_order(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    assert registry.epochs("t") == []
    assert registry.get_epoch("t", 0) is None
    for k in (10, 2, 0, 1):
        registry.register_epoch(epoch(k))
    assert registry.epochs("t") == [0, 1, 2, 10]
    assert registry.get_epoch("t", 2) == epoch(2)


def test_a_watch_fires_when_the_epoch_is_registered(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    fired = threading.Event()
    assert registry.get_epoch("t", 3, watch=lambda _: fired.set()) is None
    registry.register_epoch(epoch(3))
    assert fired.wait(10)


def test_sources_keep_a_bounded_mapping_and_what_others_wrote(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    assert registry.get_source("t", "job") is None
    registry.register_source("t", "job", "aligned")
    for batch in range(5):
        registry.record_mapping("t", "job", "aligned", [(batch, batch + 1)], keep=3)
    path = registry.layout.source("t", "job")
    record = json.loads(zk_client.get(path)[0])
    command = {"name": "catch-up", "id": 1, "epoch": None, "issued_at_ms": 5}
    zk_client.set(path, json.dumps({**record, "command": command, "owner": "ops"}).encode())  # others' fields

    registry.record_mapping("t", "job", "aligned", [(5, 6)], keep=3)
    source = registry.register_source("t", "job", "unaligned")
    assert dict(source.mapping) == {3: 4, 4: 5, 5: 6}
    assert source.mode == "unaligned"
    assert source.other == {"owner": "ops"}
    assert source.command == Command("catch-up", 1, None, 5)
    assert registry.get_source("t", "job") == source
