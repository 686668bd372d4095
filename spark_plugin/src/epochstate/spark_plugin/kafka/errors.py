"""Errors of the aligned Kafka sink and source, and the one table that maps client errors to them."""

from __future__ import annotations

import confluent_kafka

from epochstate.core.errors import EpochStateError


class KafkaError(EpochStateError):
    """Root of the errors ``epochstate.spark_plugin.kafka`` raises on purpose."""


class BrokerTimeout(KafkaError):
    """The broker did not answer in time; the call may be repeated."""


class TopicNotFound(KafkaError):
    pass


class TopicExists(KafkaError):
    pass


class DeliveryFailed(KafkaError):
    """Rows could not be written; their offsets must not be registered in any epoch."""


class InterleavedWrite(DeliveryFailed):
    """Records not written by this writer lie between its first and last offset.

    Another producer wrote into the partition meanwhile (or, without idempotence,
    a retried batch was stored twice), so the offsets cannot form an epoch's range.
    Only one task attempt may write to a partition at a time: turn off speculative
    execution for aligned sinks.
    """


class RangeNotWritten(KafkaError):
    """An offset range ends beyond the partition's high watermark."""


class RangeUnavailable(KafkaError):
    """Records of an offset range were removed by retention or deleted.

    The epochs that refer to them can no longer be read: keep the topic's
    retention longer than the retention of the subject's epochs.
    """


def from_client_error(error: confluent_kafka.KafkaError, what: str) -> KafkaError:
    """The error to raise for a confluent-kafka error met while doing ``what``."""
    codes = confluent_kafka.KafkaError
    kind: type[KafkaError] = {
        codes.TOPIC_ALREADY_EXISTS: TopicExists,
        codes.UNKNOWN_TOPIC_OR_PART: TopicNotFound,
        codes._TIMED_OUT: BrokerTimeout,
        codes.REQUEST_TIMED_OUT: BrokerTimeout,
    }.get(error.code(), KafkaError)
    return kind(f"{what}: {error.name()}: {error.str()}")
