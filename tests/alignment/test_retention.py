"""Retention of subject epochs and mapping entries, against a real ZooKeeper.

The records are the ones the sink, the source, the coordinator and the daemon
write; each step adds or removes one hold and checks what the pruner removes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from epochstate.core.alignment.boundaries import Boundaries
from epochstate.core.alignment.commands import Command, Report
from epochstate.core.alignment.coordinator import AlignmentCoordinator
from epochstate.core.alignment.retention import SubjectRetention
from epochstate.core.zookeeper.layout import Layout
from epochstate.core.zookeeper.records import ReplicaState
from epochstate.core.zookeeper.subject_records import SubjectSourceRecord
from epochstate.spark_plugin.alignment import SubjectEpoch, SubjectRegistry, register
from epochstate.spark_plugin.alignment.errors import InvalidOption, InvalidTransition
from epochstate.spark_plugin.alignment.offsets import SubjectOffset
from epochstate.spark_plugin.alignment.protocol import decide
from epochstate.spark_plugin.kafka import OffsetRange
from tests.alignment.conftest import UpstreamJob, fresh_topic
from tests.fixtures.kafka import KafkaBroker

TOPIC = "t"


def register_epochs(registry: SubjectRegistry, count: int) -> None:
    end = 0
    for k in range(count):
        rows = OffsetRange(TOPIC, 0, end, end + 2)
        end += 2
        registry.register_epoch(SubjectEpoch(TOPIC, k, (rows,), "writer", "q", 1, {0: end}))


def replica(client: KazooClient, job: str, node: str, oldest: int) -> str:
    path = Layout().replica(job, node)
    client.create(path, ReplicaState(oldest + 5, oldest, 1).encode(), ephemeral=True, makepath=True)
    return path


def test_pruning_keeps_every_epoch_a_reader_or_a_daemon_still_needs(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    register_epochs(registry, 10)
    # `reader` read subject epochs 2..9 aligned in its batches 102..109 and reported it.
    registry.record_mapping(TOPIC, "reader", "aligned", [(100 + k, k) for k in range(2, 10)], keep=100)
    registry.update_source(
        TOPIC, "reader", lambda r: replace(r, report=Report("aligned", {0: 20}, 9, 109, None))
    )
    # `late` was told Align(3) and has not got there.
    registry.update_source(
        TOPIC, "late", lambda r: replace(r, command=Command("align", 1, 3)), create_as="unaligned"
    )
    writer_replica = replica(zk_client, "writer", "node-1", oldest=4)
    reader_replica = replica(zk_client, "reader", "node-1", oldest=105)
    retention = SubjectRetention(registry, keep=3)

    def prune() -> tuple[int, list[int], dict[int, int]]:
        pruned = retention.prune(TOPIC)
        source = registry.get_source(TOPIC, "reader")
        assert source is not None
        return pruned.plan.horizon, registry.epochs(TOPIC), dict(source.mapping)

    # The pending Align(3) needs epoch 2 (where epoch 3 starts).
    assert prune() == (2, list(range(2, 10)), {100 + k: k for k in range(2, 10)})
    assert "waits to align at 3" in retention.plan(TOPIC).binding.reason

    registry.update_source(TOPIC, "late", lambda r: replace(r, command=Command("abort", 2)))
    # The reader's daemon retains its epochs from 105, which read subject epoch 5; the writer's from 4.
    horizon, epochs, mapping = prune()
    assert (horizon, epochs) == (4, list(range(4, 10)))
    assert mapping == {100 + k: k for k in range(4, 10)}
    source = registry.get_source(TOPIC, "reader")
    assert source is not None
    record = SubjectSourceRecord.decode(source.encode())
    assert record.retired is not None and record.retired.to_json() == {
        "source_epoch": 104,
        "subject_epoch": 4,
    }
    assert source.report == Report("aligned", {0: 20}, 9, 109, None), "the source's fields stay"

    zk_client.delete(writer_replica)
    assert prune()[:2] == (5, list(range(5, 10)))
    zk_client.delete(reader_replica)
    # No daemon: the floor (3 newest) and the reader (re-reads 9, needs 8) remain.
    horizon, epochs, mapping = prune()
    assert (horizon, epochs, mapping) == (7, [7, 8, 9], {107: 7, 108: 8, 109: 9})
    assert retention.prune(TOPIC).epochs == (), "a second run removes nothing"

    # Align at an epoch whose start was retired: the coordinator and the source refuse it.
    registry.update_source(TOPIC, "late", lambda r: replace(r, report=Report("ready", {0: 0}, None, 1, 2)))
    with pytest.raises(InvalidTransition, match="older than the subject's retention"):
        AlignmentCoordinator(registry).align(TOPIC, "late", 5)
    registry.update_source(TOPIC, "late", lambda r: replace(r, command=Command("align", 3, 5)))
    at = SubjectOffset(TOPIC, None, {0: 0})
    decision = decide(at, Command("align", 3, 5), Boundaries(registry, TOPIC), ready_before=True)
    assert (decision.step, decision.state) == ("unaligned", "ready")
    assert decision.refused is not None
    assert "subject epoch 4" in decision.refused and "oldest epoch is 7" in decision.refused
    registry.update_source(TOPIC, "late", lambda r: replace(r, command=Command("abort", 4)))

    # The reader moves on and registers more: only the floor holds.
    register_epochs(registry, 14)
    registry.record_mapping(TOPIC, "reader", "aligned", [(110 + k, 10 + k) for k in range(4)], keep=100)
    registry.update_source(TOPIC, "reader", lambda r: replace(r, report=None, mode="unaligned"))
    assert prune()[:2] == (11, [11, 12, 13])


def test_the_floor_keeps_at_least_two_epochs(zk_client: KazooClient) -> None:
    with pytest.raises(InvalidOption, match="at least 2"):
        SubjectRetention(SubjectRegistry(zk_client), keep=1)
    registry = SubjectRegistry(zk_client)
    assert SubjectRetention(registry, keep=2).prune("nothing").epochs == ()


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_the_sink_prunes_as_it_writes(
    spark: Any,
    kafka_broker: KafkaBroker,
    subjects_zookeeper: tuple[str, KazooClient],
    tmp_path: Path,
) -> None:
    register(spark)
    connect, client = subjects_zookeeper
    topic = fresh_topic(kafka_broker, 1)
    registry = SubjectRegistry(client)
    # A reader that read subject epoch 1 last: it holds epoch 0 (and everything after).
    registry.record_mapping(topic, "reader", "aligned", [(5, 1)], keep=100)
    upstream = UpstreamJob(
        spark, tmp_path, topic, kafka_broker, connect, tasks=1, options={"subjectRetention": "2"}
    ).start()
    try:
        for batch in range(4):
            upstream.feed([f"b{batch}"])
        assert registry.epochs(topic) == [0, 1, 2, 3]
        registry.record_mapping(topic, "reader", "aligned", [(6, 2), (7, 3)], keep=100)
        upstream.feed(["b4"])
    finally:
        upstream.stop()
    # The floor keeps 3 and 4, the reader (which reads epoch 3 again if it restarts) 2 on.
    assert registry.epochs(topic) == [2, 3, 4]
    source = registry.get_source(topic, "reader")
    assert source is not None and source.mapping == {6: 2, 7: 3}
