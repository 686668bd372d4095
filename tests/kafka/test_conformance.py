"""Every Kafka operation the aligned sink and source rely on, against the test broker.

If the broker behind ``kafka_broker`` is swapped, this file says whether the new
one will do.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from epochstate.spark_plugin.kafka import (
    DeliveryFailed,
    InterleavedWrite,
    KafkaRecord,
    OffsetRange,
    PartitionWriter,
    RangeNotWritten,
    TopicExists,
    TopicNotFound,
    read_range,
)
from tests.fixtures.kafka import KafkaBroker, MakeTopic


def write_rows(broker: KafkaBroker, topic: str, partition: int, values: list[bytes]) -> OffsetRange:
    with PartitionWriter(broker.config(), topic, partition) as writer:
        for value in values:
            writer.write(None, value)
        written = writer.finish()
    assert written is not None
    return written


def read(broker: KafkaBroker, wanted: OffsetRange, timeout: float = 10.0) -> list[KafkaRecord]:
    return list(read_range(broker.config(), wanted, timeout=timeout))


def test_create_topic_with_partitions(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    topic = kafka_topic(create=False)
    admin = kafka_broker.admin
    admin.create_topic(topic, 5)
    assert admin.partitions_of(topic) == [0, 1, 2, 3, 4]
    assert admin.high_watermarks(topic) == dict.fromkeys(range(5), 0)
    with pytest.raises(TopicExists):
        admin.create_topic(topic, 5)
    admin.create_topic(topic, 5, exist_ok=True)
    with pytest.raises(ValueError, match="at least one partition"):
        admin.create_topic(kafka_topic(create=False), 0)


def test_unknown_topic_is_reported_not_created(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    topic = kafka_topic(create=False)
    for _ in range(2):
        with pytest.raises(TopicNotFound):
            kafka_broker.admin.partitions_of(topic)


def test_writer_returns_the_exact_offsets(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    topic = kafka_topic(3)
    assert write_rows(kafka_broker, topic, 2, [b"a", b"b", b"c"]) == OffsetRange(topic, 2, 0, 3)
    assert write_rows(kafka_broker, topic, 2, [b"d", b"e"]) == OffsetRange(topic, 2, 3, 5)
    assert write_rows(kafka_broker, topic, 0, [b"f"]) == OffsetRange(topic, 0, 0, 1)
    with PartitionWriter(kafka_broker.config(), topic, 1) as writer:
        assert writer.finish() is None
    assert kafka_broker.admin.high_watermarks(topic) == {0: 1, 1: 0, 2: 5}


def test_a_clean_writer_leaves_its_producer_to_the_next_and_a_failed_one_closes_it(
    kafka_broker: KafkaBroker, kafka_topic: MakeTopic
) -> None:
    """A new idempotent producer waits about 500 ms for its producer id: the next writer of
    the process takes over the producer of one that finished cleanly, never of one that
    did not (its purged rows left a gap in the producer's sequence numbers)."""
    topic = kafka_topic(2)
    with PartitionWriter(kafka_broker.config(), topic, 0) as first:
        first.write(None, b"a")
        assert first.finish() == OffsetRange(topic, 0, 0, 1)
    with PartitionWriter(kafka_broker.config(), topic, 1) as second:
        assert second._producer is first._producer
        second.write(None, b"b")  # never finished: dropped, the producer closed
    with PartitionWriter(kafka_broker.config(), topic, 1) as third:
        assert third._producer is not first._producer
        third.write(None, b"c")
        written = third.finish()
    assert written is not None and written.size == 1
    assert [r.value for r in read(kafka_broker, written)] == [b"c"]


def test_batch_of_ten_thousand_and_the_high_watermark(
    kafka_broker: KafkaBroker, kafka_topic: MakeTopic
) -> None:
    topic = kafka_topic(2)
    values = [b"row-%05d" % i for i in range(10_000)]
    assert write_rows(kafka_broker, topic, 1, values) == OffsetRange(topic, 1, 0, 10_000)
    assert kafka_broker.admin.high_watermarks(topic) == {0: 0, 1: 10_000}
    middle = read(kafka_broker, OffsetRange(topic, 1, 4_990, 5_010))
    assert [(r.offset, r.value) for r in middle] == [(i, values[i]) for i in range(4_990, 5_010)]
    assert [r.value for r in read(kafka_broker, OffsetRange(topic, 1, 0, 10_000))] == values


def test_list_offsets_latest_is_at_most_the_high_watermark(
    kafka_broker: KafkaBroker, kafka_topic: MakeTopic
) -> None:
    """ListOffsets(latest) lags on tansu (see the broker notes), so it is never used for the end."""
    topic = kafka_topic(1)
    written = write_rows(kafka_broker, topic, 0, [b"x"] * 500)
    consumer = Consumer(kafka_broker.config({"group.id": "list-offsets"}))
    try:  # get_watermark_offsets(cached=False) is a ListOffsets(latest) request
        _, latest = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()
    assert 0 < latest <= written.end == kafka_broker.admin.high_watermarks(topic)[0]


def test_high_watermark_right_after_each_flush(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    topic = kafka_topic(2)
    for rows in (1, 7, 300):
        written = write_rows(kafka_broker, topic, 0, [b"v"] * rows)
        assert kafka_broker.admin.high_watermarks(topic)[0] == written.end


def test_read_exact_ranges_from_several_partitions(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    topic = kafka_topic(3)
    values = {p: [b"%d-%d" % (p, i) for i in range(40 + 10 * p)] for p in range(3)}
    for partition, rows in values.items():
        # Two batches per partition, so that the ranges cross batch boundaries.
        write_rows(kafka_broker, topic, partition, rows[:25])
        write_rows(kafka_broker, topic, partition, rows[25:])
    for partition, start, end in [(0, 0, 40), (0, 10, 30), (1, 24, 26), (1, 49, 50), (2, 0, 1), (2, 30, 60)]:
        records = read(kafka_broker, OffsetRange(topic, partition, start, end))
        assert [r.offset for r in records] == list(range(start, end))
        assert [r.value for r in records] == values[partition][start:end]
    assert read(kafka_broker, OffsetRange(topic, 0, 40, 40)) == []


def test_earliest_and_latest_offsets(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    topic = kafka_topic(3)
    write_rows(kafka_broker, topic, 0, [b"a"] * 3)
    write_rows(kafka_broker, topic, 2, [b"b"] * 11)
    assert kafka_broker.admin.earliest_offsets(topic) == {0: 0, 1: 0, 2: 0}
    assert kafka_broker.admin.high_watermarks(topic) == {0: 3, 1: 0, 2: 11}


def test_reading_beyond_the_end_fails_clearly(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    topic = kafka_topic(1)
    write_rows(kafka_broker, topic, 0, [b"r"] * 5)
    started = time.monotonic()
    with pytest.raises(RangeNotWritten, match=r"readable only up to offset 5"):
        read(kafka_broker, OffsetRange(topic, 0, 3, 8))
    assert time.monotonic() - started < 5, "a range ending past the end fails at the end, not by timeout"
    with pytest.raises(RangeNotWritten, match=r"\[10, 12\): the partition ends at offset 5"):
        read(kafka_broker, OffsetRange(topic, 0, 10, 12), timeout=1.5)
    with pytest.raises(RangeNotWritten):
        read(kafka_broker, OffsetRange(topic, 0, 5, 6), timeout=1.5)


def test_concurrent_writers_to_different_partitions(
    kafka_broker: KafkaBroker, kafka_topic: MakeTopic
) -> None:
    topic = kafka_topic(2)
    results: dict[int, OffsetRange] = {}
    failures: list[BaseException] = []

    def write(partition: int) -> None:
        try:
            for batch in range(3):
                values = [b"%d-%d-%d" % (partition, batch, i) for i in range(1000)]
                results[partition] = write_rows(kafka_broker, topic, partition, values)
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=write, args=(p,)) for p in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures
    assert results == {p: OffsetRange(topic, p, 2000, 3000) for p in (0, 1)}
    for partition in (0, 1):
        values = [r.value for r in read(kafka_broker, OffsetRange(topic, partition, 0, 3000))]
        assert values == [b"%d-%d-%d" % (partition, b, i) for b in range(3) for i in range(1000)]


def test_another_producer_in_the_same_partition_is_detected(
    kafka_broker: KafkaBroker, kafka_topic: MakeTopic
) -> None:
    topic = kafka_topic(1)
    foreign = Producer(kafka_broker.config())
    with PartitionWriter(kafka_broker.config(), topic, 0) as writer:
        writer.write(None, b"mine-1")
        deadline = time.monotonic() + 10
        while kafka_broker.admin.high_watermarks(topic)[0] < 1:  # the writer sends in the background
            assert time.monotonic() < deadline, "the writer's first row never arrived"
        foreign.produce(topic, b"foreign", partition=0)
        assert foreign.flush(10) == 0
        writer.write(None, b"mine-2")
        with pytest.raises(InterleavedWrite, match=r"2 rows were given offsets spanning .*\[0, 3\)"):
            writer.finish()


def test_writing_to_a_missing_partition_fails(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    topic = kafka_topic(1)
    with (
        pytest.raises(DeliveryFailed, match="partition"),
        PartitionWriter(kafka_broker.config(), topic, 3, timeout=10) as writer,
    ):
        writer.write(None, b"nowhere")
        writer.finish()


def test_keys_values_headers_and_timestamps_round_trip(
    kafka_broker: KafkaBroker, kafka_topic: MakeTopic
) -> None:
    topic = kafka_topic(2)
    rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
        (b"key-1", b"value-1", [("trace", b"t1")], 1_700_000_000_000),
        (None, b"no key", [], 1_700_000_000_001),
        (b"tombstone", None, [("dup", b"1"), ("dup", b"2"), ("nothing", None)], 1_700_000_000_002),
        (b"", b"", [("empty", b"")], 1_600_000_000_000),
        (bytes(range(256)), bytes(range(255, -1, -1)), [("binary", bytes(range(256)))], 1_700_000_000_003),
    ]
    with PartitionWriter(kafka_broker.config(), topic, 1) as writer:
        for key, value, headers, timestamp in rows:
            writer.write(key, value, headers=headers, timestamp=timestamp)
        writer.write(b"now", b"default timestamp")
        written = writer.finish()
    assert written == OffsetRange(topic, 1, 0, 6)
    records = read(kafka_broker, written)
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in records[:5]] == rows
    now_ms = time.time() * 1000
    assert records[5].timestamp is not None and abs(records[5].timestamp - now_ms) < 60_000


def test_ranges_with_gaps_from_transaction_markers(kafka_broker: KafkaBroker, kafka_topic: MakeTopic) -> None:
    """Offsets without a record are skipped; a range of only such offsets is empty."""
    topic = kafka_topic(1)
    producer = Producer(kafka_broker.config({"transactional.id": f"tx-{topic}"}))
    producer.init_transactions(10)
    for values in ([b"t0", b"t1", b"t2"], [b"t3"]):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        producer.commit_transaction(10)
    # Rows at 0, 1, 2, a commit marker at 3, a row at 4, a commit marker at 5.
    assert kafka_broker.admin.high_watermarks(topic) == {0: 6}

    def offsets(start: int, end: int) -> list[int]:
        return [r.offset for r in read(kafka_broker, OffsetRange(topic, 0, start, end), timeout=5)]

    assert offsets(0, 6) == [0, 1, 2, 4]
    assert offsets(2, 4) == [2]
    assert offsets(3, 4) == []
    assert offsets(3, 5) == [4]
    assert offsets(5, 6) == []
