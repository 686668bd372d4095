"""The `covers` epoch selector: the earliest epoch whose end position covers a Kafka
position, on a job reading a real Kafka-protocol broker."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochstate.client import DeadlineExceeded, InvalidArgument, NoSuchEpoch
from epochstate.daemon.server.positions import _parse
from epochstate.spark_plugin.alignment import register
from epochstate.spark_plugin.kafka.producer import PartitionWriter
from tests.fixtures.daemon import DaemonProcess
from tests.fixtures.kafka import KafkaBroker


def test_positions_of_both_kafka_sources() -> None:
    assert _parse('{"t": {"0": 5, "1": 7}}') == {("t", 0): 5, ("t", 1): 7}
    assert _parse('{"subject": "s", "epoch": null, "positions": {"2": 9}}') == {("s", 2): 9}
    assert _parse('{"logOffset": 3}') == {}
    assert _parse(None) == {} and _parse("-") == {}


def test_covers_pins_the_earliest_epoch_that_has_read_that_far(
    spark: Any, tmp_path: Path, kafka_broker: KafkaBroker, daemon_factory: Callable[..., DaemonProcess]
) -> None:
    from pyspark.sql import functions as F

    topic = kafka_broker.create_topic(f"covers-{uuid.uuid4().hex[:8]}", partitions=2)
    session = spark
    register(session)

    def produce(partition: int, values: list[str]) -> None:
        with PartitionWriter(kafka_broker.config(), topic, partition) as writer:
            for v in values:
                writer.write(None, v.encode())
            writer.finish()

    frame = (
        session.readStream.format("epochstate-kafka")
        .option("topic", topic)
        .option("bootstrap", kafka_broker.bootstrap)
        .option("mode", "unaligned")
        .load()
    )
    counts = frame.groupBy(F.col("value").cast("string").alias("word")).count()
    checkpoint = tmp_path / "cp"
    query = (
        counts.writeStream.format("noop")
        .outputMode("update")
        .queryName("words")
        .option("checkpointLocation", str(checkpoint))
        # The records produced for one step (two partitions, two produce calls) mostly
        # land in one batch; one split in two changes no expectation (they come from the
        # positions the epochs ended at), and each step waits about half a trigger.
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    daemon = daemon_factory({"words": str(checkpoint)})
    written: dict[int, list[str]] = {0: [], 1: []}  # per partition, in offset order

    def send(partition: int, values: list[str]) -> None:
        produce(partition, values)
        written[partition] += values

    def read_all() -> None:
        """Until the job's batches have read every record written: processAllAvailable
        alone can return on a trigger that asked the broker before the last write."""
        deadline = time.monotonic() + 60
        while True:
            query.processAllAvailable()
            progress = query.lastProgress
            end = progress["sources"][0]["endOffset"] if progress is not None else None
            read = _parse(end if end is None or isinstance(end, str) else json.dumps(end))
            if all(read.get((topic, p), 0) >= len(values) for p, values in written.items()):
                return
            assert time.monotonic() < deadline, (read, written)
            time.sleep(0.05)

    try:
        # Meant as epoch 0: p0 0..3, p1 0..1; epoch 1: p0 3..5; epoch 2: p1 1..4. A trigger
        # can still split a step in two, so expectations come from the positions the
        # epochs actually ended at, not from this plan.
        send(0, ["a", "b", "a"])
        send(1, ["c"])
        read_all()
        send(0, ["a", "d"])
        read_all()
        send(1, ["c", "c", "e"])
        read_all()
        last = query.lastProgress["batchId"]
        daemon.wait_for_epoch("words", last)
        with daemon.client(timeout=20) as client:
            ends = {e.epoch: _parse(e.sources[0].end_offset_json) for e in client.epochs("words")}
            assert sorted(ends) == list(range(last + 1)) and ends[last] == {(topic, 0): 5, (topic, 1): 4}

            def covering(position: dict[tuple[str, int], int]) -> int:
                """The oracle: the earliest epoch whose end position is at or past ``position``."""
                wanted = position.items()
                return min(e for e, end in ends.items() if all(end.get(p, 0) >= o for p, o in wanted))

            def pinned(position: dict[tuple[str, int], int]) -> int:
                return client.get("words", ["a"], covers=position).epoch

            for position in (
                {(topic, 0): 1},
                {(topic, 0): 3, (topic, 1): 1},
                {(topic, 0): 4},
                {(topic, 0): 5, (topic, 1): 2},
                {(topic, 0): 5, (topic, 1): 4},
            ):
                assert pinned(position) == covering(position), (position, ends)
            assert client.get("words", ["a"], covers={(topic, 0): 4}).value == (3,)

            with pytest.raises(NoSuchEpoch, match="reads none of"):
                pinned({("other-topic", 0): 1})
            with pytest.raises(InvalidArgument):
                pinned({(topic, 0): -1})
            with pytest.raises(DeadlineExceeded, match="covering"):
                client.get("words", ["a"], covers={(topic, 0): 6}, timeout=1.0)

            # A scan pinned by covers: its later pages stay at that epoch after the job moves on.
            at = covering({(topic, 0): 4})
            pages = client.scan("words", covers={(topic, 0): 4}, page_size=1)
            scanned = [next(pages)]

            # A read that waits: the covering epoch commits while it is pending.
            def feed_more() -> None:
                send(0, ["z"])
                read_all()

            feeder = threading.Timer(0.5, feed_more)
            feeder.start()
            try:
                assert client.get("words", ["z"], covers={(topic, 0): 6}, timeout=60).epoch == last + 1
            finally:
                feeder.join()
            scanned += pages
            assert {row.epoch for row in scanned} == {at}
            read = [w for (_, partition), end in ends[at].items() for w in written[partition][:end]]
            counts = {word: row.value for row in scanned for word in row.key}
            assert counts == {w: (read.count(w),) for w in set(read)}, (scanned, ends[at])
    finally:
        query.stop()
