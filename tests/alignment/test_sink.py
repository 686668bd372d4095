"""The aligned sink: batch n becomes subject epoch n with exactly the batch's rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from epochstate.daemon.sources.checkpoint.checkpoint import Checkpoint
from epochstate.spark_plugin.alignment import (
    EpochWrittenByAnotherQuery,
    InvalidOption,
    SubjectRegistry,
    TooFewPartitions,
)
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from epochstate.spark_plugin.alignment.options import SinkOptions
from epochstate.spark_plugin.alignment.sink import (
    PartitionWritten,
    RowLayout,
    SubjectStreamWriter,
    write_partition,
)
from epochstate.spark_plugin.kafka import OffsetRange, read_range
from tests.alignment.conftest import RERUN, SubjectRun, epoch_znode, read_epoch
from tests.fixtures.kafka import KafkaBroker, MakeTopic

VALUE_ONLY = StructType([StructField("value", StringType())])


@pytest.mark.spark
def test_every_batch_is_an_epoch_with_exactly_its_rows(
    subject_run: SubjectRun, kafka_broker: KafkaBroker
) -> None:
    upstream = subject_run.upstream
    assert sorted(subject_run.epochs) == list(range(len(upstream.fed)))
    query_id = Checkpoint(upstream.checkpoint).query_id()
    for k, epoch in subject_run.epochs.items():
        assert [row[0] for row in read_epoch(kafka_broker, epoch)] == sorted(upstream.fed[k]), k
        assert (epoch.writer, epoch.query_id) == ("upstream", query_id)
    assert subject_run.epochs[2].ranges == (), "an empty batch registers an empty epoch"


@pytest.mark.spark
def test_task_i_writes_only_partition_i(subject_run: SubjectRun) -> None:
    for epoch in subject_run.epochs.values():
        assert {r.partition for r in epoch.ranges} <= {0, 1}
    for partition in (0, 1):
        ends = [
            e.end_positions[partition] for e in subject_run.epochs.values() if partition in e.end_positions
        ]
        assert ends == sorted(ends), "epochs follow each other in every partition"


@pytest.mark.spark
def test_reexecuted_batch_keeps_its_epoch_and_its_rows_are_never_read(
    subject_run: SubjectRun, kafka_broker: KafkaBroker
) -> None:
    assert subject_run.rerun_epoch_after == subject_run.rerun_epoch_before, "the epoch was not rewritten"
    rerun = subject_run.epochs[RERUN]
    following = {r.partition: r.start for r in subject_run.epochs[RERUN + 1].ranges}
    between = [
        record.value.decode()
        for r in rerun.ranges
        for record in read_range(
            kafka_broker.config(),
            OffsetRange(r.topic, r.partition, r.end, following[r.partition]),
            timeout=10,
        )
        if record.value is not None
    ]
    assert sorted(between) == sorted(subject_run.upstream.fed[RERUN]), "the re-run wrote its rows again"


@pytest.fixture
def sink_options(kafka_broker: KafkaBroker, zk_connect: str) -> Iterator[Callable[[str], SinkOptions]]:
    def make(topic: str) -> SinkOptions:
        return SinkOptions.parse(
            {"topic": topic, "bootstrap": kafka_broker.bootstrap, "zookeeper": zk_connect, "job": "writer"}
        )

    yield make
    close_shared_clients()


def test_failed_attempt_rows_are_never_read(
    kafka_broker: KafkaBroker,
    kafka_topic: MakeTopic,
    zk_client: KazooClient,
    sink_options: Callable[[str], SinkOptions],
) -> None:
    topic = kafka_topic(1)
    options, layout = sink_options(topic), RowLayout.of(VALUE_ONLY)
    failed = write_partition(
        options, layout, 0, [(f"failed-{i}",) for i in range(4)], attempt=0, query_id="q"
    )
    retried = write_partition(
        options, layout, 0, [(f"retried-{i}",) for i in range(3)], attempt=1, query_id="q"
    )
    SubjectStreamWriter(options, layout).commit([retried], 0)

    epoch = SubjectRegistry(zk_client).get_epoch(topic, 0)
    assert epoch is not None and failed.offset_range is not None
    assert epoch.ranges == (retried.offset_range,)
    assert [row[0] for row in read_epoch(kafka_broker, epoch)] == [f"retried-{i}" for i in range(3)]
    assert failed.offset_range.end <= epoch.ranges[0].start, "the failed attempt's rows lie before the epoch"


def test_recommitted_batch_keeps_its_epoch(
    kafka_topic: MakeTopic, zk_client: KazooClient, sink_options: Callable[[str], SinkOptions]
) -> None:
    topic = kafka_topic(2)
    options, layout = sink_options(topic), RowLayout.of(VALUE_ONLY)
    writer = SubjectStreamWriter(options, layout)
    first = [write_partition(options, layout, p, [(f"first-{p}",)], query_id="q") for p in (0, 1)]
    writer.commit(list(first), 0)
    before = epoch_znode(zk_client, topic, 0)

    again = [write_partition(options, layout, p, [(f"again-{p}",)], query_id="q") for p in (0, 1)]
    writer.commit(list(again), 0)
    assert epoch_znode(zk_client, topic, 0) == before

    other_query = [PartitionWritten(m.partition, m.offset_range, 0, "another-query") for m in again]
    with pytest.raises(EpochWrittenByAnotherQuery, match="topic of its own"):
        writer.commit(list(other_query), 0)
    assert epoch_znode(zk_client, topic, 0) == before


def test_task_without_a_partition_fails_naming_both_numbers(
    kafka_topic: MakeTopic, sink_options: Callable[[str], SinkOptions]
) -> None:
    topic = kafka_topic(2)
    with pytest.raises(TooFewPartitions, match=r"has 2 partitions and the batch at least 3 tasks"):
        write_partition(sink_options(topic), RowLayout.of(VALUE_ONLY), 2, [("x",)])


def test_rows_need_a_binary_or_string_value() -> None:
    assert (
        RowLayout.of(StructType([StructField("key", StringType()), StructField("value", StringType())])).key
        == 0
    )
    for columns in (
        [StructField("key", StringType())],
        [StructField("value", IntegerType())],
        [StructField("value", StringType()), StructField("partition", IntegerType())],
    ):
        with pytest.raises(InvalidOption):
            RowLayout.of(StructType(columns))


def test_sink_options_are_checked(tmp_path: Path) -> None:
    base = {"topic": "t", "bootstrap": "127.0.0.1:1", "zookeeper": "127.0.0.1:2"}
    assert SinkOptions.parse({**base, "queryName": "q"}).job == "q"
    assert SinkOptions.parse({**base, "JOB": "j", "kafka.linger.ms": "5"}).kafka.client == {
        "bootstrap.servers": "127.0.0.1:1",
        "linger.ms": "5",
    }
    for bad in ({**base}, {**base, "job": "j", "topic": "a/b"}, {**base, "job": "j", "idempotent": "maybe"}):
        with pytest.raises(InvalidOption):
            SinkOptions.parse(bad)
