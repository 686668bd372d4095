"""The planners' offsets and partitions against real ZooKeeper and Kafka, with Spark's offsets log faked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from epochstate.spark_plugin.alignment import (
    CheckpointMismatch,
    SubjectEpoch,
    SubjectOffset,
    SubjectRegistry,
)
from epochstate.spark_plugin.alignment.aligned import NextEpoch
from epochstate.spark_plugin.alignment.coordinated import CoordinatedPlanner
from epochstate.spark_plugin.alignment.options import SourceOptions
from epochstate.spark_plugin.alignment.planned import PlannedOffsets
from epochstate.spark_plugin.alignment.unaligned import UnalignedPlanner
from epochstate.spark_plugin.kafka import OffsetRange, PartitionWriter, TopicAdmin
from tests.fixtures.kafka import KafkaBroker, MakeTopic
from tests.fixtures.zookeeper import eventually


def plan(checkpoint: Path, batch: int, *offsets: SubjectOffset | str) -> None:
    """Write ``offsets/<batch>`` as Spark does: version, batch metadata, one line per source."""
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})]
    lines += [o if isinstance(o, str) else json.dumps(o.to_json()) for o in offsets]
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(lines))


def register(registry: SubjectRegistry, k: int, *ranges: tuple[int, int, int]) -> SubjectEpoch:
    epoch = SubjectEpoch("t", k, tuple(OffsetRange("t", p, s, e) for p, s, e in ranges), "up", "q", 0)
    registry.register_epoch(epoch)
    return epoch


def aligned(tmp_path: Path, zk_client: KazooClient, **extra: str) -> CoordinatedPlanner:
    """A source started aligned, without commands (so it never asks Kafka: no broker at its address)."""
    options = SourceOptions.parse(
        {"topic": "t", "bootstrap": "127.0.0.1:1", "zookeeper": "-", "job": "down", "checkpointLocation": "-"}
        | extra
    )
    admin = TopicAdmin({"bootstrap.servers": "127.0.0.1:1", "log_level": "0"})
    return CoordinatedPlanner(options, SubjectRegistry(zk_client), PlannedOffsets(str(tmp_path), "t"), admin)


def test_aligned_offsets_advance_one_epoch_per_batch(tmp_path: Path, zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    register(registry, 0, (0, 0, 4), (1, 0, 2))
    register(registry, 1, (1, 2, 3))
    planner = aligned(tmp_path, zk_client)
    assert planner.initial() == SubjectOffset("t", -1, {})
    assert planner.latest() == SubjectOffset("t", 0, {0: 4, 1: 2})
    plan(tmp_path, 0, '{"other source": 1}', planner.latest())
    assert planner.latest() == SubjectOffset("t", 1, {0: 4, 1: 3})
    plan(tmp_path, 1, '{"other source": 1}', planner.latest())
    assert planner.latest() == SubjectOffset("t", 1, {0: 4, 1: 3}), "no epoch 2 yet: no new batch"

    start, end = SubjectOffset("t", 0, {0: 4, 1: 2}), SubjectOffset("t", 1, {0: 4, 1: 3})
    [partition] = planner.partitions(start, end)
    assert (partition.offset_range, partition.subject_epoch) == (OffsetRange("t", 1, 2, 3), 1)
    source = registry.get_source("t", "down")
    assert source is not None and dict(source.mapping) == {1: 1}
    assert planner.partitions(end, end) == [], "a restart's batch without new epochs reads nothing"


def test_a_registered_epoch_is_seen_through_the_watch(zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    frozen = NextEpoch(registry, "t", clock=lambda: 0.0)  # no re-check: only the watch tells
    assert frozen.get(0) is None
    assert frozen.get(0) is None
    register(registry, 0, (0, 0, 1))
    assert eventually(lambda: frozen.get(0) is not None, timeout=10)


def test_starting_epoch(tmp_path: Path, zk_client: KazooClient) -> None:
    registry = SubjectRegistry(zk_client)
    assert aligned(tmp_path, zk_client, startingEpoch="latest").initial().epoch == -1
    for k in (3, 4, 5):
        register(registry, k)
    assert aligned(tmp_path, zk_client).initial().epoch == 2, "earliest: the oldest registered"
    assert aligned(tmp_path, zk_client, startingEpoch="latest").initial().epoch == 5
    assert aligned(tmp_path, zk_client, startingEpoch="4").latest() == SubjectOffset("t", 4, {})


def test_a_foreign_offsets_log_is_refused(tmp_path: Path, zk_client: KazooClient) -> None:
    planner = aligned(tmp_path, zk_client)
    plan(tmp_path, 0, '{"logOffset": 0}')
    with pytest.raises(CheckpointMismatch, match="checkpointLocation"):
        planner.latest()
    with pytest.raises(CheckpointMismatch):
        planner.partitions(SubjectOffset("t", -1, {}), SubjectOffset("t", 0, {0: 1}))


def test_unaligned_offsets_follow_the_watermarks_within_the_rate_limit(
    tmp_path: Path, kafka_broker: KafkaBroker, kafka_topic: MakeTopic
) -> None:
    topic = kafka_topic(2)
    for partition, rows in ((0, 6), (1, 2)):
        with PartitionWriter(kafka_broker.config(), topic, partition) as writer:
            for i in range(rows):
                writer.write(None, f"{partition}-{i}".encode())
            writer.finish()
    options = SourceOptions.parse(
        {
            "topic": topic,
            "bootstrap": kafka_broker.bootstrap,
            "mode": "unaligned",
            "maxOffsetsPerTrigger": "4",
            "checkpointLocation": str(tmp_path),
        }
    )
    planner = UnalignedPlanner(options, kafka_broker.admin, PlannedOffsets(str(tmp_path), topic), None)
    assert planner.initial() == SubjectOffset(topic, None, {0: 0, 1: 0})
    first = planner.latest()
    assert first == SubjectOffset(topic, None, {0: 3, 1: 1})
    plan(tmp_path, 0, first)
    second = planner.latest()
    assert second == SubjectOffset(topic, None, {0: 6, 1: 2})
    assert [p.offset_range for p in planner.partitions(first, second)] == [
        OffsetRange(topic, 0, 3, 6),
        OffsetRange(topic, 1, 1, 2),
    ]
    latest = SourceOptions.parse(
        {
            "topic": topic,
            "bootstrap": kafka_broker.bootstrap,
            "mode": "unaligned",
            "startingOffsets": "latest",
        }
    )
    assert UnalignedPlanner(latest, kafka_broker.admin, None, None).initial().positions == {0: 6, 1: 2}
