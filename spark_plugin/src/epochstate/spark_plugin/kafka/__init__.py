"""Kafka for aligned epochs: exact offset ranges written by the sink, read by the source.

Built on confluent-kafka. Every function takes a librdkafka client config (at
least ``bootstrap.servers``) and adds the settings its guarantees rest on.
"""

from epochstate.core.alignment.ranges import OffsetRange
from epochstate.spark_plugin.kafka.admin import TopicAdmin
from epochstate.spark_plugin.kafka.errors import (
    BrokerTimeout,
    DeliveryFailed,
    InterleavedWrite,
    KafkaError,
    RangeNotWritten,
    RangeUnavailable,
    TopicExists,
    TopicNotFound,
)
from epochstate.spark_plugin.kafka.producer import PartitionWriter
from epochstate.spark_plugin.kafka.reader import KafkaRecord, read_range

__all__ = [
    "BrokerTimeout",
    "DeliveryFailed",
    "InterleavedWrite",
    "KafkaError",
    "KafkaRecord",
    "OffsetRange",
    "PartitionWriter",
    "RangeNotWritten",
    "RangeUnavailable",
    "TopicAdmin",
    "TopicExists",
    "TopicNotFound",
    "read_range",
]
