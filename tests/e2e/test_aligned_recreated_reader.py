"""``aligned_with`` through a reader whose checkpoint is deleted and recreated.

Job ``orders`` (a stateful aggregation the daemon follows) writes a subject
through the aligned sink; job ``reader`` reads it aligned. The reader's old query
reads subject epochs 0..3 as its batches 0..3; its checkpoint is then deleted and
the new query starts at subject epoch 3 (batch 0 reads 3, batch 1 reads 4).
Every answer the daemon gives for "the epoch of orders aligned with epoch m of
reader" must be the subject epoch the reader's batch m read: before source records
named their query, the old query's entry ``1 -> 1`` answered for the new epoch 1.
Real Spark, ZooKeeper, the Kafka broker and the daemon.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from epochstate.client import DeadlineExceeded, EpochStateClient
from epochstate.devtools.zookeeper import EmbeddedZooKeeper
from epochstate.spark_plugin.alignment import register
from epochstate.spark_plugin.alignment.connections import close_shared_clients
from tests.alignment.conftest import DownstreamJob
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.kafka import KafkaBroker
from tests.fixtures.zookeeper import new_test_client

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

FORMAT = "epochstate-kafka"


def read_epochs(reader: DownstreamJob) -> dict[int, int]:
    """Batch -> the subject epoch it read, from the rows the reader's own batches saw."""
    found = {}
    for batch, rows in reader.rows().items():
        epochs = {row[3] for row in rows}
        assert len(epochs) == 1, f"batch {batch} of {reader.job} read subject epochs {epochs}"
        epoch = epochs.pop()
        assert epoch is not None
        found[batch] = epoch
    return found


def wrong_answers(client: EpochStateClient, read: dict[int, int]) -> int:
    """How many of the reader's epochs the daemon aligns with another orders epoch than they read.

    ``orders``' epoch n wrote subject epoch n, so the right answer for batch m is ``read[m]``.
    """
    wrong = 0
    for batch, subject_epoch in read.items():
        answer = client.get("orders", ["alice"], aligned_with=("reader", batch), timeout=60)
        wrong += answer.epoch != subject_epoch
    return wrong


@pytest.fixture
def connect(zookeeper_server: EmbeddedZooKeeper) -> Iterator[str]:
    chroot = f"/tests-{uuid.uuid4().hex}"
    admin = new_test_client(zookeeper_server.connect_string)
    admin.start(timeout=15)
    admin.ensure_path(chroot)
    try:
        yield f"{zookeeper_server.connect_string}{chroot}"
    finally:
        close_shared_clients()
        with contextlib.suppress(NoNodeError):
            admin.delete(chroot, recursive=True)
        admin.stop()
        admin.close()


def test_a_recreated_reader_never_aligns_through_the_old_querys_mapping(
    spark: Any, tmp_path: Path, kafka_broker: KafkaBroker, connect: str
) -> None:
    from pyspark.sql import functions as F

    register(spark)
    topic = kafka_broker.create_topic(f"orders-{uuid.uuid4().hex[:8]}", partitions=2)
    inputs, checkpoint = tmp_path / "in", tmp_path / "orders"
    inputs.mkdir()
    counts = (
        spark.readStream.format("json")
        .schema("user string, amount long")
        .option("maxFilesPerTrigger", 1)
        .load(str(inputs))
        .groupBy("user")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("total"))
    )
    orders = (
        counts.selectExpr("user AS key", "to_json(struct(user, orders, total)) AS value")
        .writeStream.format(FORMAT)
        .outputMode("complete")
        .trigger(processingTime="100 milliseconds")
        .queryName("orders")
        .option("topic", topic)
        .option("bootstrap", kafka_broker.bootstrap)
        .option("zookeeper", connect)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )

    def feed(batch: int) -> None:
        temporary = inputs / f".part-{batch:05d}.tmp"
        temporary.write_text(json.dumps({"user": "alice", "amount": batch}) + "\n")
        temporary.rename(inputs / f"part-{batch:05d}.json")
        orders.processAllAvailable()

    daemon = DaemonProcess(
        tmp_path / "daemon",
        {"orders": str(checkpoint)},
        zookeeper=connect,
        env={"EPOCHSTATE_NODE": "recreated"},
    ).start()
    old = DownstreamJob(spark, tmp_path / "reader", topic, kafka_broker, connect, "reader")
    new = DownstreamJob(
        spark, tmp_path / "reader", topic, kafka_broker, connect, "reader", {"startingEpoch": "3"}
    )
    try:
        for batch in range(4):
            feed(batch)
        old.start()
        old.wait_for_batch(3)
        old_read = read_epochs(old)
        assert old_read == {0: 0, 1: 1, 2: 2, 3: 3}
        with daemon.client(timeout=90) as client:
            assert wrong_answers(client, old_read) == 0
        old.stop()

        shutil.rmtree(old.checkpoint)
        new.start()
        new.wait_for_batch(0)
        with daemon.client(timeout=90) as client:
            assert client.get("orders", ["alice"], aligned_with=("reader", 0), timeout=60).epoch == 3
            # The new query's batch 1 has not run: no answer (the old mapping said epoch 1).
            with pytest.raises(DeadlineExceeded, match="did not read its epoch 1"):
                client.get("orders", ["alice"], aligned_with=("reader", 1), timeout=1.0)
            feed(4)
            new.wait_for_batch(1)
            new_read = read_epochs(new)
            assert new_read == {0: 3, 1: 4}
            wrong = wrong_answers(client, new_read)
            print(f"wrong aligned answers after recreating the reader checkpoint: {wrong} of {len(new_read)}")
            assert wrong == 0
    finally:
        new.stop()
        old.stop()
        orders.stop()
        daemon.stop()
