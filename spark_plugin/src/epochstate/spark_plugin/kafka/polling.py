"""Polling a consumer: what is queued without waiting for a full batch, and watermarks."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, Message, TopicPartition

from epochstate.spark_plugin.kafka.errors import BrokerTimeout, from_client_error

_Code = confluent_kafka.KafkaError


def available_messages(consumer: Consumer, wait: float, limit: int = 1000) -> list[Message[Any, Any]]:
    """What the consumer has queued (up to ``limit``), waiting at most ``wait`` s for the first.

    ``Consumer.consume`` alone waits for all ``limit`` messages or the whole timeout.
    """
    first = consumer.poll(wait)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=limit - 1, timeout=0)]


def fetched_high_watermarks(
    consumer: Consumer, topic: str, starts: dict[int, int], deadline: float
) -> dict[int, int]:
    """Partition -> high watermark as the partition's leader reports it in Fetch responses.

    Assigns ``consumer`` to each partition at ``starts[partition]``, which must not
    be beyond the end (ListOffsets(latest) is a safe start even where it lags), and
    polls until each partition yielded a record, whose Fetch response carried the
    watermark, or an end-of-partition event. The consumer should read uncommitted
    and fetch with a short ``fetch.wait.max.ms``. Raises :class:`BrokerTimeout` at
    ``deadline`` (a ``time.monotonic()`` value).
    """
    consumer.assign([TopicPartition(topic, p, offset) for p, offset in starts.items()])
    found: dict[int, int] = {}
    while len(found) < len(starts):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            missing = sorted(set(starts) - set(found))
            raise BrokerTimeout(f"high watermarks of {topic!r}: no Fetch answer for partitions {missing}")
        for message in available_messages(consumer, min(remaining, 0.5)):
            partition, offset, error = message.partition(), message.offset(), message.error()
            if partition is None or partition in found or offset is None:
                if error is not None and error.fatal():
                    raise from_client_error(error, f"high watermarks of {topic!r}")
                continue
            if error is None:
                _, cached_high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
                found[partition] = max(cached_high, offset + 1)
            elif error.code() == _Code._PARTITION_EOF:
                found[partition] = offset
            else:
                raise from_client_error(error, f"high watermark of {topic}[{partition}]")
    return found
