"""Reading one exact offset range: the aligned source's way to read an epoch of a subject."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import confluent_kafka
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.spark_plugin.kafka.config import ClientConfig, consumer_settings
from epochstate.spark_plugin.kafka.errors import (
    BrokerTimeout,
    KafkaError,
    RangeNotWritten,
    RangeUnavailable,
    from_client_error,
)
from epochstate.spark_plugin.kafka.polling import available_messages, fetched_high_watermarks

_Code = confluent_kafka.KafkaError

# A reader never moves on its own: an offset outside the log must surface as an
# error (auto.offset.reset=error), and the end of the partition as an event.
_READER_SETTINGS: ClientConfig = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
}


class KafkaRecord(NamedTuple):
    """One record as stored: ``timestamp`` in ms since the epoch, None if it has none."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: tuple[tuple[str, bytes | None], ...]


# Defaults the caller may change. A range that ends with a marker at the end of
# the partition is only known complete when a Fetch answers "nothing new", which
# the broker delays by up to this long.
_READER_DEFAULTS: ClientConfig = {"fetch.wait.max.ms": 100}


def read_range(
    consumer_config: ClientConfig, offset_range: OffsetRange, *, timeout: float = 30.0
) -> Iterator[KafkaRecord]:
    """Yield the records of ``offset_range`` in offset order, and nothing else.

    Offsets without a record (compacted away, aborted, transaction markers) are
    skipped; the iterator ends once the partition was read up to ``end``, so a
    complete iteration has seen every record of the range. The isolation level is
    the caller's (librdkafka's default is read_committed).

    Raises :class:`RangeNotWritten` when the partition ends before ``end``,
    :class:`RangeUnavailable` when records at ``start`` were already removed, and
    :class:`BrokerTimeout` when the broker gave nothing for ``timeout`` seconds.
    Some brokers answer a fetch beyond their end with silence rather than an
    error; that case is told apart after the timeout.
    """
    if offset_range.size == 0:
        return
    consumer = Consumer(consumer_settings({**_READER_DEFAULTS, **consumer_config}, _READER_SETTINGS))
    try:
        consumer.assign([TopicPartition(offset_range.topic, offset_range.partition, offset_range.start)])
        yield from _records(consumer, offset_range, timeout)
    finally:
        consumer.close()


def _records(consumer: Consumer, wanted: OffsetRange, timeout: float) -> Iterator[KafkaRecord]:
    idle_deadline = time.monotonic() + timeout
    while True:
        remaining = idle_deadline - time.monotonic()
        if remaining <= 0:
            raise _diagnosed(consumer, wanted, f"nothing received for {timeout} s")
        messages = available_messages(consumer, min(remaining, 0.5))
        if messages:
            idle_deadline = time.monotonic() + timeout
        for message in messages:
            error, offset = message.error(), message.offset()
            if error is not None:
                code = error.code()
                if code == _Code._PARTITION_EOF and offset is not None:
                    if offset >= wanted.end:
                        return
                    raise RangeNotWritten(f"{wanted}: the partition is readable only up to offset {offset}")
                if code in (_Code._AUTO_OFFSET_RESET, _Code.OFFSET_OUT_OF_RANGE):
                    raise _diagnosed(consumer, wanted, error.str())
                if error.fatal():
                    raise from_client_error(error, f"reading {wanted}")
                continue  # transient (a broker reconnecting): the idle timeout bounds it
            if offset is None or offset < wanted.start:
                continue
            if offset >= wanted.end:
                return
            yield _record_of(message, offset)
            if offset == wanted.end - 1:
                return


def _record_of(message: confluent_kafka.Message[Any, Any], offset: int) -> KafkaRecord:
    kind, timestamp = message.timestamp()
    headers = tuple(
        (name, value.encode() if isinstance(value, str) else value) for name, value in _header_list(message)
    )
    return KafkaRecord(
        offset=offset,
        key=message.key(),
        value=message.value(),
        timestamp=None if kind == TIMESTAMP_NOT_AVAILABLE else timestamp,
        headers=headers,
    )


def _header_list(message: confluent_kafka.Message[Any, Any]) -> list[tuple[str, str | bytes | None]]:
    headers = message.headers()
    if headers is None:
        return []
    return list(headers.items()) if isinstance(headers, dict) else list(headers)


def _diagnosed(consumer: Consumer, wanted: OffsetRange, cause: str) -> KafkaError:
    """Why ``wanted`` could not be read, judged from the partition's current watermarks."""
    try:
        low, listed_end = consumer.get_watermark_offsets(
            TopicPartition(wanted.topic, wanted.partition), timeout=5.0, cached=False
        )
        # ListOffsets(latest) may lag the end (see admin.py); a Fetch tells the true one.
        high = fetched_high_watermarks(
            consumer, wanted.topic, {wanted.partition: listed_end}, time.monotonic() + 5.0
        )[wanted.partition]
    except (confluent_kafka.KafkaException, KafkaError) as error:
        return BrokerTimeout(f"reading {wanted}: {cause}; the watermarks are unknown too: {error}")
    if wanted.start < low:
        return RangeUnavailable(f"{wanted}: the log starts at offset {low} ({cause})")
    if wanted.end > high:
        return RangeNotWritten(f"{wanted}: the partition ends at offset {high} ({cause})")
    return BrokerTimeout(f"reading {wanted}: {cause} (watermarks [{low}, {high}))")
