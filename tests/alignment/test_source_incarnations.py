"""Source records of two queries of one job (a recreated checkpoint), against a real ZooKeeper."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.commands import Report
from epochstate.core.alignment.coordinator import AlignmentCoordinator
from epochstate.core.alignment.errors import InvalidTransition
from epochstate.core.zookeeper.subject_records import RETIRED
from epochstate.spark_plugin.alignment import SubjectRegistry


def test_a_new_query_replaces_the_old_querys_mapping_in_one_write(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    for batch in range(10):
        registry.record_mapping("t", "job", "aligned", [(batch, 100 + batch)], keep=50, query_id="q1")
    registry.update_source(
        "t",
        "job",
        lambda r: replace(r, other={**r.other, RETIRED: {"source_epoch": 2, "subject_epoch": 102}}),
    )
    path = registry.layout.source("t", "job")
    _, before = zk_client.get(path)

    written = registry.record_mapping("t", "job", "aligned", [(0, 200)], keep=50, query_id="q2")

    data, after = zk_client.get(path)
    assert after.version == before.version + 1, "one compare-and-set"
    stored = json.loads(data)
    assert stored["query_id"] == "q2"
    assert stored["mapping"] == {"0": 200}, "no entry of q1 survives (merged, 1..9 would read q1's epochs)"
    assert stored[RETIRED] == {"source_epoch": 0, "subject_epoch": 102}, "q1's batch ids retire nothing of q2"
    assert written == registry.get_source("t", "job")

    registry.record_mapping("t", "job", "aligned", [(1, 201)], keep=50, query_id="q2")
    record = registry.get_source("t", "job")
    assert record is not None and dict(record.mapping) == {0: 200, 1: 201}


def test_a_record_without_a_query_id_keeps_only_entries_the_query_confirms(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    registry.record_mapping("t", "job", "aligned", [(j, j + 5) for j in range(4)], keep=50)  # as before
    record = registry.get_source("t", "job")
    assert record is not None and record.query_id is None
    assert "query_id" not in json.loads(zk_client.get(registry.layout.source("t", "job"))[0])

    own = {0: 5, 1: 6}  # the query's offsets log: its batches 0 and 1 ended at subject epochs 5, 6
    registry.record_mapping(
        "t", "job", "aligned", [(2, 9)], keep=50, query_id="q", adopt=lambda j, k: own.get(j) == k
    )
    record = registry.get_source("t", "job")
    assert record is not None and record.query_id == "q"
    assert dict(record.mapping) == {0: 5, 1: 6, 2: 9}


def test_a_command_to_the_old_query_is_void_for_the_new_one(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    coordinator = AlignmentCoordinator(registry)
    registry.register_source("t", "job", "unaligned", query_id="q1")
    registry.update_source("t", "job", lambda r: replace(r, report=Report("ready", {0: 5})), query_id="q1")
    align = coordinator.align("t", "job", 3)
    assert align.query_id == "q1"
    assert registry.get_source("t", "job").live_command == align  # type: ignore[union-attr]
    assert not coordinator.source("t", "job").answered

    # The recreated job's source writes its first report: a fresh record of q2.
    registry.update_source(
        "t", "job", lambda r: replace(r, report=Report("unaligned", {0: 0})), query_id="q2"
    )
    record = registry.get_source("t", "job")
    assert record is not None and record.query_id == "q2"
    assert record.command == align and record.live_command is None
    assert record.for_query("q2", 0).live_command is None, "what the new query's source acts on"
    status = coordinator.source("t", "job")
    assert status.answered and status.state == "unaligned"
    with pytest.raises(InvalidTransition, match="addressed to query q1"):
        coordinator.wait("t", "job", align, 1.0)
    with pytest.raises(InvalidTransition, match="ready"):
        coordinator.align("t", "job", 3)  # q2 never reported ready: q1's readiness does not count
    catch_up = coordinator.catch_up("t", "job")
    assert (catch_up.id, catch_up.query_id) == (align.id + 1, "q2")
    assert registry.get_source("t", "job").live_command == catch_up  # type: ignore[union-attr]
